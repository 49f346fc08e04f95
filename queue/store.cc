#include "queue/store.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

namespace trainq {

namespace {

constexpr std::array<std::string_view, kRunStateCount> kStateNames = {
    "queued", "leased", "running", "succeeded", "failed", "dead", "cancelled"};

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
    // and the commit status each batch wants on its forge (queue/push_store.cc).
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
    // 6 -> 7: hyperparameter sweeps (queue/sweep_store.cc). A sweep runs an
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
    // edited in place (queue/push_store.cc).
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
    // 10 -> 11: gang runs (queue/gang_store.cc). One row per node of a gang
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
};
static_assert(std::size(kMigrations) == Store::kSchemaVersion);

std::string RepoName(const std::string& url) {
  std::string u = url;
  while (!u.empty() && u.back() == '/') u.pop_back();
  auto slash = u.find_last_of("/:");
  std::string name = slash == std::string::npos ? u : u.substr(slash + 1);
  if (name.size() > 4 && name.ends_with(".git")) name.resize(name.size() - 4);
  return name.empty() ? url : name;
}

RunState StateOf(const std::string& s) { return ParseRunState(s).value_or(RunState::kQueued); }

const char* kRunColumns =
    "r.id, r.batch_id, b.experiment, c.sha, r.seed, r.repeat, r.state, r.attempts, "
    "b.max_attempts, r.worker, r.started_ms, r.finished_ms, r.not_before_ms, r.exit_code, "
    "r.metric_value, r.last_error, r.log_path";

RunRow ReadRunRow(const sql::Stmt& s) {
  RunRow r;
  r.id = s.Int(0);
  r.batch_id = s.Int(1);
  r.experiment = s.Text(2);
  r.sha = s.Text(3);
  r.seed = s.Int(4);
  r.repeat = static_cast<int>(s.Int(5));
  r.state = StateOf(s.Text(6));
  r.attempts = static_cast<int>(s.Int(7));
  r.max_attempts = static_cast<int>(s.Int(8));
  r.worker = s.Text(9);
  r.started_ms = s.OptInt(10);
  r.finished_ms = s.OptInt(11);
  if (auto nb = s.OptInt(12); nb && *nb > 0) r.not_before_ms = nb;
  if (auto ec = s.OptInt(13)) r.exit_code = static_cast<int>(*ec);
  r.metric_value = s.OptDouble(14);
  r.last_error = s.Text(15);
  r.log_path = s.Text(16);
  return r;
}

}  // namespace

std::string_view RunStateName(RunState s) { return kStateNames[static_cast<int>(s)]; }

std::optional<RunState> ParseRunState(std::string_view name) {
  for (int i = 0; i < kRunStateCount; ++i) {
    if (kStateNames[i] == name) return static_cast<RunState>(i);
  }
  return std::nullopt;
}

bool IsTerminal(RunState s) {
  return s == RunState::kSucceeded || s == RunState::kDead || s == RunState::kCancelled;
}

bool BatchProgress::active() const {
  return count(RunState::kQueued) + count(RunState::kLeased) + count(RunState::kRunning) +
             count(RunState::kFailed) >
         0;
}

Status ApplyMigrations(sql::Db& db, int from, int to) {
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

namespace {

// Seeds are seed_start .. seed_start + repeats - 1: that must not pass
// INT64_MAX (signed overflow wrapped to negative seeds).
Status CheckSeedRange(const std::string& what, std::int64_t seed_start, int repeats) {
  if (repeats > 0 && seed_start > std::numeric_limits<std::int64_t>::max() - (repeats - 1)) {
    return Fail(ErrorKind::kInvalidArgument,
                what + ": seeds " + std::to_string(seed_start) + " + " +
                    std::to_string(repeats) + " repeats pass the largest 64-bit integer; " +
                    "choose a smaller seed");
  }
  return {};
}

}  // namespace

// A new database appears at `path` whole: made and migrated under a
// temporary name, then linked into place (link fails on an existing name, so
// of processes creating it at once one wins and the others open its file).
// Another process thus never sees an empty file at `path`, and an empty file
// there can only be a damaged or emptied database (refused by Open).
Status Store::CreateWhole(const std::string& path, const StoreOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path + "-wal", ec)) {
    return Fail(ErrorKind::kInvalidArgument,
                path + " does not exist, but its write-ahead log " + path +
                    "-wal does (the database was deleted or moved without it): nothing was "
                    "created, since a new database would replay that log. Restore the "
                    "database beside it, or move " + path + "-wal away");
  }
  char tag[64];
  std::snprintf(tag, sizeof tag, ".creating-%d-%llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(
                    std::chrono::steady_clock::now().time_since_epoch().count()));
  const std::string tmp = path + tag;
  {
    ASSIGN_OR_RETURN(auto db, sql::Db::Open(tmp, true, options.busy_timeout_ms));
    StoreOptions o = options;
    o.create = false;
    TRY(db.Exec("PRAGMA journal_mode=WAL"));
    Store store(std::move(db), o);
    if (auto st = store.Migrate(); !st) {
      fs::remove(tmp, ec);
      return st;
    }
  }  // closed: the WAL is checkpointed into the file and removed
  for (const char* suffix : {"-wal", "-shm"}) fs::remove(tmp + suffix, ec);
  int linked = ::link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  fs::remove(tmp, ec);
  if (linked != 0 && link_errno != EEXIST) {
    return Fail(ErrorKind::kIo, path + ": cannot create the database: " +
                                    std::strerror(link_errno));
  }
  return {};
}

