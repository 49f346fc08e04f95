#include "queue/schema.h"

#include <iterator>
#include <string>

namespace trainq {

namespace {

// Schema migrations; index i upgrades user_version i to i+1. Never edit one
// that has shipped: add a new one.
const char* const kMigrations[] = {
    // 0 -> 1: the first schema.
    R"sql(
CREATE TABLE repos (
  id INTEGER PRIMARY KEY,
  url TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  created_ms INTEGER NOT NULL
);
CREATE TABLE commits (
  id INTEGER PRIMARY KEY,
  repo_id INTEGER NOT NULL REFERENCES repos(id),
  sha TEXT NOT NULL,
  parent_sha TEXT NOT NULL DEFAULT '',
  subject TEXT NOT NULL DEFAULT '',
  author TEXT NOT NULL DEFAULT '',
  committed_ms INTEGER NOT NULL DEFAULT 0,
  created_ms INTEGER NOT NULL,
  UNIQUE (repo_id, sha)
);
CREATE TABLE batches (
  id INTEGER PRIMARY KEY,
  commit_id INTEGER NOT NULL REFERENCES commits(id),
  experiment TEXT NOT NULL,
  command TEXT NOT NULL,
  metric_name TEXT NOT NULL,
  metric_goal TEXT NOT NULL CHECK (metric_goal IN ('max', 'min')),
  metric_regex TEXT NOT NULL DEFAULT '',
  repeats INTEGER NOT NULL CHECK (repeats > 0),
  seed_start INTEGER NOT NULL,
  gpus INTEGER NOT NULL DEFAULT 0,
  timeout_s INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL CHECK (max_attempts > 0),
  spec_json TEXT NOT NULL DEFAULT '{}',
  created_ms INTEGER NOT NULL,
  UNIQUE (commit_id, experiment)
);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  batch_id INTEGER NOT NULL REFERENCES batches(id),
  seed INTEGER NOT NULL,
  repeat INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN
    ('queued','leased','running','succeeded','failed','dead','cancelled')),
  attempts INTEGER NOT NULL DEFAULT 0,
  not_before_ms INTEGER NOT NULL DEFAULT 0,
  lease_token INTEGER NOT NULL DEFAULT 0,
  lease_expires_ms INTEGER,
  worker TEXT NOT NULL DEFAULT '',
  started_ms INTEGER,
  finished_ms INTEGER,
  exit_code INTEGER,
  metric_value REAL,
  last_error TEXT NOT NULL DEFAULT '',
  log_path TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  UNIQUE (batch_id, seed)
);
CREATE INDEX runs_by_state ON runs (state, id);
CREATE TABLE metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  name TEXT NOT NULL,
  step INTEGER,
  value REAL NOT NULL,
  final INTEGER NOT NULL DEFAULT 0,
  recorded_ms INTEGER NOT NULL
);
CREATE INDEX metrics_by_run ON metrics (run_id, name);
CREATE TABLE machines (
  id INTEGER PRIMARY KEY,
  pool TEXT NOT NULL,
  provider TEXT NOT NULL,
  provider_id TEXT NOT NULL,
  state TEXT NOT NULL,
  slots INTEGER NOT NULL DEFAULT 0,
  gpus INTEGER NOT NULL DEFAULT 0,
  created_ms INTEGER NOT NULL,
  last_seen_ms INTEGER NOT NULL,
  last_error TEXT NOT NULL DEFAULT '',
  UNIQUE (pool, provider_id)
);
CREATE TABLE deliveries (
  id INTEGER PRIMARY KEY,
  forge TEXT NOT NULL,
  delivery_id TEXT NOT NULL,
  event TEXT NOT NULL,
  repo_url TEXT NOT NULL DEFAULT '',
  ref TEXT NOT NULL DEFAULT '',
  before_sha TEXT NOT NULL DEFAULT '',
  after_sha TEXT NOT NULL DEFAULT '',
  received_ms INTEGER NOT NULL,
  UNIQUE (forge, delivery_id)
);
)sql",
    // 1 -> 2: record why a batch runs, and count interruptions (preemptions)
    // separately from attempts; index batches for the parent-commit lookups.
    R"sql(
ALTER TABLE batches ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN interruptions INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_by_batch ON runs (batch_id, repeat);
CREATE INDEX commits_by_sha ON commits (sha);
)sql",
    // 2 -> 3: commit triggers. Pushes received by webhook or seen by polling
    // (processed later by a background worker), the last head seen per ref,
    // and the commit status each batch wants on its forge (queue/pushes.cc).
    R"sql(
