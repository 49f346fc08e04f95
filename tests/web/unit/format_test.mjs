// The dashboard's pure formatters (agent/daemon/web/format.mjs).
import {test} from 'node:test';
import assert from 'node:assert/strict';
import {confirmText, dur, niceTicks, num, pText, plural, shortSha, signed, tickLabel, unfinished, verdictClass, when}
  from '../../../agent/daemon/web/format.mjs';

const labels = (lo, hi) => { const t = niceTicks(lo, hi); return t.values.map(v => tickLabel(v, t.decimals)); };

test('niceTicks: round numbers 1-2-5 apart, as the C++ NiceTicks (axis_ticks.cc)', () => {
  // The cases the browser test checks on the experiment page.
  assert.deepEqual(labels(0.9483, 0.9821), ['0.95', '0.96', '0.97', '0.98']);
  assert.deepEqual(labels(2.1, 21.9), ['5', '10', '15', '20']);
  assert.deepEqual(labels(0, 0.9), ['0', '0.2', '0.4', '0.6', '0.8']);
  assert.deepEqual(labels(-0.021, 0.011), ['-0.02', '-0.01', '0', '0.01']);
  // Reversed bounds, one value, nothing finite.
  assert.deepEqual(labels(21.9, 2.1), ['5', '10', '15', '20']);
  assert.deepEqual(niceTicks(3, 3), {values: [3], decimals: 4});
  assert.deepEqual(niceTicks(NaN, 1), {values: [], decimals: 0});
  assert.deepEqual(niceTicks(0, Infinity), {values: [], decimals: 0});
  // At least 3 ticks even over a narrow range.
  assert.ok(niceTicks(0.1, 0.12).values.length >= 3);
});

test('tickLabel: no trailing zeros, never -0', () => {
  assert.equal(tickLabel(0.5, 2), '0.5');
  assert.equal(tickLabel(2, 3), '2');
  assert.equal(tickLabel(-0.0000001, 2), '0');
  assert.equal(tickLabel(1234.5678, 1), '1234.6');
});

test('numbers: a dash for none, fixed digits, a sign on effects, p as the CLI writes it', () => {
  assert.equal(num(null), '–');
  assert.equal(num(Infinity), '–');
  assert.equal(num(0.123456), '0.1235');
  assert.equal(num(2, 2), '2.00');
  assert.equal(signed(0.01), '+0.0100');
  assert.equal(signed(-0.01), '-0.0100');
  assert.equal(signed(0), '+0.0000');
  assert.equal(signed(undefined), '–');
  assert.equal(pText(0.04), '=0.0400');
  assert.equal(pText(0.00001), '<0.0001');
  assert.equal(pText(null), '–');
});

test('durations and times', () => {
  assert.equal(dur(null), '–');
  assert.equal(dur(0), '0s');
  assert.equal(dur(42_400), '42s');
  assert.equal(dur(187_000), '3m07s');
  assert.equal(dur(2 * 3600_000 + 5 * 60_000), '2h05m');
  assert.equal(dur(-5), '0s');
  assert.equal(when(Date.UTC(2026, 0, 2, 3, 4, 5)), '2026-01-02 03:04:05 UTC');
  assert.equal(when(0), '–');
  assert.equal(when(null, 'never'), 'never');
});

test('shas, plurals, verdict classes', () => {
  assert.equal(shortSha('0123456789abcdef'), '0123456789');
  assert.equal(shortSha(null), '');
  assert.equal(plural(1, 'run'), 'run');
  assert.equal(plural(0, 'run'), 'runs');
  assert.equal(plural(2, 'batch', 'batches'), 'batches');
  assert.equal(verdictClass('equivalent within ±0.003'), 'equivalent');
  assert.equal(verdictClass('better'), 'better');
  assert.equal(verdictClass(null), 'none');
});

test('an action asks with what it does and how much (docs/dashboard.md)', () => {
  const d = {experiment: 'mlp', commit: 'ae08415cafe', run: '7', seed: '3', state: 'running'};
  assert.equal(confirmText({...d, action: 'add_seeds'}, 5), 'queue 5 more seeds of mlp at ae08415?');
  assert.equal(confirmText({...d, action: 'add_seeds'}, 1), 'queue 1 more seed of mlp at ae08415?');
  assert.equal(confirmText({...d, action: 'cancel_batch', left: '7'}), 'cancel 7 unfinished runs of mlp at ae08415?');
  assert.equal(confirmText({...d, action: 'cancel_batch', left: '1'}), 'cancel 1 unfinished run of mlp at ae08415?');
  assert.equal(confirmText({...d, action: 'cancel_run'}), 'cancel run 7 (mlp seed 3 at ae08415, running)?');
  assert.equal(confirmText({...d, action: 'retry_run'}), 'retry run 7 (mlp seed 3 at ae08415): queue 1 run again?');
  assert.equal(confirmText({action: 'reset_pool', pool: 'gpu', failed: '3'}),
    'reset pool gpu: forget its 3 failed boots and let it boot again?');
  assert.equal(unfinished({queued: 1, leased: 2, running: 3, failed: 4, succeeded: 9}), 10);
  assert.equal(unfinished({}), 0);
});