Result<Store> Store::Open(const std::string& path, StoreOptions options) {
  std::error_code exists_ec;
  bool existed = std::filesystem::exists(path, exists_ec);
  if (options.create && !existed) {
    auto parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    TRY(CreateWhole(path, options));
    existed = true;
  }
  ASSIGN_OR_RETURN(auto db, sql::Db::Open(path, false, options.busy_timeout_ms));
  // Another program's SQLite file (tables, but no trainq schema version) is
  // refused before anything is written to it.
  {
    auto probe = db.Prepare(
        "SELECT (SELECT user_version FROM pragma_user_version), "
        "(SELECT count(*) FROM sqlite_master WHERE type = 'table')");
    if (!probe) {
      Error e = probe.error();
      if (e.kind == ErrorKind::kInternal || e.kind == ErrorKind::kCorruption) {
        e.message += " (is this a trainq database?)";
      }
      return std::unexpected(e);
    }
    auto row = probe->Step();
    if (!row) {
      Error e = row.error();
      if (e.kind == ErrorKind::kInternal || e.kind == ErrorKind::kCorruption) {
        e.message += " (is this a trainq database?)";
      }
      return std::unexpected(e);
    }
    if (*row && probe->Int(0) == 0 && probe->Int(1) > 0) {
      return Fail(ErrorKind::kInvalidArgument,
                  path + ": not a trainq database (it holds other tables); pass --db with a "
                         "new file or a trainq store");
    }
    if (*row && probe->Int(0) == 0 && probe->Int(1) == 0 && existed &&
        !options.initialize_existing) {
      std::error_code ec;
      auto size = std::filesystem::file_size(path, ec);
      return Fail(ErrorKind::kInvalidArgument,
                  path + ": the file exists but holds no trainq queue (" +
                      (ec ? std::string("empty") : std::to_string(size) + " bytes") +
                      "); nothing was written to it. If it held your queue, restore it from a "
                      "backup; to start a new queue in this file, run `trainq --db " + path +
                      " init`");
    }
  }
  // WAL lets readers (trainq status) work while the daemon writes.
  // synchronous=FULL makes every acknowledged commit durable.
  {
    auto wal = db.Prepare("PRAGMA journal_mode=WAL");
    if (!wal) return std::unexpected(wal.error());
    if (auto r = wal->Step(); !r) {
      Error e = r.error();
      if (e.kind == ErrorKind::kInternal || e.kind == ErrorKind::kCorruption) {
        e.message += " (is this a trainq database?)";
      }
      return std::unexpected(e);
    }
  }  // the statement must be finished before any transaction commits
  TRY(db.Exec("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;"));
  Store store(std::move(db), options);
  TRY(store.Migrate());
  return store;
}

Result<std::vector<std::string>> Store::QuickCheck(int max_lines) {
  ASSIGN_OR_RETURN(auto st, db_.Prepare("PRAGMA quick_check(" + std::to_string(max_lines) + ")"));
  std::vector<std::string> lines;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    lines.push_back(st.Text(0));
  }
  return lines;
}

int Store::schema_version() {
  auto s = db_.Prepare("PRAGMA user_version");
  if (!s || !s->Step().value_or(false)) return -1;
  return static_cast<int>(s->Int(0));
}

Status Store::Migrate() {
  int version = schema_version();
  if (version < 0) return std::unexpected(db_.LastError("reading schema version"));
  if (version > kSchemaVersion) {
    return Fail(ErrorKind::kInvalidArgument,
                db_.path() + ": written by a newer trainq (schema version " +
                    std::to_string(version) + "; this build knows up to " +
                    std::to_string(kSchemaVersion) + "); upgrade trainq");
  }
  if (version == kSchemaVersion) return {};
  return ApplyMigrations(db_, version, kSchemaVersion);
}

TimeMs Store::BackoffMs(int attempt) const {
  TimeMs d = options_.backoff_base_ms;
  for (int i = 1; i < attempt && d < options_.backoff_cap_ms; ++i) d *= 2;
  return std::min(d, options_.backoff_cap_ms);
}

Result<std::int64_t> Store::UpsertCommit(const std::string& repo_url, const CommitInfo& commit,
                                         TimeMs now) {
  ASSIGN_OR_RETURN(auto repo_ins,
                   db_.Prepare("INSERT INTO repos (url, name, created_ms) VALUES (?, ?, ?) "
                               "ON CONFLICT (url) DO NOTHING"));
  TRY(repo_ins.Bind(1, repo_url).Bind(2, RepoName(repo_url)).Bind(3, now).Run());
  ASSIGN_OR_RETURN(auto repo_sel, db_.Prepare("SELECT id FROM repos WHERE url = ?"));
  repo_sel.Bind(1, repo_url);
  ASSIGN_OR_RETURN(bool has_repo, repo_sel.Step());
  if (!has_repo) return Fail(ErrorKind::kInternal, "repository row vanished");
  std::int64_t repo_id = repo_sel.Int(0);

  ASSIGN_OR_RETURN(auto commit_ins,
                   db_.Prepare("INSERT INTO commits (repo_id, sha, parent_sha, subject, author, "
                               "committed_ms, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?) "
                               "ON CONFLICT (repo_id, sha) DO NOTHING"));
  TRY(commit_ins.Bind(1, repo_id)
          .Bind(2, commit.sha)
          .Bind(3, commit.parent_sha)
          .Bind(4, commit.message)
          .Bind(5, commit.author)
          .Bind(6, commit.committed_ms)
          .Bind(7, now)
          .Run());
  ASSIGN_OR_RETURN(auto commit_sel,
                   db_.Prepare("SELECT id FROM commits WHERE repo_id = ? AND sha = ?"));
  commit_sel.Bind(1, repo_id).Bind(2, commit.sha);
  ASSIGN_OR_RETURN(bool has_commit, commit_sel.Step());
  if (!has_commit) return Fail(ErrorKind::kInternal, "commit row vanished");
  return commit_sel.Int(0);
}

