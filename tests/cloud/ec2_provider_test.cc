// The EC2 provider against a fake EC2 endpoint on loopback that answers with
// EC2's XML shapes and checks every request's AWS Signature Version 4 (the
// algorithm re-implemented here from AWS's documentation, with OpenSSL).
#include "cloud/ec2_provider.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "cloud/autoscaler.h"
#include "cloud/mini_xml.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "tests/support/fake_ec2.h"
#include "tests/support/http_server.h"
#include "tests/support/temp_dir.h"

namespace trainq::cloud {
namespace {

using testing::FakeEc2;
using testing::FakeInstance;
using testing::TestHttpRequest;
using testing::TestHttpResponse;

struct Ec2Fixture {
  FakeEc2 ec2;
  testing::TempDir dir;
  CurlHttpClient http;
  SystemClock clock;

  std::string Credentials(const std::string& secret, const std::string& token = "") {
    std::string path = dir / "credentials";
    WriteFile(path, "[default]\naws_access_key_id = OTHER\naws_secret_access_key = x\n\n"
                    "[trainq]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = " +
                        secret + "\n" + (token.empty() ? "" : "aws_session_token = " + token + "\n"))
        .value();
    return path;
  }

  std::unique_ptr<Provider> Make(std::map<std::string, std::string> extra = {},
                                 const std::string& secret =
                                     "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY") {
    std::map<std::string, std::string> params = {{"region", "us-east-1"},
                                                 {"image", "ami-0abcdef1234567890"},
                                                 {"instance_type", "g5.xlarge"},
                                                 {"endpoint", ec2.url()},
                                                 {"credentials_file", Credentials(secret)},
                                                 {"profile", "trainq"}};
    for (auto& [k, v] : extra) params[k] = v;
    auto p = MakeProvider("ec2", params, ProviderDeps{nullptr, &http, &clock, ""});
    REQUIRE(p);
    return std::move(*p);
  }
};

BootSpec Spec(const std::string& name, const MachineTag& tag) {
  BootSpec s;
  s.tag = tag;
  s.name = name;
  s.slots = 2;
  s.gpus = 1;
  s.token = "tq-secret-token-123";
  s.worker_argv = {"/usr/bin/trainq", "worker",       "--server", "http://10.0.0.1:8080",
                   "--token-file",    "/var/lib/trainq/tokens/gpu.token", "--machine", name};
  return s;
}

const MachineTag kTag{"gpu", "tq1"};

TEST_CASE("EC2 provider: signed RunInstances, DescribeInstances by tag, TerminateInstances") {
  Ec2Fixture f;
  auto p = f.Make({{"subnet", "subnet-1"}, {"security_groups", "sg-1, sg-2"},
                   {"key_name", "ops"}, {"iam_instance_profile", "trainq-worker"}});
  auto id = p->Boot(Spec("tq-tq1-gpu-1", kTag));
  INFO(f.ec2.last_rejection());
  REQUIRE(id);
  CHECK(id->starts_with("i-"));
  auto inst = f.ec2.instances().at(0);
  CHECK(inst.name == "tq-tq1-gpu-1");
  CHECK(inst.pool == "gpu");
  CHECK(inst.instance == "tq1");
  CHECK(inst.form["SubnetId"] == "subnet-1");
  CHECK(inst.form["SecurityGroupId.1"] == "sg-1");
  CHECK(inst.form["SecurityGroupId.2"] == "sg-2");
  CHECK(inst.form["KeyName"] == "ops");
  CHECK(inst.form["IamInstanceProfile.Name"] == "trainq-worker");
  CHECK(inst.form.count("InstanceMarketOptions.MarketType") == 0);  // on-demand
  CHECK(inst.user_data.find("exec '/usr/bin/trainq' 'worker'") != std::string::npos);

  // Another pool and another trainq instance are not listed.
  REQUIRE(p->Boot(Spec("tq-tq1-cpu-2", {"cpu", "tq1"})));
  REQUIRE(p->Boot(Spec("tq-tq2-gpu-1", {"gpu", "tq2"})));
  REQUIRE(p->Boot(Spec("tq-tq1-gpu-3", kTag)));
  REQUIRE(p->Boot(Spec("tq-tq1-gpu-4", kTag)));
  f.ec2.page_size = 2;  // three machines: two pages, NextToken followed
  auto listed = p->List(kTag);
  REQUIRE(listed);
  std::vector<std::string> names;
  for (const auto& m : *listed) {
    names.push_back(m.name);
    CHECK(m.tag == kTag);
  }
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"tq-tq1-gpu-1", "tq-tq1-gpu-3", "tq-tq1-gpu-4"});

