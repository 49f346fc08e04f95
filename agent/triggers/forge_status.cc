#include "agent/triggers/forge_status.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "agent/results/analysis.h"
#include "agent/triggers/forge.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "stats/summary.h"

namespace trainq {

namespace {

// Three decimals, more when the spread is smaller than that shows.
int Decimals(double sd) {
  if (!(sd > 0) || sd >= 0.001) return 3;
  return std::min(8, static_cast<int>(std::ceil(-std::log10(sd))) + 1);
}

}  // namespace

std::string BatchStatusDescription(const BatchProgress& b) {
  auto s = stats::Summarize(b.values);
  std::string text = b.metric_name + " ";
  if (s.n == 0) {
    text += "- (no run succeeded)";
  } else if (s.n == 1) {
    text += FormatDouble(s.mean, 3) + " (n=1)";
  } else {
    int d = Decimals(s.sd);
    text += FormatDouble(s.mean, d) + " ± " + FormatDouble(s.sd, d) + " (n=" +
            std::to_string(s.n) + ")";
  }
  std::int64_t failed = b.count(RunState::kDead) + b.count(RunState::kFailed);
  if (failed) text += ", " + std::to_string(failed) + " failed";
  if (b.count(RunState::kCancelled)) {
    text += ", " + std::to_string(b.count(RunState::kCancelled)) + " cancelled";
  }
  return text;
}

CommitState BatchFinalState(const BatchProgress& b) {
  std::int64_t ok = b.count(RunState::kSucceeded);
  std::int64_t failed = b.count(RunState::kDead) + b.count(RunState::kFailed);
  if (ok == 0 && failed == 0) return CommitState::kError;  // cancelled
  if (failed > 0 || ok == 0) return CommitState::kFailure;
  return CommitState::kSuccess;
}

namespace {

std::string SignedFixed(double v, int d) {
  std::string s = FormatDouble(v, d);
  return (s[0] != '-' ? "+" : "") + s;
}

}  // namespace

WantedStatus FinalStatus(const BatchProgress& b, const std::optional<BatchProgress>& baseline,
                         const std::string& fail_on, const StatusFamily& family) {
  WantedStatus w;
  w.state = BatchFinalState(b);
  w.description = BatchStatusDescription(b);
  if (!family.repro.empty()) w.description += "; " + family.repro;
  if (!family.drift.empty()) w.description += "; " + family.drift;
  if (!baseline || b.values.empty()) return w;
  std::string base = ShortSha(baseline->sha, kReportShaChars);
  if (baseline->active()) {
    w.state = CommitState::kPending;
    w.description += "; waiting for the baseline " + base;
    return w;
  }
  if (SameRuns(b, *baseline)) {
    // Reused unchanged: the runs of its baseline, judged where they ran; no
    // part of the commit's family.
    w.description += "; unchanged since " + base + " (the same runs): not judged again";
    return w;
  }
  if (family.unfinished > 0) {
    w.state = CommitState::kPending;
    w.description += "; waiting for " + std::to_string(family.unfinished) + " other experiment" +
                     (family.unfinished == 1 ? "" : "s") + " of this commit (" +
                     (family.comparison ? CorrectionText(*family.comparison) : "corrected") + ")";
    return w;
  }
  BatchComparison c = family.comparison ? *family.comparison : CompareBatches(b, *baseline);
  if (!c.cmp) {
    w.description += "; baseline " + base + " has no finished runs";
    if (fail_on == "not_better" && w.state == CommitState::kSuccess) w.state = CommitState::kFailure;
    return w;
  }
  const auto& test = c.paired ? c.cmp->paired : c.cmp->welch;
  auto s = stats::Summarize(b.values);
  int d = Decimals(s.sd);
  stats::Interval ci{};
  if (test) ci = c.interval.value_or(test->ci95);
  if (test) d = std::max(d, Decimals((ci.hi - ci.lo) / 4));
  std::string verdict = VerdictWord(c);
  std::string diff = SignedFixed(c.cmp->diff, d);
  std::string with_ci =
      test ? diff + " [" + SignedFixed(ci.lo, d) + ", " + SignedFixed(ci.hi, d) + "]" : diff;
  // The correction and the raw p beside the adjusted one, when there is one.
  std::string corr = CorrectionText(c), corr_long, corr_short;
  if (!corr.empty() && c.p_raw) {
    auto num = [](double v) { return v < 0.001 ? std::string("<0.001") : FormatDouble(v, 3); };
    std::string raw = num(*c.p_raw);
    corr_long = " (" + corr + ": p" + (raw[0] == '<' ? raw : "=" + raw);
    if (c.correction != stats::Correction::kNone && c.p_adjusted) {
      corr_long += ", adj " + num(*c.p_adjusted);
    }
    corr_long += ")";
    corr_short = " (" + corr + ")";
  }
  std::string text;
  for (const auto& [shown, note] : {std::pair{with_ci, corr_long}, std::pair{diff, corr_long},
                                    std::pair{diff, corr_short}, std::pair{diff, std::string()}}) {
    text = w.description + "; " + shown + " vs " + base + ": " + verdict + note;
    if (text.size() <= kMaxStatusDescription) break;
  }
  w.description = text;
  bool fail = (fail_on == "worse" && c.verdict == stats::Verdict::kWorse) ||
              (fail_on == "not_better" && c.verdict != stats::Verdict::kBetter);
  if (fail && w.state == CommitState::kSuccess) w.state = CommitState::kFailure;
  return w;
}

StatusReporter::StatusReporter(Store& store, const ServerConfig& config, HttpClient& http,
                               const Clock& clock, StatusReporterOptions options)
    : store_(store), config_(config), http_(http), clock_(clock), options_(options) {}

std::string CommitPageUrl(const ServerConfig& config, const std::string& sha) {
  if (config.public_url.empty()) return "";
  return config.public_url + "/commit/" + sha;
}

std::string WaitingStatusDescription(const std::string& note) {
  return FitStatusDescription("waiting: " + note);
}

Status StatusReporter::UpdateWaiting() {
  TimeMs now = clock_.Now();
  ASSIGN_OR_RETURN(auto waiting, store_.machines().WaitingBatches(now));
  std::map<std::int64_t, std::string> note_of;
  for (const auto& w : waiting) {
    auto& n = note_of[w.batch_id];
    n += (n.empty() ? "" : "; ") + w.note;
  }
  for (const auto& [id, note] : note_of) {
    ASSIGN_OR_RETURN(auto row, store_.pushes().GetCommitStatus(id));
    if (!row || row->state != "pending") continue;
    std::string want = WaitingStatusDescription(note);
    if (row->description != want) TRY(store_.pushes().SetCommitStatusWanted(id, "pending", want, now));
  }
  // No longer waiting (the cap lifted, a pool came back): queued again.
  ASSIGN_OR_RETURN(auto marked, store_.pushes().PendingCommitStatuses("waiting: "));
  for (const auto& row : marked) {
    if (note_of.count(row.batch_id)) continue;
    ASSIGN_OR_RETURN(auto batch, store_.runs().Batch(row.batch_id));
    if (!batch) continue;
    std::int64_t left = batch->count(RunState::kQueued) + batch->count(RunState::kFailed) +
                        batch->count(RunState::kLeased) + batch->count(RunState::kRunning);
    TRY(store_.pushes().SetCommitStatusWanted(row.batch_id, "pending",
                                     "queued: " + std::to_string(left) + " runs left", now));
  }
  return Status{};
}

Result<int> StatusReporter::Step() {
  ASSIGN_OR_RETURN(auto finished, store_.pushes().FinishedPendingStatuses(100));
  for (auto id : finished) {
    ASSIGN_OR_RETURN(auto batch, store_.runs().Batch(id));
    if (!batch) continue;
    ASSIGN_OR_RETURN(auto row, store_.pushes().GetCommitStatus(id));
    if (!row) continue;
    const RepoConfig* repo = config_.FindRepo(row->repo_url);
    ASSIGN_OR_RETURN(auto baseline, ParentBatch(store_, *batch));
    // A baseline still running keeps the status pending (its description
    // says so); once it ends, the verdict is posted. So does, with a family
    // correction, another experiment of the same commit still running: the
    // verdict depends on all of them.
    ASSIGN_OR_RETURN(auto family, CommitFamily(store_, batch->repo_url, batch->sha));
    StatusFamily sf;
    sf.size = FamilySize(family);
    auto comparisons = CompareFamily(family, /*compare_running=*/false);
    for (size_t i = 0; i < family.size(); ++i) {
      const auto& m = family[i];
      if (m.head.id == batch->id) {
        sf.comparison = comparisons[i];
        continue;
      }
      if (m.unchanged()) continue;  // not in the family
      if (m.head.active() || (m.base && m.base->active())) ++sf.unfinished;
    }
    if (family.empty() || CorrectionOf(*batch) == stats::Correction::kNone) sf.unfinished = 0;
    ASSIGN_OR_RETURN(auto drift, DriftOf(store_, *batch));
    if (drift && drift->drift) sf.drift = drift->brief;
    ASSIGN_OR_RETURN(auto repro, ReproOf(store_, *batch));
    if (repro && repro->state == ReproCheck::State::kNotReproducible) {
      sf.repro = "not reproducible (seed " + std::to_string(repro->seed) + ")";
    }
    auto want = FinalStatus(*batch, baseline, repo ? repo->fail_on : "worse", sf);
    std::string state(CommitStateName(want.state));
    if (state == row->state && want.description == row->description) continue;
    TRY(store_.pushes().SetCommitStatusWanted(id, state, want.description, clock_.Now()));
  }
  TRY(UpdateWaiting());
  ASSIGN_OR_RETURN(auto due, store_.pushes().DueCommitStatuses(clock_.Now(), 20));
  int tried = 0;
  for (const auto& s : due) {
    const RepoConfig* repo = config_.FindRepo(s.repo_url);
    auto state = ParseCommitState(s.state);
    if (!repo || !repo->status || !state) {
      TRY(store_.pushes().CommitStatusFailed(s, "status reporting is off for " + s.repo_url, 0,
                                    /*give_up=*/true, clock_.Now()));
      continue;
    }
    ++tried;
    StatusTarget target{repo->forge, repo->api_url, repo->project, repo->token.value};
    auto resp = http_.Send(CommitStatusRequest(target, s.sha, *state, s.context, s.description,
                                               CommitPageUrl(config_, s.sha)));
    TimeMs now = clock_.Now();
    if (resp && resp->ok()) {
      spdlog::info("commit status {} for {} {} posted to {}: {}", s.state, ShortSha(s.sha),
                   s.context, repo->forge == ForgeKind::kNone ? "" : ForgeName(repo->forge),
                   s.description);
      TRY(store_.pushes().CommitStatusPosted(s, s.state, s.description, now));
      continue;
    }
    const std::string error =
        resp ? ForgeHttpError(*resp, UrlForLog(repo->api_url)) : resp.error().message;
    const auto retry = NextForgeRetry(s.attempts, options_.retry_base_ms, options_.max_attempts);
    if (retry.give_up) {
      spdlog::warn("giving up on commit status {} for {} {} after {} attempts: {}", s.state,
                   ShortSha(s.sha), s.context, retry.attempt, error);
    } else {
      spdlog::warn("commit status {} for {} {} not posted (attempt {}/{}, next in {}): {}",
                   s.state, ShortSha(s.sha), s.context, retry.attempt, options_.max_attempts,
                   FormatDuration(retry.delay_ms), error);
    }
    TRY(store_.pushes().CommitStatusFailed(s, error, now + retry.delay_ms, retry.give_up, now));
  }
  return tried;
}

}  // namespace trainq
