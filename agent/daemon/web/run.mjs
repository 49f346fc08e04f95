// A run's page (/run/ID): its facts, earlier attempts, who acted on it, its
// metric curves and the tail of its log, followed while it runs.
import {html} from './html.mjs';
import {num, plural, when} from './format.mjs';
import {$, getJSON, render} from './core.mjs';
import {curvePlot} from './plot.mjs';
import {card, commitLink, expLink, retried, runActions, stateWord, table} from './parts.mjs';

const LOG_KEEP = 256 * 1024;  // characters of a log kept in the page

// The log: appended from the server's size, at most LOG_KEEP characters
// kept. It is text (textContent), never markup.
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
  return html`<h3>Earlier attempts</h3>${table(['retried', 'by', 'was', '#attempts', 'exit', 'error'], rs.map(t =>
    html`<tr class="retry-row"><td>${when(t.retried_ms)}</td><td>${t.who}</td><td>${stateWord(t.state)}</td><td class="num">${t.attempts}</td>
      <td>${t.exit_code == null ? '–' : t.exit_code}</td><td class="err">${t.error}</td></tr>`), '')}`;
}

// Who cancelled, retried or added seeds to this run or its batch (the audit trail).
function whoTable(rows) {
  if (!rows.length) return '';
  return html`<h3>Who acted on it</h3>${table(['when', 'who', 'action', 'on', 'detail'], rows.map(a =>
    html`<tr class="audit-row"><td>${a.at}</td><td>${a.who}</td><td>${a.action.replace(/_/g, ' ')}</td>
      <td>${a.target}</td><td class="muted">${a.detail}</td></tr>`), '')}`;
}

export async function runPage(id) {
  const j = await getJSON('/dash/api/run/' + encodeURIComponent(id));
  const r = j.run;
  const info = table(['run', 'experiment', 'commit', '#seed', 'state', '#attempts', 'worker', 'started', 'finished', '#metric', 'exit'],
    [html`<tr><td>${r.id}</td><td>${expLink(r.experiment)}</td><td>${commitLink(r.commit)}</td><td class="num">${r.seed}</td>
      <td id="run-state">${stateWord(r.state)} ${runActions(r)}</td>
      <td class="num">${r.attempts}/${r.max_attempts}${retried(r)}</td><td>${r.worker}</td><td>${when(r.started_ms)}</td><td>${when(r.finished_ms)}</td>
      <td class="num">${num(r.metric)}</td><td>${r.exit_code == null ? '–' : r.exit_code}</td></tr>`], '');
  const error = r.error ? html`<h3>Last error</h3><div class="err">${r.error}</div>` : '';
  render([
    {key: 'title', html: html`<h1>Run ${r.id} <span class="muted">${r.experiment} seed ${r.seed}</span></h1>`},
    {key: 'info', html: card('Run', html`${info}${error}${retriesTable(j.retries || [])}${whoTable(j.audit || [])}`)},
    {key: 'curve', html: card(html`Metrics <span class="muted">(${j.metric_points} ${plural(j.metric_points, 'point')})</span>`, curvePlot(j.metrics || []))},
    {key: 'log', html: card(html`Output <span class="muted" id="log-note"></span>`, html`<pre class="log" id="log"></pre>`)},
  ]);
  const pre = $('#log');
  if (pre && !pre.textContent && log.text) pre.textContent = log.text;
  if (log.run !== r.id) { log.run = r.id; log.size = 0; log.text = ''; }
  pollLog();
}