Result<std::vector<SubmitResult>> Store::Submit(const std::string& repo_url,
                                                const CommitInfo& commit,
                                                const std::vector<BatchSpec>& batches,
                                                TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<std::vector<SubmitResult>> {
    ASSIGN_OR_RETURN(std::int64_t commit_id, UpsertCommit(repo_url, commit, now));

    ASSIGN_OR_RETURN(
        auto batch_ins,
        db_.Prepare("INSERT INTO batches (commit_id, experiment, command, metric_name, "
                    "metric_goal, metric_regex, repeats, seed_start, gpus, timeout_s, "
                    "max_attempts, spec_json, reason, created_ms, pool) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (commit_id, experiment) DO NOTHING"));
    ASSIGN_OR_RETURN(auto batch_sel,
                     db_.Prepare("SELECT id, seed_start, repeats, reuses_batch_id FROM batches "
                                 "WHERE commit_id = ? AND experiment = ?"));
    ASSIGN_OR_RETURN(auto batch_grow,
                     db_.Prepare("UPDATE batches SET repeats = ? WHERE id = ? AND repeats < ?"));
    ASSIGN_OR_RETURN(auto run_ins,
                     db_.Prepare("INSERT INTO runs (batch_id, seed, repeat, state, created_ms, "
                                 "updated_ms) VALUES (?, ?, ?, 'queued', ?, ?) "
                                 "ON CONFLICT (batch_id, seed) DO NOTHING"));

    std::vector<SubmitResult> out;
    for (const auto& spec : batches) {
      if (spec.repeats <= 0) {
        return Fail(ErrorKind::kInvalidArgument,
                    spec.experiment + ": repeats must be positive, got " +
                        std::to_string(spec.repeats));
      }
      SubmitResult res;
      res.experiment = spec.experiment;
      TRY(batch_ins.Bind(1, commit_id)
              .Bind(2, spec.experiment)
              .Bind(3, spec.command)
              .Bind(4, spec.metric_name)
              .Bind(5, spec.metric_goal)
              .Bind(6, spec.metric_regex)
              .Bind(7, spec.repeats)
              .Bind(8, spec.seed_start)
              .Bind(9, spec.gpus)
              .Bind(10, spec.timeout_s)
              .Bind(11, spec.max_attempts)
              .Bind(12, spec.spec_json)
              .Bind(13, spec.reason)
              .Bind(14, now)
              .Bind(15, spec.pool)
              .Run());
      res.created = db_.Changes() > 0;
      batch_sel.Bind(1, commit_id).Bind(2, spec.experiment);
      ASSIGN_OR_RETURN(bool found, batch_sel.Step());
      if (!found) return Fail(ErrorKind::kInternal, "batch row vanished");
      res.batch_id = batch_sel.Int(0);
      // Seeds follow the batch's recorded start, so a top-up never shifts them.
      std::int64_t seed_start = batch_sel.Int(1);
      if (!batch_sel.IsNull(3)) res.reuses_batch_id = batch_sel.Int(3);
      batch_sel.Reset();
      if (res.reuses_batch_id) {
        // Its runs are another batch's: nothing is queued here
        // (StopReusing first to run it again).
        out.push_back(res);
        continue;
      }
      TRY(CheckSeedRange(spec.experiment, seed_start, spec.repeats));
      TRY(batch_grow.Bind(1, spec.repeats).Bind(2, res.batch_id).Bind(3, spec.repeats).Run());
      for (int i = 0; i < spec.repeats; ++i) {
        TRY(run_ins.Bind(1, res.batch_id)
                .Bind(2, seed_start + i)
                .Bind(3, i)
                .Bind(4, now)
                .Bind(5, now)
                .Run());
        res.runs_added += db_.Changes();
      }
      out.push_back(res);
    }
    return out;
  });
}

Result<SubmitResult> Store::ReuseBatch(const std::string& repo_url, const CommitInfo& commit,
                                      const std::string& experiment, std::int64_t source,
                                      const std::string& reason, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<SubmitResult> {
    // The batch that has the runs: a reusing source's own source.
    ASSIGN_OR_RETURN(auto src, db_.Prepare("SELECT coalesce(reuses_batch_id, id) FROM batches "
                                           "WHERE id = ?"));
    src.Bind(1, source);
    ASSIGN_OR_RETURN(bool found, src.Step());
    if (!found) {
      return Fail(ErrorKind::kNotFound, "batch " + std::to_string(source) + " does not exist");
    }
    std::int64_t root = src.Int(0);
    ASSIGN_OR_RETURN(std::int64_t commit_id, UpsertCommit(repo_url, commit, now));
    ASSIGN_OR_RETURN(auto ins, db_.Prepare(
        "INSERT INTO batches (commit_id, experiment, command, metric_name, metric_goal, "
        "metric_regex, repeats, seed_start, gpus, timeout_s, max_attempts, spec_json, reason, "
        "created_ms, pool, reuses_batch_id) "
        "SELECT ?1, ?2, command, metric_name, metric_goal, metric_regex, repeats, seed_start, "
        "gpus, timeout_s, max_attempts, spec_json, ?3, ?4, pool, id FROM batches WHERE id = ?5 "
        "ON CONFLICT (commit_id, experiment) DO NOTHING"));
    TRY(ins.Bind(1, commit_id).Bind(2, experiment).Bind(3, reason).Bind(4, now).Bind(5, root).Run());
    SubmitResult res;
    res.experiment = experiment;
    res.created = db_.Changes() > 0;
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT id, reuses_batch_id FROM batches "
                                           "WHERE commit_id = ? AND experiment = ?"));
    sel.Bind(1, commit_id).Bind(2, experiment);
    ASSIGN_OR_RETURN(bool has, sel.Step());
    if (!has) return Fail(ErrorKind::kInternal, "batch row vanished");
    res.batch_id = sel.Int(0);
    if (!sel.IsNull(1)) res.reuses_batch_id = sel.Int(1);
    return res;
  });
}

Result<bool> Store::StopReusing(std::int64_t batch_id) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<bool> {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE batches SET reuses_batch_id = NULL WHERE id = ? "
                                         "AND reuses_batch_id IS NOT NULL"));
    TRY(u.Bind(1, batch_id).Run());
    return db_.Changes() > 0;
  });
}

