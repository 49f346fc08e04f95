#include "tests/support/fake_mlflow.h"

#include <signal.h>

#include <chrono>
#include <filesystem>

#include "core/http_client.h"
#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::testing {

using nlohmann::json;

Result<std::unique_ptr<FakeMlflow>> FakeMlflow::Start(const std::string& dir,
                                                      const std::string& token) {
  std::unique_ptr<FakeMlflow> m(new FakeMlflow());
  m->dir_ = dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string port_file = dir + "/port";
  std::vector<std::string> argv = {"python3",
                                   std::string(TRAINQ_SOURCE_DIR) + "/tests/support/fake_mlflow.py",
                                   "--port-file", port_file};
  if (!token.empty()) {
    argv.push_back("--token");
    argv.push_back(token);
  }
  auto pid = m->runner_.Spawn({argv, {}, dir, dir + "/fake_mlflow.log"});
  if (!pid) return std::unexpected(pid.error().Wrap("fake mlflow"));
  m->pid_ = *pid;
  std::string port;
  bool up = WaitFor(
      [&] {
        if (auto p = ReadFile(port_file)) port = std::string(Trim(*p));
        return !port.empty() || m->runner_.Poll(m->pid_).has_value();
      },
      std::chrono::seconds(20));
  if (!up || port.empty()) return trainq::Fail(ErrorKind::kUnavailable, "fake mlflow did not start: " + m->Log());
  m->url_ = "http://127.0.0.1:" + port;
  return m;
}

FakeMlflow::~FakeMlflow() {
  if (pid_ > 0) {
    runner_.KillGroup(pid_, SIGTERM);
    runner_.Wait(pid_);
  }
}

std::string FakeMlflow::Log() const { return ReadFile(dir_ + "/fake_mlflow.log").value_or(""); }

Result<json> FakeMlflow::State() const {
  CurlHttpClient http;
  HttpRequest req;
  req.method = "GET";
  req.url = url_ + "/fake/state";
  ASSIGN_OR_RETURN(auto r, http.Send(req));
  if (r.status != 200) return trainq::Fail(ErrorKind::kInternal, "fake mlflow state: HTTP " + std::to_string(r.status));
  return json::parse(r.body);
}

Status FakeMlflow::Fail(const std::string& endpoint, int status, int times, int after,
                        int retry_after_s) const {
  CurlHttpClient http;
  HttpRequest req;
  req.method = "POST";
  req.url = url_ + "/fake/fail";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = json{{"endpoint", endpoint}, {"status", status}, {"times", times}, {"after", after},
                  {"retry_after", retry_after_s}}.dump();
  ASSIGN_OR_RETURN(auto r, http.Send(req));
  if (r.status != 200) return trainq::Fail(ErrorKind::kInternal, "fake mlflow fail: HTTP " + std::to_string(r.status));
  return {};
}

}  // namespace trainq::testing
