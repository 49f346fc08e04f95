// `trainq mlflow export --since` through the real binary against the fake
// MLflow tracking server (tests/support/fake_mlflow.py): history back-filled
// once (a second export writes nothing), a down server is an error that
// leaves the batches pending, and the token never shows.
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/strings.h"
#include "queue/outbox.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/fake_mlflow.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

struct Out {
  int code = 0;
  std::string text;
};

Out Trainq(const std::string& args) {
  Out o;
  o.code = testing::RunShell(ShellQuote(TRAINQ_BINARY) + " " + args + " 2>&1", &o.text);
  return o;
}

TEST_CASE("trainq mlflow export back-fills finished batches once", "[mlflow]") {
  testing::TempDir tmp;
  auto fake = testing::FakeMlflow::Start(tmp / "mlflow", "tok-123-secret");
  REQUIRE(fake);
  const std::string db = tmp / "q.db";
  {
    SystemClock clock;
    auto store = Store::Open(db).value();
    BatchSpec spec;
    spec.experiment = "lstm";
    spec.command = "true";
    spec.repeats = 3;
    spec.max_attempts = 1;
    REQUIRE(store.runs().Submit("/srv/model", {std::string(40, 'a'), "", "s", "me", 0}, {spec},
                                clock.Now()));
    auto leased = store.runs().Lease("w", clock.Now(), 60'000, 10).value();
    REQUIRE(leased.size() == 3);
    for (const auto& l : leased) {
      auto done = store.runs().Complete(l.run_id, l.token, clock.Now(), 0.9 + 0.01 * l.seed);
      INFO((done ? "" : done.error().message));
      REQUIRE(done);
    }
  }
  REQUIRE(WriteFile(tmp / "token", "tok-123-secret\n"));
  REQUIRE(WriteFile(tmp / "server.yaml", "mlflow:\n  tracking_uri: " + (*fake)->url() +
                                             "\n  token: {file: " + (tmp / "token") + "}\n"));
  const std::string args = "--db " + ShellQuote(db) + " mlflow export --since 30d --config " +
                           ShellQuote(tmp / "server.yaml");
  auto first = Trainq(args);
  INFO(first.text);
  CHECK(first.code == 0);
  CHECK(first.text.find("exported 1 now; in all 1 exported, 0 pending, 0 given up") !=
        std::string::npos);
  auto again = Trainq(args);
  CHECK(again.code == 0);
  CHECK(again.text.find("queued 0 finished batch(es)") != std::string::npos);
  auto state = (*fake)->State().value();
  CHECK(state["runs"].size() == 4);  // the parent and three seeds
  CHECK(state["calls"]["runs/create"] == 4);

  // A server that is down: an error, the batch left pending, no token shown.
  REQUIRE(WriteFile(tmp / "down.yaml", "mlflow:\n  tracking_uri: http://127.0.0.1:9\n  token: {file: " +
                                           (tmp / "token") + "}\n  experiment_prefix: other/\n"));
  auto fresh = Store::Open(db).value();
  REQUIRE(fresh.outbox().Enqueue("mlflow:export", "batch:99", "batch", "x", R"({"batch_id": 1})",
                                 SystemClock().Now()));
  auto down = Trainq("--db " + ShellQuote(db) + " mlflow export --config " +
                     ShellQuote(tmp / "down.yaml"));
  CHECK(down.code == 1);
  CHECK(down.text.find("1 batch(es) not exported yet") != std::string::npos);
  CHECK(down.text.find("tok-123-secret") == std::string::npos);
}

}  // namespace
}  // namespace trainq