Result<int> Store::ExtendBatch(std::int64_t requested_id, int repeats, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    // A batch that reuses another grows that one: the runs are its.
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT b.seed_start, b.id FROM batches b WHERE b.id = "
                                           "coalesce((SELECT reuses_batch_id FROM batches WHERE "
                                           "id = ?1), ?1)"));
    sel.Bind(1, requested_id);
    ASSIGN_OR_RETURN(bool found, sel.Step());
    if (!found) {
      return Fail(ErrorKind::kNotFound,
                  "batch " + std::to_string(requested_id) + " does not exist");
    }
    std::int64_t seed_start = sel.Int(0);
    const std::int64_t batch_id = sel.Int(1);
    TRY(CheckSeedRange("batch " + std::to_string(batch_id), seed_start, repeats));
    ASSIGN_OR_RETURN(auto grow,
                     db_.Prepare("UPDATE batches SET repeats = ? WHERE id = ? AND repeats < ?"));
    TRY(grow.Bind(1, repeats).Bind(2, batch_id).Bind(3, repeats).Run());
    ASSIGN_OR_RETURN(auto ins,
                     db_.Prepare("INSERT INTO runs (batch_id, seed, repeat, state, created_ms, "
                                 "updated_ms) VALUES (?, ?, ?, 'queued', ?, ?) "
                                 "ON CONFLICT (batch_id, seed) DO NOTHING"));
    int added = 0;
    for (int i = 0; i < repeats; ++i) {
      TRY(ins.Bind(1, batch_id).Bind(2, seed_start + i).Bind(3, i).Bind(4, now).Bind(5, now).Run());
      added += db_.Changes();
    }
    return added;
  });
}

// Runs the in-process executor can take: not a gang over several machines
// (those need the fleet's machines).
constexpr const char* kOneMachine =
    "COALESCE((SELECT json_extract(b.spec_json, '$.resources.nodes') FROM batches b "
    "WHERE b.id = runs.batch_id), 1) <= 1";

Result<std::vector<LeasedRun>> Store::Lease(const std::string& worker, TimeMs now,
                                            TimeMs lease_ms, int max_runs) {
  if (max_runs <= 0) return std::vector<LeasedRun>{};
  return sql::WithWriteTransaction(db_, [&]() -> Result<std::vector<LeasedRun>> {
    // Oldest first: queued runs, then failed ones whose backoff has passed.
    ASSIGN_OR_RETURN(auto pick,
                     db_.Prepare("SELECT id FROM ("
                                 " SELECT id FROM runs WHERE state = 'queued' AND " +
                                 std::string(kOneMachine) +
                                 " ORDER BY id LIMIT ?1)"
                                 " UNION ALL SELECT id FROM ("
                                 " SELECT id FROM runs WHERE state = 'failed' AND not_before_ms <= ?2"
                                 " AND " + std::string(kOneMachine) +
                                 " ORDER BY id LIMIT ?1) ORDER BY id LIMIT ?1"));
    pick.Bind(1, max_runs).Bind(2, now);
    std::vector<std::int64_t> ids;
    while (true) {
      ASSIGN_OR_RETURN(bool row, pick.Step());
      if (!row) break;
      ids.push_back(pick.Int(0));
    }
    ASSIGN_OR_RETURN(auto upd,
                     db_.Prepare("UPDATE runs SET state = 'leased', lease_token = " + std::string(kNextLeaseToken) + ", "
                                 "lease_expires_ms = ?, worker = ?, attempts = attempts + 1, "
                                 "started_ms = NULL, finished_ms = NULL, updated_ms = ? "
                                 "WHERE id = ?"));
    ASSIGN_OR_RETURN(auto info, db_.Prepare(kLeasedRunSelect));
    std::vector<LeasedRun> out;
    for (auto id : ids) {
      TRY(upd.Bind(1, now + lease_ms).Bind(2, worker).Bind(3, now).Bind(4, id).Run());
      ASSIGN_OR_RETURN(auto l, ReadLeasedRun(info, id, now + lease_ms));
      out.push_back(std::move(l));
    }
    return out;
  });
}

const char* const Store::kLeasedRunSelect =
    "SELECT r.batch_id, r.lease_token, r.seed, r.repeat, r.attempts, b.experiment, b.command, "
    "b.metric_name, b.metric_regex, repos.url, c.sha, b.timeout_s, b.gpus, "
    "COALESCE(json_extract(b.spec_json, '$.trainer'), ''), "
    "COALESCE(json_extract(b.spec_json, '$.resources.nodes'), 0), "
    "COALESCE(json_extract(b.spec_json, '$.resources.processes_per_node'), 0), "
    "json_extract(b.spec_json, '$.env_passthrough') "
    "FROM runs r JOIN batches b ON b.id = r.batch_id "
    "JOIN commits c ON c.id = b.commit_id JOIN repos ON repos.id = c.repo_id WHERE r.id = ?";

Result<LeasedRun> Store::ReadLeasedRun(sql::Stmt& info, std::int64_t id, TimeMs expires_ms) {
  info.Bind(1, id);
  ASSIGN_OR_RETURN(bool row, info.Step());
  if (!row) return Fail(ErrorKind::kInternal, "leased run vanished");
  LeasedRun l;
  l.run_id = id;
  l.batch_id = info.Int(0);
  l.token = info.Int(1);
  l.seed = info.Int(2);
  l.repeat = static_cast<int>(info.Int(3));
  l.attempt = static_cast<int>(info.Int(4));
  l.expires_ms = expires_ms;
  l.experiment = info.Text(5);
  l.command = info.Text(6);
  l.metric_name = info.Text(7);
  l.metric_regex = info.Text(8);
  l.repo_url = info.Text(9);
  l.sha = info.Text(10);
  l.timeout_s = info.Int(11);
  l.gpus = static_cast<int>(info.Int(12));
  l.trainer = info.Text(13);
  l.nodes = static_cast<int>(info.Int(14));
  l.procs_per_node = static_cast<int>(info.Int(15));
  if (!info.IsNull(16)) {
    // Written by agent/repo (Experiment::ToBatchSpec) as a list of strings.
    auto list = nlohmann::json::parse(info.Text(16), nullptr, false);
    std::vector<std::string> names;
    if (list.is_array()) {
      for (const auto& n : list) {
        if (n.is_string()) names.push_back(n.get<std::string>());
      }
    }
    l.env_passthrough = std::move(names);
  }
  info.Reset();
  return l;
}

