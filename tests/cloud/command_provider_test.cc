#include "cloud/command_provider.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "core/clock.h"
#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::cloud {
namespace {

// A "cloud" in a shell script: machines are lines "ID NAME POOL INSTANCE
// STATE" in a state file; booting one runs its worker command in the
// background (so the test sees it really ran).
const char* kCloud = R"(#!/bin/sh
set -e
state="$CLOUD_DIR/machines"
touch "$state"
case "$1" in
  boot)
    n=$(($(wc -l < "$state") + 1))
    id="vm-$n"
    echo "$id $2 $3 $4 running" >> "$state"
    shift 4
    printf '%s\n' "$TRAINQ_TOKEN" > "$CLOUD_DIR/$id.token"
    ( "$@" ) > "$CLOUD_DIR/$id.out" 2>&1
    echo "booting $id..." >&2
    echo "created"
    echo "$id"
    ;;
  list)
    awk '$5 == "running" { print $1, $2, $3, $4 }' "$state"
    ;;
  list-mine)
    awk -v p="$2" -v i="$3" '$5 == "running" && $3 == p && $4 == i { print $1, $2 }' "$state"
    ;;
  stop)
    if grep -q "^$2 " "$state"; then
      sed -i "s/^\($2 .*\) running$/\1 stopped/" "$state"
    fi
    ;;
  fail)
    echo "quota exceeded for project" >&2
    exit "$2"
    ;;
esac
)";

struct CommandFixture {
  testing::TempDir dir;
  PosixProcessRunner runner;
  FakeClock clock;
  std::string cloud;
  CommandFixture() {
    cloud = dir / "cloud.sh";
    WriteFile(cloud, kCloud).value();
    std::filesystem::permissions(cloud, std::filesystem::perms::owner_all);
    setenv("CLOUD_DIR", dir.path().c_str(), 1);
  }
  std::unique_ptr<Provider> Make(std::map<std::string, std::string> params) {
    auto p = MakeProvider("command", params,
                          ProviderDeps{&runner, nullptr, &clock, dir.path().string()});
    REQUIRE(p);
    return std::move(*p);
  }
  std::map<std::string, std::string> Params(const std::string& list = "list") {
    return {{"boot", cloud + " boot {name} {pool} {instance} {worker_command}"},
            {"list", cloud + " " + list + " {pool} {instance}"},
            {"stop", cloud + " stop {id}"}};
  }
};

BootSpec Spec(const std::string& name, const MachineTag& tag, std::vector<std::string> argv) {
  BootSpec s;
  s.tag = tag;
  s.name = name;
  s.slots = 2;
  s.token = "pool-token";
  s.worker_argv = std::move(argv);
  return s;
}

const MachineTag kTag{"gpu", "tq1"};

TEST_CASE("Command provider boots, lists by tag and stops through shell templates") {
  CommandFixture f;
  auto p = f.Make(f.Params());
  auto id = p->Boot(Spec("tq-tq1-gpu-1", kTag, {"printf", "%s|", "it's", "a worker", "$HOME"}));
  INFO((id ? "" : id.error().message));
  REQUIRE(id);
  CHECK(*id == "vm-1");  // the last line of stdout
  // The worker command arrived intact (quoted word by word).
  CHECK(ReadFile(f.dir / "vm-1.out").value_or("") == "it's|a worker|$HOME|");
  // The token reached the boot command through its environment only.
  CHECK(ReadFile(f.dir / "vm-1.token").value_or("") == "pool-token\n");
  CHECK(ReadFile(f.dir / "machines").value().find("pool-token") == std::string::npos);

  REQUIRE(p->Boot(Spec("tq-tq2-gpu-1", {"gpu", "tq2"}, {"true"})));
  REQUIRE(p->Boot(Spec("tq-tq1-cpu-1", {"cpu", "tq1"}, {"true"})));
  auto listed = p->List(kTag);
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  CHECK((*listed)[0].id == "vm-1");
  CHECK((*listed)[0].name == "tq-tq1-gpu-1");
  CHECK((*listed)[0].tag == kTag);

  REQUIRE(p->Stop("vm-1"));
  CHECK(p->List(kTag)->empty());
  CHECK(p->Stop("vm-1"));   // already stopped
  CHECK(p->Stop("vm-99"));  // unknown
  auto bad = p->Stop("vm-1; rm -rf /");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().kind == ErrorKind::kInvalidArgument);
}

TEST_CASE("Command provider: a list command that filters itself prints ID NAME") {
  CommandFixture f;
  auto p = f.Make(f.Params("list-mine"));
  REQUIRE(p->Boot(Spec("tq-tq1-gpu-1", kTag, {"true"})));
  REQUIRE(p->Boot(Spec("tq-tq2-gpu-1", {"gpu", "tq2"}, {"true"})));
  auto listed = p->List(kTag);
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  CHECK((*listed)[0].name == "tq-tq1-gpu-1");
}

TEST_CASE("Command provider errors carry stderr, sysexits usage codes are not retried") {
  CommandFixture f;
  auto params = f.Params();
  params["boot"] = f.cloud + " fail 1";
  params["list"] = f.cloud + " fail 78";
  params["stop"] = "echo 'one two three' ";
  auto p = f.Make(params);
  auto id = p->Boot(Spec("tq-tq1-gpu-1", kTag, {"true"}));
  REQUIRE_FALSE(id);
  CHECK(id.error().kind == ErrorKind::kUnavailable);
  CHECK(id.error().message.find("quota exceeded for project") != std::string::npos);
  CHECK(id.error().message.find("exit code 1") != std::string::npos);
  auto listed = p->List(kTag);
  REQUIRE_FALSE(listed);
  CHECK(listed.error().kind == ErrorKind::kInvalidArgument);

  params["list"] = "echo 'a b c'";
  params["boot"] = "true";
  auto q = f.Make(params);
  auto three = q->List(kTag);
  REQUIRE_FALSE(three);
  CHECK(three.error().message.find("line 1 has 3 fields") != std::string::npos);
  auto none = q->Boot(Spec("tq-tq1-gpu-1", kTag, {"true"}));
  REQUIRE_FALSE(none);
  CHECK(none.error().message.find("printed no id") != std::string::npos);

  params["list"] = "sleep 30";
  params["timeout"] = "1s";
  auto slow = f.Make(params)->List(kTag);
  REQUIRE_FALSE(slow);
  CHECK(slow.error().kind == ErrorKind::kTimeout);
}

}  // namespace
}  // namespace trainq::cloud
