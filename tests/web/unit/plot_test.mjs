// The dashboard's pure SVG plots (agent/daemon/web/plot.mjs): what they
// draw from a document, and that a name in them is text.
import {test} from 'node:test';
import assert from 'node:assert/strict';
import {Html} from '../../../agent/daemon/web/html.mjs';
import {curvePlot, historyPlot, progress, seedPlot} from '../../../agent/daemon/web/plot.mjs';

const XSS = '<img src=x onerror=alert(1)>';
const all = (s, re) => [...s.matchAll(re)].map(m => m[1]);

test('seedPlot: a dot per seed on each side, a line per shared seed, both means', () => {
  const vp = {experiment: XSS,
    a: {values: [0.9, 0.92, 0.91], seeds: [1, 2, 3], mean: 0.91, n: 3},
    b: {values: [0.8, 0.81], seeds: [2, 3], mean: 0.805, n: 2, commit: 'abcdef0123456789'}};
  const svg = seedPlot(vp);
  assert.ok(svg instanceof Html);
  const s = svg.text;
  assert.deepEqual(all(s, /class="seed seed-a" data-seed="(\d+)"/g), ['1', '2', '3']);
  assert.deepEqual(all(s, /class="seed seed-b" data-seed="(\d+)"/g), ['2', '3']);
  assert.equal(all(s, /(<line class="pair")/g).length, 2);
  assert.equal(all(s, /(<line class="mean")/g).length, 2);
  assert.match(s, /baseline abcdef0 \(n=2\)/);
  assert.match(s, /this commit \(n=3\)/);
  assert.ok(!s.includes('<img'), 'the experiment name is text');
  assert.match(s, /aria-label="seeds of &lt;img src=x onerror=alert\(1\)&gt;"/);
  // Round ticks between the values.
  assert.deepEqual(all(s, /class="ytick"[^>]*>([^<]*)</g), ['0.8', '0.85', '0.9']);
  assert.equal(seedPlot({a: {}, b: {}}).text, '<p class="muted">No finished runs on either side yet.</p>');
});

test('historyPlot: a point per commit with a result, its verdict word and band; names are text', () => {
  const entries = [
    {commit: 'c1', subject: 'first', mean: 0.8, ci95: [0.79, 0.81], n: 3},
    {commit: 'c2', subject: XSS, mean: 0.9, ci95: [0.89, 0.91], n: 3,
      vs_parent: {verdict: 'better', min_effect: 0.01, diff: 0.1}},
    {commit: 'c3', subject: 'running', mean: null, n: 0},
    {commit: 'c4', subject: 'same', mean: 0.9, n: 3, vs_parent: {verdict: 'equivalent within ±0.003', diff: 0}},
  ];
  const s = historyPlot({experiment: 'mlp'}, entries).text;
  assert.deepEqual(all(s, /<circle class="point p-([a-z_]+)"/g), ['none', 'better', 'equivalent']);
  assert.deepEqual(all(s, /data-commit="([^"]+)"/g), ['c1', 'c2', 'c4']);
  assert.deepEqual(all(s, /<a href="\/commit\/([^"]+)">/g), ['c1', 'c2', 'c4']);
  assert.equal(all(s, /(<rect class="band")/g).length, 1);
  assert.equal(all(s, /(<line class="ci")/g).length, 2);
  assert.deepEqual(all(s, /<text class="vword v-([a-z]+)"/g), ['better', 'equivalent']);
  assert.match(s, />better<\/text>/);
  assert.ok(!s.includes('<img'), 'a commit subject is text');
  assert.match(s, /c2 &lt;img src=x onerror=alert\(1\)&gt;: 0\.9000/);
  assert.equal(historyPlot({}, [{commit: 'c', mean: null}]).text, '<p class="muted">No finished runs yet.</p>');
});

test('historyPlot: a verdict too long for its slot is a mark with the word as its title', () => {
  const entries = Array.from({length: 60}, (_, i) => ({commit: 'c' + i, subject: '', mean: i, n: 1,
    vs_parent: {verdict: i % 2 ? 'worse' : 'no_detectable_change', diff: 0}}));
  const s = historyPlot({}, entries).text;
  assert.match(s, /<title>worse<\/title>▼<\/text>/);
  assert.match(s, /<title>no detectable change<\/title>·<\/text>/);
  // At most about 24 commit labels under the axis.
  assert.ok(all(s, /(class="mono")/g).length <= 30);
});

test('curvePlot: a chart per metric, a line per attempt, the earlier ones dashed', () => {
  const pts = [
    {name: 'loss', step: 0, value: 1, attempt: 1}, {name: 'loss', step: 1, value: 0.5, attempt: 1},
    {name: 'loss', step: 0, value: 0.9, attempt: 2}, {name: 'loss', step: 1, value: 0.4, attempt: 2},
    {name: 'loss', step: 2, value: 0.3, attempt: 2},
    {name: XSS, value: 0.7},
  ];
  const s = curvePlot(pts).text;
  assert.deepEqual(all(s, /<polyline class="(curve(?: earlier)?)"/g), ['curve earlier', 'curve']);
  assert.deepEqual(all(s, /data-attempt="(\d+)"/g), ['1', '2']);
  assert.equal(all(s, /(class="attempt-label")/g).length, 2);
  assert.match(s, /step 0<\/text>.*step 2<\/text>/);
  assert.match(s, /<p>&lt;img src=x onerror=alert\(1\)&gt;: 0\.7000<\/p>/);
  // One attempt: no labels.
  assert.equal(all(curvePlot(pts.slice(0, 2)).text, /(class="attempt-label")/g).length, 0);
  assert.equal(curvePlot([]).text, '<p class="muted">No metric points yet.</p>');
});

test('progress: a bar of the runs done and the counts in words', () => {
  const s = progress({runs: 10, counts: {succeeded: 4, running: 2, leased: 1, dead: 1, cancelled: 2}}).text;
  assert.match(s, /<rect class="bar-done" width="40"/);
  assert.match(s, /<\/svg>4\/10 done, 3 running, <span class="state-dead">1 failed<\/span>, 2 cancelled$/);
  assert.match(progress({runs: 0, counts: {}}).text, /width="0".*0\/0 done$/);
});
