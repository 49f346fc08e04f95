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
#include "tests/support/http_server.h"
#include "tests/support/temp_dir.h"

namespace trainq::cloud {
namespace {

using testing::TestHttpRequest;
using testing::TestHttpResponse;

std::string Hex(const unsigned char* p, size_t n) {
  static const char* k = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += k[p[i] >> 4];
    out += k[p[i] & 15];
  }
  return out;
}

std::string Sha256Hex(std::string_view s) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), md);
  return Hex(md, sizeof md);
}

std::string Hmac(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len);
  return std::string(reinterpret_cast<char*>(md), len);
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string UrlDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::map<std::string, std::string> ParseForm(std::string_view body) {
  std::map<std::string, std::string> out;
  for (const auto& pair : Split(body, '&')) {
    auto eq = pair.find('=');
    if (eq == std::string::npos) continue;
    out[UrlDecode(pair.substr(0, eq))] = UrlDecode(pair.substr(eq + 1));
  }
  return out;
}

std::string Base64Decode(std::string_view in) {
  static const std::string k =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (char c : in) {
    auto pos = k.find(c);
    if (pos == std::string::npos) break;
    val = (val << 6) + static_cast<int>(pos);
    bits += 6;
    if (bits >= 0) {
      out += static_cast<char>((val >> bits) & 0xFF);
      bits -= 8;
    }
  }
  return out;
}

// Checks the SigV4 Authorization header of `req`; "" when valid, else why not.
// Canonical request, string to sign and signing key as in AWS's "Create a
// signed AWS API request" (SigV4) documentation.
std::string VerifySigV4(const TestHttpRequest& req,
                        const std::map<std::string, std::string>& secrets,
                        const std::string& region, const std::string& service) {
  std::string auth = req.Header("Authorization");
  const std::string algo = "AWS4-HMAC-SHA256 ";
  if (!auth.starts_with(algo)) return "no AWS4-HMAC-SHA256 Authorization header";
  std::map<std::string, std::string> parts;
  for (auto& p : Split(auth.substr(algo.size()), ',')) {
    auto t = std::string(Trim(p));
    auto eq = t.find('=');
    if (eq != std::string::npos) parts[t.substr(0, eq)] = t.substr(eq + 1);
  }
  auto cred = Split(parts["Credential"], '/');
  if (cred.size() != 5 || cred[4] != "aws4_request") return "bad Credential";
  const std::string& akid = cred[0];
  const std::string& date = cred[1];
  if (cred[2] != region || cred[3] != service) return "wrong region or service in the scope";
  auto secret = secrets.find(akid);
  if (secret == secrets.end()) return "unknown access key";
  std::string amz_date = req.Header("X-Amz-Date");
  if (amz_date.size() != 16 || !amz_date.starts_with(date)) return "bad X-Amz-Date";
  // Within 15 minutes of now.
  std::tm tm{};
  strptime(amz_date.c_str(), "%Y%m%dT%H%M%SZ", &tm);
  auto skew = std::abs(static_cast<long>(timegm(&tm) - std::time(nullptr)));
  if (skew > 15 * 60) return "request time too skewed";
  auto signed_headers = Split(parts["SignedHeaders"], ';');
  if (std::find(signed_headers.begin(), signed_headers.end(), "host") == signed_headers.end() ||
      std::find(signed_headers.begin(), signed_headers.end(), "x-amz-date") ==
          signed_headers.end()) {
    return "host and x-amz-date must be signed";
  }
  if (!req.Header("X-Amz-Security-Token").empty() &&
      std::find(signed_headers.begin(), signed_headers.end(), "x-amz-security-token") ==
          signed_headers.end()) {
    return "x-amz-security-token must be signed";
  }
  std::string canonical_headers;
  for (const auto& name : signed_headers) {
    std::string value;
    bool found = false;
    for (const auto& [k, v] : req.headers) {
      if (Lower(k) != name) continue;
      value += (found ? "," : "") + std::string(Trim(v));
      found = true;
    }
    if (!found) return "signed header " + name + " missing";
    std::string collapsed;
    for (char ch : value) {
      if (ch == ' ' && !collapsed.empty() && collapsed.back() == ' ') continue;
      collapsed += ch;
    }
    canonical_headers += name + ":" + collapsed + "\n";
  }
  std::string path = req.target.substr(0, req.target.find('?'));
  std::string query = req.target.find('?') == std::string::npos
                          ? ""
                          : req.target.substr(req.target.find('?') + 1);
  std::string canonical = req.method + "\n" + path + "\n" + query + "\n" + canonical_headers +
                          "\n" + parts["SignedHeaders"] + "\n" + Sha256Hex(req.body);
  std::string scope = date + "/" + region + "/" + service + "/aws4_request";
  std::string to_sign =
      "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + Sha256Hex(canonical);
  std::string key = Hmac("AWS4" + secret->second, date);
  key = Hmac(key, region);
  key = Hmac(key, service);
  key = Hmac(key, "aws4_request");
  std::string sig = Hmac(key, to_sign);
  std::string expected = Hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());
  if (parts["Signature"] != expected) return "signature does not match";
  return "";
}

