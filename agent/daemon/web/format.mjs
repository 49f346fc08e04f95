// Pure formatters: numbers, times, shas and the questions the action buttons
// ask. Each returns text (a string), never markup; `html` escapes it where
// it is shown. No DOM here: tests/web/unit/format_test.mjs runs them in node.

const DASH = '–';

export function num(v, d = 4) { return (v == null || !isFinite(v)) ? DASH : Number(v).toFixed(d); }
export function signed(v, d = 4) { return v == null ? DASH : (v >= 0 ? '+' : '') + Number(v).toFixed(d); }
// "=0.0123", "<0.0001": the form after a "p".
export function pText(p) { return p == null ? DASH : (p < 1e-4 ? '<0.0001' : '=' + Number(p).toFixed(4)); }
export function shortSha(sha) { return String(sha || '').slice(0, 10); }
export function plural(n, one, many = one + 's') { return n === 1 ? one : many; }

// Axis ticks at round numbers, one step of 1, 2 or 5 times a power of ten
// apart: at most `target`, and 3 at least. The rule of the SVG charts of the
// report and the sweeps (agent/results/axis_ticks.cc NiceTicks).
export function niceTicks(lo, hi, target = 5) {
  if (!isFinite(lo) || !isFinite(hi)) return {values: [], decimals: 0};
  if (hi < lo) [lo, hi] = [hi, lo];
  if (hi - lo <= 0) return {values: [lo], decimals: 4};
  let out = {values: [], decimals: 0};
  for (let t = Math.max(2, target); t <= 4 * Math.max(2, target); t++) {
    const raw = (hi - lo) / (t - 1);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / mag;
    const step = (norm <= 1 + 1e-9 ? 1 : norm <= 2 + 1e-9 ? 2 : norm <= 5 + 1e-9 ? 5 : 10) * mag;
    const values = [];
    const last = Math.floor(hi / step + 1e-9);
    for (let k = Math.ceil(lo / step - 1e-9); k <= last && values.length < 1000; k++) {
      const v = k * step;
      values.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    }
    out = {values, decimals: Math.max(0, -Math.floor(Math.log10(step) + 1e-9))};
    if (values.length >= 3) break;
  }
  return out;
}

// A tick's label: `decimals` digits at most, no trailing zeros, never "-0".
export function tickLabel(v, decimals) {
  let s = Number(v).toFixed(Math.min(15, Math.max(0, decimals)));
  if (s.includes('.')) s = s.replace(/0+$/, '').replace(/\.$/, '');
  return s === '-0' ? '0' : s;
}

// "42s", "3m07s", "2h05m".
export function dur(ms) {
  if (ms == null) return DASH;
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
  return Math.floor(s / 3600) + 'h' + String(Math.floor(s / 60) % 60).padStart(2, '0') + 'm';
}

// "2026-01-02 03:04:05 UTC"; `none` for a missing time.
export function when(ms, none = DASH) {
  return ms ? new Date(ms).toISOString().replace('T', ' ').slice(0, 19) + ' UTC' : none;
}

// Runs of a batch that a cancel would stop.
export function unfinished(c) { return (c.queued || 0) + (c.leased || 0) + (c.running || 0) + (c.failed || 0); }

// The question an action button asks, from its data-* attributes: "queue 5
// more seeds of mlp at ae08415?", "cancel 7 unfinished runs of mlp at ae08415?".
export function confirmText(d, seeds) {
  const sha = String(d.commit || '').slice(0, 7), at = `${d.experiment} at ${sha}`;
  switch (d.action) {
    case 'add_seeds': return `queue ${seeds} more ${plural(seeds, 'seed')} of ${at}?`;
    case 'cancel_batch': return `cancel ${d.left} unfinished ${plural(Number(d.left), 'run')} of ${at}?`;
    case 'cancel_run': return `cancel run ${d.run} (${d.experiment} seed ${d.seed} at ${sha}, ${d.state})?`;
    case 'retry_run': return `retry run ${d.run} (${d.experiment} seed ${d.seed} at ${sha}): queue 1 run again?`;
    case 'reset_pool': return `reset pool ${d.pool}: forget its ${d.failed} failed ${plural(Number(d.failed), 'boot')} and let it boot again?`;
  }
  return `${d.action}?`;
}

// The first word of a verdict, for its CSS class: "equivalent within ±0.003" -> "equivalent".
export function verdictClass(v) { return String(v || 'none').split(' ')[0]; }
