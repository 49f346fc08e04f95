#include "cloud/ec2_provider.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "cloud/mini_xml.h"
#include "core/strings.h"

namespace trainq::cloud {

namespace {

constexpr const char* kVersion = "2016-11-15";

struct Credentials {
  std::string access_key, secret_key, session_token;
};

Result<Credentials> LoadCredentials(const std::map<std::string, std::string>& params) {
  Credentials c;
  auto file = params.find("credentials_file");
  if (file != params.end()) {
    auto it = params.find("profile");
    std::string profile = it == params.end() ? "default" : it->second;
    auto text = ReadFile(file->second);
    if (!text) {
      return Fail(ErrorKind::kInvalidArgument,
                  "ec2: params.credentials_file: cannot read " + file->second + ": " +
                      text.error().message);
    }
    std::string section;
    for (const auto& raw : Split(*text, '\n')) {
      auto line = Trim(raw);
      if (line.empty() || line[0] == '#' || line[0] == ';') continue;
      if (line.front() == '[' && line.back() == ']') {
        section = std::string(Trim(line.substr(1, line.size() - 2)));
        if (section.starts_with("profile ")) section = std::string(Trim(section.substr(8)));
        continue;
      }
      if (section != profile) continue;
      auto eq = line.find('=');
      if (eq == std::string_view::npos) continue;
      std::string key(Trim(line.substr(0, eq)));
      std::string value(Trim(line.substr(eq + 1)));
      if (key == "aws_access_key_id") c.access_key = value;
      if (key == "aws_secret_access_key") c.secret_key = value;
      if (key == "aws_session_token") c.session_token = value;
    }
    if (c.access_key.empty() || c.secret_key.empty()) {
      return Fail(ErrorKind::kInvalidArgument,
                  "ec2: " + file->second + ": profile [" + profile +
                      "] has no aws_access_key_id and aws_secret_access_key");
    }
    return c;
  }
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  c.access_key = env("AWS_ACCESS_KEY_ID");
  c.secret_key = env("AWS_SECRET_ACCESS_KEY");
  c.session_token = env("AWS_SESSION_TOKEN");
  if (c.access_key.empty() || c.secret_key.empty()) {
    return Fail(ErrorKind::kInvalidArgument,
                "ec2: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                "params.credentials_file");
  }
  return c;
}

bool Retryable(const std::string& code, int status) {
  static const std::set<std::string> kCodes = {
      "RequestLimitExceeded",       "Throttling",
      "ThrottlingException",        "InsufficientInstanceCapacity",
      "InsufficientHostCapacity",   "InsufficientCapacity",
      "InsufficientReservedInstanceCapacity", "Unavailable",
      "ServiceUnavailable",         "InternalError",
      "InternalFailure",            "RequestTimeout",
      "MaxSpotInstanceCountExceeded"};
  return status >= 500 || kCodes.count(code) > 0;
}

}  // namespace

std::string Base64Encode(std::string_view data) {
  static const char* kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < data.size(); i += 3) {
    unsigned v = (static_cast<unsigned char>(data[i]) << 16) |
                 (static_cast<unsigned char>(data[i + 1]) << 8) |
                 static_cast<unsigned char>(data[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == data.size()) {
    unsigned v = static_cast<unsigned char>(data[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == data.size()) {
    unsigned v = (static_cast<unsigned char>(data[i]) << 16) |
                 (static_cast<unsigned char>(data[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

Ec2Provider::Ec2Provider(HttpClient* http, std::map<std::string, std::string> params)
    : http_(http), params_(std::move(params)) {
  endpoint_ = Param("endpoint");
  if (endpoint_.empty()) endpoint_ = "https://ec2." + Param("region") + ".amazonaws.com/";
  if (endpoint_.find('/', endpoint_.find("://") + 3) == std::string::npos) endpoint_ += "/";
}

std::string Ec2Provider::Param(const std::string& key) const {
  auto it = params_.find(key);
  return it == params_.end() ? "" : it->second;
}

std::string Ec2Provider::UserData(const BootSpec& spec, const std::string& prefix) {
  std::string s = "#!/bin/sh\n";
  s += "# trainq worker " + spec.name + " (pool " + spec.tag.pool + ")\n";
  if (!prefix.empty()) s += prefix + (prefix.back() == '\n' ? "" : "\n");
  s += "set -e\n";
  std::string token_file;
  for (size_t i = 0; i + 1 < spec.worker_argv.size(); ++i) {
    if (spec.worker_argv[i] == "--token-file") token_file = spec.worker_argv[i + 1];
  }
  if (!token_file.empty() && !spec.token.empty()) {
    auto dir = std::filesystem::path(token_file).parent_path().string();
    s += "umask 077\n";
    if (!dir.empty()) s += "mkdir -p " + ShellQuote(dir) + "\n";
    s += "printf '%s\\n' " + ShellQuote(spec.token) + " > " + ShellQuote(token_file) + "\n";
    s += "chmod 600 " + ShellQuote(token_file) + "\n";
    s += "umask 022\n";
  }
  s += "exec";
  for (const auto& a : spec.worker_argv) s += " " + ShellQuote(a);
  s += "\n";
  return s;
}

// A warm pool's instances boot again from stopped: their user data must run
// at every boot, not only the first (AWS's documented cloud-init recipe: a
// MIME multipart whose cloud-config runs scripts-user "always").
std::string Ec2Provider::WarmUserData(const std::string& script) {
  return "Content-Type: multipart/mixed; boundary=\"//\"\nMIME-Version: 1.0\n\n"
         "--//\nContent-Type: text/cloud-config; charset=\"us-ascii\"\nMIME-Version: 1.0\n"
         "Content-Transfer-Encoding: 7bit\n"
         "Content-Disposition: attachment; filename=\"cloud-config.txt\"\n\n"
         "#cloud-config\ncloud_final_modules:\n- [scripts-user, always]\n\n"
         "--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\nMIME-Version: 1.0\n"
         "Content-Transfer-Encoding: 7bit\n"
         "Content-Disposition: attachment; filename=\"userdata.txt\"\n\n" +
         script + "--//--\n";
}

Result<std::string> Ec2Provider::Call(const std::string& action, Form form) {
  ASSIGN_OR_RETURN(auto creds, LoadCredentials(params_));
  form.insert(form.begin(), {{"Action", action}, {"Version", kVersion}});
  std::string body;
  for (const auto& [k, v] : form) {
    body += (body.empty() ? "" : "&") + UrlEncode(k) + "=" + UrlEncode(v);
  }
  HttpRequest req;
  req.method = "POST";
  req.url = endpoint_;
  req.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}};
  req.body = std::move(body);
  req.timeout_ms = 60'000;
  req.aws_sigv4 = AwsSigV4{"aws:amz:" + Param("region") + ":ec2", creds.access_key,
                           creds.secret_key, creds.session_token};
  auto resp = http_->Send(req);
  if (!resp) return std::unexpected(resp.error().Wrap("ec2 " + action));
  if (resp->ok()) return std::move(resp->body);
  // <Response><Errors><Error><Code>..</Code><Message>..</Message></Error></Errors>
  std::string code, message;
  if (auto xml = ParseXml(resp->body)) {
    const XmlNode* err = xml->Find("Errors/Error");
    if (!err) err = xml->Find("Error");  // some endpoints answer <ErrorResponse><Error>
    if (err) {
      code = err->Text("Code");
      message = err->Text("Message");
    }
  }
  std::string what = "ec2 " + action + ": HTTP " + std::to_string(resp->status);
  if (!code.empty()) what += ": " + code;
  if (!message.empty()) what += ": " + message;
  if (code.empty() && message.empty() && !resp->body.empty()) {
    what += ": " + std::string(Trim(resp->body.substr(0, 300)));
  }
  if (code == "AuthFailure" || code == "SignatureDoesNotMatch" || code == "InvalidClientTokenId" ||
      code == "UnauthorizedOperation" || code == "OptInRequired" || resp->status == 401 ||
      resp->status == 403) {
    what += " (check the credentials and their permissions)";
  }
  return Fail(Retryable(code, resp->status) ? ErrorKind::kUnavailable
                                            : ErrorKind::kInvalidArgument,
              what);
}

Result<std::string> Ec2Provider::Boot(const BootSpec& spec) {
  if (spec.worker_argv.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "ec2: boot: no worker command");
  }
  std::string user_data = UserData(spec, Param("user_data_prefix"));
  if (Param("on_stop") == "stop") {
    user_data = WarmUserData(user_data);
    ASSIGN_OR_RETURN(auto warm, StartStopped(spec, user_data));
    if (!warm.empty()) return warm;
  }
  Form f = {{"ImageId", Param("image")},
            {"InstanceType", Param("instance_type")},
            {"MinCount", "1"},
            {"MaxCount", "1"},
            {"ClientToken", spec.name.substr(0, 64)},
            {"UserData", Base64Encode(user_data)},
            {"TagSpecification.1.ResourceType", "instance"},
            {"TagSpecification.1.Tag.1.Key", "trainq:pool"},
            {"TagSpecification.1.Tag.1.Value", spec.tag.pool},
            {"TagSpecification.1.Tag.2.Key", "trainq:instance"},
            {"TagSpecification.1.Tag.2.Value", spec.tag.instance},
            {"TagSpecification.1.Tag.3.Key", "Name"},
            {"TagSpecification.1.Tag.3.Value", spec.name}};
  if (auto v = Param("subnet"); !v.empty()) f.emplace_back("SubnetId", v);
  int g = 0;
  for (const auto& sg : Split(Param("security_groups"), ',')) {
    auto t = std::string(Trim(sg));
    if (!t.empty()) f.emplace_back("SecurityGroupId." + std::to_string(++g), t);
  }
  if (auto v = Param("key_name"); !v.empty()) f.emplace_back("KeyName", v);
  if (auto v = Param("iam_instance_profile"); !v.empty()) {
    f.emplace_back("IamInstanceProfile.Name", v);
  }
  if (Param("market") == "spot") {
    f.emplace_back("InstanceMarketOptions.MarketType", "spot");
    f.emplace_back("InstanceMarketOptions.SpotOptions.SpotInstanceType", "one-time");
    f.emplace_back("InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior", "terminate");
    if (auto v = Param("max_price"); !v.empty()) {
      f.emplace_back("InstanceMarketOptions.SpotOptions.MaxPrice", v);
    }
  }
  ASSIGN_OR_RETURN(auto body, Call("RunInstances", std::move(f)));
  auto xml = ParseXml(body);
  if (!xml) return std::unexpected(xml.error().Wrap("ec2 RunInstances"));
  std::string id = xml->Text("instancesSet/item/instanceId");
  if (id.empty()) {
    return Fail(ErrorKind::kCorruption, "ec2 RunInstances: no instanceId in the answer");
  }
  return id;
}

Result<std::string> Ec2Provider::StartStopped(const BootSpec& spec,
                                              const std::string& user_data) {
  ASSIGN_OR_RETURN(auto stopped, Describe(spec.tag, {"stopped"}));
  if (stopped.empty()) return std::string();
  const std::string id = stopped.front().id;
  // Renamed and given the new worker command line before it starts; a crash
  // in between leaves a stopped instance that the next Boot takes again.
  TRY(Call("CreateTags", {{"ResourceId.1", id}, {"Tag.1.Key", "Name"}, {"Tag.1.Value", spec.name}}));
  TRY(Call("ModifyInstanceAttribute",
           {{"InstanceId", id}, {"UserData.Value", Base64Encode(user_data)}}));
  TRY(Call("StartInstances", {{"InstanceId.1", id}}));
  return id;
}

Result<std::vector<ListedMachine>> Ec2Provider::List(const MachineTag& tag) {
  return Describe(tag, {"pending", "running"});
}

Result<std::vector<ListedMachine>> Ec2Provider::Describe(const MachineTag& tag,
                                                        const std::vector<std::string>& states) {
  std::vector<ListedMachine> out;
  std::string next;
  for (int page = 0; page < 100; ++page) {
    Form f = {{"Filter.1.Name", "tag:trainq:pool"},     {"Filter.1.Value.1", tag.pool},
              {"Filter.2.Name", "tag:trainq:instance"}, {"Filter.2.Value.1", tag.instance},
              {"Filter.3.Name", "instance-state-name"}};
    for (size_t i = 0; i < states.size(); ++i) {
      f.emplace_back("Filter.3.Value." + std::to_string(i + 1), states[i]);
    }
    if (!next.empty()) f.emplace_back("NextToken", next);
    ASSIGN_OR_RETURN(auto body, Call("DescribeInstances", std::move(f)));
    auto xml = ParseXml(body);
    if (!xml) return std::unexpected(xml.error().Wrap("ec2 DescribeInstances"));
    const XmlNode* reservations = xml->Child("reservationSet");
    for (const XmlNode* r : reservations ? reservations->Children("item")
                                         : std::vector<const XmlNode*>{}) {
      const XmlNode* instances = r->Child("instancesSet");
      if (!instances) continue;
      for (const XmlNode* inst : instances->Children("item")) {
        std::string id = inst->Text("instanceId");
        std::string state = inst->Text("instanceState/name");
        if (id.empty() || std::find(states.begin(), states.end(), state) == states.end()) continue;
        MachineTag t;
        std::string name;
        if (const XmlNode* tags = inst->Child("tagSet")) {
          for (const XmlNode* item : tags->Children("item")) {
            std::string key = item->Text("key");
            if (key == "trainq:pool") t.pool = item->Text("value");
            if (key == "trainq:instance") t.instance = item->Text("value");
            if (key == "Name") name = item->Text("value");
          }
        }
        if (!(t == tag)) continue;  // the filter did it already; belt and braces
        out.push_back(ListedMachine{id, t, name});
      }
    }
    next = xml->Text("nextToken");
    if (next.empty()) return out;
  }
  return Fail(ErrorKind::kInternal, "ec2 DescribeInstances: more than 100 pages");
}

Status Ec2Provider::Stop(const std::string& id) {
  if (id.empty()) return Fail(ErrorKind::kInvalidArgument, "ec2: stop: empty instance id");
  auto body = Call(Param("on_stop") == "stop" ? "StopInstances" : "TerminateInstances",
                   {{"InstanceId.1", id}});
  if (!body) {
    const auto& m = body.error().message;
    if (m.find("InvalidInstanceID.NotFound") != std::string::npos) return {};
    return std::unexpected(body.error());
  }
  return {};
}

Result<std::string> Ec2Provider::LogTail(const std::string& id, const std::string&,
                                         std::size_t max_bytes) {
  if (id.empty()) return Fail(ErrorKind::kNotFound, "ec2: no instance id");
  ASSIGN_OR_RETURN(auto body, Call("GetConsoleOutput", {{"InstanceId", id}, {"Latest", "true"}}));
  auto xml = ParseXml(body);
  if (!xml) return std::unexpected(xml.error().Wrap("ec2 GetConsoleOutput"));
  std::string encoded = xml->Text("output");
  if (encoded.empty()) return Fail(ErrorKind::kNotFound, "ec2: no console output yet for " + id);
  ASSIGN_OR_RETURN(auto text, DecodeBase64(encoded));
  return TailBytes(text, max_bytes);
}

Result<std::string> DecodeBase64(std::string_view data) {
  std::string out;
  unsigned v = 0;
  int bits = 0;
  for (char c : data) {
    int d;
    if (c >= 'A' && c <= 'Z') {
      d = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      d = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      d = c - '0' + 52;
    } else if (c == '+') {
      d = 62;
    } else if (c == '/') {
      d = 63;
    } else if (c == '=' || c == '\n' || c == '\r' || c == ' ') {
      continue;
    } else {
      return Fail(ErrorKind::kCorruption, "not base64");
    }
    v = (v << 6) | static_cast<unsigned>(d);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return out;
}

}  // namespace trainq::cloud
