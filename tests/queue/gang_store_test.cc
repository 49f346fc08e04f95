// The gangs section of the Store: a run over several machines is leased to
// all of them in one transaction or not at all, its members are delivered on
// their machines' next polls, one silent member fails the whole run, and the
// run completes with node 0's metric once every member is done.
#include <catch2/catch.hpp>
#include <map>

#include "core/clock.h"
#include "queue/gangs.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using namespace trainq;

namespace {

constexpr TimeMs kT0 = 1'700'000'000'000;
constexpr TimeMs kLease = 60'000;

BatchSpec GangSpec(const std::string& name, int repeats, int nodes, int procs) {
  BatchSpec b;
  b.experiment = name;
  b.command = "python3 ddp.py";
  b.repeats = repeats;
  b.timeout_s = 60;
  b.max_attempts = 3;
  b.spec_json = R"({"resources": {"gpus": 0, "nodes": )" + std::to_string(nodes) +
                R"(, "processes_per_node": )" + std::to_string(procs) + "}}";
  return b;
}

BatchSpec PlainSpec(const std::string& name, int repeats) {
  BatchSpec b;
  b.experiment = name;
  b.command = "python3 train.py";
  b.repeats = repeats;
  b.timeout_s = 60;
  return b;
}

struct Fixture {
  testing::TempDir dir;
  Store store = Store::Open(testing::StoreLocation(dir, "trainq.db")).value();
  FakeClock clock{kT0};

  void Submit(const std::vector<BatchSpec>& specs) {
    CommitInfo c;
    c.sha = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    c.committed_ms = kT0;
    REQUIRE(store.runs().Submit("/repos/demo", c, specs, clock.Now()));
  }
  std::int64_t Register(const std::string& name, const std::string& pool = "local") {
    Machines::WorkerRegistration r;
    r.pool = pool;
    r.name = name;
    r.hostname = "host";
    r.pid = 1;
    r.slots = 1;
    auto m = store.machines().RegisterWorker(r, clock.Now());
    REQUIRE(m);
    return m->id;
  }
  std::vector<LeasedRun> Lease(std::int64_t machine) {
    Machines::LeaseLimits l;
    l.max_runs = 1;
    auto r = store.machines().LeaseForMachine(machine, l, clock.Now(), kLease);
    REQUIRE(r);
    return *r;
  }
  // Every live run's member count: each must be its gang's full size.
  void CheckNoPartialGang(int nodes) {
    auto live = store.gangs().LiveGangMembers();
    REQUIRE(live);
    std::map<std::int64_t, int> per_run;
    for (const auto& g : *live) ++per_run[g.run_id];
    for (const auto& [run, count] : per_run) {
      INFO("run " << run);
      CHECK(count == nodes);
    }
  }
};

}  // namespace

TEST_CASE("A gang is leased to all its machines at once or not at all", "[gang]") {
  Fixture f;
  f.Submit({GangSpec("ddp", 1, 3, 2)});
  auto a = f.Register("a");
  auto b = f.Register("b");
  // Two idle machines for a gang of three: nothing is leased, nothing held.
  CHECK(f.Lease(a).empty());
  CHECK(f.Lease(b).empty());
  auto live = f.store.gangs().LiveGangMembers();
  REQUIRE(live);
  CHECK(live->empty());
  auto queued = f.store.runs().Runs(std::nullopt, RunState::kQueued, 0);
  REQUIRE(queued);
  CHECK(queued->size() == 1);

  // The third machine makes it: one poll leases all three.
  auto c = f.Register("c");
  auto leased = f.Lease(c);
  REQUIRE(leased.size() == 1);
  CHECK(leased[0].nodes == 3);
  CHECK(leased[0].procs_per_node == 2);
  CHECK(leased[0].node_rank == 0);
  auto members = f.store.gangs().GangMembers(leased[0].run_id);
  REQUIRE(members);
  REQUIRE(members->size() == 3);
  CHECK((*members)[0].machine_id == c);  // the asking machine is node 0
  CHECK((*members)[1].machine_id == a);
  CHECK((*members)[2].machine_id == b);
  f.CheckNoPartialGang(3);
  // The partners get their member on their next poll, once.
  auto la = f.Lease(a);
  REQUIRE(la.size() == 1);
  CHECK(la[0].run_id == leased[0].run_id);
  CHECK(la[0].node_rank == 1);
  CHECK(la[0].token == leased[0].token);
  CHECK(f.Lease(a).empty());
  auto lb = f.Lease(b);
  REQUIRE(lb.size() == 1);
  CHECK(lb[0].node_rank == 2);
  // Their machines count the member as a live lease (drain contract, autoscaler).
  auto ma = f.store.machines().Machine(a);
  REQUIRE(ma);
  CHECK((*ma)->live_leases == 1);
}

