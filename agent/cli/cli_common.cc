// What the commands share: the default database, opening one that exists,
// and the options that send a command to a running `trainq serve`.
#include "agent/cli/cli.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "queue/store.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {

Result<Store> OpenExisting(const std::string& db) {
  StoreOptions so;
  so.create = false;
  return Store::Open(db, so);
}

std::string UserDbPath() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  if (xdg && *xdg == '/') return (fs::path(xdg) / "trainq" / "trainq.db").string();
  const char* home = std::getenv("HOME");
  if (home && *home) return (fs::path(home) / ".local" / "share" / "trainq" / "trainq.db").string();
  return "trainq.db";
}

std::string DefaultDbPath() {
  const char* env = std::getenv("TRAINQ_DB");
  if (env && *env) return env;
  // A ./trainq.db from before the per-user default keeps working.
  std::error_code ec;
  if (fs::exists("trainq.db", ec)) return "trainq.db";
  return UserDbPath();
}

void AddServerOptions(CLI::App* c, std::string* server, std::string* token_file, ServerRole role,
                      const std::string& more) {
  const bool admin = role == ServerRole::kAdmin;
  c->add_option("--server", *server,
                std::string("Ask a running `trainq serve` (its base URL; needs its ") +
                    (admin ? "admin" : "read") + " token) instead of the database" + more)
      ->envname("TRAINQ_SERVER");
  c->add_option("--token-file", *token_file,
                std::string("File holding the server's ") + (admin ? "admin_token" : "read token") +
                    " (default: $" + (admin ? "TRAINQ_ADMIN_TOKEN" : "TRAINQ_READ_TOKEN") +
                    ", else the personal token `trainq login` kept for the server)");
}

}  // namespace trainq
