// The trainq dashboard: plain JS and SVG, no build step, no outside requests.
// Every number shown comes from the server's documents (the same JSON the CLI
// prints); no verdict is computed here. Live: server-sent events from
// /dash/events trigger a refetch of the page's documents; sections whose HTML
// did not change are left alone, so scroll and selection stay.
'use strict';

const $ = (s, r = document) => r.querySelector(s);
const LOG_KEEP = 256 * 1024;   // characters of a log kept in the page
const PAGE = 40;               // rows or points per page

function esc(s) {
  return String(s == null ? '' : s).replace(/[&<>"']/g,
    c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
}
function num(v, d = 4) { return (v == null || !isFinite(v)) ? '–' : Number(v).toFixed(d); }
function signed(v, d = 4) { return v == null ? '–' : (v >= 0 ? '+' : '') + Number(v).toFixed(d); }
function pText(p) { return p == null ? '–' : (p < 1e-4 ? '<0.0001' : '=' + Number(p).toFixed(4)); }
// Axis ticks at round numbers, one step of 1, 2 or 5 times a power of ten
// apart: at most `target`, and 3 at least. The rule of the SVG charts of the
// report and the sweeps (agent/results/axis_ticks.cc NiceTicks).
function niceTicks(lo, hi, target = 5) {
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
function tickLabel(v, decimals) {
  let s = Number(v).toFixed(Math.min(15, Math.max(0, decimals)));
  if (s.includes('.')) s = s.replace(/0+$/, '').replace(/\.$/, '');
  return s === '-0' ? '0' : s;
}
function short(sha) { return esc(String(sha || '').slice(0, 10)); }
function dur(ms) {
  if (ms == null) return '–';
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
  return Math.floor(s / 3600) + 'h' + String(Math.floor(s / 60) % 60).padStart(2, '0') + 'm';
}
function when(ms) { return ms ? new Date(ms).toISOString().replace('T', ' ').slice(0, 19) + ' UTC' : '–'; }
function commitLink(sha) { return `<a class="mono" href="/commit/${encodeURIComponent(sha)}">${short(sha)}</a>`; }
function expLink(name) { return `<a href="/experiment/${encodeURIComponent(name)}">${esc(name)}</a>`; }
function runLink(id) { return `<a href="/run/${id}">${id}</a>`; }
function verdictWord(v) {
  if (!v) return '<span class="muted">no baseline</span>';
  const w = v.replace(/_/g, ' ');
  // "equivalent within ±0.003": the class is the first word.
  return `<span class="verdict v-${esc(v.split(' ')[0])}">${esc(w)}</span>`;
}
function stateCls(s) { return `<span class="state-${esc(s)}">${esc(s)}</span>`; }

const session = {role: 'read', csrf: '', who: '', person: false};
// Cancel, retry and add seeds: a write role or an admin (agent/daemon/access.h).
const admin = () => session.role === 'admin' || session.role === 'write';
const isAdmin = () => session.role === 'admin';

async function getJSON(url) {
  const r = await fetch(url, {credentials: 'same-origin', headers: {Accept: 'application/json'}});
  if (r.status === 401) { signedOut(); throw new Error('signed out'); }
  const j = await r.json();
  if (!r.ok) throw new Error(j.reason || ('HTTP ' + r.status));
  return j;
}

function signedOut() {
  $('#main').innerHTML = '<section class="card"><h1>Signed out</h1><p>Your session ended. ' +
    '<a href="/signin?next=' + encodeURIComponent(location.pathname + location.search) +
    '">Sign in again</a> with your personal token, or the read or admin token.</p></section>';
  stopLive();
}

function toast(text, bad) {
  const t = $('#toast');
  t.textContent = text;
  t.className = 'toast' + (bad ? ' bad' : '');
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 4000);
}

// Sections of the page by key; a section's DOM is replaced only when its HTML changed.
function render(sections) {
  const main = $('#main');
  const keys = new Set(sections.map(s => s.key));
  for (const el of Array.from(main.children)) {
    if (!el.dataset.key || !keys.has(el.dataset.key)) el.remove();
  }
  let prev = null;
  for (const s of sections) {
    let el = main.querySelector(`:scope > [data-key="${s.key}"]`);
    if (!el) {
      el = document.createElement('div');
      el.dataset.key = s.key;
      if (prev) prev.after(el); else main.prepend(el);
    }
    if (el.dataset.html !== s.html) {
      el.innerHTML = s.html;
      el.dataset.html = s.html;
    }
    prev = el;
  }
}

function card(title, body, extra = '') {
  return `<section class="card"${extra}><h2>${title}</h2>${body}</section>`;
}

function table(head, rows, empty) {
  if (!rows.length) return `<p class="muted">${empty}</p>`;
  return '<table><thead><tr>' + head.map(h => {
    const n = h.startsWith('#');
    return `<th${n ? ' class="num"' : ''}>${esc(n ? h.slice(1) : h)}</th>`;
  }).join('') + '</tr></thead><tbody>' + rows.join('') + '</tbody></table>';
}

// Paging of long lists, kept across refreshes.
const pages = {};
function paged(key, items) {
  const n = Math.max(1, Math.ceil(items.length / PAGE));
  const p = Math.min(pages[key] || 0, n - 1);
  const slice = items.slice(p * PAGE, (p + 1) * PAGE);
  const pager = n > 1 ? `<div class="pager"><button data-page="${key}" data-to="${p - 1}"${p === 0 ? ' disabled' : ''}>‹ newer</button>` +
    `<span class="muted">page ${p + 1} of ${n} (${items.length})</span>` +
    `<button data-page="${key}" data-to="${p + 1}"${p >= n - 1 ? ' disabled' : ''}>older ›</button></div>` : '';
  return {slice, pager};
}

// Actions that spend (or stop) machine time say what they do and how much
// in their confirmation (docs/dashboard.md): the batch's experiment, commit
// and unfinished runs ride on the buttons.
function unfinished(c) { return (c.queued || 0) + (c.leased || 0) + (c.running || 0) + (c.failed || 0); }
function batchActions(b, experiment, commit, counts) {
  if (!admin()) return '';
  const what = `data-batch="${b}" data-experiment="${esc(experiment)}" data-commit="${esc(commit)}"`;
  const left = unfinished(counts || {});
  return `<span class="actions">` +
    (left ? `<button class="danger" data-action="cancel_batch" ${what} data-left="${left}">cancel batch</button>` : '') +
    `<input type="number" min="1" max="100" value="5" aria-label="seeds to add" data-seeds-for="${b}">` +
    `<button data-action="add_seeds" ${what}>add seeds</button></span>`;
}
function runActions(r) {
  if (!admin()) return '';
  const what = `data-run="${r.id}" data-experiment="${esc(r.experiment)}" data-commit="${esc(r.commit)}" data-seed="${r.seed}" data-state="${esc(r.state)}"`;
  if (['dead', 'cancelled'].includes(r.state)) return `<button data-action="retry_run" ${what}>retry</button>`;
  if (!['queued', 'leased', 'running', 'failed'].includes(r.state)) return '';
  return `<button class="danger" data-action="cancel_run" ${what}>cancel</button>`;
}
// "queue 5 more seeds of mlp at ae08415?", "cancel 7 unfinished runs of mlp at ae08415?".
function confirmText(btn, seeds) {
  const d = btn.dataset, at = `${d.experiment} at ${String(d.commit || '').slice(0, 7)}`;
  switch (d.action) {
    case 'add_seeds': return `queue ${seeds} more seed${seeds === 1 ? '' : 's'} of ${at}?`;
    case 'cancel_batch': return `cancel ${d.left} unfinished ${Number(d.left) === 1 ? 'run' : 'runs'} of ${at}?`;
    case 'cancel_run': return `cancel run ${d.run} (${d.experiment} seed ${d.seed} at ${String(d.commit || '').slice(0, 7)}, ${d.state})?`;
    case 'retry_run': return `retry run ${d.run} (${d.experiment} seed ${d.seed} at ${String(d.commit || '').slice(0, 7)}): queue 1 run again?`;
  }
  return `${d.action}?`;
}

function retried(r) { return r.retries ? ` <span class="muted" title="retried ${r.retries} time(s); earlier attempts on the run's page">↻${r.retries}</span>` : ''; }

function progress(b) {
  const c = b.counts || {};
  const total = b.runs || 0;
  const done = c.succeeded || 0;
  const pct = total ? Math.round(100 * done / total) : 0;
  const running = (c.running || 0) + (c.leased || 0);
  const failed = (c.dead || 0) + (c.failed || 0);
  return `<svg class="bar" width="140" height="10" viewBox="0 0 100 10" preserveAspectRatio="none" aria-hidden="true"><rect class="bar-bg" width="100" height="10" rx="4"/><rect class="bar-done" width="${pct}" height="10" rx="4"/></svg>${done}/${total} done` +
    (running ? `, ${running} running` : '') + (failed ? `, <span class="state-dead">${failed} failed</span>` : '') +
    (c.cancelled ? `, ${c.cancelled} cancelled` : '');
}

// ---- pages -----------------------------------------------------------------

async function overview() {
  const [st, ex, sw] = await Promise.all([getJSON('/dash/api/status'), getJSON('/dash/api/experiments'),
    getJSON('/dash/api/sweeps')]);
  const c = st.counts || {};
  const order = ['queued', 'leased', 'running', 'failed', 'succeeded', 'dead', 'cancelled'];
  const counts = '<div class="counts" id="counts">' + order.map(k =>
    `<div class="count" data-state="${k}"><b>${c[k] || 0}</b><span>${k}</span></div>`).join('') +
    `<div class="count"><b>${st.slots ? st.slots.busy : 0}/${st.slots ? st.slots.total : 0}</b><span>slots busy</span></div></div>`;
  const running = table(['run', 'experiment', 'commit', '#seed', '#attempt', 'elapsed', 'latest', 'worker'],
    (st.running || []).map(r => {
      const l = r.latest;
      const latest = l ? (l.step != null ? `step ${l.step} ` : '') +
        Object.entries(l.metrics || {}).map(([k, v]) => `${esc(k)} ${num(v)}`).join(', ') : '–';
      return `<tr data-run="${r.id}"><td>${runLink(r.id)}</td><td>${expLink(r.experiment)}</td><td>${commitLink(r.commit)}</td>` +
        `<td class="num">${r.seed}</td><td class="num">${r.attempts}/${r.max_attempts}</td><td>${dur(r.elapsed_ms)}</td>` +
        `<td>${latest}</td><td>${esc(r.worker)} ${runActions(r)}</td></tr>`;
    }), 'Nothing is running.');
  const waiting = table(['batch', 'experiment', '#runs', 'why it waits'],
    (st.waiting || []).map(w => `<tr><td>${w.batch}</td><td>${expLink(w.experiment)}</td><td class="num">${w.runs}</td><td>${esc(w.reason)}</td></tr>`),
    'No batch is held back.');
  const active = (st.batches || []).filter(b => (b.counts.queued || 0) + (b.counts.leased || 0) + (b.counts.running || 0) + (b.counts.failed || 0) > 0);
  const batches = table(['batch', 'experiment', 'commit', 'progress', 'mean', 'eta'],
    active.map(b => `<tr data-batch="${b.id}"><td>${b.id}</td><td>${expLink(b.experiment)}</td><td>${commitLink(b.commit)} <span class="muted">${esc(b.subject)}</span></td>` +
      `<td class="progress">${progress(b)}${batchActions(b.id, b.experiment, b.commit, b.counts)}</td><td class="num">${num(b.summary && b.summary.mean)}</td><td>${b.eta_ms ? when(b.eta_ms) : '–'}</td></tr>`),
    'No batch in progress.');
  const pools = table(['pool', 'machines', '#slots busy', '#cost', 'health'],
    (st.pools || []).map(p => `<tr><td>${esc(p.pool)}</td><td>${Object.entries(p.machines || {}).map(([k, v]) => `${v} ${esc(k)}`).join(', ') || '–'}</td>` +
      `<td class="num">${p.slots.busy}/${p.slots.total}</td><td class="num">$${num(p.cost, 2)}</td><td>${p.failing ? '<span class="state-dead">failing</span> ' + esc(p.provider_error) : 'ok'}</td></tr>`),
    'No machines (runs use serve\'s own slots).');
  const pushes = table(['push', 'ref', 'commits', 'state', 'result', 'received'],
    ((st.pushes && st.pushes.recent) || []).map(p => `<tr><td>${p.id}</td><td class="clip">${esc(p.ref)}</td><td class="nowrap">${short(p.before)}..${commitLink(p.after)}</td>` +
      `<td>${stateCls(p.state)}</td><td class="clip" title="${esc(p.error || p.result)}">${esc(p.error || p.result)}</td><td class="nowrap">${when(p.received_ms)}</td></tr>`),
    'No pushes recorded.');
  // Companion batches (a determinism check's "x@repro", a sweep's points
  // "x@sweep3.p7") are listed under their experiment, not beside it.
  const all = ex.experiments || [];
  const base = n => n.includes('@') ? n.slice(0, n.indexOf('@')) : n;
  const companions = {};
  for (const e of all) if (e.experiment.includes('@')) (companions[e.repo + '\n' + base(e.experiment)] ||= []).push(e);
  const exps = all.filter(e => !e.experiment.includes('@'));
  for (const e of all) {  // a companion whose experiment has no batch of its own stays listed
    if (e.experiment.includes('@') && !exps.some(x => x.repo === e.repo && x.experiment === base(e.experiment)) &&
        !exps.includes(e)) exps.push(e);
  }
  const pg = paged('experiments', exps);
  const latest = e => {
    const v = e.latest_verdict;
    return v ? `<span title="${esc(v.text)}">${verdictWord(v.verdict)}</span> <span class="muted">vs ${short(v.baseline_commit)}</span>` :
      '<span class="muted">–</span>';
  };
  const expTable = table(['experiment', 'metric', '#batches', 'latest commit', 'latest verdict'],
    pg.slice.map(e => {
      const cs = e.experiment.includes('@') ? [] : (companions[e.repo + '\n' + e.experiment] || []);
      const more = cs.length ? `<div class="muted small">+ ${cs.length} companion${cs.length === 1 ? '' : 's'}: ` +
        cs.slice(0, 3).map(c => expLink(c.experiment)).join(', ') + (cs.length > 3 ? ', …' : '') + '</div>' : '';
      return `<tr data-experiment="${esc(e.experiment)}"><td>${expLink(e.experiment)}<div class="muted small">${esc(e.repo)}</div>${more}</td><td>${esc(e.metric)}</td>` +
        `<td class="num">${e.batches}</td><td class="clip">${commitLink(e.latest_commit)} <span class="muted">${esc(e.latest_subject)}</span></td>` +
        `<td>${latest(e)}</td></tr>`;
    }),
    'No experiment has batches yet: <code>trainq submit</code> queues some.') + pg.pager;
  const sweeps = table(['sweep', 'experiment', 'commit', '#points', 'started'],
    (sw.sweeps || []).map(s => `<tr><td><a href="/sweeps">${s.id}</a></td><td>${expLink(s.experiment)}</td><td>${s.commit ? commitLink(s.commit) : '–'}</td>` +
      `<td class="num">${s.points}</td><td>${when(s.created_ms)}</td></tr>`), 'No sweep in progress.');
  render([
    {key: 'title', html: '<h1>Overview</h1>'},
    {key: 'counts', html: card('Queue', counts)},
    {key: 'experiments', html: card('Experiments', expTable, ' id="experiments"')},
    {key: 'batches', html: card('Batches in progress', batches, ' id="batches"')},
    {key: 'running', html: card('Running', running, ' id="running"')},
    {key: 'waiting', html: card('Waiting', waiting)},
    {key: 'pushes', html: card('Recent pushes', pushes, ' id="pushes"')},
    {key: 'lower', html: '<div class="grid">' + card('Pools', pools) + card('Sweeps in progress', sweeps) + '</div>'},
  ]);
}

// Seeds of both sides as dots, the same seed joined by a line; means as bars.
function seedPlot(vp) {
  const a = vp.a || {}, b = vp.b || {};
  const all = (a.values || []).concat(b.values || []);
  if (!all.length) return '<p class="muted">No finished runs on either side yet.</p>';
  const W = 460, H = 240, L = 64, R = 16, T = 14, B = 34;
  let lo = Math.min(...all), hi = Math.max(...all);
  if (hi - lo < 1e-12) { lo -= 0.5; hi += 0.5; }
  const pad = (hi - lo) * 0.08; lo -= pad; hi += pad;
  const y = v => T + (H - T - B) * (1 - (v - lo) / (hi - lo));
  const xb = L + (W - L - R) * 0.25, xa = L + (W - L - R) * 0.75;
  let s = `<svg class="seeds" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="seeds of ${esc(vp.experiment)}">`;
  const ticks = niceTicks(lo, hi);
  for (const v of ticks.values) {
    const yy = y(v);
    s += `<line class="gridline" x1="${L}" x2="${W - R}" y1="${yy}" y2="${yy}"/><text class="ytick" x="${L - 6}" y="${yy + 4}" text-anchor="end">${tickLabel(v, ticks.decimals)}</text>`;
  }
  const seedsB = new Map((b.seeds || []).map((sd, i) => [sd, b.values[i]]));
  (a.seeds || []).forEach((sd, i) => {
    if (seedsB.has(sd)) s += `<line class="pair" x1="${xb}" y1="${y(seedsB.get(sd))}" x2="${xa}" y2="${y(a.values[i])}"/>`;
  });
  const dots = (side, x, cls) => (side.values || []).map((v, i) =>
    `<circle class="seed ${cls}" data-seed="${side.seeds ? side.seeds[i] : ''}" data-value="${v}" cx="${x + ((i % 3) - 1) * 3}" cy="${y(v)}" r="4"><title>seed ${side.seeds ? side.seeds[i] : '?'}: ${num(v, 5)}</title></circle>`).join('');
  if (b.mean != null) s += `<line class="mean" x1="${xb - 22}" x2="${xb + 22}" y1="${y(b.mean)}" y2="${y(b.mean)}"/>`;
  if (a.mean != null) s += `<line class="mean" x1="${xa - 22}" x2="${xa + 22}" y1="${y(a.mean)}" y2="${y(a.mean)}"/>`;
  s += dots(b, xb, 'seed-b') + dots(a, xa, 'seed-a');
  s += `<text x="${xb}" y="${H - 10}" text-anchor="middle">baseline ${short(b.commit).slice(0, 7)} (n=${b.n || 0})</text>`;
  s += `<text x="${xa}" y="${H - 10}" text-anchor="middle">this commit (n=${a.n || 0})</text>`;
  return s + '</svg>';
}

// The verdict document's own fields (analysis.h ComparisonJson): the
// interval and p the verdict used (widened and adjusted in a family), the
// raw p beside them and the correction named, as every other surface shows.
function pCell(c) {
  if (!c || c.p_raw == null) return '–';
  if (c.p_adjusted != null && c.text && c.method !== 'none') {
    return `<span class="p-adj">${esc(pText(c.p_adjusted).replace(/^=/, ''))}</span> ` +
      `<span class="muted p-raw">(raw ${esc(pText(c.p_raw).replace(/^=/, ''))}, ${esc(c.text)})</span>`;
  }
  return `<span class="p-adj">${esc(pText(c.p_raw).replace(/^=/, ''))}</span>` + (c.text ? ` <span class="muted">(${esc(c.text)})</span>` : '');
}
function effectText(vp) {
  const c = vp.correction || {};
  const test = vp.paired ? `paired t on ${vp.shared_seeds} shared seeds` : 'Welch t';
  let s = `<div class="effect">effect <b class="diff">${signed(vp.diff)}</b>`;
  if (c.interval) s += ` (<span class="ci">${esc(c.level_text)} ${signed(c.interval[0])}..${signed(c.interval[1])}</span>)`;
  s += `, ${test}`;
  if (c.p_raw != null) {
    s += c.p_adjusted != null && c.text && c.method !== 'none'
      ? `, <span class="p-adj">p${pText(c.p_adjusted)} adjusted</span> (<span class="p-raw">p${pText(c.p_raw)} raw</span>, <span class="correction">${esc(c.text)}</span>)`
      : `, <span class="p-adj">p${pText(c.p_raw)}</span>` + (c.text ? ` (<span class="correction">${esc(c.text)}</span>)` : '');
  }
  s += ` → ${verdictWord(vp.verdict)}</div>`;
  if (vp.min_effect != null) s += `<div class="muted">min_effect ${num(vp.min_effect)}, alpha ${num(vp.alpha, 3)}</div>`;
  if (vp.probability_of_improvement) s += `<div class="muted poi">${esc(vp.probability_of_improvement.text)}</div>`;
  if (vp.cost) s += `<div class="muted cost">${esc(vp.cost.text)}</div>`;
  if (vp.top_up) s += `<div class="muted top-up">${esc(vp.top_up)}</div>`;
  return s;
}

async function commitPage(sha) {
  const j = await getJSON('/dash/api/commit/' + encodeURIComponent(sha));
  const f = j.family;
  const family = f && (f.size > 1 || (f.unchanged || []).length) ? `<p class="family">Family: ${f.size} experiment${f.size === 1 ? '' : 's'} changed` +
    ((f.experiments || []).length ? ` (${f.experiments.map(esc).join(', ')})` : '') + (f.text ? `, verdicts corrected together: <b>${esc(f.text)}</b>` : '') +
    ((f.unchanged || []).length ? `; <span class="muted">unchanged (reused, not counted): ${f.unchanged.map(esc).join(', ')}</span>` : '') + '</p>' : '';
  const sections = [{key: 'title', html: `<h1>Commit <span class="mono">${short(j.commit)}</span> <span class="muted">${esc(j.subject)}</span></h1>` +
    `<p class="muted">${esc(j.repo)} · parent ${j.parent ? commitLink(j.parent) : '–'}</p>` + family}];
  for (const b of j.batches || []) {
    const vp = b.vs_parent;
    let cmp;
    if (b.unchanged) {
      cmp = `<p class="unchanged">Unchanged: the same runs as batch ${b.unchanged.batch} at ${commitLink(b.unchanged.commit)}` +
        ` (reused); not compared here and not counted in the family.</p>`;
    } else if (vp) {
      cmp = `<div class="grid"><div>${seedPlot(vp)}</div><div>${effectText(vp)}` +
        `<p>this commit: ${num(vp.a.mean)} ± ${num(vp.a.sd)} (n=${vp.a.n})<br>baseline ${commitLink(vp.baseline_sha)}: ${num(vp.b.mean)} ± ${num(vp.b.sd)} (n=${vp.b.n})` +
        `<br><span class="muted">${esc(vp.baseline_note)}</span></p></div></div>`;
    } else {
      cmp = `<p class="muted">No baseline: ${esc(b.baseline_note || 'no runs of this experiment at the parent commit')}</p>`;
    }
    const runs = table(['run', '#seed', 'state', '#attempts', '#metric', 'error', ''],
      (b.runs || []).map(r => `<tr data-run="${r.id}" data-state="${esc(r.state)}"><td>${runLink(r.id)}</td><td class="num">${r.seed}</td><td>${stateCls(r.state)}</td>` +
        `<td class="num">${r.attempts}/${r.max_attempts}${retried(r)}</td><td class="num">${num(r.metric)}</td><td class="err">${esc(r.error)}</td><td>${runActions(r)}</td></tr>`),
      'No runs.');
    const p = b.progress || {};
    const prog = progress({counts: p.counts || {}, runs: p.runs || 0});
    sections.push({key: 'b' + b.id, html: `<section class="card batch" data-batch="${b.id}" data-experiment="${esc(b.experiment)}">` +
      `<h2>${expLink(b.experiment)} <span class="muted">batch ${b.id} · ${esc(b.metric)} (${esc(b.goal)})</span></h2>` +
      `<p>${prog}${b.reuses_batch ? '' : batchActions(b.id, b.experiment, j.commit, p.counts)}</p><p class="muted">why: ${esc(b.reason)}</p>${cmp}<h3>Runs</h3>${runs}</section>`});
  }
  if (!(j.batches || []).length) {
    // Nothing ran here: say why, from the pushes that brought the commit, and
    // what its commit statuses said.
    const why = (j.pushes || []).map(p => `<li>push ${p.id} to ${esc(p.ref)} (${esc(p.source)}, ${when(p.received_ms)}): ` +
      `${stateCls(p.state)} ${esc(p.error || p.result || '')}` +
      ((p.statuses || []).length ? '<br><span class="muted">statuses: ' + p.statuses.map(s =>
        `${esc(s.context)} ${esc(s.posted || s.wanted)}: ${esc(s.description)}`).join('; ') + '</span>' : '') + '</li>').join('');
    sections.push({key: 'none', html: card('Nothing ran at this commit',
      why ? `<ul class="why">${why}</ul>` : '<p class="muted">No push or submit named this commit: trainq has not seen it. ' +
        'Push it to a watched branch, or <code>trainq submit</code> it.</p>')});
  }
  render(sections);
}

// Mean and 95% CI per commit, oldest left; the marker's colour and word are
// the stored verdict against that commit's baseline; the band is ± min_effect
// around the baseline's mean.
function historyPlot(e, entries) {
  const W = 1180, H = 300, L = 70, R = 20, T = 18, B = 40;
  const pts = entries.filter(x => x.mean != null);
  if (!pts.length) return '<p class="muted">No finished runs yet.</p>';
  const vals = [];
  for (const x of pts) {
    vals.push(x.mean);
    if (x.ci95) vals.push(x.ci95[0], x.ci95[1]);
    const vp = x.vs_parent;
    if (vp && vp.min_effect != null && vp.diff != null) {
      const base = x.mean - vp.diff;
      vals.push(base + vp.min_effect, base - vp.min_effect);
    }
  }
  let lo = Math.min(...vals), hi = Math.max(...vals);
  if (hi - lo < 1e-12) { lo -= 0.5; hi += 0.5; }
  const pad = (hi - lo) * 0.1; lo -= pad; hi += pad;
  const n = entries.length;
  const step = (W - L - R) / Math.max(1, n);
  const x = i => L + step * (i + 0.5);
  const y = v => T + (H - T - B) * (1 - (v - lo) / (hi - lo));
  let s = `<svg class="history" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="history of ${esc(e.experiment)}">`;
  const ticks = niceTicks(lo, hi);
  for (const v of ticks.values) {
    const yy = y(v);
    s += `<line class="gridline" x1="${L}" x2="${W - R}" y1="${yy}" y2="${yy}"/><text class="ytick" x="${L - 6}" y="${yy + 4}" text-anchor="end">${tickLabel(v, ticks.decimals)}</text>`;
  }
  s += `<line class="axis" x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/><line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>`;
  entries.forEach((en, i) => {
    const vp = en.vs_parent;
    if (en.mean == null) return;
    if (vp && vp.min_effect != null && vp.diff != null) {
      const base = en.mean - vp.diff;
      s += `<rect class="band" x="${x(i) - step * 0.4}" width="${step * 0.8}" y="${y(base + vp.min_effect)}" height="${Math.max(1, y(base - vp.min_effect) - y(base + vp.min_effect))}"><title>min_effect band ±${num(vp.min_effect)} around the baseline ${num(base)}</title></rect>`;
    }
  });
  entries.forEach((en, i) => {
    if (en.mean == null) return;
    const vp = en.vs_parent;
    const v = vp ? vp.verdict : 'none';
    if (en.ci95) s += `<line class="ci" x1="${x(i)}" x2="${x(i)}" y1="${y(en.ci95[0])}" y2="${y(en.ci95[1])}"/>`;
    s += `<a href="/commit/${encodeURIComponent(en.commit)}"><circle class="point p-${esc(v.split(' ')[0])}" data-commit="${esc(en.commit)}" data-verdict="${esc(v)}" cx="${x(i)}" cy="${y(en.mean)}" r="6">` +
      `<title>${short(en.commit)} ${esc(en.subject)}: ${num(en.mean)}${en.ci95 ? ` (95% CI ${num(en.ci95[0])}..${num(en.ci95[1])})` : ''}, n=${en.n}${vp ? ', ' + esc(vp.verdict) : ''}</title></circle></a>`;
    if (vp) {
      // The word where it fits over its point (about 6 px a letter), else a
      // mark (the table below has the words).
      const word = v.replace(/_/g, ' ');
      const shown = word.length * 6 <= step ? word : ({better: '▲', worse: '▼'}[v] || '·');
      s += `<text class="vword v-${esc(v.split(" ")[0])}" x="${x(i)}" y="${T + 10}" text-anchor="middle">${shown === word ? '' : `<title>${esc(word)}</title>`}${esc(shown)}</text>`;
    }
    if (n <= 24 || i % Math.ceil(n / 24) === 0) s += `<text x="${x(i)}" y="${H - B + 16}" text-anchor="middle" class="mono">${short(en.commit).slice(0, 7)}</text>`;
  });
  return s + '</svg>';
}

// The experiment page's last document, reused until the store changes (paging).
let expDoc = null, changes = 0;

// Which branch the history follows, and links to the others.
function branchLine(name, h) {
  if (!h) return '';
  const others = (h.branches || []).filter(b => b !== h.branch).map(b =>
    `<a href="/experiment/${encodeURIComponent(name)}?branch=${encodeURIComponent(b)}">${esc(b)}</a>`).join(' ');
  let s = '<p class="branch-line">';
  if (h.order === 'branch') {
    s += `Along branch <b class="mono" id="branch">${esc(h.branch)}</b> (first parents, oldest left): ${h.on_branch} commit${h.on_branch === 1 ? '' : 's'} with results` +
      (h.off_branch ? `, <span class="muted">${h.off_branch} batch${h.off_branch === 1 ? '' : 'es'} of commits off this branch not shown</span>` : '') +
      (h.truncated ? `, <span class="muted">only the newest ${h.walked} commits read</span>` : '');
  } else {
    s += `<span class="muted">${esc(h.note)}</span>`;
  }
  if (others) s += ` <span class="muted">· other branches:</span> ${others}`;
  return s + '</p>';
}

// A pager over the server's pages of a history (history.page of .pages).
function serverPager(key, h) {
  const p = h.page || 0, n = h.pages || 1;
  if (n <= 1) return '';
  return `<div class="pager"><button data-page="${key}" data-to="${p - 1}"${p === 0 ? ' disabled' : ''}>‹ newer</button>` +
    `<span class="muted">page ${p + 1} of ${n} (${h.points})</span>` +
    `<button data-page="${key}" data-to="${p + 1}"${p >= n - 1 ? ' disabled' : ''}>older ›</button></div>`;
}

async function experimentPage(name) {
  const branch = new URLSearchParams(location.search).get('branch');
  // The server cuts the history to the page shown (40 commits, newest first).
  const q = new URLSearchParams({page: String(pages.hist || 0), per_page: String(PAGE)});
  if (branch) q.set('branch', branch);
  const url = '/dash/api/experiment/' + encodeURIComponent(name) + '?' + q;
  // A redraw reuses the document it has; a store change fetches it again.
  let j = expDoc && expDoc.url === url && expDoc.gen === changes ? expDoc.data : null;
  if (!j) { const gen = changes; j = await getJSON(url); expDoc = {url, gen, data: j}; }
  const sections = [{key: 'title', html: `<h1>Experiment ${esc(name)}</h1>`}];
  (j.experiments || []).forEach((e, k) => {
    const entries = e.batches || [];  // oldest first
    const h = e.history || {};
    const rows = entries.slice().reverse().map(en => {
      const vp = en.vs_parent;
      // Shown once, where the runs ran: the commits that reused them are named.
      const reused = (en.reused_at || []).length ? `<div class="muted reused">reused unchanged at ${en.reused_at.map(commitLink).join(', ')}</div>` : '';
      return `<tr data-commit="${esc(en.commit)}"><td>${commitLink(en.commit)}</td><td>${esc(en.subject)}${reused}</td><td class="num">${en.n}</td>` +
        `<td class="num">${num(en.mean)}</td><td>${en.ci95 ? num(en.ci95[0]) + '..' + num(en.ci95[1]) : '–'}</td>` +
        `<td>${vp ? commitLink(vp.baseline_commit || en.parent) : '–'}</td><td class="num">${vp ? signed(vp.diff) : '–'}</td>` +
        `<td class="num p-cell">${vp ? pCell(vp.correction) : '–'}</td><td>${vp ? verdictWord(vp.verdict) : verdictWord(null)}</td></tr>`;
    });
    const pager = serverPager('hist', h);
    sections.push({key: 'e' + k, html: `<section class="card"><h2>${esc(e.repo)} · ${esc(e.metric)} (${esc(e.goal)})</h2>` + branchLine(name, h) +
      `<p class="legend muted"><span>● mean, bar: 95% CI</span><span>shaded: ± min_effect around the baseline</span><span>word: verdict vs the baseline</span></p>` +
      historyPlot(e, entries) + pager +
      table(['commit', 'subject', '#n', '#mean', '95% CI', 'baseline', '#effect', '#p (adjusted)', 'verdict'], rows, 'No batches.') + '</section>'});
  });
  render(sections);
}

function curvePlot(points) {
  const byName = {};
  for (const p of points) (byName[p.name] = byName[p.name] || []).push(p);
  let out = '';
  for (const [name, ps] of Object.entries(byName)) {
    const stepped = ps.filter(p => p.step != null);
    if (stepped.length < 2) {
      out += `<p>${esc(name)}: ${ps.map(p => num(p.value)).join(', ')}</p>`;
      continue;
    }
    const W = 560, H = 200, L = 60, R = 12, T = 10, B = 26;
    const xs = stepped.map(p => p.step), ys = stepped.map(p => p.value);
    let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    if (x1 === x0) x1 = x0 + 1;
    if (y1 - y0 < 1e-12) { y0 -= 0.5; y1 += 0.5; }
    const fx = v => L + (W - L - R) * (v - x0) / (x1 - x0), fy = v => T + (H - T - B) * (1 - (v - y0) / (y1 - y0));
    out += `<svg class="curve-plot" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="curve of ${esc(name)}">` +
      `<line class="axis" x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/><line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>` +
      `<text x="${L - 6}" y="${fy(y1) + 4}" text-anchor="end">${num(y1)}</text><text x="${L - 6}" y="${fy(y0) + 4}" text-anchor="end">${num(y0)}</text>` +
      `<text x="${L}" y="${H - 8}">step ${x0}</text><text x="${W - R}" y="${H - 8}" text-anchor="end">step ${x1}</text>`;
    // One curve per attempt (a retried run starts again at step 0): the
    // store keeps which attempt sent each point.
    const byAttempt = new Map();
    for (const p of stepped) {
      const k = p.attempt || 0;
      if (!byAttempt.has(k)) byAttempt.set(k, []);
      byAttempt.get(k).push(p);
    }
    const many = byAttempt.size > 1;
    let i = 0;
    for (const [k, ps2] of byAttempt) {
      const last = ++i === byAttempt.size;
      out += `<polyline class="curve${last ? '' : ' earlier'}" data-attempt="${k}" points="${ps2.map(p => fx(p.step).toFixed(1) + ',' + fy(p.value).toFixed(1)).join(' ')}"><title>attempt ${k}</title></polyline>`;
      if (many) {
        const e = ps2[ps2.length - 1];
        out += `<text class="attempt-label" x="${fx(e.step).toFixed(1)}" y="${(fy(e.value) - 6).toFixed(1)}" text-anchor="end">attempt ${k}</text>`;
      }
    }
    out += `<text x="${W - R}" y="${T + 10}" text-anchor="end">${esc(name)}</text></svg>`;
  }
  return out || '<p class="muted">No metric points yet.</p>';
}

// The log: appended from the server's size, at most LOG_KEEP characters kept.
const log = {run: 0, size: 0, text: '', timer: 0, busy: false};
async function pollLog() {
  if (log.busy) return;
  log.busy = true;
  try {
    const j = await getJSON(`/dash/api/run/${log.run}/log?from=${log.size}`);
    if (j.from < log.size || j.skipped) log.text = j.skipped ? '… (earlier output skipped)\n' : '';
    log.text += j.text;
    if (log.text.length > LOG_KEEP) log.text = '…\n' + log.text.slice(log.text.length - LOG_KEEP);
    log.size = j.size;
    const pre = $('#log');
    if (pre && (j.text || pre.textContent !== log.text)) {
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = log.text;
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
    const note = $('#log-note');
    if (note) note.textContent = j.archived ? 'archived by retention (read from output.log.gz)' : '';
    // An archived log is whole: nothing more will come.
    const live = !j.archived && ['running', 'leased', 'queued', 'failed'].includes(j.state);
    clearTimeout(log.timer);
    if (live && !document.hidden) log.timer = setTimeout(pollLog, 1000);
  } catch (e) {
    clearTimeout(log.timer);
    log.timer = setTimeout(pollLog, 3000);
  } finally {
    log.busy = false;
  }
}

// Earlier rounds of attempts that ended before a retry, oldest first.
function retriesTable(rs) {
  if (!rs.length) return '';
  return '<h3>Earlier attempts</h3>' + table(['retried', 'by', 'was', '#attempts', 'exit', 'error'],
    rs.map(t => `<tr class="retry-row"><td>${when(t.retried_ms)}</td><td>${esc(t.who)}</td><td>${stateCls(t.state)}</td><td class="num">${t.attempts}</td>` +
      `<td>${t.exit_code == null ? '–' : t.exit_code}</td><td class="err">${esc(t.error)}</td></tr>`), '');
}

// Who cancelled, retried or added seeds to this run or its batch (the audit trail).
function whoTable(rows) {
  if (!rows.length) return '';
  return '<h3>Who acted on it</h3>' + table(['when', 'who', 'action', 'on', 'detail'],
    rows.map(a => `<tr class="audit-row"><td>${esc(a.at)}</td><td>${esc(a.who)}</td><td>${esc(a.action.replace(/_/g, ' '))}</td>` +
      `<td>${esc(a.target)}</td><td class="muted">${esc(a.detail)}</td></tr>`), '');
}

async function runPage(id) {
  const j = await getJSON('/dash/api/run/' + encodeURIComponent(id));
  const r = j.run;
  const info = table(['run', 'experiment', 'commit', '#seed', 'state', '#attempts', 'worker', 'started', 'finished', '#metric', 'exit'],
    [`<tr><td>${r.id}</td><td>${expLink(r.experiment)}</td><td>${commitLink(r.commit)}</td><td class="num">${r.seed}</td><td id="run-state">${stateCls(r.state)} ${runActions(r)}</td>` +
     `<td class="num">${r.attempts}/${r.max_attempts}${retried(r)}</td><td>${esc(r.worker)}</td><td>${when(r.started_ms)}</td><td>${when(r.finished_ms)}</td>` +
     `<td class="num">${num(r.metric)}</td><td>${r.exit_code == null ? '–' : r.exit_code}</td></tr>`], '');
  const sections = [
    {key: 'title', html: `<h1>Run ${r.id} <span class="muted">${esc(r.experiment)} seed ${r.seed}</span></h1>`},
    {key: 'info', html: card('Run', info + (r.error ? `<h3>Last error</h3><div class="err">${esc(r.error)}</div>` : '') + retriesTable(j.retries || []) + whoTable(j.audit || []))},
    {key: 'curve', html: card(`Metrics <span class="muted">(${j.metric_points} point${j.metric_points === 1 ? '' : 's'})</span>`, curvePlot(j.metrics || []))},
    {key: 'log', html: card('Output <span class="muted" id="log-note"></span>', '<pre class="log" id="log"></pre>')},
  ];
  render(sections);
  const pre = $('#log');
  if (pre && !pre.textContent && log.text) pre.textContent = log.text;
  if (log.run !== r.id) { log.run = r.id; log.size = 0; log.text = ''; }
  pollLog();
}

async function machinesPage() {
  const st = await getJSON('/dash/api/status');
  const pools = table(['pool', 'machines', '#slots busy', '#booted', 'billed', '#cost', 'provider'],
    (st.pools || []).map(p => `<tr><td>${esc(p.pool)}</td><td>${Object.entries(p.machines || {}).map(([k, v]) => `${v} ${esc(k)}`).join(', ') || '–'}</td>` +
      `<td class="num">${p.slots.busy}/${p.slots.total}</td><td class="num">${p.machines_booted}</td><td>${dur(p.billed_ms)}</td><td class="num">$${num(p.cost, 2)}</td>` +
      `<td>${p.failing ? '<span class="state-dead">failing</span> ' : ''}${esc(p.provider_error || '')}${p.boots && p.boots.error ? '<div class="err">' + esc(p.boots.error) + '</div>' : ''}</td></tr>`),
    'No pools have machines.');
  const ms = (st.machines || []);
  const pg = paged('machines', ms);
  // The sandbox form each worker's probe found: "off" and "hostproc" say why.
  const sandbox = m => m.sandbox == null ? '–' : m.sandbox === 'bwrap' ? 'bwrap' :
    `<span class="${m.sandbox === 'none' ? 'state-dead' : 'muted'}">${m.sandbox === 'none' ? 'off' : esc(m.sandbox)}</span>` +
    (m.sandbox_note ? `<div class="muted">${esc(m.sandbox_note)}</div>` : '');
  const machines = table(['id', 'pool', 'name', 'state', 'sandbox', '#slots', '#busy', 'idle', '#runs done', '#cost', 'last error'],
    pg.slice.map(m => `<tr><td>${m.id}</td><td>${esc(m.pool)}</td><td>${esc(m.name || m.hostname)}</td><td>${stateCls(m.state)}${m.silent ? ' <span class="state-dead">silent</span>' : ''}</td>` +
      `<td>${sandbox(m)}</td>` +
      `<td class="num">${m.slots}</td><td class="num">${m.busy}</td><td>${m.idle_ms == null ? '–' : dur(m.idle_ms)}</td><td class="num">${m.runs_done}</td>` +
      `<td class="num">$${num(m.cost, 2)}</td><td class="err">${esc(m.last_error)}</td></tr>`),
    'No machines: runs use serve\'s own slots, or no pool booted one yet.') + pg.pager;
  const costs = st.costs || {};
  // server.yaml `notify:` targets (docs/notifications.md): last delivery, last error.
  const targets = await getJSON('/dash/api/notify');
  const when = ms => ms == null ? 'never' : new Date(ms).toISOString().replace('T', ' ').slice(0, 19) + ' UTC';
  const notify = table(['target', 'to', 'events', '#delivered', '#pending', '#given up', 'last delivery', 'last error'],
    targets.map(t => `<tr><td>${esc(t.name)}</td><td>${esc(t.to)}</td><td>${esc(t.events.join(', '))}</td>` +
      `<td class="num">${t.delivered}</td><td class="num">${t.pending}</td><td class="num">${t.gave_up}</td>` +
      `<td>${when(t.last_delivered_ms)}${t.last_delivered_event ? ' (' + esc(t.last_delivered_event) + ')' : ''}</td>` +
      `<td>${t.last_error_ms == null ? '–' : '<span class="muted">' + when(t.last_error_ms) + '</span><div class="err">' + esc(t.last_error) + '</div>'}</td></tr>`),
    'No notify targets in the server config.');
  // server.yaml `mlflow:` (docs/mlflow.md): where batches go, the last export, the last error.
  const mf = await getJSON('/dash/api/mlflow');
  const mlflow = !mf.configured ? '<p class="muted">No <code>mlflow:</code> in the server config: nothing is exported.</p>' :
    table(['exports', 'to', 'experiments'],
      mf.servers.map(s => `<tr><td>${esc(s.scope)}</td><td>${esc(s.to)}</td><td>${s.to === 'off' ? '–' : esc(s.experiment_prefix) + '&lt;experiment&gt;'}</td></tr>`), '') +
    table(['#exported', '#pending', '#given up', 'last export', 'last error'],
      [`<tr><td class="num">${mf.exported}</td><td class="num">${mf.pending}</td><td class="num">${mf.gave_up}</td>` +
       `<td>${when(mf.last_export_ms)}${mf.last_exported_batch != null ? ' (batch ' + esc(String(mf.last_exported_batch)) + ')' : ''}</td>` +
       `<td>${mf.last_error_ms == null ? '–' : '<span class="muted">' + when(mf.last_error_ms) + '</span><div class="err">' + esc(mf.last_error) + '</div>'}</td></tr>`], '');
  render([
    {key: 'title', html: '<h1>Machines and pools</h1>'},
    {key: 'pools', html: card('Pools', pools + `<p class="muted">All pools: ${costs.machines_booted || 0} machine${(costs.machines_booted || 0) === 1 ? '' : 's'} booted, billed ${dur(costs.billed_ms)}, $${num(costs.cost, 2)}.</p>`)},
    {key: 'machines', html: card('Machines', machines)},
    {key: 'notify', html: card('Notifications', notify)},
    {key: 'mlflow', html: card('MLflow export', mlflow, ' id="mlflow"')},
  ]);
}

async function sweepsPage() {
  const j = await getJSON('/dash/api/report');
  const sw = (j.sweeps || []).slice().reverse();
  const pg = paged('sweeps', sw);
  // The report's own plots (agent/results/sweep_plot.cc) of one sweep, as
  // SVG images from the server: ?sweep=ID, else the newest.
  const want = Number(new URLSearchParams(location.search).get('sweep')) || (sw[0] && sw[0].id);
  const cur = sw.find(s => s.id === want);
  let plots = '';
  if (cur) {
    const names = (await getJSON(`/dash/api/sweep/${cur.id}`)).plots || [];
    const order = n => n === 'progress.svg' ? 0 : n === 'parallel.svg' ? 1 : n === 'importance.svg' ? 2 : 3;
    names.sort((a, b) => order(a) - order(b) || a.localeCompare(b));
    // The images change when the sweep does: the version is its progress.
    const v = `${cur.points}-${cur.runs_done}-${esc(cur.state)}`;
    plots = card(`Plots of sweep ${cur.id} <span class="muted">${esc(cur.experiment)} at ${short(cur.commit)}, as in <code>trainq report</code></span>`,
      '<div class="sweep-plots">' + names.map(n => `<figure><img class="sweep-plot" data-plot="${esc(n)}" alt="${esc(n)} of sweep ${cur.id}" ` +
        `src="/dash/api/sweep/${cur.id}/${encodeURIComponent(n)}?v=${v}"></figure>`).join('') + '</div>');
  }
  const rows = pg.slice.map(s => `<tr${s.id === want ? ' class="selected"' : ''}><td><a href="/sweeps?sweep=${s.id}">${s.id}</a></td><td>${expLink(s.experiment)}</td><td>${commitLink(s.commit)}</td><td>${stateCls(s.state)}</td>` +
    `<td class="num">${s.points}/${s.budget_points}</td><td>${progress({counts: {succeeded: s.runs_done}, runs: s.runs_total})}</td>` +
    `<td>${(s.winner || []).map(esc).join('<br>') || '<span class="muted">no winner yet</span>'}</td>` +
    `<td>${Object.entries(s.importance || {}).map(([k, v]) => `${esc(k)} ${num(v, 2)}`).join(', ') || '–'}</td></tr>`);
  render([
    {key: 'title', html: '<h1>Sweeps</h1>'},
    {key: 'list', html: card('Sweeps', table(['sweep', 'experiment', 'commit', 'state', '#points', 'runs', 'winner', 'importance (η²)'], rows, 'No sweeps: <code>trainq sweep start</code> starts one.') + pg.pager)},
    {key: 'plots', html: plots},
  ]);
}

// ---- people: the account page (personal tokens) and the audit page -----------

const made = {token: '', name: ''};  // a token just made: shown once, until the page is left
async function accountPage() {
  const intro = `<p>Signed in as <b id="who">${esc(session.who)}</b> (${esc(session.role)}).</p>`;
  if (!session.person && !isAdmin()) {
    render([{key: 'title', html: '<h1>Account</h1>'},
      {key: 'me', html: card('Personal tokens', intro + '<p class="muted">This session was opened with a shared token: personal ' +
        'tokens belong to people. Ask an admin for one, then sign in with it.</p>')}]);
    return;
  }
  const j = await getJSON('/dash/api/tokens');
  const rows = j.tokens.map(t => `<tr class="token-row"><td class="num">${t.id}</td><td>${esc(t.name)}</td>` +
    (isAdmin() ? `<td>${esc(t.owner)}</td>` : '') + `<td>${esc(t.role)}</td><td>${when(t.created_ms)}</td>` +
    `<td>${t.expires_ms ? when(t.expires_ms) : 'never'}</td><td>${t.last_used_ms ? when(t.last_used_ms) + ' <span class="muted">' + esc(t.last_used_from) + '</span>' : '–'}</td>` +
    `<td>${t.revoked_ms ? '<span class="state-cancelled">revoked ' + when(t.revoked_ms) + '</span>' : t.live ? '<span class="state-succeeded">live</span>' : '<span class="state-dead">expired</span>'}</td>` +
    `<td>${t.live ? `<button class="danger" data-revoke="${t.id}" data-name="${esc(t.name)}">revoke</button>` : ''}</td></tr>`);
  const head = ['#id', 'name'].concat(isAdmin() ? ['owner'] : []).concat(['role', 'made', 'expires', 'last used', 'state', '']);
  const roles = ['read', 'write', 'admin'].filter(r => r === 'read' || (r === 'write' && session.role !== 'read') || (r === 'admin' && isAdmin()));
  const form = `<form id="new-token" class="new-token">` +
    `<label>Name <input name="name" required maxlength="200" placeholder="laptop, ci" spellcheck="false"></label>` +
    (isAdmin() ? `<label>For <input name="owner" maxlength="200" placeholder="${session.person ? esc(session.who) : 'ada@example.com'}" spellcheck="false"></label>` : '') +
    `<label>Role <select name="role">${roles.map(r => `<option${r === (session.role === 'admin' && !session.person ? 'read' : session.role) ? ' selected' : ''}>${r}</option>`).join('')}</select></label>` +
    `<label>Expires in <select name="days"><option value="7">7 days</option><option value="30">30 days</option><option value="90" selected>90 days</option><option value="365">a year</option><option value="0">never</option></select></label>` +
    `<button type="submit">Make token</button></form>`;
  const shown = made.token ? `<div class="made" id="made-token"><p>Token <b>${esc(made.name)}</b>, shown this once (the server keeps only its hash):</p>` +
    `<pre class="mono">${esc(made.token)}</pre><p class="muted">On your machine: <code>trainq login --server ${esc(location.origin)}</code> and paste it.</p></div>` : '';
  render([
    {key: 'title', html: '<h1>Account</h1>'},
    {key: 'me', html: card('Personal tokens', intro + '<p class="muted">A personal token carries its owner\'s name and role to the CLI and CI ' +
      '(<code>--server</code> commands, <code>trainq gate --server</code>) and signs in here. Revoking one ends its sessions at once.</p>' + shown + form)},
    {key: 'tokens', html: card(isAdmin() ? 'Everyone\'s tokens' : 'Your tokens', table(head, rows, 'No personal tokens yet.'))},
  ]);
}

async function auditPage() {
  if (!isAdmin()) { render([{key: 'title', html: '<h1>Audit</h1>'}, {key: 'no', html: card('Audit', '<p class="muted">The audit trail is for admins.</p>')}]); return; }
  const j = await getJSON('/dash/api/audit?since=30d');
  const pg = paged('audit', j.audit);
  const rows = pg.slice.map(a => `<tr class="audit-row"><td>${esc(a.at)}</td><td>${esc(a.who)}</td><td>${esc(a.action.replace(/_/g, ' '))}</td>` +
    `<td>${/^run \d+$/.test(a.target) ? runLink(a.target.slice(4)) : esc(a.target)}</td><td class="mono">${esc(a.address)}</td><td class="muted">${esc(a.detail)}</td></tr>`);
  render([
    {key: 'title', html: '<h1>Audit <span class="muted">the last 30 days, newest first</span></h1>'},
    {key: 'list', html: card('Who did what', table(['when', 'who', 'action', 'target', 'from', 'detail'], rows,
      'Nothing yet: cancels, retries, added seeds, pool resets, tokens and sign-ins appear here.') + pg.pager)},
  ]);
}

async function makeToken(form) {
  const f = new FormData(form);
  const body = {name: f.get('name'), days: Number(f.get('days')), role: f.get('role')};
  if (f.get('owner')) body.owner = f.get('owner');
  const r = await fetch('/dash/api/tokens', {method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json', 'X-CSRF-Token': session.csrf}, body: JSON.stringify(body)});
  const j = await r.json();
  if (!r.ok) { toast('refused: ' + (j.reason || r.status), true); return; }
  made.token = j.token; made.name = j.name;
  toast(`made token ${j.id} for ${j.owner}`);
  refresh();
}

async function revokeToken(btn) {
  if (!window.confirm(`revoke token ${btn.dataset.revoke} (${btn.dataset.name})? It stops working at once.`)) return;
  const r = await fetch('/dash/api/tokens/revoke', {method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json', 'X-CSRF-Token': session.csrf}, body: JSON.stringify({id: Number(btn.dataset.revoke)})});
  const j = await r.json();
  if (!r.ok) { toast('refused: ' + (j.reason || r.status), true); return; }
  toast(`revoked token ${j.revoked}`);
  refresh();
}

// ---- routing, live updates, actions ----------------------------------------

function route() {
  const p = decodeURIComponent(location.pathname);
  let m;
  if ((m = p.match(/^\/commit\/([^/]+)/))) return {nav: 'overview', load: () => commitPage(m[1])};
  if ((m = p.match(/^\/experiment\/(.+?)\/?$/))) return {nav: 'overview', load: () => experimentPage(m[1])};
  if ((m = p.match(/^\/run\/(\d+)/))) return {nav: 'overview', load: () => runPage(m[1])};
  if (p.startsWith('/machines')) return {nav: 'machines', load: machinesPage};
  if (p.startsWith('/sweeps')) return {nav: 'sweeps', load: sweepsPage};
  if (p.startsWith('/account')) return {nav: 'account', load: accountPage};
  if (p.startsWith('/audit')) return {nav: 'audit', load: auditPage};
  return {nav: 'overview', load: overview};
}
const current = route();

let loading = null, again = false;
async function refresh() {
  if (loading) { again = true; return loading; }
  loading = (async () => {
    do {
      again = false;
      try {
        await current.load();
        window.trainqRefreshes = (window.trainqRefreshes || 0) + 1;
      } catch (e) {
        if (e.message !== 'signed out') toast(e.message, true);
      }
    } while (again);
  })();
  await loading;
  loading = null;
}

let source = null, pollTimer = 0, failures = 0;
function setLive(cls, text) { const l = $('#live'); l.className = 'live ' + cls; l.textContent = text; }
function startLive() {
  stopLive();
  if (!window.EventSource) { startPolling(); return; }
  source = new EventSource('/dash/events');
  source.addEventListener('change', () => { failures = 0; changes++; setLive('on', 'live'); refresh(); });
  source.onopen = () => { failures = 0; setLive('on', 'live'); };
  source.onerror = () => {
    // The server ends each stream after a change or a quiet while and the
    // browser reconnects; only a closed source or repeated errors mean polling.
    if (source && (source.readyState === EventSource.CLOSED || ++failures > 5)) startPolling();
  };
}
function startPolling() {
  if (source) { source.close(); source = null; }
  setLive('poll', 'polling');
  clearInterval(pollTimer);
  pollTimer = setInterval(() => { changes++; refresh(); }, 2000);
}
function stopLive() {
  if (source) { source.close(); source = null; }
  clearInterval(pollTimer);
  pollTimer = 0;
}

async function act(btn) {
  const body = {action: btn.dataset.action};
  if (btn.dataset.batch) body.batch = Number(btn.dataset.batch);
  if (btn.dataset.run) body.run = Number(btn.dataset.run);
  if (body.action === 'add_seeds') {
    const input = document.querySelector(`[data-seeds-for="${btn.dataset.batch}"]`);
    body.seeds = Number(input ? input.value : 1);
  }
  if (!window.confirm(confirmText(btn, body.seeds))) return;
  btn.disabled = true;
  try {
    const r = await fetch('/dash/api/action', {method: 'POST', credentials: 'same-origin',
      headers: {'Content-Type': 'application/json', 'X-CSRF-Token': session.csrf}, body: JSON.stringify(body)});
    const j = await r.json();
    if (!r.ok) throw new Error(j.reason || ('HTTP ' + r.status));
    toast(body.action === 'add_seeds' ? `added ${j.added} run(s)` :
      body.action === 'retry_run' ? `run ${j.retried} is queued again` : `cancelled ${j.cancelled} run(s)`);
    refresh();
  } catch (e) {
    toast('refused: ' + e.message, true);
  } finally {
    btn.disabled = false;
  }
}

async function signOut() {
  try {
    await fetch('/dash/api/logout', {method: 'POST', credentials: 'same-origin',
      headers: {'X-CSRF-Token': session.csrf}});
  } finally {
    stopLive();
    location.href = '/signin';
  }
}

document.addEventListener('click', ev => {
  const b = ev.target.closest('button');
  if (!b) return;
  if (b.id === 'signout') { ev.preventDefault(); signOut(); return; }
  if (b.dataset.revoke) { ev.preventDefault(); revokeToken(b); return; }
  if (b.dataset.action) { ev.preventDefault(); act(b); }
  if (b.dataset.page) {
    pages[b.dataset.page] = Number(b.dataset.to);
    refresh();
  }
});
document.addEventListener('submit', ev => {
  if (ev.target.id === 'new-token') { ev.preventDefault(); makeToken(ev.target); }
});
window.addEventListener('pagehide', stopLive);
window.addEventListener('pageshow', ev => { if (ev.persisted) { changes++; startLive(); refresh(); } });

(async function main() {
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('current', a.dataset.nav === current.nav);
  try {
    const s = await getJSON('/dash/api/session');
    Object.assign(session, s);
    $('#role').textContent = s.person ? `${s.who} (${s.role})` :
      s.role === 'admin' ? 'admin session' : 'read-only session';
    if (s.role === 'admin') $('#nav-audit').hidden = false;
    $('#signout').hidden = false;
  } catch (e) {
    return;
  }
  await refresh();
  startLive();
})();