struct FakeInstance {
  std::string id, state, name, pool, instance, client_token, user_data;
  std::map<std::string, std::string> form;  // the RunInstances request
};

// EC2's query API, as much of it as the provider uses.
class FakeEc2 {
 public:
  FakeEc2()
      : server_([this](const TestHttpRequest& r) { return Handle(r); }) {}

  std::string url() const { return server_.url() + "/"; }
  void InjectError(int status, std::string code, int times = 1) {
    std::lock_guard lock(mu_);
    inject_status_ = status;
    inject_code_ = std::move(code);
    inject_times_ = times;
  }
  std::vector<FakeInstance> instances() const {
    std::lock_guard lock(mu_);
    return instances_;
  }
  std::vector<std::string> actions() const {
    std::lock_guard lock(mu_);
    return actions_;
  }
  std::string last_rejection() const {
    std::lock_guard lock(mu_);
    return rejection_;
  }
  std::map<std::string, std::string> secrets = {{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}};
  size_t page_size = 2;
  // What GetConsoleOutput answers for every instance (before base64).
  std::string console_output;

 private:
  static TestHttpResponse Error(int status, const std::string& code, const std::string& msg) {
    return {status,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>" + code +
                "</Code><Message>" + msg +
                "</Message></Error></Errors><RequestID>ea966190-f9aa-478e-9ede-example</RequestID>"
                "</Response>",
            {{"Content-Type", "text/xml;charset=UTF-8"}}};
  }
  static TestHttpResponse Ok(const std::string& body) {
    return {200, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + body,
            {{"Content-Type", "text/xml;charset=UTF-8"}}};
  }

  static std::string InstanceXml(const FakeInstance& i) {
    // Trimmed from a real DescribeInstances answer: nested item lists
    // (groupSet, networkInterfaceSet, tagSet) that a parser must not confuse.
    return "<item><instanceId>" + i.id +
           "</instanceId><imageId>ami-0abcdef1234567890</imageId><instanceState><code>" +
           (i.state == "running" ? "16" : i.state == "pending" ? "0" : "48") +
           "</code><name>" + i.state +
           "</name></instanceState><privateDnsName>ip-10-0-0-12.ec2.internal</privateDnsName>"
           "<reason/><amiLaunchIndex>0</amiLaunchIndex><productCodes/>"
           "<instanceType>g5.xlarge</instanceType><launchTime>2026-11-22T04:00:00.000Z</launchTime>"
           "<placement><availabilityZone>us-east-1a</availabilityZone><tenancy>default</tenancy>"
           "</placement><monitoring><state>disabled</state></monitoring>"
           "<groupSet><item><groupId>sg-0123</groupId><groupName>default</groupName></item>"
           "</groupSet><networkInterfaceSet><item><networkInterfaceId>eni-1</networkInterfaceId>"
           "<privateIpAddressesSet><item><privateIpAddress>10.0.0.12</privateIpAddress>"
           "<primary>true</primary></item></privateIpAddressesSet></item></networkInterfaceSet>"
           "<tagSet><item><key>trainq:pool</key><value>" + i.pool +
           "</value></item><item><key>Name</key><value>" + i.name +
           "</value></item><item><key>trainq:instance</key><value>" + i.instance +
           "</value></item></tagSet><hypervisor>xen</hypervisor></item>";
  }

