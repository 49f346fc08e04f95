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

// Where the first argument that is neither an option nor --db's value is:
// the command the user meant; argc when there is none.
int FirstWordAt(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--db") {
      ++i;
      continue;
    }
    if (a.starts_with("-")) continue;
    return i;
  }
  return argc;
}

// That word, when CLI11 found no command.
std::optional<std::string> FirstWord(int argc, char** argv) {
  const int at = FirstWordAt(argc, argv);
  if (at >= argc) return std::nullopt;
  return std::string(argv[at]);
}

}  // namespace

std::vector<std::string> HelpAsOption(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  const int at = FirstWordAt(argc, argv);
  if (at >= argc || args[static_cast<std::size_t>(at)] != "help") return args;
  args.erase(args.begin() + at);
  // Each word names a subcommand of the one before, while that one has
  // some: one that does not is left to the parser without --help, which
  // names it ("unknown command 'nosuch'") and exits 2.
  const CLI::App* level = &app;
  for (std::size_t i = static_cast<std::size_t>(at); i < args.size(); ++i) {
    if (args[i].starts_with("-")) continue;
    auto subs = level->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) break;
    auto it = std::find_if(subs.begin(), subs.end(),
                           [&](const CLI::App* sub) { return sub->get_name() == args[i]; });
    if (it == subs.end()) return args;
    level = *it;
  }
  args.push_back("--help");
  return args;
}

void AddHelpCommand(CLI::App& app) {
  auto* help = app.add_subcommand(
      "help", "The help of trainq, or of COMMAND: `trainq help sweep start` is `trainq sweep "
              "start --help`");
  help->add_option("command", "The command (and its subcommand)")->expected(0, 2);
  // Only reached when HelpAsOption was not applied: the same help.
  help->callback([] { throw CLI::CallForHelp(); });
}

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
