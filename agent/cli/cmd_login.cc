// `trainq login`, `trainq logout` and `trainq audit` (issue 41): keep a
// personal token made on the dashboard's account page for a server, and
// list the audit trail (from the database, or from a server with --server).
#include <termios.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "agent/cli/cli.h"
#include "agent/cli/credentials.h"
#include "agent/cli/read_client.h"
#include "agent/daemon/access.h"
#include "core/strings.h"
#include "queue/access.h"
#include "queue/store.h"

using nlohmann::json;

namespace trainq {

namespace {

struct LoginOptions {
  std::string server;
  std::string token_file;
};

struct AuditOptions {
  std::string db;
  std::string server;
  std::string token_file;
  std::string since = "7d";
  int limit = 1000;
  bool json = false;
};

// One line from stdin; on a terminal, asked for without echo.
Result<std::string> ReadPastedToken() {
  bool tty = ::isatty(STDIN_FILENO);
  termios old {};
  if (tty) {
    std::cerr << "Paste a personal token (made on the dashboard's account page): " << std::flush;
    if (::tcgetattr(STDIN_FILENO, &old) == 0) {
      termios quiet = old;
      quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
      ::tcsetattr(STDIN_FILENO, TCSANOW, &quiet);
    }
  }
  std::string line;
  std::getline(std::cin, line);
  if (tty) {
    ::tcsetattr(STDIN_FILENO, TCSANOW, &old);
    std::cerr << "\n";
  }
  std::string t(Trim(line));
  if (t.empty()) {
    return Fail(ErrorKind::kInvalidArgument,
                "no token given: paste a personal token made on the dashboard's account page "
                "(/account), or give --token-file FILE");
  }
  return t;
}

Status CmdLogin(const LoginOptions& o, std::ostream& out) {
  if (o.server.empty()) {
    return Fail(ErrorKind::kInvalidArgument,
                "--server: the base URL of a running `trainq serve` is required (or "
                "$TRAINQ_SERVER)");
  }
  std::string token;
  if (!o.token_file.empty()) {
    ASSIGN_OR_RETURN(auto text, ReadFile(o.token_file));
    token = std::string(Trim(text));
  } else {
    ASSIGN_OR_RETURN(token, ReadPastedToken());
  }
  // Checked before it is kept: a typo is said now, not at the next command.
  ReadClient client(o.server, token);
  auto who = client.Whoami();
  if (!who) {
    return std::unexpected(who.error().Wrap("the token was not accepted; nothing was kept"));
  }
  std::string name = (*who)["who"].get<std::string>();
  std::string role = (*who)["role"].get<std::string>();
  if (!who->value("personal", false)) {
    out << "note: this is the server's shared " << name
        << ", not a personal token; it is kept all the same\n";
  }
  TRY(StoreToken(o.server, token, name, role));
  out << "signed in to " << ServerKey(o.server) << " as " << name << " (" << role << ")";
  if (who->contains("expires_ms") && (*who)["expires_ms"].is_number_integer()) {
    out << "; the token expires " << FormatTimestamp((*who)["expires_ms"].get<std::int64_t>())
        << " UTC";
  }
  out << "\nthe token is kept in " << CredentialsPath()
      << " (mode 0600) and used by every --server command for this server\n";
  return {};
}

Status CmdLogout(const LoginOptions& o, std::ostream& out) {
  if (o.server.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "--server: which server's token to forget");
  }
  ASSIGN_OR_RETURN(bool forgot, ForgetToken(o.server));
  out << (forgot ? "forgot the token kept for " : "no token was kept for ") << ServerKey(o.server)
      << (forgot ? " (revoke it on the dashboard's account page to end it everywhere)\n" : "\n");
  return {};
}

Status CmdAudit(const AuditOptions& o, const Clock& clock, std::ostream& out) {
  std::vector<Access::AuditRow> rows;
  if (!o.server.empty()) {
    ASSIGN_OR_RETURN(auto token, ReadAdminToken(o.token_file, o.server));
    ReadClient client(o.server, token);
    ASSIGN_OR_RETURN(auto j, client.Audit(o.since, o.limit));
    if (o.json) {
      out << j["audit"].dump(2) << "\n";
      return {};
    }
    for (const auto& r : j["audit"]) {
      rows.push_back({r.value("id", std::int64_t{0}), r.value("at_ms", std::int64_t{0}),
                      r.value("who", ""), r.value("action", ""), r.value("target", ""),
                      r.value("detail", ""), r.value("address", "")});
    }
  } else {
    ASSIGN_OR_RETURN(auto seconds, ParseDurationSeconds(o.since));
    ASSIGN_OR_RETURN(auto store, Store::Open(o.db, {.create = false}));
    ASSIGN_OR_RETURN(rows, store.access().AuditSince(clock.Now() - seconds * 1000, o.limit));
    if (o.json) {
      out << AuditJson(rows).dump(2) << "\n";
      return {};
    }
  }
  out << AuditText(rows);
  return {};
}

}  // namespace

void AddLoginCommands(CLI::App& app, const CliContext& ctx) {
  auto login = std::make_shared<LoginOptions>();
  auto* c = app.add_subcommand(
      "login",
      "Keep a personal token for a server (paste one made on its dashboard's account page); "
      "every --server command then uses it");
  c->add_option("--server", login->server, "The base URL of the `trainq serve`")
      ->envname("TRAINQ_SERVER");
  c->add_option("--token-file", login->token_file,
                "Read the token from this file instead of the terminal");
  c->callback([=] { *ctx.exit_code = ReportStatus(CmdLogin(*login, std::cout)); });

  auto logout = std::make_shared<LoginOptions>();
  auto* c_out = app.add_subcommand("logout", "Forget the token `trainq login` kept for a server");
  c_out->add_option("--server", logout->server, "The base URL of the `trainq serve`")
      ->envname("TRAINQ_SERVER");
  c_out->callback([=] { *ctx.exit_code = ReportStatus(CmdLogout(*logout, std::cout)); });

  auto audit = std::make_shared<AuditOptions>();
  auto* c_audit = app.add_subcommand(
      "audit",
      "Who did what, when, from where: cancels, retries, added seeds, pool resets, tokens made "
      "and revoked, sign-ins and failed sign-ins, newest first");
  c_audit->add_option("--since", audit->since, "How far back: 90m, 12h, 7d (default 7d)");
  c_audit->add_option("--limit", audit->limit, "At most this many rows (default 1000)")
      ->check(CLI::Range(1, 100'000));
  c_audit->add_flag("--json", audit->json, "Print the rows as a JSON array");
  c_audit->add_option("--server", audit->server,
                      "Ask a running `trainq serve` (an admin: the admin token or an admin's "
                      "personal token) instead of reading the database")
      ->envname("TRAINQ_SERVER");
  c_audit->add_option("--token-file", audit->token_file,
                      "With --server: file holding the token (else $TRAINQ_ADMIN_TOKEN, else "
                      "the one `trainq login` kept)");
  c_audit->callback([=] {
    audit->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdAudit(*audit, *ctx.clock, std::cout));
  });
}

}  // namespace trainq