CREATE TABLE pushes (
  id INTEGER PRIMARY KEY,
  source TEXT NOT NULL,
  delivery_id TEXT NOT NULL,
  repo_url TEXT NOT NULL,
  ref TEXT NOT NULL,
  before_sha TEXT NOT NULL,
  after_sha TEXT NOT NULL,
  default_branch TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL CHECK (state IN ('pending', 'done', 'skipped', 'failed')),
  attempts INTEGER NOT NULL DEFAULT 0,
  not_before_ms INTEGER NOT NULL DEFAULT 0,
  result TEXT NOT NULL DEFAULT '',
  error TEXT NOT NULL DEFAULT '',
  received_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  UNIQUE (source, delivery_id)
);
CREATE INDEX pushes_by_state ON pushes (state, not_before_ms, id);
CREATE INDEX pushes_by_after ON pushes (after_sha);
CREATE TABLE ref_heads (
  repo_url TEXT NOT NULL,
  ref TEXT NOT NULL,
  sha TEXT NOT NULL,
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (repo_url, ref)
);
CREATE TABLE commit_statuses (
  batch_id INTEGER PRIMARY KEY REFERENCES batches(id),
  repo_url TEXT NOT NULL,
  sha TEXT NOT NULL,
  context TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('pending', 'success', 'failure', 'error')),
  description TEXT NOT NULL DEFAULT '',
  posted_state TEXT NOT NULL DEFAULT '',
  attempts INTEGER NOT NULL DEFAULT 0,
  not_before_ms INTEGER NOT NULL DEFAULT 0,
  gave_up INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '',
  updated_ms INTEGER NOT NULL
);
CREATE INDEX commit_statuses_due ON commit_statuses (gave_up, not_before_ms);
)sql",
    // 3 -> 4: machines. Workers over HTTP lease runs to machine rows; the
    // machines table is rebuilt (names unique when set; provider ids unique
    // per pool among live machines only, since a warm EC2 pool starts a
    // stopped instance again under its old id,
    // boot/ready/busy/stop times, resources, cost); runs remember their
    // machine; batches name a pool; machine_events records every machine state
    // change with the leases it held; provider health and the hashed worker
    // token of each pool.
    R"sql(
CREATE TABLE machines_v4 (
  id INTEGER PRIMARY KEY,
  pool TEXT NOT NULL,
  provider TEXT NOT NULL,
  provider_id TEXT NOT NULL DEFAULT '',
  name TEXT NOT NULL DEFAULT '',
  hostname TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL CHECK (state IN
    ('requested','booting','ready','draining','stopping','stopped','failed')),
  slots INTEGER NOT NULL DEFAULT 0,
  gpus INTEGER NOT NULL DEFAULT 0,
  resources_json TEXT NOT NULL DEFAULT '{}',
  hourly_cost REAL NOT NULL DEFAULT 0,
  created_ms INTEGER NOT NULL,
  booted_ms INTEGER NOT NULL,
  ready_ms INTEGER,
  last_busy_ms INTEGER,
  stopped_ms INTEGER,
  last_seen_ms INTEGER NOT NULL,
  last_error TEXT NOT NULL DEFAULT ''
);
INSERT INTO machines_v4 (id, pool, provider, provider_id, state, slots, gpus, created_ms,
  booted_ms, ready_ms, stopped_ms, last_seen_ms, last_error)
SELECT id, pool, provider, provider_id,
  CASE WHEN state IN ('requested','booting','ready','draining','stopping','stopped','failed')
       THEN state ELSE 'ready' END,
  slots, gpus, created_ms, created_ms,
  CASE WHEN state = 'ready' THEN created_ms END,
  CASE WHEN state IN ('stopped', 'failed') THEN last_seen_ms END,
  last_seen_ms, last_error FROM machines;
DROP TABLE machines;
ALTER TABLE machines_v4 RENAME TO machines;
CREATE UNIQUE INDEX machines_by_provider_id ON machines (pool, provider_id)
  WHERE provider_id != '' AND state NOT IN ('stopped', 'failed');
CREATE UNIQUE INDEX machines_by_name ON machines (name) WHERE name != '';
CREATE INDEX machines_by_state ON machines (state, pool);
ALTER TABLE runs ADD COLUMN machine_id INTEGER REFERENCES machines(id);
CREATE INDEX runs_by_machine ON runs (machine_id, state);
ALTER TABLE batches ADD COLUMN pool TEXT NOT NULL DEFAULT '';
CREATE TABLE machine_events (
  id INTEGER PRIMARY KEY,
  machine_id INTEGER NOT NULL REFERENCES machines(id),
  at_ms INTEGER NOT NULL,
  state TEXT NOT NULL,
  live_leases INTEGER NOT NULL,
  note TEXT NOT NULL DEFAULT ''
);
CREATE INDEX machine_events_by_machine ON machine_events (machine_id, id);
CREATE TABLE pool_health (
  pool TEXT PRIMARY KEY,
  consecutive_failures INTEGER NOT NULL DEFAULT 0,
  next_retry_ms INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '',
  updated_ms INTEGER NOT NULL
);
CREATE TABLE pool_tokens (
  pool TEXT PRIMARY KEY,
  sha256 TEXT NOT NULL,
  created_ms INTEGER NOT NULL
);
)sql",
    // 4 -> 5: baselines. A batch remembers the commit it is compared with
    // (base_sha), the batch chosen as its baseline (at the base, or at an
    // ancestor with the same inputs, or queued for the purpose) and why; a
    // commit status remembers the description the forge last accepted, so a
    // verdict that arrives later (the baseline finished) is posted again.
    R"sql(
ALTER TABLE batches ADD COLUMN base_sha TEXT NOT NULL DEFAULT '';
ALTER TABLE batches ADD COLUMN baseline_batch_id INTEGER REFERENCES batches(id);
ALTER TABLE batches ADD COLUMN baseline_note TEXT NOT NULL DEFAULT '';
ALTER TABLE commit_statuses ADD COLUMN posted_description TEXT NOT NULL DEFAULT '';
UPDATE commit_statuses SET posted_description = description WHERE posted_state = state;
)sql",
    // 5 -> 6: why runnable runs wait, by (pool, gpus) of their batch: `trainq
    // serve` rewrites these notes on every fleet pass ("no pool has 1 GPU");
    // `trainq status` shows them beside the batch.
    R"sql(
