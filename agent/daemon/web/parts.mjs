// Markup the pages share: links, verdict and state words, cards, tables,
// pagers and the action buttons. Each returns `html` markup.
import {html} from './html.mjs';
import {shortSha, unfinished, verdictClass} from './format.mjs';
import {PAGE, canAct, pages} from './core.mjs';

export const commitLink = sha => html`<a class="mono" href="/commit/${encodeURIComponent(sha)}">${shortSha(sha)}</a>`;
export const expLink = name => html`<a href="/experiment/${encodeURIComponent(name)}">${name}</a>`;
export const runLink = id => html`<a href="/run/${id}">${id}</a>`;
export const stateWord = s => html`<span class="state-${s}">${s}</span>`;

// "equivalent within ±0.003": the class is the first word.
export function verdictWord(v) {
  if (!v) return html`<span class="muted">no baseline</span>`;
  return html`<span class="verdict v-${verdictClass(v)}">${v.replace(/_/g, ' ')}</span>`;
}

// A card with a title (text or markup); id names the section for the tests.
// The test-set noise floor beside a seed sd (NoiseFloorJson,
// agent/results/analysis.h): its short form, the whole sentence as its
// title; `floor-at` when the seed spread sits at the floor.
export function floorNote(f) {
  if (!f || f.floor == null) return '';
  return html` <span class="floor${f.at_floor ? ' floor-at' : ''}" title="${f.text}">(${f.short})</span>`;
}

export function card(title, body, id) {
  return html`<section class="card"${id ? html` id="${id}"` : ''}><h2>${title}</h2>${body}</section>`;
}

// Rows (markup) under a head of column names; "#name" is a number column.
export function table(head, rows, empty) {
  if (!rows.length) return html`<p class="muted">${empty}</p>`;
  const th = head.map(h => h.startsWith('#') ? html`<th class="num">${h.slice(1)}</th>` : html`<th>${h}</th>`);
  return html`<table><thead><tr>${th}</tr></thead><tbody>${rows}</tbody></table>`;
}

// "‹ newer · page 2 of 3 (97) · older ›" over the pages of `key`.
export function pager(key, p, n, total) {
  if (n <= 1) return '';
  return html`<div class="pager"><button data-page="${key}" data-to="${p - 1}"${p === 0 ? html` disabled` : ''}>‹ newer</button>
    <span class="muted">page ${p + 1} of ${n} (${total})</span>
    <button data-page="${key}" data-to="${p + 1}"${p >= n - 1 ? html` disabled` : ''}>older ›</button></div>`;
}

// Paging of a long list in the page, kept across refreshes.
export function paged(key, items) {
  const n = Math.max(1, Math.ceil(items.length / PAGE));
  const p = Math.min(pages[key] || 0, n - 1);
  return {slice: items.slice(p * PAGE, (p + 1) * PAGE), pager: pager(key, p, n, items.length)};
}

// Actions that spend (or stop) machine time say what they do and how much
// in their confirmation (docs/dashboard.md): the batch's experiment, commit
// and unfinished runs ride on the buttons.
export function batchActions(b, experiment, commit, counts) {
  if (!canAct()) return '';
  const left = unfinished(counts || {});
  const what = html`data-batch="${b}" data-experiment="${experiment}" data-commit="${commit}"`;
  return html`<span class="actions">${
    left ? html`<button class="danger" data-action="cancel_batch" ${what} data-left="${left}">cancel batch</button>` : ''}
    <input type="number" min="1" max="100" value="5" aria-label="seeds to add" data-seeds-for="${b}">
    <button data-action="add_seeds" ${what}>add seeds</button></span>`;
}

export function runActions(r) {
  if (!canAct()) return '';
  const what = html`data-run="${r.id}" data-experiment="${r.experiment}" data-commit="${r.commit}" data-seed="${r.seed}" data-state="${r.state}"`;
  if (['dead', 'cancelled'].includes(r.state)) return html`<button data-action="retry_run" ${what}>retry</button>`;
  if (!['queued', 'leased', 'running', 'failed'].includes(r.state)) return '';
  return html`<button class="danger" data-action="cancel_run" ${what}>cancel</button>`;
}

// "2 up, 1 booting": a pool's machines by state.
export const machineCounts = p => Object.entries(p.machines || {}).map(([k, v]) => `${v} ${k}`).join(', ') || '–';

// "↻2" after a run's attempts when it was retried.
export function retried(r) {
  return r.retries ? html` <span class="muted" title="retried ${r.retries} time(s); earlier attempts on the run's page">↻${r.retries}</span>` : '';
}