TEST_CASE("A machine in a gang leases nothing else, and a busy machine joins no gang", "[gang]") {
  Fixture f;
  f.Submit({PlainSpec("plain", 1), GangSpec("ddp", 1, 2, 1), PlainSpec("later", 2)});
  auto a = f.Register("a");
  auto b = f.Register("b");
  auto c = f.Register("c");
  // a takes the plain run (the oldest): only b and c are idle.
  auto la = f.Lease(a);
  REQUIRE(la.size() == 1);
  CHECK(la[0].nodes == 0);
  auto lb = f.Lease(b);
  REQUIRE(lb.size() == 1);
  CHECK(lb[0].nodes == 2);
  auto members = f.store.gangs().GangMembers(lb[0].run_id);
  REQUIRE(members);
  REQUIRE(members->size() == 2);
  CHECK((*members)[1].machine_id == c);
  // c is in the gang: its poll delivers the member and nothing of "later".
  auto lc = f.Lease(c);
  REQUIRE(lc.size() == 1);
  CHECK(lc[0].run_id == lb[0].run_id);
  CHECK(f.Lease(c).empty());
}

TEST_CASE("Two gangs competing for too few machines run one after the other", "[gang]") {
  Fixture f;
  f.Submit({GangSpec("first", 1, 2, 1), GangSpec("second", 1, 2, 1)});
  auto a = f.Register("a");
  auto b = f.Register("b");
  auto c = f.Register("c");
  // Three machines, two gangs of two: whichever machine polls first, exactly
  // one gang forms and the third machine holds nothing.
  auto lc = f.Lease(c);
  REQUIRE(lc.size() == 1);
  f.CheckNoPartialGang(2);
  CHECK(f.Lease(a).size() == 1);  // a is c's partner (lowest id)
  CHECK(f.Lease(b).empty());
  f.CheckNoPartialGang(2);
  auto live = f.store.gangs().LiveGangMembers();
  REQUIRE(live);
  CHECK(live->size() == 2);

  // The first gang finishes: node 1 first, then node 0 with the metric.
  const auto run = lc[0];
  REQUIRE(f.store.gangs().GangBeat(run.run_id, run.token, 0, c, f.clock.Now(), kLease, true, "10.0.0.3",
                           29500));
  auto done1 = f.store.gangs().GangMemberSucceeded(run.run_id, run.token, 1, a, f.clock.Now(), {});
  REQUIRE(done1);
  CHECK_FALSE(*done1);
  auto done0 = f.store.gangs().GangMemberSucceeded(run.run_id, run.token, 0, c, f.clock.Now(), 0.75);
  REQUIRE(done0);
  CHECK(*done0);
  auto r = f.store.runs().Run(run.run_id);
  REQUIRE(r);
  CHECK((*r)->state == RunState::kSucceeded);
  CHECK((*r)->metric_value == Approx(0.75));

  // Now the second gang forms on the machines that were freed.
  auto lb = f.Lease(b);
  REQUIRE(lb.size() == 1);
  CHECK(lb[0].run_id != run.run_id);
  f.CheckNoPartialGang(2);
}