Status Store::CheckLease(std::int64_t run_id, std::int64_t token, std::string_view action) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT state, lease_token FROM runs WHERE id = ?"));
  s.Bind(1, run_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) {
    return Fail(ErrorKind::kNotFound, "run " + std::to_string(run_id) + " does not exist");
  }
  auto state = StateOf(s.Text(0));
  std::int64_t current = s.Int(1);
  if (current != token) {
    // The current token is never shown: it is what proves a lease.
    return Fail(ErrorKind::kConflict,
                std::string(action) + " run " + std::to_string(run_id) + ": lease token " +
                    std::to_string(token) +
                    " is not the run's current lease (stale: the run was leased again; or never "
                    "issued)");
  }
  if (state != RunState::kLeased && state != RunState::kRunning) {
    return Fail(ErrorKind::kConflict, std::string(action) + " run " + std::to_string(run_id) +
                                          ": the run is " + std::string(RunStateName(state)) +
                                          ", not leased");
  }
  return {};
}

Status Store::MarkRunning(std::int64_t run_id, std::int64_t token, TimeMs now,
                          const std::string& log_path) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    TRY(CheckLease(run_id, token, "start"));
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = 'running', started_ms = ?, "
                                         "log_path = ?, updated_ms = ? WHERE id = ?"));
    return u.Bind(1, now).Bind(2, log_path).Bind(3, now).Bind(4, run_id).Run();
  });
}

Result<TimeMs> Store::Heartbeat(std::int64_t run_id, std::int64_t token, TimeMs now,
                                TimeMs lease_ms) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<TimeMs> {
    TRY(CheckLease(run_id, token, "heartbeat"));
    // A worker heard from again: a later expiry is its own (no refund).
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET lease_expires_ms = ?, updated_ms = ?, "
                                         "last_error = CASE WHEN last_error LIKE "
                                         "'lease renewed: %' THEN '' ELSE last_error END "
                                         "WHERE id = ?"));
    TRY(u.Bind(1, now + lease_ms).Bind(2, now).Bind(3, run_id).Run());
    return now + lease_ms;
  });
}

Status Store::AddMetrics(std::int64_t run_id, std::int64_t token,
                         const std::vector<MetricPoint>& points, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    TRY(CheckLease(run_id, token, "metrics for"));
    ASSIGN_OR_RETURN(auto ins, db_.Prepare("INSERT INTO metrics (run_id, name, step, value, final, "
                                           "recorded_ms) VALUES (?, ?, ?, ?, ?, ?)"));
    for (const auto& p : points) {
      TRY(ins.Bind(1, run_id)
              .Bind(2, p.name)
              .Bind(3, p.step)
              .Bind(4, p.value)
              .Bind(5, p.final ? 1 : 0)
              .Bind(6, now)
              .Run());
    }
    return {};
  });
}

namespace {
// last_error of a run whose lease GraceLeases renewed: its expiry is refunded.
constexpr std::string_view kGraceMarker = "lease renewed: ";
constexpr std::string_view kExpiredMarker = "lease expired: ";
}  // namespace

Status Store::Complete(std::int64_t run_id, std::int64_t token, TimeMs now, double metric_value,
                       int exit_code) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    // A run put back in the queue with its attempt given back (interrupted,
    // its machine lost or gone from the provider's list) that succeeds after
    // all: the attempt did run, so it counts again.
    int attempt_back = 0;
    if (auto st = CheckLease(run_id, token, "complete"); !st) {
      if (st.error().kind != ErrorKind::kConflict) return st;
      ASSIGN_OR_RETURN(auto q, db_.Prepare("SELECT state, lease_token, last_error FROM runs "
                                           "WHERE id = ?"));
      q.Bind(1, run_id);
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) return st;
      auto state = StateOf(q.Text(0));
      bool same_lease = q.Int(1) == token;
      std::string last_error = q.Text(2);
      // Also a run returned from a lost machine (its worker came back).
      bool expired = last_error.starts_with(kExpiredMarker) ||
                     last_error.starts_with("interrupted: " + std::string(kExpiredMarker)) ||
                     last_error.starts_with("interrupted: machine lost: ");
      // The lease expired (the worker stalled, the server was away), nobody
      // else holds the run: the command's success stands.
      if (!(same_lease && expired &&
            (state == RunState::kFailed || state == RunState::kDead ||
             state == RunState::kQueued))) {
        Error e = st.error();
        if (state == RunState::kSucceeded) {
          e.message += "; another holder already completed it: this result is not counted";
        }
        return std::unexpected(e);
      }
      if (state == RunState::kQueued && last_error.starts_with("interrupted: ")) attempt_back = 1;
    }
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = 'succeeded', finished_ms = ?, "
                                         "metric_value = ?, exit_code = ?, last_error = '', "
                                         "attempts = attempts + ?, "
                                         "lease_expires_ms = NULL, updated_ms = ? WHERE id = ?"));
    return u.Bind(1, now)
        .Bind(2, metric_value)
        .Bind(3, exit_code)
        .Bind(4, attempt_back)
        .Bind(5, now)
        .Bind(6, run_id)
        .Run();
  });
}