CREATE TABLE waiting_notes (
  pool TEXT NOT NULL,
  gpus INTEGER NOT NULL,
  note TEXT NOT NULL,
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (pool, gpus)
);
)sql",
    // 6 -> 7: hyperparameter sweeps (queue/sweeps.cc). A sweep runs an
    // experiment at one commit; each point is a batch of it (experiment
    // "EXP@sweepN.pK") whose command carries the point's values.
    R"sql(
CREATE TABLE sweeps (
  id INTEGER PRIMARY KEY,
  repo_url TEXT NOT NULL,
  commit_json TEXT NOT NULL,
  experiment TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  batch_json TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('running', 'stopped', 'done')),
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL
);
CREATE TABLE sweep_points (
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  idx INTEGER NOT NULL CHECK (idx >= 0),
  params_json TEXT NOT NULL,
  batch_id INTEGER REFERENCES batches(id),
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (sweep_id, idx)
);
)sql",
    // 7 -> 8: pull requests. A push can be a pull/merge request's head (its number
    // and target branch), and each pull request has one comment on the forge,
    // edited in place (queue/pushes.cc).
    R"sql(
ALTER TABLE pushes ADD COLUMN pr_number INTEGER NOT NULL DEFAULT 0;
ALTER TABLE pushes ADD COLUMN target_branch TEXT NOT NULL DEFAULT '';
CREATE INDEX pushes_by_pr ON pushes (repo_url, pr_number, id) WHERE pr_number > 0;
CREATE TABLE pr_comments (
  repo_url TEXT NOT NULL,
  pr_number INTEGER NOT NULL,
  head_sha TEXT NOT NULL DEFAULT '',
  comment_id TEXT NOT NULL DEFAULT '',
  body TEXT NOT NULL DEFAULT '',
  body_sha256 TEXT NOT NULL DEFAULT '',
  posted_sha256 TEXT NOT NULL DEFAULT '',
  settled INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0,
  not_before_ms INTEGER NOT NULL DEFAULT 0,
  gave_up INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '',
  posted_ms INTEGER NOT NULL DEFAULT 0,
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (repo_url, pr_number)
);
)sql",
    // 8 -> 9: per pool, how its boots went (failed in a row, back-off,
    // failing) and what its budget holds back; pool '*' is all pools.
    R"sql(
CREATE TABLE pool_state (
  pool TEXT PRIMARY KEY,
  failed_boots INTEGER NOT NULL DEFAULT 0,
  next_boot_ms INTEGER NOT NULL DEFAULT 0,
  failing INTEGER NOT NULL DEFAULT 0,
  boot_error TEXT NOT NULL DEFAULT '',
  log_tail TEXT NOT NULL DEFAULT '',
  config_hash TEXT NOT NULL DEFAULT '',
  spent_day REAL NOT NULL DEFAULT 0,
  spent_month REAL NOT NULL DEFAULT 0,
  budget_per_day REAL NOT NULL DEFAULT 0,
  budget_per_month REAL NOT NULL DEFAULT 0,
  cap TEXT NOT NULL DEFAULT '',
  updated_ms INTEGER NOT NULL DEFAULT 0
);
)sql",
    // 9 -> 10: the commit status of a push that failed before queueing
    // anything (a fetch error, a bad trainq.yaml): there is no batch to hang
    // it on, so it is keyed by the push.
    R"sql(
CREATE TABLE push_statuses (
  push_id INTEGER PRIMARY KEY REFERENCES pushes(id),
  repo_url TEXT NOT NULL,
  sha TEXT NOT NULL,
  context TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('pending', 'success', 'failure', 'error')),
  description TEXT NOT NULL DEFAULT '',
  posted_state TEXT NOT NULL DEFAULT '',
  posted_description TEXT NOT NULL DEFAULT '',
  attempts INTEGER NOT NULL DEFAULT 0,
  not_before_ms INTEGER NOT NULL DEFAULT 0,
  gave_up INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '',
  updated_ms INTEGER NOT NULL
);
CREATE INDEX push_statuses_due ON push_statuses (gave_up, not_before_ms);
)sql",
    // 10 -> 11: gang runs (queue/gangs.cc). One row per node of a gang
    // run's attempt: the machine it runs on, the run's lease token of that
    // attempt, the member's expiry and, for node 0, the rendezvous address.
    // waiting_notes (rewritten by every fleet pass) is keyed by the gang's
    // node count too: "needs 3 machines at once" is not a note for 1-node runs.
    R"sql(
CREATE TABLE gang_members (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  node_rank INTEGER NOT NULL CHECK (node_rank >= 0),
  token INTEGER NOT NULL,
  machine_id INTEGER NOT NULL REFERENCES machines(id),
  state TEXT NOT NULL CHECK (state IN ('assigned', 'running', 'done')),
  delivered INTEGER NOT NULL DEFAULT 0,
  expires_ms INTEGER NOT NULL,
  master_addr TEXT NOT NULL DEFAULT '',
  master_port INTEGER NOT NULL DEFAULT 0,
  metric_value REAL,
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (run_id, node_rank)
);
CREATE INDEX gang_members_by_machine ON gang_members (machine_id, run_id);
DROP TABLE waiting_notes;
CREATE TABLE waiting_notes (
  pool TEXT NOT NULL,
  gpus INTEGER NOT NULL,
  nodes INTEGER NOT NULL DEFAULT 0,
  note TEXT NOT NULL,
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (pool, gpus, nodes)
);
)sql",
    // 11 -> 12: nothing to judge, and inputs run once. A batch may reuse
    // another batch (reuses_batch_id): a commit whose inputs for an
    // experiment equal an earlier commit's takes that batch's runs as its own
    // instead of queueing new ones. quiet_commits records pushed commits whose
    // change touched no experiment (decided: nothing to judge). A push's
    // statuses are keyed by context too, so such a commit gets one per
    // experiment.
    R"sql(
