// Sweeps (/sweeps): every sweep with its winner and importances, and the
// report's own SVG plots of one (agent/results/sweep_plot.cc), as images.
import {html} from './html.mjs';
import {num, shortSha} from './format.mjs';
import {getJSON, render} from './core.mjs';
import {progress} from './plot.mjs';
import {card, commitLink, expLink, paged, stateWord, table} from './parts.mjs';

const PLOT_ORDER = ['progress.svg', 'parallel.svg', 'importance.svg'];
// The plots in the order the report shows them, the rest by name.
export function plotOrder(names) {
  const rank = n => PLOT_ORDER.includes(n) ? PLOT_ORDER.indexOf(n) : PLOT_ORDER.length;
  return names.slice().sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
}

// Plots of one sweep from the server: ?sweep=ID, else the newest.
async function plots(cur) {
  const names = plotOrder((await getJSON(`/dash/api/sweep/${cur.id}`)).plots || []);
  // The images change when the sweep does: the version is its progress.
  const v = `${cur.points}-${cur.runs_done}-${cur.state}`;
  const figures = names.map(n => html`<figure><img class="sweep-plot" data-plot="${n}" alt="${n} of sweep ${cur.id}" 
    src="/dash/api/sweep/${cur.id}/${encodeURIComponent(n)}?v=${encodeURIComponent(v)}"></figure>`);
  return card(html`Plots of sweep ${cur.id} <span class="muted">${cur.experiment} at ${shortSha(cur.commit)}, as in <code>trainq report</code></span>`,
    html`<div class="sweep-plots">${figures}</div>`);
}

function row(s, want) {
  const winner = (s.winner || []).map((w, i) => html`${i ? html`<br>` : ''}${w}`);
  const importance = Object.entries(s.importance || {}).map(([k, v]) => `${k} ${num(v, 2)}`).join(', ') || '–';
  return html`<tr${s.id === want ? html` class="selected"` : ''}><td><a href="/sweeps?sweep=${s.id}">${s.id}</a></td>
    <td>${expLink(s.experiment)}</td><td>${commitLink(s.commit)}</td><td>${stateWord(s.state)}</td>
    <td class="num">${s.points}/${s.budget_points}</td><td>${progress({counts: {succeeded: s.runs_done}, runs: s.runs_total})}</td>
    <td>${winner.length ? winner : html`<span class="muted">no winner yet</span>`}</td><td>${importance}</td></tr>`;
}

export async function sweepsPage() {
  const j = await getJSON('/dash/api/report');
  const sw = (j.sweeps || []).slice().reverse();
  const pg = paged('sweeps', sw);
  const want = Number(new URLSearchParams(location.search).get('sweep')) || (sw[0] && sw[0].id);
  const cur = sw.find(s => s.id === want);
  const list = table(['sweep', 'experiment', 'commit', 'state', '#points', 'runs', 'winner', 'importance (η²)'],
    pg.slice.map(s => row(s, want)), html`No sweeps: <code>trainq sweep start</code> starts one.`);
  render([
    {key: 'title', html: html`<h1>Sweeps</h1>`},
    {key: 'list', html: card('Sweeps', html`${list}${pg.pager}`)},
    {key: 'plots', html: cur ? await plots(cur) : html``},
  ]);
}
