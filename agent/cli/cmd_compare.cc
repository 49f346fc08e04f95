// `trainq compare REV_A REV_B` and `trainq gate REV --baseline BRANCH`:
// the same experiment at two commits, compared with a verdict.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>

#include "agent/cli/cli.h"
#include "agent/cli/read_client.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/results/analysis.h"
#include "agent/results/gate.h"
#include "agent/results/sweep.h"
#include "core/clock.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/store.h"

using nlohmann::json;

namespace trainq {

namespace {

// The batches of a revision: resolved with git when `repo_dir` is a
// repository, else read as a commit id prefix in the store.
Result<std::vector<BatchProgress>> BatchesAt(Store& store, const std::string& rev,
                                             const std::string& repo_dir) {
  ASSIGN_OR_RETURN(std::string sha, ResolveRevision(rev, repo_dir));
  ASSIGN_OR_RETURN(auto batches, store.runs().BatchesForCommit(sha));
  std::set<std::string> shas;
  for (const auto& b : batches) shas.insert(b.sha);
  if (shas.size() > 1) {
    return Fail(ErrorKind::kInvalidArgument,
                "commit id '" + rev + "' is ambiguous: it matches " + std::to_string(shas.size()) +
                    " commits in the store; give more digits");
  }
  if (batches.empty()) {
    return Fail(ErrorKind::kNotFound,
                "no runs stored for " + rev + (rev == sha ? "" : " (" + ShortSha(sha) + ")") +
                    "; queue some with `trainq submit --commit " + rev + "`");
  }
  return batches;
}

}  // namespace

Status CmdCompare(const CompareCommandOptions& o, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
  ASSIGN_OR_RETURN(auto a, BatchesAt(store, o.rev_a, o.repo));
  ASSIGN_OR_RETURN(auto b, BatchesAt(store, o.rev_b, o.repo));
  std::optional<stats::Correction> correction;
  if (!o.correction.empty()) {
    ASSIGN_OR_RETURN(correction, stats::ParseCorrection(o.correction));
  }
  std::set<std::string> wanted(o.experiments.begin(), o.experiments.end());
  // The experiments compared are one family: corrected together.
  std::vector<FamilyMember> family;
  std::set<std::string> seen;
  for (const auto& ba : a) {
    if (!wanted.empty() && !wanted.count(ba.experiment)) continue;
    if (IsSweepPointExperiment(ba.experiment) || IsReproExperiment(ba.experiment)) continue;
    for (const auto& bb : b) {
      if (bb.experiment == ba.experiment && bb.repo_url == ba.repo_url) {
        // A side not reproducible for a fixed seed is compared unpaired.
        ASSIGN_OR_RETURN(auto repro_a, ReproOf(store, ba));
        ASSIGN_OR_RETURN(auto repro_b, ReproOf(store, bb));
        family.push_back({ba, bb, std::move(repro_a), std::move(repro_b)});
        seen.insert(ba.experiment);
      }
    }
  }
  std::vector<BatchComparison> comparisons;
  for (auto& c : CompareFamily(family, /*compare_running=*/true, correction)) {
    if (c) comparisons.push_back(std::move(*c));
  }
  for (const auto& name : wanted) {
    if (!seen.count(name)) {
      return Fail(ErrorKind::kNotFound, "experiment '" + name + "' has no batch at both " +
                                            o.rev_a + " and " + o.rev_b);
    }
  }
  if (comparisons.empty()) {
    return Fail(ErrorKind::kNotFound,
                o.rev_a + " and " + o.rev_b + " have no experiment in common");
  }
  if (o.json) {
    json j = json::array();
    for (const auto& c : comparisons) j.push_back(ComparisonJson(c));
    out << j.dump(2) << "\n";
    return {};
  }
  for (const auto& c : comparisons) {
    out << c.a.experiment << " (" << c.a.metric_name << ", "
        << (c.a.metric_goal == "min" ? "lower" : "higher") << " is better)\n";
    out << "  A " << ShortSha(c.a.sha, kReportShaChars) << "  " << SpreadText(c.a) << "\n";
    out << "  B " << ShortSha(c.b.sha, kReportShaChars) << "  " << SpreadText(c.b) << "\n";
    out << "  A - B: " << ComparisonText(c) << "\n";
    // The test-set noise floor of each side, when its runs reported it.
    for (const auto* side : {&c.a, &c.b}) {
      json f = NoiseFloorJson(*side);
      if (f.is_object()) {
        out << "  " << (side == &c.a ? "A" : "B") << " floor: " << f.value("text", "") << "\n";
      }
    }
  }
  // The family: the experiments compared whose runs differ (one with the
  // same runs on both sides is shown unchanged, not counted).
  std::string corr;
  for (const auto& c : comparisons) {
    if (!(corr = CorrectionText(c)).empty()) break;
  }
  if (!corr.empty()) {
    if (comparisons.front().correction == stats::Correction::kNone) {
      out << "verdicts not corrected for the " << FamilySize(family)
          << " experiments (correction: none)\n";
    } else {
      out << "verdicts corrected for " << FamilySize(family)
          << " experiments at once: " << corr << "\n";
    }
  }
  return {};
}

Result<int> CmdGate(const GateOptions& o, std::ostream& out) {
  if (!o.server.empty()) return GateFromServer(o, o.wait_s * 1000, o.json, out);
  ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
  GateRequest req;
  req.rev = o.rev;
  req.baseline = o.baseline;
  req.repo_dir = o.repo;
  req.experiments = o.experiments;
  if (!o.correction.empty()) {
    ASSIGN_OR_RETURN(req.correction, stats::ParseCorrection(o.correction));
  }
  // Waited through the Clock, as every loop of trainq's logic is.
  const Clock& clock = SystemClock::Get();
  const TimeMs deadline = clock.Now() + o.wait_s * 1000;
  while (true) {
    ASSIGN_OR_RETURN(auto d, DecideGate(store, req));
    if (d.finished || clock.Now() >= deadline) {
      if (o.json) {
        out << d.json.dump(2) << "\n";
      } else {
        out << d.text;
        if (!d.finished && o.wait_s > 0) {
          out << "(gave up waiting after " << FormatDuration(o.wait_s * 1000) << ")\n";
        }
      }
      return d.exit_code;
    }
    clock.SleepFor(2'000);
  }
}

// `trainq compare` and `trainq gate`.
void AddCompareCommands(CLI::App& app, const CliContext& ctx) {
  // compare
  auto compare = std::make_shared<CompareCommandOptions>();
  auto* c_compare = app.add_subcommand(
      "compare", "Compare the experiments of two commits: difference, test, verdict");
  c_compare->add_option("REV_A", compare->rev_a, "The change (commit id, or a name with --repo)")
      ->required();
  c_compare->add_option("REV_B", compare->rev_b, "What it is compared with")->required();
  c_compare->add_option("--repo", compare->repo, "Git repository to resolve names in")
      ->capture_default_str();
  c_compare->add_option("--experiment,-e", compare->experiments, "Only this experiment");
  c_compare->add_flag("--json", compare->json, "Print as JSON");
  c_compare->add_option("--correction", compare->correction,
                        "Family correction over the experiments compared: holm (default, "
                        "or trainq.yaml's defaults.correction), bh or none")
      ->check(CLI::IsMember({"holm", "bh", "none"}));
  c_compare->callback([=] {
    compare->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdCompare(*compare, std::cout));
  });

  // gate
  auto gate = std::make_shared<GateOptions>();
  auto* c_gate = app.add_subcommand(
      "gate",
      "Exit 0 when no experiment at REV is worse than the baseline, 1 when one is, 3 when "
      "undecided");
  c_gate->add_option("REV", gate->rev, "Revision to check")->capture_default_str();
  c_gate->add_option("--baseline", gate->baseline, "Branch or commit to compare with")
      ->capture_default_str();
  c_gate->add_option("--repo", gate->repo, "Git repository to resolve names in")
      ->capture_default_str();
  c_gate->add_option("--experiment,-e", gate->experiments, "Only this experiment (repeatable)");
  c_gate->add_flag("--json", gate->json, "Print the decision as JSON");
  c_gate->add_option("--correction", gate->correction,
                     "Family correction over the experiments gated: holm (default, or "
                     "trainq.yaml's defaults.correction), bh or none")
      ->check(CLI::IsMember({"holm", "bh", "none"}));
  auto gate_wait = std::make_shared<std::string>();
  c_gate->add_option("--wait", *gate_wait,
                     "Wait up to this long (e.g. 30m) for the runs of both sides to end");
  auto gate_strict = std::make_shared<bool>(false);
  c_gate->add_flag("--strict", *gate_strict,
                   "Accepted for old scripts: undecided always exits 3 now");
  AddServerOptions(c_gate, &gate->server, &gate->token_file, ServerRole::kRead,
                   "; --repo then names one of its repositories");
  c_gate->callback([=] {
    gate->db = *ctx.db;
    // With --server, --repo names a repository of the server (url or short
    // name), not a local directory: "." is no default there.
    if (!gate->server.empty() && c_gate->get_option("--repo")->count() == 0) gate->repo.clear();
    if (!gate_wait->empty()) {
      auto w = ParseDurationSeconds(*gate_wait);
      if (!w) {
        *ctx.exit_code = ReportStatus(std::unexpected(w.error())) + 1;
        return;
      }
      gate->wait_s = *w;
    }
    auto r = CmdGate(*gate, std::cout);
    *ctx.exit_code = r ? *r : ReportStatus(std::unexpected(r.error())) + 1;
  });
}

}  // namespace trainq