ALTER TABLE batches ADD COLUMN reuses_batch_id INTEGER REFERENCES batches(id);
CREATE TABLE quiet_commits (
  repo_url TEXT NOT NULL,
  sha TEXT NOT NULL,
  push_id INTEGER NOT NULL REFERENCES pushes(id),
  note TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (repo_url, sha)
);
CREATE INDEX quiet_commits_by_sha ON quiet_commits (sha);
CREATE TABLE push_statuses_v12 (
  push_id INTEGER NOT NULL REFERENCES pushes(id),
  repo_url TEXT NOT NULL,
  sha TEXT NOT NULL,
  context TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('pending', 'success', 'failure', 'error')),
  description TEXT NOT NULL DEFAULT '',
  posted_state TEXT NOT NULL DEFAULT '',
  posted_description TEXT NOT NULL DEFAULT '',
  attempts INTEGER NOT NULL DEFAULT 0,
  not_before_ms INTEGER NOT NULL DEFAULT 0,
  gave_up INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '',
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (push_id, context)
);
INSERT INTO push_statuses_v12 (push_id, repo_url, sha, context, state, description,
  posted_state, posted_description, attempts, not_before_ms, gave_up, last_error, updated_ms)
  SELECT push_id, repo_url, sha, context, state, description, posted_state,
  posted_description, attempts, not_before_ms, gave_up, last_error, updated_ms FROM push_statuses;
DROP TABLE push_statuses;
ALTER TABLE push_statuses_v12 RENAME TO push_statuses;
CREATE INDEX push_statuses_due ON push_statuses (gave_up, not_before_ms);
)sql",
    // 12 -> 13: reads that stay flat as history grows (bench/README.md,
    // Scale). Run counts per state, overall and per batch, kept by triggers
    // on runs, so `trainq status` counts without visiting every run and finds
    // the active batches without visiting every batch (a batch_counts row
    // whose count falls to 0 is deleted); and the durations of the latest
    // succeeded runs per (repository, experiment), the newest 50 kept, for
    // the ETA estimate (RecentRunDurations) without sorting all of history;
    // run time per machine and pool and stopped machines' billing (below).
    R"sql(
CREATE TABLE run_counts (
  state TEXT PRIMARY KEY,
  n INTEGER NOT NULL
);
CREATE TABLE batch_counts (
  batch_id INTEGER NOT NULL,
  state TEXT NOT NULL,
  n INTEGER NOT NULL,
  PRIMARY KEY (batch_id, state)
);
CREATE INDEX batch_counts_by_state ON batch_counts (state, batch_id);
INSERT INTO run_counts (state, n) SELECT state, count(*) FROM runs GROUP BY state;
INSERT INTO batch_counts (batch_id, state, n)
  SELECT batch_id, state, count(*) FROM runs GROUP BY batch_id, state;
CREATE TABLE recent_durations (
  repo_id INTEGER NOT NULL,
  experiment TEXT NOT NULL,
  finished_ms INTEGER NOT NULL,
  run_id INTEGER NOT NULL,
  duration_ms INTEGER NOT NULL,
  PRIMARY KEY (repo_id, experiment, finished_ms, run_id)
);
INSERT INTO recent_durations (repo_id, experiment, finished_ms, run_id, duration_ms)
  SELECT repo_id, experiment, finished_ms, id, duration_ms FROM (
    SELECT c.repo_id, b.experiment, r.finished_ms, r.id, r.finished_ms - r.started_ms AS duration_ms,
           row_number() OVER (PARTITION BY c.repo_id, b.experiment
                              ORDER BY r.finished_ms DESC, r.id DESC) AS k
    FROM runs r JOIN batches b ON b.id = r.batch_id JOIN commits c ON c.id = b.commit_id
    WHERE r.state = 'succeeded' AND r.started_ms IS NOT NULL AND r.finished_ms IS NOT NULL)
  WHERE k <= 50;
