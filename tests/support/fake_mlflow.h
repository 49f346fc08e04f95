// The fake MLflow tracking server (tests/support/fake_mlflow.py) as a test
// fixture: plain HTTP on loopback, strict about every request, with test
// controls to fail calls on demand; stopped when destroyed.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/process.h"
#include "core/result.h"

namespace trainq::testing {

class FakeMlflow {
 public:
  // Started in `dir` (created); `token` "" = no Authorization checked.
  static Result<std::unique_ptr<FakeMlflow>> Start(const std::string& dir,
                                                   const std::string& token = "");
  ~FakeMlflow();

  const std::string& url() const { return url_; }  // http://127.0.0.1:PORT
  std::string Log() const;
  // {"experiments": [...], "runs": [...], "calls": {endpoint: n}, "errors": [...]}
  Result<nlohmann::json> State() const;
  // The next `times` calls of `endpoint` after `after` more answer `status`.
  Status Fail(const std::string& endpoint, int status, int times = 1, int after = 0,
              int retry_after_s = 1) const;

 private:
  FakeMlflow() = default;
  PosixProcessRunner runner_;
  int pid_ = 0;
  std::string dir_, url_;
};

}  // namespace trainq::testing