  REQUIRE(p->Stop(*id));
  listed = p->List(kTag);
  REQUIRE(listed);
  CHECK(listed->size() == 2);
  CHECK(f.ec2.instances().at(0).state == "shutting-down");
  // An instance EC2 does not know is gone already.
  CHECK(p->Stop("i-0deadbeef"));
  CHECK(f.ec2.last_rejection().empty());
}

TEST_CASE("EC2 provider: a boot retried with the same name does not launch twice") {
  Ec2Fixture f;
  auto p = f.Make();
  auto a = p->Boot(Spec("tq-tq1-gpu-1", kTag));
  auto b = p->Boot(Spec("tq-tq1-gpu-1", kTag));
  REQUIRE(a);
  REQUIRE(b);
  CHECK(*a == *b);
  CHECK(f.ec2.instances().size() == 1);
}

TEST_CASE("EC2 provider: a crash between boot and record leaves the machine findable by tag") {
  Ec2Fixture f;
  {
    auto p = f.Make();
    // RunInstances succeeded, but the caller died before recording the id.
    REQUIRE(p->Boot(Spec("tq-tq1-gpu-7", kTag)));
  }
  auto restarted = f.Make();
  auto listed = restarted->List(kTag);
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  CHECK((*listed)[0].name == "tq-tq1-gpu-7");
  const std::string id = (*listed)[0].id;
  CHECK(id == f.ec2.instances().at(0).id);

  // The autoscaler's next pass is fed with that listing. With nothing queued
  // the orphan is not wanted: it is stopped at once.
  PoolInput pool;
  pool.config.name = "gpu";
  pool.config.max = 4;
  pool.config.boot_timeout_ms = 600'000;
  pool.listing = std::vector<std::string>{id};
  const TimeMs t0 = 1'000'000;
  Decision d = Autoscale({pool}, t0);
  REQUIRE(d.actions.size() == 1);
  CHECK(d.actions[0].kind == ActionKind::kStop);
  CHECK(d.actions[0].machine == id);
  // With a run queued it is adopted instead, and no other machine is booted ...
  pool.demand = 1;
  d = Autoscale({pool}, t0);
  REQUIRE(d.actions.size() == 1);
  CHECK(d.actions[0].kind == ActionKind::kAdopt);
  CHECK(d.actions[0].machine == id);
  // ... recorded booting as of now. Its worker never registers, so once
  // boot_timeout has passed it is stopped (a failed boot: its replacement
  // waits for the boot back-off), and the provider terminates it.
  Machine adopted;
  adopted.row = 1;
  adopted.id = id;
  adopted.state = MachineState::kBooting;
  adopted.booted_at = t0;
  pool.machines = {adopted};
  CHECK(Autoscale({pool}, t0 + 600'000 - 1).actions.empty());
  d = Autoscale({pool}, t0 + 600'000 + 1);
  auto stop = std::find_if(d.actions.begin(), d.actions.end(),
                           [](const Action& a) { return a.kind == ActionKind::kLost; });
  REQUIRE(stop != d.actions.end());
  CHECK(stop->machine == id);
  CHECK(stop->row == 1);
  CHECK_FALSE(std::any_of(d.actions.begin(), d.actions.end(),
                          [](const Action& a) { return a.kind == ActionKind::kBoot; }));
  REQUIRE(restarted->Stop(stop->machine));
  CHECK(restarted->List(kTag)->empty());
  CHECK(f.ec2.instances().at(0).state == "shutting-down");
}

TEST_CASE("EC2 provider: a warm pool stops instances and boots a stopped one again, renamed") {
  Ec2Fixture f;
  auto p = f.Make({{"on_stop", "stop"}});
  auto id = p->Boot(Spec("tq-tq1-gpu-1", kTag));
  REQUIRE(id);
  CHECK(f.ec2.instances().at(0).user_data.find("[scripts-user, always]") != std::string::npos);
  REQUIRE(p->Stop(*id));
  CHECK(p->List(kTag)->empty());  // stopped: not a live machine
  CHECK(f.ec2.instances().at(0).state == "stopped");

  auto again = p->Boot(Spec("tq-tq1-gpu-2", kTag));
  INFO(f.ec2.last_rejection());
  REQUIRE(again);
  CHECK(*again == *id);
  REQUIRE(f.ec2.instances().size() == 1);  // no new launch
  auto inst = f.ec2.instances().at(0);
  CHECK(inst.name == "tq-tq1-gpu-2");
  CHECK(inst.user_data.find("'--machine' 'tq-tq1-gpu-2'") != std::string::npos);
  auto listed = p->List(kTag);
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  CHECK((*listed)[0].name == "tq-tq1-gpu-2");
  // None stopped left: the next boot launches a new one.
  auto third = p->Boot(Spec("tq-tq1-gpu-3", kTag));
  REQUIRE(third);
  CHECK(*third != *id);
  std::vector<std::string> actions = f.ec2.actions();
  CHECK(std::count(actions.begin(), actions.end(), "RunInstances") == 2);
  CHECK(std::count(actions.begin(), actions.end(), "StartInstances") == 1);
  CHECK(std::count(actions.begin(), actions.end(), "TerminateInstances") == 0);
}

TEST_CASE("EC2 provider: spot market options") {
  Ec2Fixture f;
  auto p = f.Make({{"market", "spot"}, {"max_price", "0.90"}});
  REQUIRE(p->Boot(Spec("tq-tq1-gpu-1", kTag)));
  auto form = f.ec2.instances().at(0).form;
  CHECK(form["InstanceMarketOptions.MarketType"] == "spot");
  CHECK(form["InstanceMarketOptions.SpotOptions.SpotInstanceType"] == "one-time");
  CHECK(form["InstanceMarketOptions.SpotOptions.MaxPrice"] == "0.90");
}

TEST_CASE("EC2 provider: a wrong secret is refused by the signature check with a clear error") {
  Ec2Fixture f;
  auto p = f.Make({}, "not-the-secret");
  auto id = p->Boot(Spec("tq-tq1-gpu-1", kTag));
  REQUIRE_FALSE(id);
  CHECK(f.ec2.last_rejection() == "signature does not match");
  INFO(id.error().message);
  CHECK(id.error().message.find("RunInstances") != std::string::npos);
  CHECK(id.error().message.find("AuthFailure") != std::string::npos);
  CHECK(id.error().message.find("credentials") != std::string::npos);
  CHECK(id.error().message.find("not-the-secret") == std::string::npos);
  CHECK_FALSE(id.error().retryable());
  CHECK(f.ec2.instances().empty());
}

TEST_CASE("EC2 provider: throttling, capacity and 5xx are retryable, bad requests are not") {
  Ec2Fixture f;
  auto p = f.Make();
  for (auto [status, code] : std::vector<std::pair<int, std::string>>{
           {503, "RequestLimitExceeded"},
           {500, "InsufficientInstanceCapacity"},
           {503, "Unavailable"},
           {500, "InternalError"},
           {502, "SomethingNew"}}) {
    f.ec2.InjectError(status, code);
    auto id = p->Boot(Spec("tq-tq1-gpu-1", kTag));
    REQUIRE_FALSE(id);
    INFO(id.error().message);
    CHECK(id.error().kind == ErrorKind::kUnavailable);
    CHECK(id.error().message.find(code) != std::string::npos);
  }
  f.ec2.InjectError(400, "InvalidAMIID.Malformed");
  auto listed = p->List(kTag);
  REQUIRE_FALSE(listed);
  CHECK(listed.error().kind == ErrorKind::kInvalidArgument);
  CHECK(listed.error().message.find("InvalidAMIID.Malformed") != std::string::npos);
  // Nothing listening: a transport error, retryable.
  auto gone = MakeProvider("ec2",
                           {{"region", "us-east-1"}, {"image", "ami-1"}, {"instance_type", "t3.micro"},
                            {"endpoint", "http://127.0.0.1:" +
                                             std::to_string(testing::FreeLoopbackPort()) + "/"},
                            {"credentials_file", f.Credentials("s")}, {"profile", "trainq"}},
                           ProviderDeps{nullptr, &f.http, &f.clock, ""});
  REQUIRE(gone);
  auto r = (*gone)->List(kTag);
  REQUIRE_FALSE(r);
  CHECK(r.error().retryable());
}

TEST_CASE("EC2 provider: credentials from the environment, with a session token") {
  Ec2Fixture f;
  f.ec2.secrets["ASIATEMP"] = "tempsecret";
  setenv("AWS_ACCESS_KEY_ID", "ASIATEMP", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "tempsecret", 1);
  setenv("AWS_SESSION_TOKEN", "FwoGZXIvYXdzEXAMPLE//token==", 1);
  auto p = MakeProvider("ec2",
                        {{"region", "us-east-1"}, {"image", "ami-1"}, {"instance_type", "t3.micro"},
                         {"endpoint", f.ec2.url()}},
                        ProviderDeps{nullptr, &f.http, &f.clock, ""});
  REQUIRE(p);
  auto listed = (*p)->List(kTag);
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_SESSION_TOKEN");
  INFO(f.ec2.last_rejection());
  REQUIRE(listed);
  auto none = (*p)->List(kTag);
  REQUIRE_FALSE(none);
  CHECK(none.error().message.find("AWS_ACCESS_KEY_ID") != std::string::npos);
}

TEST_CASE("EC2 user data writes the token to the worker's token file (0600) and execs it") {
  testing::TempDir dir;
  BootSpec s;
  s.tag = kTag;
  s.name = "tq-tq1-gpu-1";
  s.token = "tok'en with quote";
  std::string token_file = dir / "tokens/gpu.token";
  s.worker_argv = {"/bin/sh", "-c", "printf 'worker %s\\n' \"$0\" > '" + (dir / "out") + "'",
                   "--token-file", token_file};
  std::string script = Ec2Provider::UserData(s, "echo prefix-ran > '" + (dir / "prefix") + "'");
  WriteFile(dir / "user-data", script).value();
  REQUIRE(testing::RunShell("sh " + dir / "user-data") == 0);
  CHECK(ReadFile(token_file).value_or("") == "tok'en with quote\n");
  struct stat st {};
  REQUIRE(::stat(token_file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(ReadFile(dir / "out").value_or("") == "worker --token-file\n");
  CHECK(ReadFile(dir / "prefix").value_or("") == "prefix-ran\n");
}

TEST_CASE("MiniXml reads EC2 answers: nested items, entities, self-closing tags") {
  auto xml = ParseXml(
      "<?xml version=\"1.0\"?><!-- c --><R xmlns=\"x\"><a>1 &amp; 2 &lt;3&gt; &#65;&#x42;</a>"
      "<set><item><k>x</k></item><item><k>y</k><set><item><k>z</k></item></set></item></set>"
      "<empty/><attr q=\"a>b\">t</attr></R>");
  REQUIRE(xml);
  CHECK(xml->Text("a") == "1 & 2 <3> AB");
  REQUIRE(xml->Child("set")->Children("item").size() == 2);
  CHECK(xml->Child("set")->Children("item")[1]->Text("set/item/k") == "z");
  CHECK(xml->Text("attr") == "t");
  CHECK(xml->Child("empty") != nullptr);
  CHECK_FALSE(ParseXml("<a><b></a>"));
  CHECK_FALSE(ParseXml("<a>"));
  CHECK_FALSE(ParseXml("no xml"));
}

TEST_CASE("MakeProvider refuses unknown kinds and names missing or unknown parameters") {
  CurlHttpClient http;
  SystemClock clock;
  ProviderDeps deps{nullptr, &http, &clock, ""};
  auto a = MakeProvider("gce", {}, deps);
  REQUIRE_FALSE(a);
  CHECK(a.error().message.find("\"gce\"") != std::string::npos);
  auto b = MakeProvider("ec2", {{"image", "ami-1"}, {"instance_type", "t3.micro"}}, deps);
  REQUIRE_FALSE(b);
  CHECK(b.error().message == "params.region: required by ec2");
  auto c = MakeProvider("ec2",
                        {{"region", "r"}, {"image", "i"}, {"instance_type", "t"}, {"zone", "z"}},
                        deps);
  REQUIRE_FALSE(c);
  CHECK(c.error().message.find("params.zone: unknown to ec2") == 0);
  auto d = MakeProvider("ec2",
                        {{"region", "r"}, {"image", "i"}, {"instance_type", "t"}, {"market", "cheap"}},
                        deps);
  REQUIRE_FALSE(d);
  CHECK(d.error().message.find("params.market") == 0);
  auto e = MakeProvider("command", {{"boot", "x"}, {"list", "y"}}, deps);
  REQUIRE_FALSE(e);
  CHECK(e.error().message == "params.stop: required by command");
  // The worker command's parameters are accepted by every kind.
  for (auto kind : {"local", "slurm", "ec2", "command"}) {
    std::map<std::string, std::string> params = {
        {"server_url", "http://10.0.0.1:8080"}, {"token_file", "/t"}, {"trainq", "/usr/bin/trainq"},
        {"worker_gpus", "0,1"}, {"worker_data_dir", "/var/lib/trainq"}};
    if (std::string(kind) == "ec2") {
      params.insert({{"region", "r"}, {"image", "i"}, {"instance_type", "t"}});
    }
    if (std::string(kind) == "command") params.insert({{"boot", "b"}, {"list", "l"}, {"stop", "s"}});
    INFO(kind);
    CHECK(CheckProviderParams(kind, params));
  }
  auto g = MakeProvider("local", {{"stop_grace", "soon"}}, deps);
  REQUIRE_FALSE(g);
  CHECK(g.error().message.find("params.stop_grace") == 0);
}

}  // namespace
}  // namespace trainq::cloud