CREATE TRIGGER runs_counted_insert AFTER INSERT ON runs BEGIN
  INSERT INTO run_counts (state, n) VALUES (new.state, 1)
    ON CONFLICT (state) DO UPDATE SET n = n + 1;
  INSERT INTO batch_counts (batch_id, state, n) VALUES (new.batch_id, new.state, 1)
    ON CONFLICT (batch_id, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER runs_counted_delete AFTER DELETE ON runs BEGIN
  UPDATE run_counts SET n = n - 1 WHERE state = old.state;
  UPDATE batch_counts SET n = n - 1 WHERE batch_id = old.batch_id AND state = old.state;
  DELETE FROM batch_counts WHERE batch_id = old.batch_id AND state = old.state AND n <= 0;
END;
CREATE TRIGGER runs_counted_update AFTER UPDATE OF state, batch_id ON runs
  WHEN old.state IS NOT new.state OR old.batch_id IS NOT new.batch_id BEGIN
  UPDATE run_counts SET n = n - 1 WHERE state = old.state;
  INSERT INTO run_counts (state, n) VALUES (new.state, 1)
    ON CONFLICT (state) DO UPDATE SET n = n + 1;
  UPDATE batch_counts SET n = n - 1 WHERE batch_id = old.batch_id AND state = old.state;
  DELETE FROM batch_counts WHERE batch_id = old.batch_id AND state = old.state AND n <= 0;
  INSERT INTO batch_counts (batch_id, state, n) VALUES (new.batch_id, new.state, 1)
    ON CONFLICT (batch_id, state) DO UPDATE SET n = n + 1;
END;
-- Run time per machine and per pool (Machines, Costs): the time of runs
-- whose time no longer moves (all but those running now), and succeeded
-- runs per machine, kept by triggers; the running ones are added at read
-- time. And the billing of stopped machines per pool, so Costs reads the
-- live machines only.
CREATE TABLE machine_runs (
  machine_id INTEGER PRIMARY KEY,
  busy_ms INTEGER NOT NULL,
  done INTEGER NOT NULL
);
CREATE TABLE pool_runs (
  pool TEXT PRIMARY KEY,
  busy_ms INTEGER NOT NULL
);
CREATE TABLE pool_ended (
  pool TEXT PRIMARY KEY,
  machines INTEGER NOT NULL,
  billed_ms INTEGER NOT NULL,
  cost_ms REAL NOT NULL
);
CREATE INDEX machines_live ON machines (pool) WHERE stopped_ms IS NULL;
INSERT INTO machine_runs (machine_id, busy_ms, done)
  SELECT r.machine_id, sum((CASE WHEN r.started_ms IS NULL OR (r.state = 'running' AND r.finished_ms IS NULL) THEN 0 ELSE max(0, COALESCE(r.finished_ms, r.updated_ms) - r.started_ms) END)), sum((r.state = 'succeeded')) FROM runs r
  WHERE r.machine_id IS NOT NULL GROUP BY r.machine_id;
INSERT INTO pool_runs (pool, busy_ms)
  SELECT m.pool, sum(x.busy_ms) FROM machine_runs x JOIN machines m ON m.id = x.machine_id
  GROUP BY m.pool;
INSERT INTO pool_ended (pool, machines, billed_ms, cost_ms)
  SELECT m.pool, count(*), sum(max(0, m.stopped_ms - m.booted_ms)), sum(max(0, m.stopped_ms - m.booted_ms) * m.hourly_cost) FROM machines m
  WHERE m.stopped_ms IS NOT NULL GROUP BY m.pool;
CREATE TRIGGER runs_time_insert AFTER INSERT ON runs WHEN new.machine_id IS NOT NULL BEGIN
  INSERT INTO machine_runs (machine_id, busy_ms, done) VALUES (new.machine_id, (CASE WHEN new.started_ms IS NULL OR (new.state = 'running' AND new.finished_ms IS NULL) THEN 0 ELSE max(0, COALESCE(new.finished_ms, new.updated_ms) - new.started_ms) END), (new.state = 'succeeded'))
    ON CONFLICT (machine_id) DO UPDATE SET busy_ms = busy_ms + excluded.busy_ms,
    done = done + excluded.done;
  INSERT INTO pool_runs (pool, busy_ms) SELECT pool, (CASE WHEN new.started_ms IS NULL OR (new.state = 'running' AND new.finished_ms IS NULL) THEN 0 ELSE max(0, COALESCE(new.finished_ms, new.updated_ms) - new.started_ms) END) FROM machines
    WHERE id = new.machine_id ON CONFLICT (pool) DO UPDATE SET busy_ms = busy_ms + excluded.busy_ms;
END;
CREATE TRIGGER runs_time_delete AFTER DELETE ON runs WHEN old.machine_id IS NOT NULL BEGIN
  UPDATE machine_runs SET busy_ms = busy_ms - (CASE WHEN old.started_ms IS NULL OR (old.state = 'running' AND old.finished_ms IS NULL) THEN 0 ELSE max(0, COALESCE(old.finished_ms, old.updated_ms) - old.started_ms) END), done = done - (old.state = 'succeeded')
    WHERE machine_id = old.machine_id;
  UPDATE pool_runs SET busy_ms = busy_ms - (CASE WHEN old.started_ms IS NULL OR (old.state = 'running' AND old.finished_ms IS NULL) THEN 0 ELSE max(0, COALESCE(old.finished_ms, old.updated_ms) - old.started_ms) END)
    WHERE pool = (SELECT pool FROM machines WHERE id = old.machine_id);
END;
CREATE TRIGGER runs_time_update AFTER UPDATE ON runs
  WHEN (old.machine_id IS NOT NULL OR new.machine_id IS NOT NULL)
   AND (old.machine_id IS NOT new.machine_id OR (CASE WHEN old.started_ms IS NULL OR (old.state = 'running' AND old.finished_ms IS NULL) THEN 0 ELSE max(0, COALESCE(old.finished_ms, old.updated_ms) - old.started_ms) END) != (CASE WHEN new.started_ms IS NULL OR (new.state = 'running' AND new.finished_ms IS NULL) THEN 0 ELSE max(0, COALESCE(new.finished_ms, new.updated_ms) - new.started_ms) END)
        OR (old.state = 'succeeded') != (new.state = 'succeeded')) BEGIN
  UPDATE machine_runs SET busy_ms = busy_ms - (CASE WHEN old.started_ms IS NULL OR (old.state = 'running' AND old.finished_ms IS NULL) THEN 0 ELSE max(0, COALESCE(old.finished_ms, old.updated_ms) - old.started_ms) END), done = done - (old.state = 'succeeded')
    WHERE machine_id = old.machine_id;
  UPDATE pool_runs SET busy_ms = busy_ms - (CASE WHEN old.started_ms IS NULL OR (old.state = 'running' AND old.finished_ms IS NULL) THEN 0 ELSE max(0, COALESCE(old.finished_ms, old.updated_ms) - old.started_ms) END)
    WHERE pool = (SELECT pool FROM machines WHERE id = old.machine_id);
  INSERT INTO machine_runs (machine_id, busy_ms, done)
    SELECT new.machine_id, (CASE WHEN new.started_ms IS NULL OR (new.state = 'running' AND new.finished_ms IS NULL) THEN 0 ELSE max(0, COALESCE(new.finished_ms, new.updated_ms) - new.started_ms) END), (new.state = 'succeeded') WHERE new.machine_id IS NOT NULL
    ON CONFLICT (machine_id) DO UPDATE SET busy_ms = busy_ms + excluded.busy_ms,
    done = done + excluded.done;
  INSERT INTO pool_runs (pool, busy_ms) SELECT pool, (CASE WHEN new.started_ms IS NULL OR (new.state = 'running' AND new.finished_ms IS NULL) THEN 0 ELSE max(0, COALESCE(new.finished_ms, new.updated_ms) - new.started_ms) END) FROM machines
    WHERE id = new.machine_id ON CONFLICT (pool) DO UPDATE SET busy_ms = busy_ms + excluded.busy_ms;
END;
CREATE TRIGGER machines_ended_insert AFTER INSERT ON machines WHEN new.stopped_ms IS NOT NULL BEGIN
  INSERT INTO pool_ended (pool, machines, billed_ms, cost_ms)
    VALUES (new.pool, 1, max(0, new.stopped_ms - new.booted_ms), max(0, new.stopped_ms - new.booted_ms) * new.hourly_cost)
    ON CONFLICT (pool) DO UPDATE SET machines = machines + 1,
    billed_ms = billed_ms + excluded.billed_ms, cost_ms = cost_ms + excluded.cost_ms;
END;
CREATE TRIGGER machines_ended_delete AFTER DELETE ON machines WHEN old.stopped_ms IS NOT NULL BEGIN
  UPDATE pool_ended SET machines = machines - 1, billed_ms = billed_ms - max(0, old.stopped_ms - old.booted_ms),
    cost_ms = cost_ms - max(0, old.stopped_ms - old.booted_ms) * old.hourly_cost WHERE pool = old.pool;
END;
CREATE TRIGGER machines_ended_update AFTER UPDATE OF stopped_ms, booted_ms, hourly_cost, pool
  ON machines WHEN old.stopped_ms IS NOT NULL OR new.stopped_ms IS NOT NULL BEGIN
  UPDATE pool_ended SET machines = machines - 1, billed_ms = billed_ms - max(0, old.stopped_ms - old.booted_ms),
    cost_ms = cost_ms - max(0, old.stopped_ms - old.booted_ms) * old.hourly_cost
    WHERE pool = old.pool AND old.stopped_ms IS NOT NULL;
  INSERT INTO pool_ended (pool, machines, billed_ms, cost_ms)
    SELECT new.pool, 1, max(0, new.stopped_ms - new.booted_ms), max(0, new.stopped_ms - new.booted_ms) * new.hourly_cost WHERE new.stopped_ms IS NOT NULL
    ON CONFLICT (pool) DO UPDATE SET machines = machines + 1,
    billed_ms = billed_ms + excluded.billed_ms, cost_ms = cost_ms + excluded.cost_ms;
END;
-- Pushes per state (status), kept by triggers like run_counts.
CREATE TABLE push_counts (
  state TEXT PRIMARY KEY,
  n INTEGER NOT NULL
);
INSERT INTO push_counts (state, n) SELECT state, count(*) FROM pushes GROUP BY state;
CREATE TRIGGER pushes_counted_insert AFTER INSERT ON pushes BEGIN
  INSERT INTO push_counts (state, n) VALUES (new.state, 1)
    ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER pushes_counted_delete AFTER DELETE ON pushes BEGIN
  UPDATE push_counts SET n = n - 1 WHERE state = old.state;
END;
CREATE TRIGGER pushes_counted_update AFTER UPDATE OF state ON pushes
  WHEN old.state IS NOT new.state BEGIN
  UPDATE push_counts SET n = n - 1 WHERE state = old.state;
  INSERT INTO push_counts (state, n) VALUES (new.state, 1)
    ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
-- `trainq report --since`, GET /api/v1/report?since=: batches by creation.
CREATE INDEX batches_by_created ON batches (created_ms);
CREATE TRIGGER runs_duration_kept AFTER UPDATE OF state ON runs
  WHEN new.state = 'succeeded' AND old.state IS NOT 'succeeded'
       AND new.started_ms IS NOT NULL AND new.finished_ms IS NOT NULL BEGIN
  INSERT OR REPLACE INTO recent_durations (repo_id, experiment, finished_ms, run_id, duration_ms)
    SELECT c.repo_id, b.experiment, new.finished_ms, new.id, new.finished_ms - new.started_ms
    FROM batches b JOIN commits c ON c.id = b.commit_id WHERE b.id = new.batch_id;
  DELETE FROM recent_durations
    WHERE (repo_id, experiment) = (SELECT c.repo_id, b.experiment FROM batches b
                                   JOIN commits c ON c.id = b.commit_id WHERE b.id = new.batch_id)
      AND (finished_ms, run_id) < (SELECT finished_ms, run_id FROM recent_durations d
             WHERE (d.repo_id, d.experiment) = (SELECT c.repo_id, b.experiment FROM batches b
                    JOIN commits c ON c.id = b.commit_id WHERE b.id = new.batch_id)
             ORDER BY finished_ms DESC, run_id DESC LIMIT 1 OFFSET 49);
END;
)sql",
    // 13 -> 14: one table of commit statuses. A batch's status (batch_id
    // set) and the status of a push that failed or had nothing to judge
    // (push_id set, one per context) were two tables doing one job; their
    // rows move here unchanged.
    R"sql(