Result<RunState> Store::FailRun(std::int64_t run_id, std::int64_t token, TimeMs now,
                                const std::string& error, std::optional<int> exit_code,
                                bool retry) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<RunState> {
    TRY(CheckLease(run_id, token, "fail"));
    ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT r.attempts, b.max_attempts FROM runs r "
                                         "JOIN batches b ON b.id = r.batch_id WHERE r.id = ?"));
    s.Bind(1, run_id);
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return Fail(ErrorKind::kNotFound, "run vanished");
    int attempts = static_cast<int>(s.Int(0));
    int max_attempts = static_cast<int>(s.Int(1));
    RunState next = !retry || attempts >= max_attempts ? RunState::kDead : RunState::kFailed;
    TimeMs not_before = next == RunState::kFailed ? now + BackoffMs(attempts) : 0;
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = ?, finished_ms = ?, "
                                         "not_before_ms = ?, last_error = ?, exit_code = ?, "
                                         "lease_expires_ms = NULL, updated_ms = ? WHERE id = ?"));
    TRY(u.Bind(1, RunStateName(next))
            .Bind(2, now)
            .Bind(3, not_before)
            .Bind(4, error)
            .Bind(5, exit_code)
            .Bind(6, now)
            .Bind(7, run_id)
            .Run());
    return next;
  });
}

Status Store::Interrupt(std::int64_t run_id, std::int64_t token, TimeMs now,
                        const std::string& reason) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    TRY(CheckLease(run_id, token, "interrupt"));
    ASSIGN_OR_RETURN(auto u,
                     db_.Prepare("UPDATE runs SET state = 'queued', attempts = attempts - 1, "
                                 "interruptions = interruptions + 1, not_before_ms = 0, "
                                 "last_error = ?, lease_expires_ms = NULL, started_ms = NULL, "
                                 "worker = '', updated_ms = ? WHERE id = ?"));
    return u.Bind(1, "interrupted: " + reason).Bind(2, now).Bind(3, run_id).Run();
  });
}

Result<int> Store::ExpireLeases(TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT r.id, r.attempts, b.max_attempts, r.worker, "
                                         "r.last_error "
                                         "FROM runs r JOIN batches b ON b.id = r.batch_id "
                                         "WHERE r.state IN ('leased', 'running') "
                                         "AND r.lease_expires_ms < ?"));
    s.Bind(1, now);
    struct Expired {
      std::int64_t id;
      int attempts, max_attempts;
      std::string worker;
      bool graced;  // the coordinator caused it: no attempt used
    };
    std::vector<Expired> expired;
    while (true) {
      ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      expired.push_back({s.Int(0), static_cast<int>(s.Int(1)), static_cast<int>(s.Int(2)),
                         s.Text(3), s.Text(4).starts_with(kGraceMarker)});
    }
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = ?, not_before_ms = ?, "
                                         "last_error = ?, lease_expires_ms = NULL, "
                                         "finished_ms = ?, updated_ms = ? WHERE id = ?"));
    ASSIGN_OR_RETURN(auto refund,
                     db_.Prepare("UPDATE runs SET state = 'queued', attempts = attempts - 1, "
                                 "interruptions = interruptions + 1, not_before_ms = 0, "
                                 "last_error = ?, lease_expires_ms = NULL, started_ms = NULL, "
                                 "worker = '', updated_ms = ? WHERE id = ?"));
    for (const auto& e : expired) {
      if (e.graced) {
        TRY(refund
                .Bind(1, "interrupted: " + std::string(kExpiredMarker) + "worker '" + e.worker +
                             "' did not come back after trainq serve was away (no attempt used)")
                .Bind(2, now)
                .Bind(3, e.id)
                .Run());
        continue;
      }
      bool dead = e.attempts >= e.max_attempts;
      TRY(u.Bind(1, dead ? "dead" : "failed")
              .Bind(2, dead ? 0 : now + BackoffMs(e.attempts))
              .Bind(3, "lease expired: worker '" + e.worker + "' stopped sending heartbeats")
              .Bind(4, now)
              .Bind(5, now)
              .Bind(6, e.id)
              .Run());
    }
    return static_cast<int>(expired.size());
  });
}

Result<int> Store::GraceLeases(TimeMs expired_before, TimeMs now, TimeMs lease_ms,
                               const std::string& reason) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET lease_expires_ms = ?, last_error = ?, "
                                         "updated_ms = ? WHERE state IN ('leased', 'running') "
                                         "AND lease_expires_ms < ?"));
    TRY(u.Bind(1, now + lease_ms)
            .Bind(2, std::string(kGraceMarker) + reason)
            .Bind(3, now)
            .Bind(4, expired_before)
            .Run());
    return db_.Changes();
  });
}

Result<int> Store::CancelBatch(std::int64_t batch_id, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT 1 FROM batches WHERE id = ?"));
    s.Bind(1, batch_id);
    ASSIGN_OR_RETURN(bool exists, s.Step());
    if (!exists) {
      return Fail(ErrorKind::kNotFound, "batch " + std::to_string(batch_id) + " does not exist");
    }
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = 'cancelled', finished_ms = ?, "
                                         "lease_expires_ms = NULL, updated_ms = ? WHERE "
                                         "batch_id = ? AND state IN ('queued', 'leased', "
                                         "'running', 'failed')"));
    TRY(u.Bind(1, now).Bind(2, now).Bind(3, batch_id).Run());
    return db_.Changes();
  });
}

Result<int> Store::CancelRun(std::int64_t run_id, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT state FROM runs WHERE id = ?"));
    s.Bind(1, run_id);
    ASSIGN_OR_RETURN(bool exists, s.Step());
    if (!exists) {
      return Fail(ErrorKind::kNotFound, "run " + std::to_string(run_id) + " does not exist");
    }
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = 'cancelled', finished_ms = ?, "
                                         "lease_expires_ms = NULL, updated_ms = ? WHERE id = ? "
                                         "AND state IN ('queued', 'leased', 'running', 'failed')"));
    TRY(u.Bind(1, now).Bind(2, now).Bind(3, run_id).Run());
    return db_.Changes();
  });
}