  TestHttpResponse Handle(const TestHttpRequest& req) {
    std::lock_guard lock(mu_);
    if (req.method != "POST" || req.target != "/") return Error(400, "InvalidAction", "POST /");
    auto form = ParseForm(req.body);
    actions_.push_back(form["Action"]);
    if (auto why = VerifySigV4(req, secrets, "us-east-1", "ec2"); !why.empty()) {
      rejection_ = why;
      return Error(401, "AuthFailure",
                   "AWS was not able to validate the provided access credentials");
    }
    if (form["Version"] != "2016-11-15") return Error(400, "InvalidParameterValue", "Version");
    if (inject_times_ > 0) {
      --inject_times_;
      return Error(inject_status_, inject_code_, "injected");
    }
    const std::string& action = form["Action"];
    if (action == "RunInstances") return Run(form);
    if (action == "DescribeInstances") return Describe(form);
    if (action == "GetConsoleOutput") {
      for (const auto& i : instances_) {
        if (i.id != form["InstanceId"]) continue;
        return Ok("<GetConsoleOutputResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">"
                  "<requestId>r</requestId><instanceId>" + i.id +
                  "</instanceId><timestamp>2026-11-22T04:10:00.000Z</timestamp><output>" +
                  Base64Encode(console_output) + "</output></GetConsoleOutputResponse>");
      }
      return Error(400, "InvalidInstanceID.NotFound", "The instance ID does not exist");
    }
    if (action == "TerminateInstances") return Terminate(form);
    if (action == "StopInstances") return StopOrStart(form, "stopping", "stopped");
    if (action == "StartInstances") return StopOrStart(form, "pending", "stopped");
    if (action == "CreateTags") {
      for (auto& i : instances_) {
        if (i.id != form["ResourceId.1"]) continue;
        if (form["Tag.1.Key"] == "Name") i.name = form["Tag.1.Value"];
        return Ok("<CreateTagsResponse><requestId>r</requestId><return>true</return>"
                  "</CreateTagsResponse>");
      }
      return Error(400, "InvalidInstanceID.NotFound", "no such instance");
    }
    if (action == "ModifyInstanceAttribute") {
      for (auto& i : instances_) {
        if (i.id != form["InstanceId"]) continue;
        if (i.state != "stopped") {
          return Error(400, "IncorrectInstanceState", "The instance is not in the 'stopped' state.");
        }
        i.user_data = Base64Decode(form["UserData.Value"]);
        return Ok("<ModifyInstanceAttributeResponse><requestId>r</requestId><return>true</return>"
                  "</ModifyInstanceAttributeResponse>");
      }
      return Error(400, "InvalidInstanceID.NotFound", "no such instance");
    }
    return Error(400, "InvalidAction", "The action " + action + " is not valid for this web service.");
  }

  TestHttpResponse Run(std::map<std::string, std::string>& f) {
    if (f["MinCount"] != "1" || f["MaxCount"] != "1" || f["ImageId"].empty() ||
        f["InstanceType"].empty()) {
      return Error(400, "MissingParameter", "ImageId, InstanceType, MinCount, MaxCount");
    }
    for (const auto& i : instances_) {
      if (!f["ClientToken"].empty() && i.client_token == f["ClientToken"]) {
        return Ok(RunXml(i));  // idempotent retry
      }
    }
    FakeInstance inst;
    inst.id = "i-0" + std::to_string(1000000 + instances_.size());
    inst.state = "pending";
    inst.client_token = f["ClientToken"];
    inst.user_data = Base64Decode(f["UserData"]);
    inst.form = f;
    if (f["TagSpecification.1.ResourceType"] != "instance") {
      return Error(400, "InvalidParameterValue", "TagSpecification");
    }
    for (int t = 1; t <= 10; ++t) {
      std::string k = f["TagSpecification.1.Tag." + std::to_string(t) + ".Key"];
      std::string v = f["TagSpecification.1.Tag." + std::to_string(t) + ".Value"];
      if (k == "Name") inst.name = v;
      if (k == "trainq:pool") inst.pool = v;
      if (k == "trainq:instance") inst.instance = v;
    }
    instances_.push_back(inst);
    return Ok(RunXml(inst));
  }

  static std::string RunXml(const FakeInstance& i) {
    return "<RunInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">"
           "<requestId>r-1</requestId><reservationId>r-0abc</reservationId>"
           "<ownerId>123456789012</ownerId><groupSet/><instancesSet>" +
           InstanceXml(i) + "</instancesSet></RunInstancesResponse>";
  }