CREATE TABLE statuses (
  id INTEGER PRIMARY KEY,
  batch_id INTEGER REFERENCES batches(id),
  push_id INTEGER REFERENCES pushes(id),
  repo_url TEXT NOT NULL,
  sha TEXT NOT NULL,
  context TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('pending', 'success', 'failure', 'error')),
  description TEXT NOT NULL DEFAULT '',
  posted_state TEXT NOT NULL DEFAULT '',
  posted_description TEXT NOT NULL DEFAULT '',
  attempts INTEGER NOT NULL DEFAULT 0,
  not_before_ms INTEGER NOT NULL DEFAULT 0,
  gave_up INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '',
  updated_ms INTEGER NOT NULL,
  CHECK ((batch_id IS NULL) != (push_id IS NULL))
);
CREATE UNIQUE INDEX statuses_by_batch ON statuses (batch_id) WHERE batch_id IS NOT NULL;
CREATE UNIQUE INDEX statuses_by_push ON statuses (push_id, context) WHERE push_id IS NOT NULL;
CREATE INDEX statuses_due ON statuses (gave_up, not_before_ms);
INSERT INTO statuses (batch_id, repo_url, sha, context, state, description, posted_state,
  posted_description, attempts, not_before_ms, gave_up, last_error, updated_ms)
  SELECT batch_id, repo_url, sha, context, state, description, posted_state,
  posted_description, attempts, not_before_ms, gave_up, last_error, updated_ms
  FROM commit_statuses ORDER BY batch_id;
