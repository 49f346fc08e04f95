// Every module builds its markup with the `html` template: no string or
// untagged template holds a tag, no value is joined to markup with +, no
// raw(), and innerHTML is set in one place (core.mjs, through the Trusted
// Types policy). tests/web/unit/markup_scan.mjs counts them.
import {test} from 'node:test';
import assert from 'node:assert/strict';
import {readFileSync, readdirSync} from 'node:fs';
import {dirname, join} from 'node:path';
import {fileURLToPath} from 'node:url';
import {scan} from './markup_scan.mjs';

const WEB = join(dirname(fileURLToPath(import.meta.url)), '../../../agent/daemon/web');
const modules = readdirSync(WEB).filter(f => f.endsWith('.mjs')).sort();

test('the dashboard is the modules the daemon embeds', () => {
  const cmake = readFileSync(join(WEB, '../CMakeLists.txt'), 'utf8');
  const listed = [...cmake.matchAll(/\/web\/([a-z_]+\.mjs)/g)].map(m => m[1]).sort();
  assert.deepEqual(listed, modules);
  assert.ok(!readdirSync(WEB).some(f => f.endsWith('.js')), 'no classic script is left');
});

for (const f of modules) {
  test(`${f}: all markup through html`, () => {
    const c = scan(readFileSync(join(WEB, f), 'utf8'));
    assert.deepEqual({untagged: c.untaggedMarkup, joins: c.joins, raw: f === 'html.mjs' ? 0 : c.rawCalls, esc: c.escCalls,
      unquoted: c.unquotedAttributes}, {untagged: 0, joins: 0, raw: 0, esc: 0, unquoted: 0},
    `markup outside html at lines ${c.where}`);
    assert.equal(c.innerHTML, f === 'core.mjs' ? 1 : 0, 'innerHTML is set in core.mjs alone');
  });
}

// The layers of docs/design/dashboard.md: a module imports only those
// before it (the pages import no page; app.mjs imports them all).
const LAYERS = [['html.mjs'], ['format.mjs'], ['core.mjs'], ['plot.mjs'], ['parts.mjs'],
  ['overview.mjs', 'experiment.mjs', 'commit.mjs', 'run.mjs', 'machines.mjs', 'sweeps.mjs', 'account.mjs'], ['app.mjs']];
const layer = f => LAYERS.findIndex(l => l.includes(f));

test('every module is in a layer and imports only from the layers before it', () => {
  for (const f of modules) {
    assert.ok(layer(f) >= 0, `${f} is in no layer of lint_test.mjs`);
    const src = readFileSync(join(WEB, f), 'utf8');
    for (const [, dep] of src.matchAll(/^import .* from '\.\/([a-z_]+\.mjs)';$/gm)) {
      assert.ok(layer(dep) >= 0 && layer(dep) < layer(f), `${f} imports ${dep}`);
    }
  }
});

test('the scanner finds markup outside html', () => {
  const c = scan("const a = `<td>${x}</td>`; const b = '<b>' + y + '</b>'; const r = /<a'\"/g; " +
    'const ok = html`<td>${x}</td>`; el.innerHTML = s; raw(z); // <i>\n' +
    'const bad = html`<td class=${x}>n=${y}</td>`;');
  assert.equal(c.untaggedMarkup, 3);
  assert.equal(c.untaggedInterpolations, 1);
  assert.equal(c.joins, 2);
  assert.equal(c.htmlInterpolations, 3);
  assert.equal(c.unquotedAttributes, 1);
  assert.equal(c.innerHTML, 1);
  assert.equal(c.rawCalls, 1);
});
