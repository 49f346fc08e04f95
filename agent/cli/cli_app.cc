// What the `trainq` command line shares: error reporting, stop signals, and
// the exit code of a command line that does not parse.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cli/cli.h"
#include "core/strings.h"

namespace trainq {

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

// The first argument that is neither an option nor --db's value: the command
// the user meant, when CLI11 found none.
std::optional<std::string> FirstWord(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--db") {
      ++i;
      continue;
    }
    if (a.starts_with("-")) continue;
    return std::string(a);
  }
  return std::nullopt;
}

}  // namespace

int ReportStatus(const Status& st) {
  if (st) return 0;
  std::cerr << "trainq: error: " << st.error().message << "\n";
  return 1;
}

const std::atomic<bool>& StopFlag() { return g_stop; }

void CatchStopSignals() {
  struct sigaction sa{};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a sleep ends early so the loop sees the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

CLI::Validator DurationSeconds() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        auto d = ParseDurationSeconds(text);
        if (!d) return d.error().message;
        text = std::to_string(*d);
        return "";
      },
      "DURATION");
}

int ExitForParseError(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  // An unknown command: say which word was not understood (CLI11 would say
  // "A subcommand is required").
  if (app.get_subcommands().empty()) {
    const CLI::App& capp = app;
    std::vector<std::string> names;
    for (const auto* sub : capp.get_subcommands([](const CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
    }
    auto word = FirstWord(argc, argv);
    if (word && std::find(names.begin(), names.end(), *word) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      std::cerr << "trainq: unknown command '" << *word << "' (commands: " << known
                << "; see trainq --help)\n";
      return 2;
    }
  }
  // Usage errors exit 2 (as getopt tools do), with CLI11's message; --help
  // and --version exit 0.
  int rc = app.exit(e);
  return rc == 0 ? 0 : 2;
}

}  // namespace trainq