INSERT INTO statuses (push_id, repo_url, sha, context, state, description, posted_state,
  posted_description, attempts, not_before_ms, gave_up, last_error, updated_ms)
  SELECT push_id, repo_url, sha, context, state, description, posted_state,
  posted_description, attempts, not_before_ms, gave_up, last_error, updated_ms
  FROM push_statuses ORDER BY push_id, context;
DROP TABLE commit_statuses;
DROP TABLE push_statuses;
)sql",
    // 14 -> 15: a run's retries (RunQueue::RetryRun): what each earlier
    // round of attempts ended with, kept when a dead or cancelled run is put
    // back in the queue.
    R"sql(
CREATE TABLE run_retries (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id),
  retried_ms INTEGER NOT NULL,
  who TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL,
  attempts INTEGER NOT NULL,
  exit_code INTEGER,
  finished_ms INTEGER,
  last_error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX run_retries_by_run ON run_retries (run_id, id);
)sql",
    // 15 -> 16: reads that grew with history, and retention (issue 30).
    // batches_by_experiment: an experiment's newest batches (drift's
    // lookback, `trainq report --experiment`) without visiting the others.
    // points_compacted / log_archived: what retention (queue/retention.h)
    // did to a finished run; the two partial indexes hold only the finished
    // runs it has not done yet, oldest first, so a tick reads what it does.
    R"sql(
CREATE INDEX batches_by_experiment ON batches (experiment, id);
ALTER TABLE runs ADD COLUMN points_compacted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN log_archived INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_points_due ON runs (finished_ms, id)
  WHERE points_compacted = 0 AND finished_ms IS NOT NULL;
CREATE INDEX runs_logs_due ON runs (finished_ms, id)
  WHERE log_archived = 0 AND finished_ms IS NOT NULL;
)sql",
    // 16 -> 17: serve's outcome log (the runs that ended since its last
    // look, each loop) read every finished run through runs_by_state and
    // sorted them: a second of CPU per loop at 1M runs. A range on this
    // index reads the new ones.
    R"sql(
CREATE INDEX runs_by_finished ON runs (finished_ms, id) WHERE finished_ms IS NOT NULL;
)sql",
    // 17 -> 18: the ref whose push queued a batch (refs/heads/feature,
    // refs/pull/7/head), so that coalescing cancels only what that ref's own
    // earlier pushes queued (issue 36). NULL: not known (a batch from before
    // this version, `trainq submit`, a baseline queued at a base): coalescing
    // never cancels it. The two indexes find the batches that reuse a batch
    // or are compared with it, which keep it.
    R"sql(
ALTER TABLE batches ADD COLUMN ref TEXT;
CREATE INDEX batches_by_reuses ON batches (reuses_batch_id) WHERE reuses_batch_id IS NOT NULL;
CREATE INDEX batches_by_baseline ON batches (baseline_batch_id)
  WHERE baseline_batch_id IS NOT NULL;
)sql",
    // 18 -> 19: the lease (attempt) that sent each metric point, so that a
    // run's page draws each attempt's curve on its own after a retry
    // (issue 38.8). NULL: a point from before this version.
    R"sql(
ALTER TABLE metrics ADD COLUMN lease INTEGER;
)sql",
    // 19 -> 20: people (issue 41). Personal API tokens, kept as the SHA-256
    // of their secret, and the audit trail: who did what, when, from where.
    R"sql(
CREATE TABLE api_tokens (
  id INTEGER PRIMARY KEY,
  hash TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  owner TEXT NOT NULL,
  role TEXT NOT NULL CHECK (role IN ('read', 'write', 'admin')),
  created_by TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  expires_ms INTEGER,
  last_used_ms INTEGER,
  last_used_from TEXT NOT NULL DEFAULT '',
  revoked_ms INTEGER
);
CREATE INDEX api_tokens_by_owner ON api_tokens (owner, id);
CREATE TABLE audit (
  id INTEGER PRIMARY KEY,
  at_ms INTEGER NOT NULL,
  who TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL DEFAULT '',
  detail TEXT NOT NULL DEFAULT '',
  address TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_by_time ON audit (at_ms, id);
CREATE INDEX audit_by_target ON audit (target, at_ms) WHERE target != '';
)sql",
    // 20 -> 21: the outbox (queue/outbox.h, issue 43): messages to outside
    // services (notifications; later exports), one row per target and
    // event, with the delivery id, backoff and outcome in the row; and the
    // senders' marks (a scan's cursor, the conditions that hold).
    R"sql(
