// An experiment's page (/experiment/NAME): its history along a branch, a
// plot and a table of every commit with results, a page of 40 at a time.
import {html} from './html.mjs';
import {num, pText, plural, signed} from './format.mjs';
import {PAGE, getJSON, pages, render, state} from './core.mjs';
import {historyPlot} from './plot.mjs';
import {commitLink, floorNote, pager, table, verdictWord} from './parts.mjs';

// The P column: the p the verdict used, and the raw one beside it when a
// correction adjusted it.
export function pCell(c) {
  if (!c || c.p_raw == null) return '–';
  const bare = p => pText(p).replace(/^=/, '');
  if (c.p_adjusted != null && c.text && c.method !== 'none') {
    return html`<span class="p-adj">${bare(c.p_adjusted)}</span> <span class="muted p-raw">(raw ${bare(c.p_raw)}, ${c.text})</span>`;
  }
  return html`<span class="p-adj">${bare(c.p_raw)}</span>${c.text ? html` <span class="muted">(${c.text})</span>` : ''}`;
}

// Which branch the history follows, and links to the others.
export function branchLine(name, h) {
  if (!h) return '';
  const others = (h.branches || []).filter(b => b !== h.branch).map((b, i) =>
    html`${i ? ' ' : ''}<a href="/experiment/${encodeURIComponent(name)}?branch=${encodeURIComponent(b)}">${b}</a>`);
  const along = h.order === 'branch'
    ? html`Along branch <b class="mono" id="branch">${h.branch}</b> (first parents, oldest left): ${h.on_branch} ${plural(h.on_branch, 'commit')} with results${
      h.off_branch ? html`, <span class="muted">${h.off_branch} ${plural(h.off_branch, 'batch', 'batches')} of commits off this branch not shown</span>` : ''}${
      h.truncated ? html`, <span class="muted">only the newest ${h.walked} commits read</span>` : ''}`
    : html`<span class="muted">${h.note}</span>`;
  return html`<p class="branch-line">${along}${others.length ? html` <span class="muted">· other branches:</span> ${others}` : ''}</p>`;
}

// Said once under the title when some batch reported eval_examples.
function floorLegend(entries) {
  if (!entries.some(en => en.noise_floor && en.noise_floor.floor != null)) return '';
  return html`<span>eval floor: sqrt(p(1-p)/n) of the runs' eval_examples; "sd at it": more seeds will not narrow the spread, a larger evaluation set will</span>`;
}

function row(en) {
  const vp = en.vs_parent;
  // Shown once, where the runs ran: the commits that reused them are named.
  const reused = (en.reused_at || []).length ?
    html`<div class="muted reused">reused unchanged at ${en.reused_at.map((c, i) => html`${i ? ', ' : ''}${commitLink(c)}`)}</div>` : '';
  return html`<tr data-commit="${en.commit}"><td>${commitLink(en.commit)}</td><td>${en.subject}${reused}</td><td class="num">${en.n}</td>
    <td class="num">${num(en.mean)}</td><td class="num sd-cell">${num(en.sd)}${floorNote(en.noise_floor)}</td><td>${en.ci95 ? num(en.ci95[0]) + '..' + num(en.ci95[1]) : '–'}</td>
    <td>${vp ? commitLink(vp.baseline_commit || en.parent) : '–'}</td><td class="num">${vp ? signed(vp.diff) : '–'}</td>
    <td class="num p-cell">${vp ? pCell(vp.correction) : '–'}</td><td>${verdictWord(vp ? vp.verdict : null)}</td></tr>`;
}

// The last document, reused until the store changes (paging redraws it).
let doc = null;

export async function experimentPage(name) {
  const branch = new URLSearchParams(location.search).get('branch');
  // The server cuts the history to the page shown (40 commits, newest first).
  const q = new URLSearchParams({page: String(pages.hist || 0), per_page: String(PAGE)});
  if (branch) q.set('branch', branch);
  const url = '/dash/api/experiment/' + encodeURIComponent(name) + '?' + q;
  let j = doc && doc.url === url && doc.gen === state.changes ? doc.data : null;
  if (!j) { const gen = state.changes; j = await getJSON(url); doc = {url, gen, data: j}; }
  const sections = [{key: 'title', html: html`<h1>Experiment ${name}</h1>`}];
  (j.experiments || []).forEach((e, k) => {
    const entries = e.batches || [];  // oldest first
    const h = e.history || {};
    const rows = entries.slice().reverse().map(row);
    sections.push({key: 'e' + k, html: html`<section class="card"><h2>${e.repo} · ${e.metric} (${e.goal})</h2>${branchLine(name, h)}
      <p class="legend muted"><span>● mean, bar: 95% CI</span><span>shaded: ± min_effect around the baseline</span><span>word: verdict vs the baseline</span>${floorLegend(entries)}</p>
      ${historyPlot(e, entries)}${pager('hist', h.page || 0, h.pages || 1, h.points)}
      ${table(['commit', 'subject', '#n', '#mean', '#sd (eval floor)', '95% CI', 'baseline', '#effect', '#p (adjusted)', 'verdict'], rows, 'No batches.')}</section>`});
  });
  render(sections);
}
