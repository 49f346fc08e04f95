// Store benchmark: lease + complete cycles per second with 100,000 queued runs
// and synchronous=FULL, and the time `trainq status` takes on that store.
//
// Figures go in notes and docs, never into pass/fail tests. Each figure is
// printed next to a reference measured in the same run (an empty write
// transaction with the same durability settings), since this machine is shared.
//
//   bench_store [--runs 100000] [--cycles 5000] [--dir /tmp] [--db postgres://USER@HOST/DB]
// --db: a postgres:// URL of an empty database in place of a new SQLite file
// (bench/README.md, "PostgreSQL and SQLite"); the reference is then an empty
// write transaction on that server with its own durability settings.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "agent/cli/cli.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"

using namespace trainq;
using Steady = std::chrono::steady_clock;

namespace {

double Seconds(Steady::time_point a, Steady::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void Die(const Error& e) {
  std::fprintf(stderr, "bench_store: %s\n", e.message.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 100'000, cycles = 5'000;
  std::string url;
  std::string base = std::filesystem::temp_directory_path().string();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--runs") runs = std::atoi(argv[i + 1]);
    if (a == "--cycles") cycles = std::atoi(argv[i + 1]);
    if (a == "--dir") base = argv[i + 1];
    if (a == "--db") url = argv[i + 1];
  }
  std::string dir = base + "/trainq-bench-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::string path = url.empty() ? dir + "/bench.db" : url;
  const bool pg = !url.empty();
  auto store = Store::Open(path);
  if (!store) Die(store.error());

  // Fill: 100 runs per batch, one batch per (commit, experiment).
  TimeMs now = 1'700'000'000'000;
  auto t0 = Steady::now();
  int per_batch = 100;
  for (int b = 0; b * per_batch < runs; ++b) {
    CommitInfo c;
    char sha[41];
    std::snprintf(sha, sizeof sha, "%040d", b / 10);
    c.sha = sha;
    BatchSpec s;
    s.experiment = "exp" + std::to_string(b % 10);
    s.command = "true";
    s.repeats = per_batch;
    if (auto r = store->runs().Submit("/bench/repo", c, {s}, now); !r) Die(r.error());
  }
  auto t1 = Steady::now();
  std::printf("fill: %d queued runs in %.2f s\n", runs, Seconds(t0, t1));

  // Reference: empty write transactions with the same durability (WAL, FULL).
  {
    auto db = sql::Db::Open(path, false, 5000);
    if (!db) Die(db.error());
    if (auto st = db->Exec(pg ? "CREATE TABLE IF NOT EXISTS ref (x BIGINT)"
                              : "PRAGMA synchronous=FULL; CREATE TABLE IF NOT EXISTS ref (x)");
        !st) {
      Die(st.error());
    }
    int n = cycles * 2;
    auto r0 = Steady::now();
    for (int i = 0; i < n; ++i) {
      if (auto st = db->Exec(pg ? "BEGIN; INSERT INTO ref VALUES (1); COMMIT"
                                : "BEGIN IMMEDIATE; INSERT INTO ref VALUES (1); COMMIT");
          !st) {
        Die(st.error());
      }
    }
    auto r1 = Steady::now();
    std::printf("reference: %d single-row write transactions, %.0f commits/s\n", n,
                n / Seconds(r0, r1));
  }

  // Lease + complete, one run at a time (the worst case: two commits per run).
  auto c0 = Steady::now();
  for (int i = 0; i < cycles; ++i) {
    auto l = store->runs().Lease("bench", now, 60'000, 1);
    if (!l) Die(l.error());
    if (l->empty()) break;
    auto& run = l->front();
    if (auto st = store->runs().Complete(run.run_id, run.token, now, 0.5); !st) Die(st.error());
  }
  auto c1 = Steady::now();
  double rate = cycles / Seconds(c0, c1);
  std::printf("lease+complete: %d cycles, %.0f cycles/s (%.2f ms per cycle, 2 commits each)\n",
              cycles, rate, 1000.0 / rate);

  // Lease 8 at a time, as an executor with 8 free slots does.
  auto d0 = Steady::now();
  int done = 0;
  while (done < cycles) {
    auto l = store->runs().Lease("bench", now, 60'000, 8);
    if (!l) Die(l.error());
    if (l->empty()) break;
    for (auto& run : *l) {
      if (auto st = store->runs().Complete(run.run_id, run.token, now, 0.5); !st) Die(st.error());
      ++done;
    }
  }
  auto d1 = Steady::now();
  std::printf("lease(8)+complete: %d runs, %.0f runs/s\n", done, done / Seconds(d0, d1));

  // trainq status on this store (in process; the CLI adds process start-up).
  for (bool json : {false, true}) {
    StatusOptions so;
    so.db = path;
    so.json = json;
    std::ostringstream sink;
    const auto& clock = SystemClock::Get();
    auto s0 = Steady::now();
    int reps = 5;
    for (int i = 0; i < reps; ++i) {
      sink.str("");
      if (auto st = CmdStatus(so, clock, sink); !st) Die(st.error());
    }
    auto s1 = Steady::now();
    std::printf("status%s: %.1f ms with %d runs in the store\n", json ? " --json" : "",
                1000 * Seconds(s0, s1) / reps, runs);
  }
  std::printf("store: %s\n", sql::RedactUrl(path).c_str());
  if (!std::getenv("TRAINQ_BENCH_KEEP")) std::filesystem::remove_all(dir);
  return 0;
}
