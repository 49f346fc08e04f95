#include "cloud/provider.h"

#include <catch2/catch.hpp>

namespace trainq::cloud {
namespace {

BootSpec SpecFor(const MachineTag& tag) {
  BootSpec s;
  s.tag = tag;
  return s;
}

const MachineTag kGpu{"gpu", "trainq-1"};
const MachineTag kCpu{"cpu", "trainq-1"};
const MachineTag kOtherInstance{"gpu", "trainq-2"};

TEST_CASE("FakeProvider boots tagged machines and lists them by tag") {
  FakeProvider p;
  auto a = p.Boot(SpecFor(kGpu));
  auto b = p.Boot(SpecFor(kCpu));
  auto c = p.Boot(SpecFor(kOtherInstance));
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  CHECK(*a != *b);
  auto listed = p.List(kGpu);
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  CHECK((*listed)[0].id == *a);
  CHECK((*listed)[0].tag == kGpu);
}

TEST_CASE("FakeProvider records calls in order and stops machines") {
  FakeProvider p;
  auto id = p.Boot(SpecFor(kGpu));
  REQUIRE(id);
  REQUIRE(p.Stop(*id));
  REQUIRE(p.Stop(*id));  // already gone: still succeeds
  REQUIRE(p.List(kGpu)->empty());
  REQUIRE(p.calls().size() == 4);
  CHECK(p.calls()[0].kind == FakeProvider::Call::Kind::kBoot);
  CHECK(p.calls()[1].kind == FakeProvider::Call::Kind::kStop);
  CHECK(p.calls()[1].arg == *id);
  CHECK(p.calls()[3].kind == FakeProvider::Call::Kind::kList);
  CHECK(p.stopped() == std::vector<std::string>{*id});
}

TEST_CASE("FakeProvider fails the next calls when told to, and records them as failed") {
  FakeProvider p;
  p.FailNext(2, ErrorKind::kTimeout);
  auto a = p.Boot(SpecFor(kGpu));
  REQUIRE_FALSE(a);
  CHECK(a.error().kind == ErrorKind::kTimeout);
  CHECK(a.error().retryable());
  CHECK_FALSE(p.List(kGpu));
  CHECK(p.Boot(SpecFor(kGpu)));
  REQUIRE(p.calls().size() == 3);
  CHECK_FALSE(p.calls()[0].ok);
  CHECK_FALSE(p.calls()[1].ok);
  CHECK(p.calls()[2].ok);
  CHECK(p.running().size() == 1);  // the failed boot started nothing
}

TEST_CASE("FakeProvider can lose a machine, which then vanishes from List without a Stop") {
  FakeProvider p;
  auto id = p.Boot(SpecFor(kGpu));
  REQUIRE(id);
  p.Lose(*id);
  CHECK(p.List(kGpu)->empty());
  CHECK(p.stopped().empty());
}

TEST_CASE("FakeProvider orphans are listed but were never returned by Boot") {
  FakeProvider p;
  std::string orphan = p.AddOrphan(kGpu);
  auto listed = p.List(kGpu);
  REQUIRE(listed->size() == 1);
  CHECK((*listed)[0].id == orphan);
  CHECK(p.calls().size() == 1);  // only the List
}

}  // namespace
}  // namespace trainq::cloud
