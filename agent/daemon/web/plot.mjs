// Pure SVG plots of the server's documents: each takes JSON and returns
// markup (`html`) whose classes app.css colours from the shared palette
// (agent/results/palette.h). No DOM here: tests/web/unit/plot_test.mjs runs
// them in node.
import {html} from './html.mjs';
import {niceTicks, num, shortSha, tickLabel, verdictClass} from './format.mjs';

// Grid lines and labels at round numbers between lo and hi; y maps a value
// to its pixel row, the lines run from x = left to x = right.
function yTicks(lo, hi, y, left, right) {
  const ticks = niceTicks(lo, hi);
  return ticks.values.map(v => {
    const yy = y(v);
    return html`<line class="gridline" x1="${left}" x2="${right}" y1="${yy}" y2="${yy}"/>
      <text class="ytick" x="${left - 6}" y="${yy + 4}" text-anchor="end">${tickLabel(v, ticks.decimals)}</text>`;
  });
}

// A batch's progress: a bar of the runs done, then the counts in words.
export function progress(b) {
  const c = b.counts || {};
  const total = b.runs || 0;
  const done = c.succeeded || 0;
  const pct = total ? Math.round(100 * done / total) : 0;
  const running = (c.running || 0) + (c.leased || 0);
  const failed = (c.dead || 0) + (c.failed || 0);
  const bar = html`<svg class="bar" width="140" height="10" viewBox="0 0 100 10" preserveAspectRatio="none" aria-hidden="true">
    <rect class="bar-bg" width="100" height="10" rx="4"/><rect class="bar-done" width="${pct}" height="10" rx="4"/></svg>`;
  return html`${bar}${done}/${total} done${running ? `, ${running} running` : ''}${
    failed ? html`, <span class="state-dead">${failed} failed</span>` : ''}${c.cancelled ? `, ${c.cancelled} cancelled` : ''}`;
}

// The commit page's seeds of both sides as dots, the same seed joined by a
// line; means as bars.
export function seedPlot(vp) {
  const a = vp.a || {}, b = vp.b || {};
  const all = (a.values || []).concat(b.values || []);
  if (!all.length) return html`<p class="muted">No finished runs on either side yet.</p>`;
  const W = 460, H = 240, L = 64, R = 16, T = 14, B = 34;
  let lo = Math.min(...all), hi = Math.max(...all);
  if (hi - lo < 1e-12) { lo -= 0.5; hi += 0.5; }
  const pad = (hi - lo) * 0.08; lo -= pad; hi += pad;
  const y = v => T + (H - T - B) * (1 - (v - lo) / (hi - lo));
  const xb = L + (W - L - R) * 0.25, xa = L + (W - L - R) * 0.75;
  const seedsB = new Map((b.seeds || []).map((sd, i) => [sd, b.values[i]]));
  const pairs = (a.seeds || []).filter(sd => seedsB.has(sd)).map(sd =>
    html`<line class="pair" x1="${xb}" y1="${y(seedsB.get(sd))}" x2="${xa}" y2="${y(a.values[a.seeds.indexOf(sd)])}"/>`);
  const dots = (side, x, cls) => (side.values || []).map((v, i) => {
    const seed = side.seeds ? side.seeds[i] : '';
    return html`<circle class="seed ${cls}" data-seed="${seed}" data-value="${v}" cx="${x + ((i % 3) - 1) * 3}" cy="${y(v)}" r="4">
      <title>seed ${side.seeds ? seed : '?'}: ${num(v, 5)}</title></circle>`;
  });
  const mean = (m, x) => m == null ? '' : html`<line class="mean" x1="${x - 22}" x2="${x + 22}" y1="${y(m)}" y2="${y(m)}"/>`;
  return html`<svg class="seeds" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="seeds of ${vp.experiment}">${
    yTicks(lo, hi, y, L, W - R)}${pairs}${mean(b.mean, xb)}${mean(a.mean, xa)}${dots(b, xb, 'seed-b')}${dots(a, xa, 'seed-a')}
    <text x="${xb}" y="${H - 10}" text-anchor="middle">baseline ${shortSha(b.commit).slice(0, 7)} (n=${b.n || 0})</text>
    <text x="${xa}" y="${H - 10}" text-anchor="middle">this commit (n=${a.n || 0})</text></svg>`;
}