  TestHttpResponse Describe(std::map<std::string, std::string>& f) {
    std::map<std::string, std::vector<std::string>> filters;
    for (int n = 1; n <= 10; ++n) {
      std::string name = f["Filter." + std::to_string(n) + ".Name"];
      if (name.empty()) continue;
      for (int v = 1; v <= 10; ++v) {
        auto it = f.find("Filter." + std::to_string(n) + ".Value." + std::to_string(v));
        if (it != f.end()) filters[name].push_back(it->second);
      }
    }
    auto match = [&](const std::string& key, const std::string& value) {
      auto it = filters.find(key);
      return it == filters.end() ||
             std::find(it->second.begin(), it->second.end(), value) != it->second.end();
    };
    std::vector<const FakeInstance*> hits;
    for (auto& i : instances_) {
      if (i.state == "pending") i.state = "running";  // boots between calls
      if (i.state == "stopping") i.state = "stopped";
      if (match("tag:trainq:pool", i.pool) && match("tag:trainq:instance", i.instance) &&
          match("instance-state-name", i.state)) {
        hits.push_back(&i);
      }
    }
    size_t start = f.count("NextToken") ? std::stoul(f["NextToken"]) : 0;
    std::string body =
        "<DescribeInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">"
        "<requestId>8f7724cf-496f-496e-8fe3-example</requestId><reservationSet>";
    size_t end = std::min(hits.size(), start + page_size);
    for (size_t k = start; k < end; ++k) {
      body += "<item><reservationId>r-" + std::to_string(k) +
              "</reservationId><ownerId>123456789012</ownerId><groupSet/><instancesSet>" +
              InstanceXml(*hits[k]) + "</instancesSet></item>";
    }
    body += "</reservationSet>";
    if (end < hits.size()) body += "<nextToken>" + std::to_string(end) + "</nextToken>";
    body += "</DescribeInstancesResponse>";
    return Ok(body);
  }

  // StopInstances: running -> stopping (-> stopped at the next describe);
  // StartInstances: stopped -> pending. `from` is the state required to start.
  TestHttpResponse StopOrStart(std::map<std::string, std::string>& f, const std::string& to,
                               const std::string& from) {
    std::string id = f["InstanceId.1"];
    for (auto& i : instances_) {
      if (i.id != id) continue;
      if (to == "pending" && i.state != from) {
        return Error(400, "IncorrectInstanceState", "not stopped");
      }
      i.state = to;
      return Ok("<Response><requestId>r</requestId><instancesSet><item><instanceId>" + id +
                "</instanceId></item></instancesSet></Response>");
    }
    return Error(400, "InvalidInstanceID.NotFound", "The instance ID '" + id + "' does not exist");
  }

  TestHttpResponse Terminate(std::map<std::string, std::string>& f) {
    std::string id = f["InstanceId.1"];
    for (auto& i : instances_) {
      if (i.id != id) continue;
      std::string prev = i.state;
      i.state = "shutting-down";
      return Ok("<TerminateInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">"
                "<requestId>r</requestId><instancesSet><item><instanceId>" + id +
                "</instanceId><currentState><code>32</code><name>shutting-down</name>"
                "</currentState><previousState><code>16</code><name>" + prev +
                "</name></previousState></item></instancesSet></TerminateInstancesResponse>");
    }
    return Error(400, "InvalidInstanceID.NotFound",
                 "The instance ID '" + id + "' does not exist");
  }

  mutable std::mutex mu_;
  std::vector<FakeInstance> instances_;
  std::vector<std::string> actions_;
  std::string rejection_;
  int inject_status_ = 0;
  std::string inject_code_;
  int inject_times_ = 0;
  testing::TestHttpServer server_;  // last: stops before the state goes
};

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
                           [](const Action& a) { return a.kind == ActionKind::kStop; });
  REQUIRE(stop != d.actions.end());
  CHECK(stop->machine == id);
  CHECK(stop->row == 1);
  CHECK_FALSE(std::any_of(d.actions.begin(), d.actions.end(),
                          [](const Action& a) { return a.kind == ActionKind::kBoot; }));
  REQUIRE(restarted->Stop(stop->machine));
  CHECK(restarted->List(kTag)->empty());
  CHECK(f.ec2.instances().at(0).state == "shutting-down");
}

