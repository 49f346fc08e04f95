// The live web dashboard of `trainq serve`, on its HTTP listener:
//   GET  /, /experiment/NAME, /commit/SHA, /run/ID, /machines, /sweeps
//                                   the page (one HTML page, its JS and CSS compiled in)
//   GET  /dash/app.js, /dash/app.css
//   GET  /dash/api/...              the documents the CLI prints (status, show --json,
//                                   report json), a run's log tail and metric curve
//   GET  /dash/events               server-sent events: "the store changed"
//   POST /dash/api/action           cancel a batch or a run, add seeds (admin only)
// Access: `?token=READ_TOKEN` (or ADMIN_TOKEN) on any page sets an HttpOnly,
// SameSite=Strict cookie signed with a key derived from the tokens and
// redirects to the address without the token; without a valid cookie every
// route answers 401 with no data. Actions need an admin cookie and the
// session's CSRF token in the X-CSRF-Token header, and are logged with who.
// Threading: Handle() is called from the listener's threads at once; each
// data request opens its own read connection. One watcher thread (started by
// the first events request) polls the store's data_version and wakes the
// event streams.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "agent/daemon/server_http.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"

namespace trainq {

struct DashboardOptions {
  TimeMs event_hold_ms = 15'000;  // an events request waits this long for a change
  TimeMs watch_ms = 200;          // the watcher reads data_version this often
  int max_streams = 64;           // events requests waiting at once; more answer at once
  std::int64_t max_log_bytes = 64 << 10;  // one log request returns at most this much
};

class Dashboard {
 public:
  Dashboard(const ServerConfig& config, std::string db_path, std::string data_dir,
            const Clock& clock, DashboardOptions options = {});
  ~Dashboard();  // stops the watcher
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  // Whether `path` (trailing slashes removed) is one of the dashboard's.
  static bool Owns(const std::string& path);
  HttpServerReply Handle(const HttpServerRequest& request, const std::string& path);
  // "http://HOST:PORT/?token=TOKEN" for `listen` ("127.0.0.1:8080"): a read
  // token made at this start, never the configured read_token.
  std::string Url(const std::string& listen) const;
  // Waiting event streams answer now and new ones do not wait (shutdown).
  void Stop();

 private:
  enum class Role { kNone, kRead, kAdmin };
  struct Session {
    Role role = Role::kNone;
    std::string id;  // the cookie's nonce: who, in the action log
  };
  Session SessionOf(const HttpServerRequest& req) const;
  std::string CsrfToken(const Session& s) const;
  HttpServerReply Login(const HttpServerRequest& req, const std::string& path,
                        const std::string& token);
  HttpServerReply Data(const HttpServerRequest& req, const std::string& path, const Session& s);
  HttpServerReply Events(const HttpServerRequest& req);
  HttpServerReply Action(const HttpServerRequest& req, const Session& s);
  void StartWatcher();
  void Watch();

  const ServerConfig& config_;
  std::string db_path_;
  std::string data_dir_;
  const Clock& clock_;
  DashboardOptions options_;
  std::string read_token_;   // the config's (may be empty)
  std::string login_token_;  // made at start: the logged address's, a read session
  std::string key_;         // signs cookies and CSRF tokens
  std::string boot_;        // this process's event ids start with it

  std::mutex mu_;  // guards what follows
  std::condition_variable cv_;
  std::uint64_t generation_ = 0;  // store changes seen since start
  int streams_ = 0;
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace trainq