// The experiment page's history: mean and 95% CI per commit, oldest left;
// the marker's colour and word are the stored verdict against that commit's
// baseline; the band is ± min_effect around the baseline's mean.
export function historyPlot(e, entries) {
  const W = 1180, H = 300, L = 70, R = 20, T = 18, B = 40;
  const pts = entries.filter(x => x.mean != null);
  if (!pts.length) return html`<p class="muted">No finished runs yet.</p>`;
  const band = x => {
    const vp = x.vs_parent;
    return vp && vp.min_effect != null && vp.diff != null ? {base: x.mean - vp.diff, half: vp.min_effect} : null;
  };
  const vals = [];
  for (const x of pts) {
    vals.push(x.mean);
    if (x.ci95) vals.push(x.ci95[0], x.ci95[1]);
    const bd = band(x);
    if (bd) vals.push(bd.base + bd.half, bd.base - bd.half);
  }
  let lo = Math.min(...vals), hi = Math.max(...vals);
  if (hi - lo < 1e-12) { lo -= 0.5; hi += 0.5; }
  const pad = (hi - lo) * 0.1; lo -= pad; hi += pad;
  const n = entries.length;
  const step = (W - L - R) / Math.max(1, n);
  const x = i => L + step * (i + 0.5);
  const y = v => T + (H - T - B) * (1 - (v - lo) / (hi - lo));
  const axes = html`<line class="axis" x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/><line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>`;
  const bands = entries.map((en, i) => {
    const bd = en.mean == null ? null : band(en);
    if (!bd) return '';
    const top = y(bd.base + bd.half), height = Math.max(1, y(bd.base - bd.half) - top);
    return html`<rect class="band" x="${x(i) - step * 0.4}" width="${step * 0.8}" y="${top}" height="${height}">
      <title>min_effect band ±${num(bd.half)} around the baseline ${num(bd.base)}</title></rect>`;
  });
  const points = entries.map((en, i) => {
    if (en.mean == null) return '';
    const vp = en.vs_parent;
    const v = vp ? vp.verdict : 'none';
    const ci = en.ci95 ? html`<line class="ci" x1="${x(i)}" x2="${x(i)}" y1="${y(en.ci95[0])}" y2="${y(en.ci95[1])}"/>` : '';
    const tip = `${shortSha(en.commit)} ${en.subject}: ${num(en.mean)}${en.ci95 ? ` (95% CI ${num(en.ci95[0])}..${num(en.ci95[1])})` : ''}` +
      `, n=${en.n}${vp ? ', ' + vp.verdict : ''}`;
    const point = html`<a href="/commit/${encodeURIComponent(en.commit)}"><circle class="point p-${verdictClass(v)}" data-commit="${en.commit}" 
      data-verdict="${v}" cx="${x(i)}" cy="${y(en.mean)}" r="6"><title>${tip}</title></circle></a>`;
    // The word where it fits over its point (about 6 px a letter), else a
    // mark (the table below has the words).
    let word = '';
    if (vp) {
      const w = v.replace(/_/g, ' ');
      const shown = w.length * 6 <= step ? w : ({better: '▲', worse: '▼'}[v] || '·');
      word = html`<text class="vword v-${verdictClass(v)}" x="${x(i)}" y="${T + 10}" text-anchor="middle">${
        shown === w ? '' : html`<title>${w}</title>`}${shown}</text>`;
    }
    const label = n <= 24 || i % Math.ceil(n / 24) === 0 ?
      html`<text x="${x(i)}" y="${H - B + 16}" text-anchor="middle" class="mono">${shortSha(en.commit).slice(0, 7)}</text>` : '';
    return html`${ci}${point}${word}${label}`;
  });
  return html`<svg class="history" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="history of ${e.experiment}">${
    yTicks(lo, hi, y, L, W - R)}${axes}${bands}${points}</svg>`;
}

// A run's metric curves, one chart per metric name and one line per attempt
// (a retried run starts again at step 0; the store keeps which attempt sent
// each point). A metric without steps is a list of values.
export function curvePlot(points) {
  const byName = {};
  for (const p of points) (byName[p.name] = byName[p.name] || []).push(p);
  const charts = Object.entries(byName).map(([name, ps]) => {
    const stepped = ps.filter(p => p.step != null);
    if (stepped.length < 2) return html`<p>${name}: ${ps.map(p => num(p.value)).join(', ')}</p>`;
    const W = 560, H = 200, L = 60, R = 12, T = 10, B = 26;
    const xs = stepped.map(p => p.step), ys = stepped.map(p => p.value);
    let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    if (x1 === x0) x1 = x0 + 1;
    if (y1 - y0 < 1e-12) { y0 -= 0.5; y1 += 0.5; }
    const fx = v => L + (W - L - R) * (v - x0) / (x1 - x0), fy = v => T + (H - T - B) * (1 - (v - y0) / (y1 - y0));
    const frame = html`<line class="axis" x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/>
      <line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>
      <text x="${L - 6}" y="${fy(y1) + 4}" text-anchor="end">${num(y1)}</text><text x="${L - 6}" y="${fy(y0) + 4}" text-anchor="end">${num(y0)}</text>
      <text x="${L}" y="${H - 8}">step ${x0}</text><text x="${W - R}" y="${H - 8}" text-anchor="end">step ${x1}</text>`;
    const byAttempt = new Map();
    for (const p of stepped) {
      const k = p.attempt || 0;
      if (!byAttempt.has(k)) byAttempt.set(k, []);
      byAttempt.get(k).push(p);
    }
    const many = byAttempt.size > 1;
    const lines = [...byAttempt].map(([k, ps2], i) => {
      const last = i === byAttempt.size - 1;
      const coords = ps2.map(p => fx(p.step).toFixed(1) + ',' + fy(p.value).toFixed(1)).join(' ');
      const end = ps2[ps2.length - 1];
      return html`<polyline class="curve${last ? '' : ' earlier'}" data-attempt="${k}" points="${coords}"><title>attempt ${k}</title></polyline>${
        many ? html`<text class="attempt-label" x="${fx(end.step).toFixed(1)}" y="${(fy(end.value) - 6).toFixed(1)}" text-anchor="end">attempt ${k}</text>` : ''}`;
    });
    return html`<svg class="curve-plot" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="curve of ${name}">${
      frame}${lines}<text x="${W - R}" y="${T + 10}" text-anchor="end">${name}</text></svg>`;
  });
  return charts.length ? html`${charts}` : html`<p class="muted">No metric points yet.</p>`;
}