CREATE TABLE outbox (
  id INTEGER PRIMARY KEY,
  target TEXT NOT NULL,
  event_key TEXT NOT NULL,
  kind TEXT NOT NULL,
  delivery_id TEXT NOT NULL,
  payload TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'gave_up')),
  attempts INTEGER NOT NULL DEFAULT 0,
  not_before_ms INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '',
  error_ms INTEGER,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  delivered_ms INTEGER,
  UNIQUE (target, event_key)
);
CREATE INDEX outbox_due ON outbox (not_before_ms, id) WHERE state = 'pending';
CREATE INDEX outbox_by_delivery ON outbox (target, delivered_ms) WHERE delivered_ms IS NOT NULL;
CREATE TABLE outbox_marks (
  name TEXT PRIMARY KEY,
  value TEXT NOT NULL,
  updated_ms INTEGER NOT NULL
);
)sql",
    // 21 -> 22: a sweep point's part in the confirmation (issue 40): the
    // search's pick given fresh seeds ('confirm') and the runner-up given the
    // same seeds ('confirm_baseline'), so the two are compared paired on
    // seeds nobody selected on.
    R"sql(
ALTER TABLE sweep_points ADD COLUMN role TEXT NOT NULL DEFAULT '';
)sql",
};
static_assert(std::size(kMigrations) == kStoreSchemaVersion);

}  // namespace

namespace {

// PostgreSQL: the baseline, then the shared migrations after it, each in a
// write transaction (which holds the database's write lock, so replicas
// opening a new database at once migrate it once).
Status ApplyPostgresMigrations(sql::Db& db, int from, int to) {
  for (int v = from; v < to;) {
    int next = v;
    auto st = sql::WithWriteTransaction(db, [&]() -> Status {
      int now = SchemaVersion(db);
      if (now < 0) return std::unexpected(db.LastError("reading schema version"));
      if (now > v) {
        next = now;
        return Status{};
      }
      if (v == 0) {
        TRY(db.Exec(kPostgresBaseline));
        next = kPostgresBaselineVersion;
        return Status{};
      }
      if (v < kPostgresBaselineVersion) {
        return Fail(ErrorKind::kInvalidArgument,
                    db.path() + ": PostgreSQL schema version " + std::to_string(v) +
                        " is older than the baseline; this database was not made by trainq");
      }
      if (v >= static_cast<int>(std::size(kMigrations))) {
        return Fail(ErrorKind::kInternal, "no migration from schema version " + std::to_string(v));
      }
      TRY(db.Exec(kMigrations[v]));
      next = v + 1;
      return db.Exec("UPDATE trainq_schema_version SET version = " + std::to_string(next));
    });
    if (!st) return std::unexpected(st.error().Wrap("migrating schema to version " +
                                                    std::to_string(v + 1)));
    v = next;
  }
  return {};
}

}  // namespace

Status ApplyMigrations(sql::Db& db, int from, int to) {
  if (db.is_postgres()) return ApplyPostgresMigrations(db, from, to);
  for (int v = from; v < to; ++v) {
    auto st = sql::WithWriteTransaction(db, [&]() -> Status {
      // Another process opening the same new file may have migrated it
      // between our read of user_version and this write lock (found by
      // ci/faults: four concurrent first submits).
      {
        ASSIGN_OR_RETURN(auto q, db.Prepare("PRAGMA user_version"));
        ASSIGN_OR_RETURN(bool row, q.Step());
        if (row && q.Int(0) > v) return Status{};
      }  // finished before the migration's statements run
      TRY(db.Exec(kMigrations[v]));
      return db.Exec("PRAGMA user_version = " + std::to_string(v + 1));
    });
    if (!st) return std::unexpected(st.error().Wrap("migrating schema to version " +
                                                    std::to_string(v + 1)));
  }
  return {};
}

int SchemaVersion(sql::Db& db) {
  if (db.is_postgres()) {
    auto t = db.Prepare(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() "
        "AND table_name = 'trainq_schema_version'");
    if (!t || !t->Step().value_or(false)) return -1;
    if (t->Int(0) == 0) return 0;
    auto s = db.Prepare("SELECT version FROM trainq_schema_version");
    if (!s || !s->Step().value_or(false)) return -1;
    return static_cast<int>(s->Int(0));
  }
  auto s = db.Prepare("PRAGMA user_version");
  if (!s || !s->Step().value_or(false)) return -1;
  return static_cast<int>(s->Int(0));
}

Status MigrateToCurrent(sql::Db& db) {
  int version = SchemaVersion(db);
  if (version < 0) return std::unexpected(db.LastError("reading schema version"));
  if (version > kStoreSchemaVersion) {
    return Fail(ErrorKind::kInvalidArgument,
                db.path() + ": written by a newer trainq (schema version " +
                    std::to_string(version) + "; this build knows up to " +
                    std::to_string(kStoreSchemaVersion) + "); upgrade trainq");
  }
  if (version == kStoreSchemaVersion) return {};
  return ApplyMigrations(db, version, kStoreSchemaVersion);
}

}  // namespace trainq
