// PlanRank: how a process finds its place in a distributed run from the spec
// and the environment (torchrun's variables, or the ones rank 0 sets for the
// local ranks it starts).
#include "trainer/launcher.h"

#include <catch2/catch.hpp>

#include <map>

namespace trainq::trainer {
namespace {

Result<RankPlan> Plan(const DistributedSpec& d, const std::map<std::string, std::string>& env) {
  return PlanRank(d, [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

DistributedSpec MakeSpec(const std::string& rendezvous, std::int64_t workers = 2) {
  DistributedSpec d;
  d.workers = workers;
  d.rendezvous = rendezvous;
  d.timeout_seconds = 7;
  d.where = "s.yaml:9";
  return d;
}

TEST_CASE("rendezvous auto: the process started by the user is rank 0 and starts the others") {
  auto p = Plan(MakeSpec("auto"), {});
  REQUIRE(p);
  CHECK(p->spawn_local);
  CHECK(p->rendezvous.rank == 0);
  CHECK(p->rendezvous.world == 2);
  CHECK(p->rendezvous.timeout_seconds == 7);

  auto child = Plan(MakeSpec("auto"), {{"TRAINQ_DIST_RANK", "1"}, {"TRAINQ_DIST_WORLD", "2"},
                                   {"TRAINQ_DIST_STORE", "/tmp/x/store"}, {"TRAINQ_DIST_PARENT", "42"}});
  REQUIRE(child);
  CHECK_FALSE(child->spawn_local);
  CHECK(child->rendezvous.rank == 1);
  CHECK(child->rendezvous.file_store == "/tmp/x/store");
  CHECK(child->parent_pid == 42);

  auto mismatch = Plan(MakeSpec("auto", 3), {{"TRAINQ_DIST_RANK", "1"}, {"TRAINQ_DIST_WORLD", "2"},
                                         {"TRAINQ_DIST_STORE", "/s"}, {"TRAINQ_DIST_PARENT", "42"}});
  REQUIRE_FALSE(mismatch);
  CHECK_THAT(mismatch.error().message, Catch::Contains("distributed.workers is 3"));
}

TEST_CASE("rendezvous env and tcp:// read torchrun's variables, and name the one that is wrong") {
  const std::map<std::string, std::string> torchrun{
      {"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29400"}};
  auto env = Plan(MakeSpec("env", 4), torchrun);
  REQUIRE(env);
  CHECK_FALSE(env->spawn_local);
  CHECK(env->rendezvous.rank == 3);
  CHECK(env->rendezvous.local_rank == 1);
  CHECK(env->rendezvous.host == "10.1.2.3");
  CHECK(env->rendezvous.port == 29400);
  CHECK(env->rendezvous.file_store.empty());

  auto tcp = Plan(MakeSpec("tcp://127.0.0.1:5555", 4), torchrun);
  REQUIRE(tcp);
  CHECK(tcp->rendezvous.host == "127.0.0.1");
  CHECK(tcp->rendezvous.port == 5555);

  auto no_rank = Plan(MakeSpec("env", 4), {{"WORLD_SIZE", "4"}});
  REQUIRE_FALSE(no_rank);
  CHECK_THAT(no_rank.error().message, Catch::Contains("RANK is not set"));
  auto world = Plan(MakeSpec("env", 2), torchrun);
  REQUIRE_FALSE(world);
  CHECK_THAT(world.error().message, Catch::Contains("WORLD_SIZE is 4 but distributed.workers is 2 (s.yaml:9)"));
  auto bad_port = Plan(MakeSpec("env", 4), {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"},
                                        {"MASTER_PORT", "http"}});
  REQUIRE_FALSE(bad_port);
  CHECK_THAT(bad_port.error().message, Catch::Contains("MASTER_PORT='http' is not a non-negative integer"));
}

}  // namespace
}  // namespace trainq::trainer
