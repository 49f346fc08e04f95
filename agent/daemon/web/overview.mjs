// The overview (/): the queue's counts, what runs and waits, batches in
// progress, recent pushes, every experiment's latest verdict, pools, sweeps.
import {html} from './html.mjs';
import {dur, num, plural, shortSha, when} from './format.mjs';
import {getJSON, render} from './core.mjs';
import {progress} from './plot.mjs';
import {batchActions, card, commitLink, expLink, machineCounts, paged, runActions, runLink, stateWord, table, verdictWord} from './parts.mjs';

const ORDER = ['queued', 'leased', 'running', 'failed', 'succeeded', 'dead', 'cancelled'];

function counts(st) {
  const c = st.counts || {};
  const slots = st.slots || {busy: 0, total: 0};
  return html`<div class="counts" id="counts">${ORDER.map(k =>
    html`<div class="count" data-state="${k}"><b>${c[k] || 0}</b><span>${k}</span></div>`)}
    <div class="count"><b>${slots.busy}/${slots.total}</b><span>slots busy</span></div></div>`;
}

function running(st) {
  return table(['run', 'experiment', 'commit', '#seed', '#attempt', 'elapsed', 'latest', 'worker'],
    (st.running || []).map(r => {
      const l = r.latest;
      const latest = l ? (l.step != null ? `step ${l.step} ` : '') +
        Object.entries(l.metrics || {}).map(([k, v]) => `${k} ${num(v)}`).join(', ') : '–';
      return html`<tr data-run="${r.id}"><td>${runLink(r.id)}</td><td>${expLink(r.experiment)}</td><td>${commitLink(r.commit)}</td>
        <td class="num">${r.seed}</td><td class="num">${r.attempts}/${r.max_attempts}</td><td>${dur(r.elapsed_ms)}</td>
        <td>${latest}</td><td>${r.worker} ${runActions(r)}</td></tr>`;
    }), 'Nothing is running.');
}

function waiting(st) {
  return table(['batch', 'experiment', '#runs', 'why it waits'], (st.waiting || []).map(w =>
    html`<tr><td>${w.batch}</td><td>${expLink(w.experiment)}</td><td class="num">${w.runs}</td><td>${w.reason}</td></tr>`),
  'No batch is held back.');
}

function batches(st) {
  const c = b => b.counts;
  const active = (st.batches || []).filter(b => (c(b).queued || 0) + (c(b).leased || 0) + (c(b).running || 0) + (c(b).failed || 0) > 0);
  return table(['batch', 'experiment', 'commit', 'progress', 'mean', 'eta'], active.map(b =>
    html`<tr data-batch="${b.id}"><td>${b.id}</td><td>${expLink(b.experiment)}</td><td>${commitLink(b.commit)} <span class="muted">${b.subject}</span></td>
      <td class="progress">${progress(b)}${batchActions(b.id, b.experiment, b.commit, b.counts)}</td>
      <td class="num">${num(b.summary && b.summary.mean)}</td><td>${b.eta_ms ? when(b.eta_ms) : '–'}</td></tr>`),
  'No batch in progress.');
}

function pools(st) {
  return table(['pool', 'machines', '#slots busy', '#cost', 'health'], (st.pools || []).map(p =>
    html`<tr><td>${p.pool}</td><td>${machineCounts(p)}</td><td class="num">${p.slots.busy}/${p.slots.total}</td>
      <td class="num">$${num(p.cost, 2)}</td><td>${p.failing || (p.boots && p.boots.failing) ? html`<span class="state-dead">failing</span> ${p.provider_error || (p.boots ? p.boots.error : '')}` : 'ok'}</td></tr>`),
  'No machines (runs use serve\'s own slots).');
}

function pushes(st) {
  return table(['push', 'ref', 'commits', 'state', 'result', 'received'], ((st.pushes && st.pushes.recent) || []).map(p =>
    html`<tr><td>${p.id}</td><td class="clip">${p.ref}</td><td class="nowrap">${shortSha(p.before)}..${commitLink(p.after)}</td>
      <td>${stateWord(p.state)}</td><td class="clip" title="${p.error || p.result}">${p.error || p.result}</td>
      <td class="nowrap">${when(p.received_ms)}</td></tr>`),
  'No pushes recorded.');
}

// Companion batches (a determinism check's "x@repro", a sweep's points
// "x@sweep3.p7") are listed under their experiment, not beside it.
function experiments(ex) {
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
    return v ? html`<span title="${v.text}">${verdictWord(v.verdict)}</span> <span class="muted">vs ${shortSha(v.baseline_commit)}</span>` :
      html`<span class="muted">–</span>`;
  };
  const rows = pg.slice.map(e => {
    const cs = e.experiment.includes('@') ? [] : (companions[e.repo + '\n' + e.experiment] || []);
    const links = cs.slice(0, 3).map((c, i) => html`${i ? ', ' : ''}${expLink(c.experiment)}`);
    const more = cs.length ? html`<div class="muted small">+ ${cs.length} ${plural(cs.length, 'companion')}: ${links}${cs.length > 3 ? ', …' : ''}</div>` : '';
    return html`<tr data-experiment="${e.experiment}"><td>${expLink(e.experiment)}<div class="muted small">${e.repo}</div>${more}</td>
      <td>${e.metric}</td><td class="num">${e.batches}</td>
      <td class="clip">${commitLink(e.latest_commit)} <span class="muted">${e.latest_subject}</span></td><td>${latest(e)}</td></tr>`;
  });
  return html`${table(['experiment', 'metric', '#batches', 'latest commit', 'latest verdict'], rows,
    html`No experiment has batches yet: <code>trainq submit</code> queues some.`)}${pg.pager}`;
}

function sweeps(sw) {
  return table(['sweep', 'experiment', 'commit', '#points', 'started'], (sw.sweeps || []).map(s =>
    html`<tr><td><a href="/sweeps">${s.id}</a></td><td>${expLink(s.experiment)}</td><td>${s.commit ? commitLink(s.commit) : '–'}</td>
      <td class="num">${s.points}</td><td>${when(s.created_ms)}</td></tr>`), 'No sweep in progress.');
}

export async function overviewPage() {
  const [st, ex, sw] = await Promise.all([getJSON('/dash/api/status'), getJSON('/dash/api/experiments'),
    getJSON('/dash/api/sweeps')]);
  render([
    {key: 'title', html: html`<h1>Overview</h1>`},
    {key: 'counts', html: card('Queue', counts(st))},
    {key: 'experiments', html: card('Experiments', experiments(ex), 'experiments')},
    {key: 'batches', html: card('Batches in progress', batches(st), 'batches')},
    {key: 'running', html: card('Running', running(st), 'running')},
    {key: 'waiting', html: card('Waiting', waiting(st))},
    {key: 'pushes', html: card('Recent pushes', pushes(st), 'pushes')},
    {key: 'lower', html: html`<div class="grid">${card('Pools', pools(st))}${card('Sweeps in progress', sweeps(sw))}</div>`},
  ]);
}
