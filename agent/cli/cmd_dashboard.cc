// `trainq dashboard-link`: a one-time sign-in link to a running serve's
// dashboard, asked with the read or admin token (POST /dash/api/login-link),
// so that no long-lived token goes into a browser's address bar.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "agent/cli/cli.h"
#include "agent/cli/read_client.h"
#include "core/strings.h"

using nlohmann::json;

namespace trainq {

Status CmdDashboardLink(const DashboardLinkOptions& o, std::ostream& out) {
  if (o.server.empty()) {
    return Fail(ErrorKind::kInvalidArgument,
                "--server: the base URL of a running `trainq serve` is required (or "
                "$TRAINQ_SERVER)");
  }
  ASSIGN_OR_RETURN(std::string token,
                   o.admin ? ReadAdminToken(o.token_file, o.server) : ReadToken(o.token_file, o.server));
  ReadClient client(o.server, token);
  ASSIGN_OR_RETURN(json link, client.LoginLink());
  if (o.json) {
    out << link.dump(2) << "\n";
    return {};
  }
  out << link.value("url", "") << "\n";
  std::cerr << "a one-time " << link.value("role", "read") << " sign-in link, good for "
            << FormatDuration(link.value("expires_in_s", std::int64_t{0}) * 1000)
            << ": it works once\n";
  return {};
}

void AddDashboardLinkCommand(CLI::App& app, const CliContext& ctx) {
  auto o = std::make_shared<DashboardLinkOptions>();
  auto* c = app.add_subcommand(
      "dashboard-link",
      "Print a one-time sign-in link to a running serve's dashboard (asked with its read or "
      "admin token)");
  c->add_option("--server", o->server, "The base URL of the `trainq serve` to sign in to")
      ->envname("TRAINQ_SERVER");
  c->add_flag("--admin", o->admin,
              "An admin session (the admin token: --token-file or $TRAINQ_ADMIN_TOKEN); else a "
              "read session (the read token: --token-file or $TRAINQ_READ_TOKEN)");
  c->add_option("--token-file", o->token_file, "File holding the token");
  c->add_flag("--json", o->json, "Print {url, role, expires_in_s} as JSON");
  c->callback([=] { *ctx.exit_code = ReportStatus(CmdDashboardLink(*o, std::cout)); });
}

}  // namespace trainq
