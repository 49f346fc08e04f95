#include "agent/daemon/server_context.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "agent/daemon/read_api.h"

namespace trainq {

ServerContext::ServerContext(const ServerConfig& config, std::string db_path, const Clock& clock,
                             ServerOptions options)
    : config_(config), db_path_(std::move(db_path)), clock_(clock), options_(std::move(options)) {}

Status ServerContext::Open() {
  ASSIGN_OR_RETURN(auto w, Store::Open(db_path_));
  ASSIGN_OR_RETURN(auto r, Store::Open(db_path_));
  {
    MutexLock lock(write_mu);
    write_store.emplace(std::move(w));
    write_store->UseFineBusyWait();  // a webhook waits for the worker's writes in 1 ms steps
  }
  MutexLock lock(read_mu);
  read_store.emplace(std::move(r));
  read_store->UseFineBusyWait();
  return {};
}

std::string ServerContext::DataDir() const {
  if (!options_.data_dir.empty()) return options_.data_dir;
  auto parent = std::filesystem::path(db_path_).parent_path();
  return parent.empty() ? "." : parent.string();
}

Principal ServerContext::Caller(const HttpServerRequest& req, bool touch) {
  const TimeMs now = clock_.Now();
  Principal p;
  {
    MutexLock lock(read_mu);
    p = IdentifyBearer(config_, read_store ? &*read_store : nullptr, req.headers, now);
  }
  if (p.token_id && touch) {
    MutexLock lock(write_mu);
    if (auto st = write_store->access().TouchToken(p.token_id, now, req.peer, 60'000); !st) {
      spdlog::warn("api: the last use of token {} was not recorded: {}", p.token_id,
                   st.error().message);
    }
  }
  if (!p.refused.empty()) {
    if (auto skipped = refused_token_log_.Allow(now)) {
      spdlog::warn("api: {} {} from {} was refused: {}{}", req.method, req.path, req.peer,
                   p.refused,
                   *skipped ? " (" + std::to_string(*skipped) + " more since the last such line)"
                            : std::string());
    }
  }
  return p;
}

int ServerContext::ReadAccess(const HttpServerRequest& req) {
  Principal p = Caller(req, true);
  if (p.role != AccessRole::kNone) return 0;
  // A refused personal token is a 401 (revoked, expired, unknown); anything
  // else answers as before people: 403 while no read token is configured.
  auto auth = FindHeader(req.headers, "Authorization").value_or("");
  if (auth.starts_with(std::string("Bearer ") + std::string(kPersonalTokenPrefix))) return 401;
  return CheckReadToken(config_, req.headers) == 403 ? 403 : 401;
}

}  // namespace trainq
