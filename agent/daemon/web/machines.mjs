// Machines and pools (/machines): each pool's spend and health, each
// machine's state and sandbox, the notify targets' deliveries and the MLflow export.
import {html} from './html.mjs';
import {dur, num, plural, when} from './format.mjs';
import {getJSON, isAdmin, render} from './core.mjs';
import {card, machineCounts, paged, stateWord, table} from './parts.mjs';

function pools(st) {
  return table(['pool', 'machines', '#slots busy', '#booted', 'billed', '#cost', 'provider'], (st.pools || []).map(p =>
    html`<tr><td>${p.pool}</td><td>${machineCounts(p)}</td>
      <td class="num">${p.slots.busy}/${p.slots.total}</td><td class="num">${p.machines_booted}</td><td>${dur(p.billed_ms)}</td><td class="num">$${num(p.cost, 2)}</td>
      <td>${p.failing || (p.boots && p.boots.failing) ? html`<span class="state-dead">failing</span> ` : ''}${p.provider_error || ''}${
      p.boots && p.boots.error ? html`<div class="err">${p.boots.error}</div>` : ''}${resetPool(p)}</td></tr>`),
  'No pools have machines.');
}

// A pool whose boots failed: an admin forgets them and it boots again, as
// `trainq pools reset NAME` does (an admin's: a pool spans every repository).
function resetPool(p) {
  const b = p.boots;
  if (!isAdmin() || !b || !(b.failed > 0 || b.failing)) return '';
  return html`<div class="actions"><button class="danger" data-action="reset_pool" data-pool="${p.pool}" data-failed="${b.failed}">reset pool</button></div>`;
}

// The sandbox form each worker's probe found: "off" and "hostproc" say why.
function sandbox(m) {
  if (m.sandbox == null) return '–';
  if (m.sandbox === 'bwrap') return 'bwrap';
  return html`<span class="${m.sandbox === 'none' ? 'state-dead' : 'muted'}">${m.sandbox === 'none' ? 'off' : m.sandbox}</span>${
    m.sandbox_note ? html`<div class="muted">${m.sandbox_note}</div>` : ''}`;
}

function machines(st) {
  const pg = paged('machines', st.machines || []);
  const rows = pg.slice.map(m =>
    html`<tr><td>${m.id}</td><td>${m.pool}</td><td>${m.name || m.hostname}</td><td>${stateWord(m.state)}${m.silent ? html` <span class="state-dead">silent</span>` : ''}</td>
      <td>${sandbox(m)}</td>
      <td class="num">${m.slots}</td><td class="num">${m.busy}</td><td>${m.idle_ms == null ? '–' : dur(m.idle_ms)}</td><td class="num">${m.runs_done}</td>
      <td class="num">$${num(m.cost, 2)}</td><td class="err">${m.last_error}</td></tr>`);
  return html`${table(['id', 'pool', 'name', 'state', 'sandbox', '#slots', '#busy', 'idle', '#runs done', '#cost', 'last error'], rows,
    'No machines: runs use serve\'s own slots, or no pool booted one yet.')}${pg.pager}`;
}

// server.yaml `notify:` targets (docs/notifications.md): last delivery, last error.
function notify(targets) {
  return table(['target', 'to', 'events', '#delivered', '#pending', '#given up', 'last delivery', 'last error'], targets.map(t =>
    html`<tr><td>${t.name}</td><td>${t.to}</td><td>${t.events.join(', ')}</td>
      <td class="num">${t.delivered}</td><td class="num">${t.pending}</td><td class="num">${t.gave_up}</td>
      <td>${when(t.last_delivered_ms, 'never')}${t.last_delivered_event ? ` (${t.last_delivered_event})` : ''}</td>
      <td>${t.last_error_ms == null ? '–' : html`<span class="muted">${when(t.last_error_ms, 'never')}</span><div class="err">${t.last_error}</div>`}</td></tr>`),
  'No notify targets in the server config.');
}

// server.yaml `mlflow:` (docs/mlflow.md): where batches go, the last export, the last error.
function mlflow(mf) {
  if (!mf.configured) {
    return html`<p class="muted">No <code>mlflow:</code> in the server config: nothing is exported.</p>`;
  }
  const servers = table(['exports', 'to', 'experiments'], mf.servers.map(s =>
    html`<tr><td>${s.scope}</td><td>${s.to}</td><td>${s.to === 'off' ? '–' : html`${s.experiment_prefix}&lt;experiment&gt;`}</td></tr>`), '');
  const totals = table(['#exported', '#pending', '#given up', 'last export', 'last error'], [
    html`<tr><td class="num">${mf.exported}</td><td class="num">${mf.pending}</td><td class="num">${mf.gave_up}</td>
      <td>${when(mf.last_export_ms, 'never')}${mf.last_exported_batch != null ? ` (batch ${mf.last_exported_batch})` : ''}</td>
      <td>${mf.last_error_ms == null ? '–' : html`<span class="muted">${when(mf.last_error_ms, 'never')}</span><div class="err">${mf.last_error}</div>`}</td></tr>`], '');
  return html`${servers}${totals}`;
}

export async function machinesPage() {
  const st = await getJSON('/dash/api/status');
  const targets = await getJSON('/dash/api/notify');
  const mf = await getJSON('/dash/api/mlflow');
  const costs = st.costs || {};
  const booted = costs.machines_booted || 0;
  render([
    {key: 'title', html: html`<h1>Machines and pools</h1>`},
    {key: 'pools', html: card('Pools', html`${pools(st)}<p class="muted">All pools: ${booted} ${plural(booted, 'machine')} booted, 
      billed ${dur(costs.billed_ms)}, $${num(costs.cost, 2)}.</p>`)},
    {key: 'machines', html: card('Machines', machines(st))},
    {key: 'notify', html: card('Notifications', notify(targets))},
    {key: 'mlflow', html: card('MLflow export', mlflow(mf), 'mlflow')},
  ]);
}
