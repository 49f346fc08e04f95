// A fake of EC2's query API on loopback, as much of it as the EC2 provider
// (cloud/ec2_provider.h) uses: RunInstances, DescribeInstances (tag filters,
// pages), TerminateInstances, Stop/StartInstances, CreateTags,
// ModifyInstanceAttribute, GetConsoleOutput. It answers with EC2's XML shapes
// and checks every request's AWS Signature Version 4 (the algorithm
// re-implemented here from AWS's documentation, with OpenSSL), so a test of
// the provider, or of the fleet over it, speaks the real wire format.
#pragma once

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "cloud/ec2_provider.h"
#include "core/strings.h"
#include "tests/support/http_server.h"

namespace trainq::testing {

using cloud::Base64Encode;

inline std::string Hex(const unsigned char* p, size_t n) {
  static const char* k = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += k[p[i] >> 4];
    out += k[p[i] & 15];
  }
  return out;
}

inline std::string Sha256Hex(std::string_view s) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), md);
  return Hex(md, sizeof md);
}

inline std::string Hmac(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len);
  return std::string(reinterpret_cast<char*>(md), len);
}

inline std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

inline std::string UrlDecode(std::string_view s) {
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

inline std::map<std::string, std::string> ParseForm(std::string_view body) {
  std::map<std::string, std::string> out;
  for (const auto& pair : Split(body, '&')) {
    auto eq = pair.find('=');
    if (eq == std::string::npos) continue;
    out[UrlDecode(pair.substr(0, eq))] = UrlDecode(pair.substr(eq + 1));
  }
  return out;
}

inline std::string Base64Decode(std::string_view in) {
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
inline std::string VerifySigV4(const TestHttpRequest& req,
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
  TestHttpServer server_;  // last: stops before the state goes
};

}  // namespace trainq::testing
