// People: the account page (/account: personal tokens, made and revoked)
// and the admin's audit page (/audit: who did what).
import {html} from './html.mjs';
import {when} from './format.mjs';
import {getJSON, isAdmin, postJSON, render, session, toast} from './core.mjs';
import {card, paged, runLink, table} from './parts.mjs';

const made = {token: '', name: ''};  // a token just made: shown once, until the page is left

function tokenRow(t) {
  const lastUsed = t.last_used_ms ? html`${when(t.last_used_ms)} <span class="muted">${t.last_used_from}</span>` : '–';
  const live = t.revoked_ms ? html`<span class="state-cancelled">revoked ${when(t.revoked_ms)}</span>` :
    t.live ? html`<span class="state-succeeded">live</span>` : html`<span class="state-dead">expired</span>`;
  return html`<tr class="token-row"><td class="num">${t.id}</td><td>${t.name}</td>${isAdmin() ? html`<td>${t.owner}</td>` : ''}
    <td>${t.role}</td><td>${when(t.created_ms)}</td><td>${t.expires_ms ? when(t.expires_ms) : 'never'}</td><td>${lastUsed}</td><td>${live}</td>
    <td>${t.live ? html`<button class="danger" data-revoke="${t.id}" data-name="${t.name}">revoke</button>` : ''}</td></tr>`;
}

function newTokenForm() {
  const roles = ['read', 'write', 'admin'].filter(r => r === 'read' || (r === 'write' && session.role !== 'read') || (r === 'admin' && isAdmin()));
  const preset = session.role === 'admin' && !session.person ? 'read' : session.role;
  const options = roles.map(r => html`<option${r === preset ? html` selected` : ''}>${r}</option>`);
  const owner = isAdmin() ? html`<label>For <input name="owner" maxlength="200" placeholder="${session.person ? session.who : 'ada@example.com'}" spellcheck="false"></label>` : '';
  return html`<form id="new-token" class="new-token">
    <label>Name <input name="name" required maxlength="200" placeholder="laptop, ci" spellcheck="false"></label>${owner}
    <label>Role <select name="role">${options}</select></label>
    <label>Expires in <select name="days"><option value="7">7 days</option><option value="30">30 days</option>
    <option value="90" selected>90 days</option><option value="365">a year</option><option value="0">never</option></select></label>
    <button type="submit">Make token</button></form>`;
}

export async function accountPage() {
  const intro = html`<p>Signed in as <b id="who">${session.who}</b> (${session.role}).</p>`;
  if (!session.person && !isAdmin()) {
    render([{key: 'title', html: html`<h1>Account</h1>`},
      {key: 'me', html: card('Personal tokens', html`${intro}<p class="muted">This session was opened with a shared token: personal 
        tokens belong to people. Ask an admin for one, then sign in with it.</p>`)}]);
    return;
  }
  const j = await getJSON('/dash/api/tokens');
  const head = ['#id', 'name'].concat(isAdmin() ? ['owner'] : []).concat(['role', 'made', 'expires', 'last used', 'state', '']);
  const shown = made.token ? html`<div class="made" id="made-token"><p>Token <b>${made.name}</b>, shown this once (the server keeps only its hash):</p>
    <pre class="mono">${made.token}</pre><p class="muted">On your machine: <code>trainq login --server ${location.origin}</code> and paste it.</p></div>` : '';
  render([
    {key: 'title', html: html`<h1>Account</h1>`},
    {key: 'me', html: card('Personal tokens', html`${intro}<p class="muted">A personal token carries its owner's name and role to the CLI and CI 
      (<code>--server</code> commands, <code>trainq gate --server</code>) and signs in here. Revoking one ends its sessions at once.</p>${shown}${newTokenForm()}`)},
    {key: 'tokens', html: card(isAdmin() ? 'Everyone\'s tokens' : 'Your tokens', table(head, j.tokens.map(tokenRow), 'No personal tokens yet.'))},
  ]);
}

export async function auditPage() {
  if (!isAdmin()) {
    render([{key: 'title', html: html`<h1>Audit</h1>`}, {key: 'no', html: card('Audit', html`<p class="muted">The audit trail is for admins.</p>`)}]);
    return;
  }
  const j = await getJSON('/dash/api/audit?since=30d');
  const pg = paged('audit', j.audit);
  const rows = pg.slice.map(a => html`<tr class="audit-row"><td>${a.at}</td><td>${a.who}</td><td>${a.action.replace(/_/g, ' ')}</td>
    <td>${/^run \d+$/.test(a.target) ? runLink(a.target.slice(4)) : a.target}</td><td class="mono">${a.address}</td><td class="muted">${a.detail}</td></tr>`);
  render([
    {key: 'title', html: html`<h1>Audit <span class="muted">the last 30 days, newest first</span></h1>`},
    {key: 'list', html: card('Who did what', html`${table(['when', 'who', 'action', 'target', 'from', 'detail'], rows,
      'Nothing yet: cancels, retries, added seeds, pool resets, tokens and sign-ins appear here.')}${pg.pager}`)},
  ]);
}

// The new-token form's submit; `refresh` redraws the page.
export async function makeToken(form, refresh) {
  const f = new FormData(form);
  const body = {name: f.get('name'), days: Number(f.get('days')), role: f.get('role')};
  if (f.get('owner')) body.owner = f.get('owner');
  try {
    const j = await postJSON('/dash/api/tokens', body);
    made.token = j.token; made.name = j.name;
    toast(`made token ${j.id} for ${j.owner}`);
    refresh();
  } catch (e) {
    toast('refused: ' + e.message, true);
  }
}

export async function revokeToken(btn, refresh) {
  if (!window.confirm(`revoke token ${btn.dataset.revoke} (${btn.dataset.name})? It stops working at once.`)) return;
  try {
    const j = await postJSON('/dash/api/tokens/revoke', {id: Number(btn.dataset.revoke)});
    toast(`revoked token ${j.revoked}`);
    refresh();
  } catch (e) {
    toast('refused: ' + e.message, true);
  }
}
