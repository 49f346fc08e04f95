// A commit's page (/commit/SHA): its family, each batch's comparison with
// the seeds plot and the effect, its runs; or why nothing ran.
import {html} from './html.mjs';
import {num, pText, plural, shortSha, signed, when} from './format.mjs';
import {getJSON, render} from './core.mjs';
import {progress, seedPlot} from './plot.mjs';
import {batchActions, card, commitLink, expLink, floorNote, retried, runActions, runLink, stateWord, table, verdictWord} from './parts.mjs';

// The verdict document's own fields (analysis.h ComparisonJson): the
// interval and p the verdict used (widened and adjusted in a family), the
// raw p beside them and the correction named, as every other surface shows.
export function effectText(vp) {
  const c = vp.correction || {};
  const test = vp.paired ? `paired t on ${vp.shared_seeds} shared seeds` : 'Welch t';
  const ci = c.interval ? html` (<span class="ci">${c.level_text} ${signed(c.interval[0])}..${signed(c.interval[1])}</span>)` : '';
  let p = '';
  if (c.p_raw != null) {
    p = c.p_adjusted != null && c.text && c.method !== 'none'
      ? html`, <span class="p-adj">p${pText(c.p_adjusted)} adjusted</span> (<span class="p-raw">p${pText(c.p_raw)} raw</span>, <span class="correction">${c.text}</span>)`
      : html`, <span class="p-adj">p${pText(c.p_raw)}</span>${c.text ? html` (<span class="correction">${c.text}</span>)` : ''}`;
  }
  return html`<div class="effect">effect <b class="diff">${signed(vp.diff)}</b>${ci}, ${test}${p} → ${verdictWord(vp.verdict)}</div>${
    vp.min_effect != null ? html`<div class="muted">min_effect ${num(vp.min_effect)}, alpha ${num(vp.alpha, 3)}</div>` : ''}${
    vp.probability_of_improvement ? html`<div class="muted poi">${vp.probability_of_improvement.text}</div>` : ''}${
    vp.cost ? html`<div class="muted cost">${vp.cost.text}</div>` : ''}${
    vp.top_up ? html`<div class="muted top-up">${vp.top_up}</div>` : ''}`;
}

function family(f) {
  if (!(f && (f.size > 1 || (f.unchanged || []).length))) return '';
  return html`<p class="family">Family: ${f.size} ${plural(f.size, 'experiment')} changed${
    (f.experiments || []).length ? ` (${f.experiments.join(', ')})` : ''}${
    f.text ? html`, verdicts corrected together: <b>${f.text}</b>` : ''}${
    (f.unchanged || []).length ? html`; <span class="muted">unchanged (reused, not counted): ${f.unchanged.join(', ')}</span>` : ''}</p>`;
}

function comparison(b) {
  const vp = b.vs_parent;
  if (b.unchanged) {
    return html`<p class="unchanged">Unchanged: the same runs as batch ${b.unchanged.batch} at ${commitLink(b.unchanged.commit)}
       (reused); not compared here and not counted in the family.</p>`;
  }
  if (!vp) return html`<p class="muted">No baseline: ${b.baseline_note || 'no runs of this experiment at the parent commit'}</p>`;
  const here = html`this commit: ${num(vp.a.mean)} ± ${num(vp.a.sd)} (n=${vp.a.n})${floorNote(vp.a.noise_floor)}`;
  const base = html`baseline ${commitLink(vp.baseline_sha)}: ${num(vp.b.mean)} ± ${num(vp.b.sd)} (n=${vp.b.n})${floorNote(vp.b.noise_floor)}`;
  const floor = vp.a.noise_floor && vp.a.noise_floor.floor != null ? html`<p class="floor-text">${vp.a.noise_floor.text}</p>` : '';
  return html`<div class="grid"><div>${seedPlot(vp)}</div><div>${effectText(vp)}
    <p>${here}<br>${base}<br><span class="muted">${vp.baseline_note}</span></p>${floor}</div></div>`;
}

function batchSection(b, commit) {
  const runs = table(['run', '#seed', 'state', '#attempts', '#metric', 'error', ''], (b.runs || []).map(r =>
    html`<tr data-run="${r.id}" data-state="${r.state}"><td>${runLink(r.id)}</td><td class="num">${r.seed}</td><td>${stateWord(r.state)}</td>
      <td class="num">${r.attempts}/${r.max_attempts}${retried(r)}</td><td class="num">${num(r.metric)}</td>
      <td class="err">${r.error}</td><td>${runActions(r)}</td></tr>`),
  'No runs.');
  const p = b.progress || {};
  const prog = progress({counts: p.counts || {}, runs: p.runs || 0});
  return html`<section class="card batch" data-batch="${b.id}" data-experiment="${b.experiment}">
    <h2>${expLink(b.experiment)} <span class="muted">batch ${b.id} · ${b.metric} (${b.goal})</span></h2>
    <p>${prog}${b.reuses_batch ? '' : batchActions(b.id, b.experiment, commit, p.counts)}</p>
    <p class="muted">why: ${b.reason}</p>${comparison(b)}<h3>Runs</h3>${runs}</section>`;
}

// Nothing ran here: say why, from the pushes that brought the commit, and
// what its commit statuses said.
function whyNothing(j) {
  const why = (j.pushes || []).map(p => {
    const statuses = (p.statuses || []).map(s => `${s.context} ${s.posted || s.wanted}: ${s.description}`).join('; ');
    return html`<li>push ${p.id} to ${p.ref} (${p.source}, ${when(p.received_ms)}): ${stateWord(p.state)} ${p.error || p.result || ''}${
      statuses ? html`<br><span class="muted">statuses: ${statuses}</span>` : ''}</li>`;
  });
  return card('Nothing ran at this commit', why.length ? html`<ul class="why">${why}</ul>` :
    html`<p class="muted">No push or submit named this commit: trainq has not seen it. 
      Push it to a watched branch, or <code>trainq submit</code> it.</p>`);
}

export async function commitPage(sha) {
  const j = await getJSON('/dash/api/commit/' + encodeURIComponent(sha));
  const sections = [{key: 'title', html: html`<h1>Commit <span class="mono">${shortSha(j.commit)}</span> <span class="muted">${j.subject}</span></h1>
    <p class="muted">${j.repo} · parent ${j.parent ? commitLink(j.parent) : '–'}</p>${family(j.family)}`}];
  for (const b of j.batches || []) sections.push({key: 'b' + b.id, html: batchSection(b, j.commit)});
  if (!(j.batches || []).length) sections.push({key: 'none', html: whyNothing(j)});
  render(sections);
}
