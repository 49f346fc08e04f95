// `trainq notify test NAME` and `trainq notify status` (issue 43;
// agent/triggers/notify.h, docs/notifications.md).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "agent/cli/cli.h"
#include "agent/triggers/notify.h"
#include "agent/triggers/server_config.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "queue/outbox.h"
#include "queue/store.h"

namespace trainq {

namespace {

struct NotifyTestOptions {
  std::string config;
  std::string name;
};

Status CmdNotifyTest(const NotifyTestOptions& o, const Clock& clock, std::ostream& out) {
  ASSIGN_OR_RETURN(auto config, LoadServerConfig(o.config));
  const NotifyTarget* t = nullptr;
  std::string names;
  for (const auto& n : config.notify) {
    if (n.name == o.name) t = &n;
    names += (names.empty() ? "" : ", ") + n.name;
  }
  if (!t) {
    return Fail(ErrorKind::kNotFound, o.config + ": no notify target named \"" + o.name + "\" (" +
                                          (names.empty() ? "the file has no `notify:`"
                                                         : "it has " + names) + ")");
  }
  CurlHttpClient http;
  const TimeMs start = clock.Now();
  TRY(SendNotifyNow(*t, SampleNotifyEvent(config, start), http));
  out << "sent a test message to " << t->name << " ("
      << (t->kind == NotifyTarget::Kind::kSlack ? "Slack webhook from " + t->slack_url.source
                                                : "webhook " + UrlForLog(t->url) + ", signed")
      << "): accepted in " << clock.Now() - start << " ms\n";
  return {};
}

struct NotifyStatusOptions {
  std::string db;
  bool json = false;
};

std::string When(const std::optional<TimeMs>& ms) {
  return ms ? FormatTimestamp(*ms) + " UTC" : std::string("never");
}

Status CmdNotifyStatus(const NotifyStatusOptions& o, std::ostream& out) {
  StoreOptions so;
  so.create = false;
  ASSIGN_OR_RETURN(auto store, Store::Open(o.db, so));
  ASSIGN_OR_RETURN(auto sums, store.outbox().Summaries("notify:"));
  if (o.json) {
    auto j = nlohmann::json::array();
    for (const auto& s : sums) {
      j.push_back({{"target", s.target.substr(7)},
                   {"pending", s.pending},
                   {"delivered", s.delivered},
                   {"gave_up", s.gave_up},
                   {"last_delivered_ms", s.last_delivered_ms ? nlohmann::json(*s.last_delivered_ms)
                                                             : nlohmann::json()},
                   {"last_delivered_event", s.last_delivered_kind},
                   {"last_error_ms",
                    s.last_error_ms ? nlohmann::json(*s.last_error_ms) : nlohmann::json()},
                   {"last_error", s.last_error}});
    }
    out << j.dump(2) << "\n";
    return {};
  }
  if (sums.empty()) {
    out << "no notification written yet\n";
    return {};
  }
  for (const auto& s : sums) {
    out << s.target.substr(7) << ": " << s.delivered << " delivered, " << s.pending
        << " pending, " << s.gave_up << " given up\n";
    out << "  last delivery: " << When(s.last_delivered_ms)
        << (s.last_delivered_kind.empty() ? "" : " (" + s.last_delivered_kind + ")") << "\n";
    if (s.last_error_ms) {
      out << "  last error:    " << When(s.last_error_ms) << ": " << s.last_error << "\n";
    }
  }
  return {};
}

}  // namespace

void AddNotifyCommands(CLI::App& app, const CliContext& ctx) {
  auto* c = app.add_subcommand("notify", "Notifications to chat and webhooks (server.yaml `notify:`)");
  c->require_subcommand(1);
  auto test = std::make_shared<NotifyTestOptions>();
  auto* c_test = c->add_subcommand("test", "Send a sample message to one notify target now");
  c_test->add_option("name", test->name, "The target's name in server.yaml")->required();
  c_test->add_option("--config", test->config, "The server config (server.yaml)")->required();
  c_test->callback([=] {
    *ctx.exit_code = ReportStatus(CmdNotifyTest(*test, *ctx.clock, std::cout));
  });
  auto status = std::make_shared<NotifyStatusOptions>();
  auto* c_status = c->add_subcommand(
      "status", "Each target's deliveries: counts, the last delivery and the last error");
  c_status->add_flag("--json", status->json, "As JSON");
  c_status->callback([=] {
    status->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdNotifyStatus(*status, std::cout));
  });
}

}  // namespace trainq