TEST_CASE("EC2 provider under the autoscaler: instances that never register are backed off, "
          "the pool ends failing with their console output, DescribeInstances is paced") {
  Ec2Fixture f;
  f.ec2.console_output =
      "[   12.3] cloud-init[812]: running user data\n"
      "trainq worker: cannot reach http://10.0.0.1:8080/api/v1/workers/register: "
      "connection timed out\n";
  auto p = f.Make();
  PoolConfig c;
  c.name = "gpu";
  c.max = 2;
  c.slots = 1;
  c.boot_timeout_ms = 10 * 60'000;
  c.hourly_cost = 1.0;
  c.list_interval_ms = 15'000;  // the ec2 defaults
  c.list_interval_idle_ms = 120'000;
  AutoscalerOptions o;

  // The fleet's loop (agent/daemon/fleet.cc) around the pure functions, a pass a
  // second on a virtual clock, against the fake's wire format.
  std::vector<Machine> machines;
  std::set<std::int64_t> judged;
  BootHealth boot;
  std::string last_log;
  TimeMs next_list = 0;
  int boots = 0;
  const TimeMs t0 = 1'000'000'000;
  for (TimeMs now = t0; now < t0 + 2 * 3'600'000; now += 1000) {
    for (auto& m : machines) {
      if (judged.count(m.row) || JudgeBoot(m, now, o) == BootOutcome::kUndecided) continue;
      judged.insert(m.row);
      auto tail = p->LogTail(m.id, "", 2000);
      REQUIRE(tail);
      last_log = *tail;
      boot = RecordBoot(boot, JudgeBoot(m, now, o) == BootOutcome::kSucceeded, now, c, o);
    }
    PoolInput in;
    in.config = c;
    in.demand = 4;  // runs wait all along
    in.boot = boot;
    for (const auto& m : machines) {
      if (!m.stopped_at) in.machines.push_back(m);
    }
    if (now >= next_list) {
      auto listed = p->List({"gpu", "tq1"});
      REQUIRE(listed);
      in.listing = std::vector<std::string>{};
      for (const auto& l : *listed) in.listing->push_back(l.id);
    }
    Decision d = Autoscale({in}, now, o);
    bool active = !d.actions.empty();
    for (const auto& m : in.machines) active = active || m.state == MachineState::kBooting;
    if (in.listing) next_list = NextListAt(now, active, c, 0.5);
    for (const auto& a : d.actions) {
      if (a.kind == ActionKind::kBoot) {
        for (int k = 0; k < a.count; ++k) {
          auto id = p->Boot(Spec("tq-tq1-gpu-" + std::to_string(++boots), {"gpu", "tq1"}));
          REQUIRE(id);
          Machine m;
          m.row = boots;
          m.id = *id;
          m.state = MachineState::kBooting;
          m.booted_at = now;
          machines.push_back(m);
        }
      } else if (a.kind == ActionKind::kStop || a.kind == ActionKind::kForget) {
        for (auto& m : machines) {
          if (m.row != a.row) continue;
          if (a.kind == ActionKind::kStop) REQUIRE(p->Stop(m.id));
          m.state = MachineState::kStopped;
          m.stopped_at = now;
        }
      }
    }
  }
  CHECK(boot.failing);
  CHECK(boot.failed >= 3);
  // Two at first (max 2), both fail together at 10 min; failing then: 2 x 10
  // min billed. Without the back-off: a new pair every 10 min, 24 boots in 2 h.
  CHECK(boots == 3);
  TimeMs billed = 0;
  for (const auto& m : machines) billed += m.stopped_at.value_or(t0 + 2 * 3'600'000) - m.booted_at;
  CHECK(billed <= 3 * 10 * 60'000 + 3 * 2000);
  CHECK_THAT(last_log, Catch::Contains("trainq worker: cannot reach http://10.0.0.1:8080"));
  auto actions = f.ec2.actions();
  const auto describes = std::count(actions.begin(), actions.end(), "DescribeInstances");
  CHECK(std::count(actions.begin(), actions.end(), "GetConsoleOutput") == boots);
  // Paced: 15 s while booting, 2 min once nothing changes (before: 7200, one a pass).
  CHECK(describes < 200);
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
