// What every page shares: the session, fetching documents, the toast, the
// paging state, and render(), the one place markup reaches the DOM.
import {Html, html} from './html.mjs';

export const $ = (s, r = document) => r.querySelector(s);
export const PAGE = 40;  // rows or points per page

export const session = {role: 'read', csrf: '', who: '', person: false};
// Cancel, retry and add seeds: a write role or an admin (agent/daemon/access.h).
export const canAct = () => session.role === 'admin' || session.role === 'write';
export const isAdmin = () => session.role === 'admin';

// Page state kept across refreshes: the page of each long list, and a count
// of store changes seen (a page may reuse its document until it grows).
export const pages = {};
export const state = {changes: 0, onSignedOut: () => {}};

export async function getJSON(url) {
  const r = await fetch(url, {credentials: 'same-origin', headers: {Accept: 'application/json'}});
  if (r.status === 401) { signedOut(); throw new Error('signed out'); }
  const j = await r.json();
  if (!r.ok) throw new Error(j.reason || ('HTTP ' + r.status));
  return j;
}

// A JSON POST with the session's CSRF token: the reply's document, or an
// Error with the server's reason.
export async function postJSON(url, body) {
  const r = await fetch(url, {method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json', 'X-CSRF-Token': session.csrf}, body: JSON.stringify(body)});
  const j = await r.json();
  if (!r.ok) throw new Error(j.reason || ('HTTP ' + r.status));
  return j;
}

function signedOut() {
  const next = '/signin?next=' + encodeURIComponent(location.pathname + location.search);
  setMarkup($('#main'), html`<section class="card"><h1>Signed out</h1><p>Your session ended. 
    <a href="${next}">Sign in again</a> with your personal token, or the read or admin token.</p></section>`);
  state.onSignedOut();
}

export function toast(text, bad) {
  const t = $('#toast');
  t.textContent = text;
  t.className = 'toast' + (bad ? ' bad' : '');
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 4000);
}

// The page's CSP requires Trusted Types (dashboard.cc PageHeaders): the only
// way to innerHTML is this policy, and it takes nothing but `html`'s markup.
const policy = globalThis.trustedTypes ? globalThis.trustedTypes.createPolicy('trainq', {createHTML: s => s}) : null;
function setMarkup(el, markup) {
  if (!(markup instanceof Html)) throw new TypeError('render takes markup made by html');
  el.innerHTML = policy ? policy.createHTML(markup.text) : markup.text;
}

// Sections of the page by key, each {key, html: markup}; a section's DOM is
// replaced only when its markup changed, so scroll and selection stay.
export function render(sections) {
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
    if (el.dataset.html !== s.html.text) {
      setMarkup(el, s.html);
      el.dataset.html = s.html.text;
    }
    prev = el;
  }
}