TEST_CASE("A silent gang member fails the whole run, which is leased again as a unit", "[gang]") {
  Fixture f;
  f.Submit({GangSpec("ddp", 1, 2, 2)});
  auto a = f.Register("a");
  auto b = f.Register("b");
  auto la = f.Lease(a);
  REQUIRE(la.size() == 1);
  auto lb = f.Lease(b);
  REQUIRE(lb.size() == 1);
  const auto run = la[0];
  // Node 0 says where it listens; node 1 learns it from its own beat.
  auto v0 = f.store.gangs().GangBeat(run.run_id, run.token, 0, a, f.clock.Now(), kLease, true,
                             "10.0.0.1", 29400);
  REQUIRE(v0);
  auto v1 = f.store.gangs().GangBeat(run.run_id, run.token, 1, b, f.clock.Now(), kLease, true, "", 0);
  REQUIRE(v1);
  CHECK(v1->master_addr == "10.0.0.1");
  CHECK(v1->master_port == 29400);
  // A member's beat from the wrong machine is refused.
  auto wrong = f.store.gangs().GangBeat(run.run_id, run.token, 1, a, f.clock.Now(), kLease, true, "", 0);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().kind == ErrorKind::kConflict);

  // Node 0 keeps beating; node 1 goes silent. The run expires with node 1's lease.
  f.clock.Advance(kLease / 2);
  REQUIRE(f.store.gangs().GangBeat(run.run_id, run.token, 0, a, f.clock.Now(), kLease, true, "", 0));
  f.clock.Advance(kLease / 2 + 1);
  auto expired = f.store.runs().ExpireLeases(f.clock.Now());
  REQUIRE(expired);
  CHECK(*expired == 1);
  auto r = f.store.runs().Run(run.run_id);
  REQUIRE(r);
  CHECK((*r)->state == RunState::kFailed);
  CHECK((*r)->attempts == 1);
  // Node 0's next beat is refused: its worker stops its processes.
  auto stale = f.store.gangs().GangBeat(run.run_id, run.token, 0, a, f.clock.Now(), kLease, true, "", 0);
  REQUIRE_FALSE(stale);
  CHECK(stale.error().kind == ErrorKind::kConflict);
  auto live = f.store.gangs().LiveGangMembers();
  REQUIRE(live);
  CHECK(live->empty());

  // After the backoff the run is leased again, as a whole, with a new token.
  f.clock.Advance(60'000);
  REQUIRE(f.store.machines().TouchWorker(a, f.clock.Now(), false));  // a's worker still polls
  auto again = f.Lease(b);
  REQUIRE(again.size() == 1);
  CHECK(again[0].run_id == run.run_id);
  CHECK(again[0].attempt == 2);
  CHECK(again[0].token > run.token);
  auto members = f.store.gangs().GangMembers(run.run_id);
  REQUIRE(members);
  CHECK(members->size() == 2);
}

TEST_CASE("A machine lost from a gang returns the whole run to the queue", "[gang]") {
  Fixture f;
  f.Submit({GangSpec("ddp", 1, 2, 1)});
  auto a = f.Register("a");
  auto b = f.Register("b");
  auto la = f.Lease(a);
  REQUIRE(la.size() == 1);
  auto returned = f.store.machines().ForgetMachine(b, f.clock.Now(), "preempted");
  REQUIRE(returned);
  CHECK(*returned == 1);
  auto r = f.store.runs().Run(la[0].run_id);
  REQUIRE(r);
  CHECK((*r)->state == RunState::kQueued);
  CHECK((*r)->attempts == 0);
}

TEST_CASE("A gang member's machine marked lost (its worker silent) returns the whole run to the "
          "queue",
          "[gang][lost]") {
  Fixture f;
  f.Submit({GangSpec("ddp", 1, 2, 1)});
  auto a = f.Register("a");
  auto b = f.Register("b");
  auto la = f.Lease(a);
  REQUIRE(la.size() == 1);
  auto returned = f.store.machines().LoseMachine(b, f.clock.Now(), "worker silent for 46s");
  REQUIRE(returned);
  CHECK(*returned == 1);
  auto r = f.store.runs().Run(la[0].run_id);
  REQUIRE(r);
  CHECK((*r)->state == RunState::kQueued);
  CHECK((*r)->attempts == 0);
  CHECK_THAT((*r)->last_error, Catch::Contains("a machine of the gang was lost"));
  CHECK(f.store.machines().Machine(b).value()->lost());
}

TEST_CASE("The in-process executor's Lease skips gangs over several machines", "[gang]") {
  Fixture f;
  f.Submit({GangSpec("multi", 1, 2, 1), GangSpec("single", 1, 1, 2)});
  auto leased = f.store.runs().Lease("local", f.clock.Now(), kLease, 5);
  REQUIRE(leased);
  REQUIRE(leased->size() == 1);
  CHECK(leased->front().experiment == "single");
  CHECK(leased->front().nodes == 1);
  CHECK(leased->front().procs_per_node == 2);
  auto demand = f.store.machines().RunnableDemand(f.clock.Now());
  REQUIRE(demand);
  REQUIRE(demand->size() == 1);
  CHECK(demand->front().nodes == 2);
}
