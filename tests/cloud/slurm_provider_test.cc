#include "cloud/slurm_provider.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "core/clock.h"
#include "core/process.h"
#include "core/strings.h"
#include "tests/support/slurm_cluster.h"

namespace trainq::cloud {
namespace {

using testing::SlurmCluster;
using testing::WaitFor;

bool InQueue(const SlurmCluster& c, const std::string& id) {
  std::string out;
  testing::RunShell(c.shell_prefix() + "squeue --noheader --format=%i", &out);
  for (const auto& line : Split(out, '\n')) {
    if (Trim(line) == id) return true;
  }
  return false;
}

TEST_CASE("Slurm provider boots, lists and cancels jobs on a real single-node Slurm") {
  auto cluster = SlurmCluster::Start();
  if (!cluster) FAIL(cluster.error());
  const SlurmCluster& c = **cluster;
  PosixProcessRunner runner;
  SystemClock clock;
  std::string work = c.dir() / "work";
  std::filesystem::create_directories(work);
  auto made = MakeProvider("slurm",
                           {{"slurm_conf", c.conf()},
                            {"partition", c.partition()},
                            {"cpus", "1"},
                            {"time", "10:00"},
                            {"output", work + "/%x-%j.out"}},
                           ProviderDeps{&runner, nullptr, &clock, work});
  REQUIRE(made);
  Provider& p = **made;

  // Long ids and names: squeue must not truncate them.
  const std::string inst = "tq1-0123456789abcdef0123456789abcdef";
  const MachineTag tag{"gpu", inst};
  const MachineTag other{"gpu", "tq2"};
  std::string marker = work + "/ran";
  BootSpec spec;
  spec.tag = tag;
  spec.name = "tq-" + inst + "-gpu-1";
  // A stand-in worker, with an argument that needs quoting.
  spec.worker_argv = {"/bin/sh", "-c", "echo \"it's $SLURM_JOB_ID\" > '" + marker + "'; sleep 300"};
  auto id = p.Boot(spec);
  REQUIRE(id);
  CHECK_FALSE(id->empty());

  BootSpec other_spec = spec;
  other_spec.tag = other;
  other_spec.name = "tq-tq2-gpu-1";
  other_spec.worker_argv = {"/bin/sh", "-c", "sleep 300"};
  auto other_id = p.Boot(other_spec);
  REQUIRE(other_id);

  auto listed = p.List(tag);
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);  // not the other trainq instance's job
  CHECK((*listed)[0].id == *id);
  CHECK((*listed)[0].name == "tq-" + inst + "-gpu-1");
  CHECK((*listed)[0].tag == tag);

  // It really ran, with the argv intact.
  REQUIRE(WaitFor([&] { return std::filesystem::exists(marker); }, std::chrono::seconds(30)));
  REQUIRE(WaitFor([&] { return Trim(ReadFile(marker).value_or("")) == "it's " + *id; },
                  std::chrono::seconds(10)));

  REQUIRE(p.Stop(*id));
  CHECK(WaitFor([&] { return !InQueue(c, *id); }, std::chrono::seconds(30)));
  auto after = p.List(tag);
  REQUIRE(after);
  CHECK(after->empty());
  REQUIRE(p.List(other)->size() == 1);

  // Stopping again, or a job Slurm never had, is fine.
  CHECK(p.Stop(*id));
  CHECK(p.Stop("999999"));
  auto bad = p.Stop("1; rm -rf /");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().kind == ErrorKind::kInvalidArgument);

  REQUIRE(p.Stop(*other_id));
}

TEST_CASE("Slurm provider errors carry sbatch's message") {
  auto cluster = SlurmCluster::Start();
  if (!cluster) FAIL(cluster.error());
  PosixProcessRunner runner;
  SystemClock clock;
  auto made = MakeProvider("slurm", {{"slurm_conf", (*cluster)->conf()}, {"partition", "nosuch"}},
                           ProviderDeps{&runner, nullptr, &clock, ""});
  REQUIRE(made);
  BootSpec spec;
  spec.tag = {"gpu", "tq1"};
  spec.name = "tq-x";
  spec.worker_argv = {"true"};
  auto id = (*made)->Boot(spec);
  REQUIRE_FALSE(id);
  INFO(id.error().message);
  CHECK(id.error().message.find("sbatch") != std::string::npos);
  CHECK(id.error().message.find("partition") != std::string::npos);
  CHECK_FALSE(id.error().retryable());
}

TEST_CASE("Slurm provider: a controller that cannot be reached is a retryable error") {
  testing::TempDir dir;
  // A configuration naming a controller port nothing listens on.
  WriteFile(dir / "slurm.conf",
            "ClusterName=none\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\n"
            "AuthType=auth/munge\nNodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n"
            "MessageTimeout=2\n")
      .value();
  PosixProcessRunner runner;
  SystemClock clock;
  auto made = MakeProvider("slurm", {{"slurm_conf", dir / "slurm.conf"}, {"timeout", "60s"}},
                           ProviderDeps{&runner, nullptr, &clock, ""});
  REQUIRE(made);
  auto listed = (*made)->List({"gpu", "tq1"});
  REQUIRE_FALSE(listed);
  INFO(listed.error().message);
  CHECK(listed.error().message.find("squeue") != std::string::npos);
  CHECK(listed.error().retryable());
}

}  // namespace
}  // namespace trainq::cloud