Result<std::array<std::int64_t, kRunStateCount>> Store::CountByState() {
  std::array<std::int64_t, kRunStateCount> counts{};
  // Kept by triggers on runs (schema 12): a row per state, not a row per run.
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT state, n FROM run_counts"));
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    if (auto st = ParseRunState(s.Text(0))) counts[static_cast<int>(*st)] = s.Int(1);
  }
  return counts;
}

namespace {

const char* kBatchSelect =
    "SELECT b.id, repos.name, c.sha, c.parent_sha, c.subject, b.experiment, b.metric_name, "
    "b.metric_goal, b.reason, b.repeats, b.created_ms, b.spec_json, repos.url, c.committed_ms, "
    "b.base_sha, b.baseline_batch_id, b.baseline_note, "
    "(SELECT min(seed) FROM runs WHERE runs.batch_id = coalesce(b.reuses_batch_id, b.id)), "
    "b.reuses_batch_id, (SELECT rc.sha FROM batches rb JOIN commits rc ON rc.id = rb.commit_id "
    "WHERE rb.id = b.reuses_batch_id) "
    "FROM batches b JOIN commits c ON c.id = b.commit_id JOIN repos ON repos.id = c.repo_id ";

}  // namespace

Result<std::vector<BatchProgress>> Store::Batches(bool only_active, int limit) {
  std::string where;
  if (only_active) {
    // batch_counts has rows only for counts above 0: the active batches are
    // found through its state index, without visiting finished batches. A
    // batch that reuses another has no runs of its own: the one it reuses is
    // the active one.
    where = "WHERE b.id IN (SELECT batch_id FROM batch_counts WHERE state IN "
            "('queued', 'leased', 'running', 'failed')) ";
  }
  return SelectBatches(where, {}, limit);
}

Result<std::int64_t> Store::CountActiveBatches() {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT count(DISTINCT batch_id) FROM batch_counts WHERE "
                                       "state IN ('queued', 'leased', 'running', 'failed')"));
  ASSIGN_OR_RETURN(bool row, s.Step());
  return row ? s.Int(0) : 0;
}

Result<std::optional<BatchProgress>> Store::Batch(std::int64_t batch_id) {
  ASSIGN_OR_RETURN(auto found, SelectBatches("WHERE b.id = ?1 ", {std::to_string(batch_id)}, 0));
  if (found.empty()) return std::optional<BatchProgress>();
  return std::optional<BatchProgress>(std::move(found.front()));
}

Result<std::vector<BatchProgress>> Store::BatchesForCommit(const std::string& sha_prefix) {
  // A prefix of hex digits only: it goes into a LIKE pattern.
  for (char ch : sha_prefix) {
    if (!std::isxdigit(static_cast<unsigned char>(ch))) {
      return Fail(ErrorKind::kInvalidArgument, "'" + sha_prefix + "' is not a commit id");
    }
  }
  if (sha_prefix.size() < 4) {
    return Fail(ErrorKind::kInvalidArgument,
                "commit id '" + sha_prefix + "' is too short (give at least 4 hex digits)");
  }
  // A range on commits_by_sha (a LIKE would visit every commit).
  std::string lower;
  for (char ch : sha_prefix) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return SelectBatches("WHERE c.sha >= ?1 AND c.sha < ?2 ", {lower, lower + "g"}, 0);
}

Result<std::vector<BatchProgress>> Store::BatchesSince(TimeMs since) {
  return SelectBatches("WHERE b.created_ms >= ?1 ", {std::to_string(since)}, 0);
}

Result<std::vector<BatchProgress>> Store::BatchesOfExperiment(const std::string& experiment,
                                                               int limit) {
  return SelectBatches("WHERE b.experiment = ?1 ", {experiment}, limit);
}

Result<std::vector<BatchProgress>> Store::SelectBatches(const std::string& where,
                                                        const std::vector<std::string>& args,
                                                        int limit) {
  std::string q = kBatchSelect + where + "ORDER BY b.id DESC";
  if (limit > 0) q += " LIMIT " + std::to_string(limit);
  ASSIGN_OR_RETURN(auto s, db_.Prepare(q));
  for (size_t i = 0; i < args.size(); ++i) s.Bind(static_cast<int>(i + 1), args[i]);
  std::vector<BatchProgress> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    BatchProgress b;
    b.id = s.Int(0);
    b.repo = s.Text(1);
    b.sha = s.Text(2);
    b.parent_sha = s.Text(3);
    b.subject = s.Text(4);
    b.experiment = s.Text(5);
    b.metric_name = s.Text(6);
    b.metric_goal = s.Text(7);
    b.reason = s.Text(8);
    b.repeats = static_cast<int>(s.Int(9));
    b.created_ms = s.Int(10);
    b.spec_json = s.Text(11);
    b.repo_url = s.Text(12);
    b.committed_ms = s.Int(13);
    b.base_sha = s.Text(14);
    if (!s.IsNull(15)) b.baseline_batch_id = s.Int(15);
    b.baseline_note = s.Text(16);
    b.seed_start = s.IsNull(17) ? 1 : s.Int(17);
    if (!s.IsNull(18)) b.reuses_batch_id = s.Int(18);
    b.reused_from_sha = s.Text(19);
    out.push_back(std::move(b));
  }
  if (out.empty()) return out;
  ASSIGN_OR_RETURN(auto counts, db_.Prepare("SELECT state, n FROM batch_counts WHERE batch_id = ?"));
  ASSIGN_OR_RETURN(auto values, db_.Prepare("SELECT metric_value, seed FROM runs WHERE "
                                            "batch_id = ? AND state = 'succeeded' AND "
                                            "metric_value IS NOT NULL ORDER BY repeat"));
  for (auto& b : out) {
    // A batch that reuses another has that batch's runs as its own.
    std::int64_t runs_of = b.reuses_batch_id.value_or(b.id);
    counts.Bind(1, runs_of);
    while (true) {
      ASSIGN_OR_RETURN(bool row, counts.Step());
      if (!row) break;
      if (auto st = ParseRunState(counts.Text(0))) b.counts[static_cast<int>(*st)] = counts.Int(1);
    }
    counts.Reset();
    values.Bind(1, runs_of);
    while (true) {
      ASSIGN_OR_RETURN(bool row, values.Step());
      if (!row) break;
      b.values.push_back(values.Double(0));
      b.seeds.push_back(values.Int(1));
    }
    values.Reset();
  }
  return out;
}

