// The trainq dashboard: ES modules and SVG, no build step, no outside
// requests. Every number shown comes from the server's documents (the same
// JSON the CLI prints); no verdict is computed here. Every page's markup is
// made by `html` (html.mjs), which escapes what it interpolates.
// Live: server-sent events from /dash/events trigger a refetch of the page's
// documents; sections whose markup did not change are left alone.
// This module routes, refreshes, follows the events and does the actions.
import {confirmText} from './format.mjs';
import {$, getJSON, pages, postJSON, session, state, toast} from './core.mjs';
import {accountPage, auditPage, makeToken, revokeToken} from './account.mjs';
import {commitPage} from './commit.mjs';
import {experimentPage} from './experiment.mjs';
import {machinesPage} from './machines.mjs';
import {overviewPage} from './overview.mjs';
import {runPage} from './run.mjs';
import {sweepsPage} from './sweeps.mjs';

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
  return {nav: 'overview', load: overviewPage};
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
  source.addEventListener('change', () => { failures = 0; state.changes++; setLive('on', 'live'); refresh(); });
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
  pollTimer = setInterval(() => { state.changes++; refresh(); }, 2000);
}
function stopLive() {
  if (source) { source.close(); source = null; }
  clearInterval(pollTimer);
  pollTimer = 0;
}
state.onSignedOut = stopLive;

// Cancel, retry, add seeds, reset a pool: asked first, then POSTed with the CSRF token.
async function act(btn) {
  const body = {action: btn.dataset.action};
  if (btn.dataset.batch) body.batch = Number(btn.dataset.batch);
  if (btn.dataset.run) body.run = Number(btn.dataset.run);
  if (btn.dataset.pool) body.pool = btn.dataset.pool;
  if (body.action === 'add_seeds') {
    const input = document.querySelector(`[data-seeds-for="${btn.dataset.batch}"]`);
    body.seeds = Number(input ? input.value : 1);
  }
  if (!window.confirm(confirmText(btn.dataset, body.seeds))) return;
  btn.disabled = true;
  try {
    const j = await postJSON('/dash/api/action', body);
    toast(body.action === 'add_seeds' ? `added ${j.added} run(s)` :
      body.action === 'retry_run' ? `run ${j.retried} is queued again` :
      body.action === 'reset_pool' ? `pool ${j.reset}: ${j.failed_boots} failed boot(s) forgotten; it boots again` :
      `cancelled ${j.cancelled} run(s)`);
    refresh();
  } catch (e) {
    toast('refused: ' + e.message, true);
  } finally {
    btn.disabled = false;
  }
}

async function signOut() {
  // No refresh after the session ends (its requests would be refused).
  stopLive();
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
  if (b.dataset.revoke) { ev.preventDefault(); revokeToken(b, refresh); return; }
  if (b.dataset.action) { ev.preventDefault(); act(b); }
  if (b.dataset.page) {
    pages[b.dataset.page] = Number(b.dataset.to);
    refresh();
  }
});
document.addEventListener('submit', ev => {
  if (ev.target.id === 'new-token') { ev.preventDefault(); makeToken(ev.target, refresh); }
});
window.addEventListener('pagehide', stopLive);
window.addEventListener('pageshow', ev => { if (ev.persisted) { state.changes++; startLive(); refresh(); } });

for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('current', a.dataset.nav === current.nav);
try {
  const s = await getJSON('/dash/api/session');
  Object.assign(session, s);
  $('#role').textContent = s.person ? `${s.who} (${s.role})` :
    s.role === 'admin' ? 'admin session' : 'read-only session';
  if (s.role === 'admin') $('#nav-audit').hidden = false;
  $('#signout').hidden = false;
  await refresh();
  startLive();
} catch (e) {
  // Signed out: getJSON drew the page that says so.
}
