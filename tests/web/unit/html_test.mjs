// The `html` template escapes every interpolation unless it is markup made
// by html itself (agent/daemon/web/html.mjs).
import {test} from 'node:test';
import assert from 'node:assert/strict';
import {Html, escape, html, join, raw} from '../../../agent/daemon/web/html.mjs';

const XSS = '<img src=x onerror=alert(1)>';

test('a string is text: every markup character is escaped', () => {
  assert.equal(escape(`a&b<c>"d"'e'`), 'a&amp;b&lt;c&gt;&quot;d&quot;&#39;e&#39;');
  assert.equal(html`<td>${XSS}</td>`.text, '<td>&lt;img src=x onerror=alert(1)&gt;</td>');
});

test('an attribute value cannot end its quotes', () => {
  const name = `x" onmouseover="alert(1)`;
  assert.equal(html`<tr data-experiment="${name}">`.text,
    '<tr data-experiment="x&quot; onmouseover=&quot;alert(1)">');
  assert.equal(html`<b title='${"'"}'>`.text, "<b title='&#39;'>");
});

test('nested templates and arrays of them stay markup, their values escaped once', () => {
  const cell = v => html`<td>${v}</td>`;
  const row = html`<tr>${['a&b', XSS].map(cell)}</tr>`;
  assert.ok(row instanceof Html);
  assert.equal(row.text, '<tr><td>a&amp;b</td><td>&lt;img src=x onerror=alert(1)&gt;</td></tr>');
  // Text in an array is escaped too.
  assert.equal(html`${['<b>', html`<b>`]}`.text, '&lt;b&gt;<b>');
});

test('null, undefined and false are nothing; 0, true and numbers are text', () => {
  assert.equal(html`[${null}${undefined}${false}]`.text, '[]');
  assert.equal(html`[${0}|${true}|${-1.5}|${NaN}]`.text, '[0|true|-1.5|NaN]');
  assert.equal(html`${0 > 1 && html`<b>no</b>`}`.text, '');
});

test('markup joined with + throws instead of turning into text', () => {
  assert.throws(() => html`<b>` + html`</b>`, TypeError);
  assert.throws(() => `${html`<b>`}`, TypeError);
  assert.throws(() => String(html`<b>`), TypeError);
});

test('raw marks a string as markup; join puts a separator between items', () => {
  assert.equal(html`${raw('<br>')}`.text, '<br>');
  assert.equal(join([html`<i>a</i>`, 'b<c'], ', ').text, '<i>a</i>, b&lt;c');
  assert.equal(join([html`<i>a</i>`, html`<i>b</i>`], html`<br>`).text, '<i>a</i><br><i>b</i>');
  assert.equal(join([]).text, '');
});