Status Store::SetBaseline(std::int64_t batch_id, const std::string& base_sha,
                         std::optional<std::int64_t> baseline_batch_id, const std::string& note) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE batches SET base_sha = ?, baseline_batch_id = ?, "
                                         "baseline_note = ? WHERE id = ?"));
    u.Bind(1, base_sha);
    if (baseline_batch_id) {
      u.Bind(2, *baseline_batch_id);
    } else {
      u.BindNull(2);
    }
    return u.Bind(3, note).Bind(4, batch_id).Run();
  });
}

Result<std::vector<RunRow>> Store::Runs(std::optional<std::int64_t> batch_id,
                                        std::optional<RunState> state, int limit) {
  std::string q = std::string("SELECT ") + kRunColumns +
                  " FROM runs r JOIN batches b ON b.id = r.batch_id "
                  "JOIN commits c ON c.id = b.commit_id WHERE 1 = 1";
  // A batch that reuses another lists that batch's runs.
  if (batch_id) {
    q += " AND r.batch_id = coalesce((SELECT reuses_batch_id FROM batches WHERE id = ?1), ?1)";
  }
  if (state) q += " AND r.state = ?2";
  // A limit keeps the newest runs, listed oldest first.
  if (limit > 0) {
    q += " ORDER BY r.id DESC LIMIT " + std::to_string(limit);
    q = "SELECT * FROM (" + q + ") ORDER BY 1";
  } else {
    q += " ORDER BY r.id";
  }
  ASSIGN_OR_RETURN(auto s, db_.Prepare(q));
  if (batch_id) s.Bind(1, *batch_id);
  if (state) s.Bind(2, RunStateName(*state));
  std::vector<RunRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadRunRow(s));
  }
  return out;
}

Result<std::vector<TimeMs>> Store::RecentRunDurations(std::int64_t batch_id, int limit) {
  // recent_durations keeps the newest 50 per (repository, experiment),
  // written by a trigger when a run succeeds (schema 12).
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT d.duration_ms FROM batches me "
                                       "JOIN commits mc ON mc.id = me.commit_id "
                                       "JOIN recent_durations d ON d.repo_id = mc.repo_id "
                                       "AND d.experiment = me.experiment "
                                       "WHERE me.id = ?1 "
                                       "ORDER BY d.finished_ms DESC, d.run_id DESC LIMIT ?2"));
  s.Bind(1, batch_id).Bind(2, static_cast<std::int64_t>(limit));
  std::vector<TimeMs> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(std::max<TimeMs>(0, s.Int(0)));
  }
  return out;
}

Result<std::vector<RunRow>> Store::RunsFinishedAfter(TimeMs finished_ms, std::int64_t run_id,
                                                     int limit) {
  std::string q = std::string("SELECT ") + kRunColumns +
                  " FROM runs r JOIN batches b ON b.id = r.batch_id "
                  "JOIN commits c ON c.id = b.commit_id "
                  "WHERE r.state IN ('succeeded', 'failed', 'dead', 'cancelled') AND "
                  "r.finished_ms IS NOT NULL "
                  "AND (r.finished_ms > ?1 OR (r.finished_ms = ?1 AND r.id > ?2)) "
                  "ORDER BY r.finished_ms, r.id LIMIT ?3";
  ASSIGN_OR_RETURN(auto s, db_.Prepare(q));
  s.Bind(1, finished_ms);
  s.Bind(2, run_id);
  s.Bind(3, static_cast<std::int64_t>(limit));
  std::vector<RunRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadRunRow(s));
  }
  return out;
}

Result<std::optional<RunRow>> Store::Run(std::int64_t run_id) {
  std::string q = std::string("SELECT ") + kRunColumns +
                  " FROM runs r JOIN batches b ON b.id = r.batch_id "
                  "JOIN commits c ON c.id = b.commit_id WHERE r.id = ?";
  ASSIGN_OR_RETURN(auto s, db_.Prepare(q));
  s.Bind(1, run_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<RunRow>();
  return std::optional<RunRow>(ReadRunRow(s));
}

Result<std::int64_t> Store::MetricCount(std::int64_t run_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT count(*) FROM metrics WHERE run_id = ?"));
  s.Bind(1, run_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  return row ? s.Int(0) : 0;
}

Result<std::vector<MetricPoint>> Store::Metrics(std::int64_t run_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT name, value, step, final FROM metrics "
                                       "WHERE run_id = ? ORDER BY rowid"));
  s.Bind(1, run_id);
  std::vector<MetricPoint> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(MetricPoint{s.Text(0), s.Double(1), s.OptInt(2), s.Int(3) != 0});
  }
  return out;
}

Result<bool> Store::RecordDelivery(const DeliveryRow& d, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<bool> {
    ASSIGN_OR_RETURN(auto u,
                     db_.Prepare("INSERT INTO deliveries (forge, delivery_id, event, repo_url, ref, "
                                 "before_sha, after_sha, received_ms) VALUES (?, ?, ?, ?, ?, ?, ?, "
                                 "?) ON CONFLICT (forge, delivery_id) DO NOTHING"));
    TRY(u.Bind(1, d.forge)
            .Bind(2, d.delivery_id)
            .Bind(3, d.event)
            .Bind(4, d.repo_url)
            .Bind(5, d.ref)
            .Bind(6, d.before_sha)
            .Bind(7, d.after_sha)
            .Bind(8, now)
            .Run());
    return db_.Changes() > 0;
  });
}

}  // namespace trainq
