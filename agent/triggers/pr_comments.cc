#include "agent/triggers/pr_comments.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "agent/repo/manifest.h"
#include "agent/repo/mirror.h"
#include "agent/results/analysis.h"
#include "agent/triggers/forge.h"
#include "agent/triggers/forge_status.h"
#include "core/strings.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "stats/summary.h"

namespace trainq {

namespace {


std::int64_t Total(const BatchProgress& b) {
  std::int64_t n = 0;
  for (auto c : b.counts) n += c;
  return n;
}

std::int64_t Ended(const BatchProgress& b) {
  std::int64_t n = 0;
  for (int i = 0; i < kRunStateCount; ++i) {
    if (IsTerminal(static_cast<RunState>(i))) n += b.counts[i];
  }
  return n;
}

std::string Signed(double v) {
  std::string s = FormatDouble(v, 4);
  return (v >= 0 && s[0] != '-') ? "+" + s : s;
}

// "0.6200 ± 0.0100", "0.6200" for one run, "-" for none.
std::string MeanSd(const BatchProgress& b) {
  if (b.values.empty()) return "-";
  auto s = stats::Summarize(b.values);
  if (s.n == 1) return FormatDouble(s.mean, 4);
  // The test-set noise floor beside the sd, when the runs reported it.
  std::string floor;
  if (auto f = NoiseFloorJson(b); f.is_object() && f["floor"].is_number()) {
    floor = " (" + f["short"].get<std::string>() + ")";
  }
  return FormatDouble(s.mean, 4) + " ± " + FormatDouble(s.sd, 4) + floor;
}

// "3", "3 (1 failed)", "2 of 3 so far".
std::string Count(const BatchProgress& b) {
  std::string n = std::to_string(b.values.size());
  if (b.active()) return n + " of " + std::to_string(Total(b)) + " so far";
  std::int64_t failed = b.count(RunState::kDead) + b.count(RunState::kFailed);
  std::int64_t cancelled = b.count(RunState::kCancelled);
  if (failed) n += " (" + std::to_string(failed) + " failed)";
  if (cancelled) n += " (" + std::to_string(cancelled) + " cancelled)";
  return n;
}

std::string Cell(std::string s) {
  // A table cell: no pipes or line breaks.
  for (auto& c : s) {
    if (c == '|' || c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

bool Adaptive(const BatchProgress& b, const std::optional<BatchProgress>& base) {
  return RunsToAdd(b, base) > 0;
}

}  // namespace

bool PrCommentSettled(const PrCommentView& view) {
  for (const auto& [head, base] : view.experiments) {
    if (head.active() || Adaptive(head, base)) return false;
    if (base && base->active()) return false;
  }
  return true;
}

std::string RenderPrComment(const PrCommentView& view) {
  bool gitlab = view.forge == "gitlab";
  std::string what = gitlab ? "merge request !" : "pull request #";
  std::string out = "<!-- trainq: this comment is edited in place on each push -->\n";
  out += "### trainq: " + what + std::to_string(view.pr_number) + "\n\n";
  out += "Head `" + ShortSha(view.head_sha) + "` into `" + view.target_branch + "`";
  if (view.experiments.empty()) {
    out += ": nothing runs";
    if (!view.push_result.empty()) out += " (" + view.push_result + ")";
    out += ".\n";
  } else {
    out +=
        ", each experiment against its baseline (the same experiment at the merge-base, or "
        "the batch trainq chose for it).\n";
  }
  // The experiments of the pull request are one family: corrected together.
  std::vector<FamilyMember> family;
  auto repro_of = [&](const BatchProgress& b) {
    auto it = view.repro.find(b.id);
    return it == view.repro.end() ? std::optional<ReproCheck>() : std::optional(it->second);
  };
  for (const auto& [head, base] : view.experiments) {
    family.push_back({head, base, repro_of(head), base ? repro_of(*base) : std::nullopt});
  }
  auto comparisons = CompareFamily(family, /*compare_running=*/false, view.correction);
  std::string family_note;
  for (size_t i = 0; i < view.experiments.size(); ++i) {
    const auto& [head, base] = view.experiments[i];
    std::string verdict, difference, test, advice;
    if (head.active()) {
      verdict = "running: " + std::to_string(Ended(head)) + "/" + std::to_string(Total(head)) +
                " runs ended";
    } else if (!base) {
      verdict = "no baseline: no runs of this experiment at the base";
    } else if (base->active()) {
      verdict = "baseline running: " + std::to_string(Ended(*base)) + "/" +
                std::to_string(Total(*base)) + " runs ended";
    } else if (comparisons[i] && comparisons[i]->unchanged) {
      verdict = "unchanged";
      test = "the same runs as the baseline: not compared, not counted";
    } else {
      const BatchComparison& c = *comparisons[i];
      verdict = VerdictWord(c);
      if (family_note.empty()) family_note = CorrectionText(c);
      advice = RunsNeededText(c);
      if (c.cmp) {
        const auto& t = c.paired ? c.cmp->paired : c.cmp->welch;
        difference = Signed(c.cmp->diff);
        if (t) {
          // The interval the verdict used (widened in a family), named.
          stats::Interval ci = c.interval.value_or(t->ci95);
          difference += " (" + LevelText(c.interval ? c.interval_level : 0.95) + " " +
                        Signed(ci.lo) + ".." + Signed(ci.hi) + ")";
          test = std::string(c.paired ? "paired t" : "Welch t") + ", " + PText(c);
          if (c.alpha < 0.05 && c.family_size <= 1) {
            test += " (alpha " + FormatDouble(c.alpha, 4) + ")";
          }
        } else {
          test = "fewer than 2 runs on a side: no test";
        }
      } else {
        verdict = "no comparison: a side has no successful run";
      }
    }
    out += "\n#### `" + head.experiment + "`: " + verdict + "\n\n";
    out += head.metric_name + ", " + (head.metric_goal == "min" ? "lower" : "higher") +
           " is better";
    if (base && !head.baseline_note.empty()) out += "; baseline: " + head.baseline_note;
    if (auto r = repro_of(head)) out += "; determinism: " + r->text;
    out += "\n\n";
    if (head.reuses_batch_id) {
      out += "Reused: the runs of batch " + std::to_string(*head.reuses_batch_id) + " at `" +
             ShortSha(head.reused_from_sha) + "`, whose inputs for `" + head.experiment +
             "` are the same; nothing was queued for this head.\n\n";
    }
    out += "| | commit | " + Cell(head.metric_name) +
           " (mean ± sd) | n | difference (interval) | test | verdict |\n";
    out += "|---|---|---|---|---|---|---|\n";
    if (base) {
      out += "| base | `" + ShortSha(base->sha) + "` | " + MeanSd(*base) + " | " + Count(*base) +
             " | | | |\n";
    } else {
      out += "| base | - | no runs | 0 | | | |\n";
    }
    out += "| head | `" + ShortSha(head.sha) + "` | " + MeanSd(head) + " | " + Count(head) + " | " +
           difference + " | " + test + " | " + Cell(verdict) + " |\n";
    if (!advice.empty()) out += "\n" + advice + "\n";
    for (const auto* side : {base ? &*base : nullptr, &head}) {
      if (!side) continue;
      auto f = NoiseFloorJson(*side);
      if (f.is_object() && f["floor"].is_number()) {
        out += "\nEvaluation floor, " + std::string(side == &head ? "head" : "base") + ": " +
               f["text"].get<std::string>() + "\n";
      }
    }
  }
  if (!family_note.empty()) {
    out += "\nVerdicts are corrected for " + std::to_string(FamilySize(family)) +
           " experiments changed at once (" + family_note +
           "): each p is shown raw, then adjusted, and the intervals are widened to match.\n";
  }
  if (!view.commit_url.empty()) {
    out += "\n[Seeds, runs and logs of `" + ShortSha(view.head_sha) + "` on the dashboard](" +
           view.commit_url + ")\n";
  }
  if (!view.report_url.empty()) out += "\n[Full report](" + view.report_url + ")\n";
  return out;
}

PrCommentReporter::PrCommentReporter(Store& store, const ServerConfig& config, HttpClient& http,
                                     const Clock& clock, std::string data_dir,
                                     PrCommentOptions options)
    : store_(store),
      config_(config),
      http_(http),
      clock_(clock),
      data_dir_(std::move(data_dir)),
      options_(options) {}

Status PrCommentReporter::Render(const RepoConfig& repo, const Pushes::Push& push) {
  TimeMs now = clock_.Now();
  ASSIGN_OR_RETURN(auto existing, store_.pushes().GetPrComment(repo.url, push.pr_number));
  PrCommentView view;
  view.forge = push.source;
  view.pr_number = push.pr_number;
  view.head_sha = push.after_sha;
  view.target_branch = push.target_branch;
  view.push_result = push.result;
  view.report_url = repo.report_url;
  view.commit_url = CommitPageUrl(config_, push.after_sha);
  std::string mirror = NormaliseRepoUrl(Mirror::PathFor(data_dir_, repo.url));
  ASSIGN_OR_RETURN(auto batches, store_.runs().BatchesForCommit(push.after_sha));
  std::sort(batches.begin(), batches.end(), [](const BatchProgress& a, const BatchProgress& b) {
    return a.experiment < b.experiment;
  });
  for (auto& b : batches) {
    if (b.sha != push.after_sha || NormaliseRepoUrl(b.repo_url) != mirror) continue;
    if (IsReproExperiment(b.experiment)) continue;  // shown with its experiment
    ASSIGN_OR_RETURN(auto base, ParentBatch(store_, b));
    ASSIGN_OR_RETURN(auto repro, ReproOf(store_, b));
    if (repro) view.repro[b.id] = *repro;
    if (base) {
      ASSIGN_OR_RETURN(auto base_repro, ReproOf(store_, *base));
      if (base_repro) view.repro[base->id] = *base_repro;
    }
    view.experiments.emplace_back(std::move(b), std::move(base));
  }
  // Nothing ran and nothing was said yet: no comment at all.
  if (view.experiments.empty() && (!existing || existing->comment_id.empty())) {
    return store_.pushes().SetPrCommentWanted(repo.url, push.pr_number, push.after_sha, "", "", true, now);
  }
  std::string body = RenderPrComment(view);
  return store_.pushes().SetPrCommentWanted(repo.url, push.pr_number, push.after_sha, body, Sha256Hex(body),
                                   PrCommentSettled(view), now);
}

Status PrCommentReporter::Post(const RepoConfig& repo, const Pushes::PrComment& c) {
  StatusTarget target{repo.forge, repo.api_url, repo.project, repo.token.value};
  bool create = c.comment_id.empty();
  HttpRequest req = create ? CreateCommentRequest(target, c.pr_number, c.body)
                           : EditCommentRequest(target, c.pr_number, c.comment_id, c.body);
  auto resp = http_.Send(req);
  TimeMs now = clock_.Now();
  std::string what = (repo.forge == ForgeKind::kGitlab ? "merge request !" : "pull request #") +
                     std::to_string(c.pr_number) + " of " + repo.url;
  std::string error;
  if (resp && resp->ok()) {
    std::string id = c.comment_id;
    if (create) {
      auto parsed = ParseCreatedCommentId(resp->body);
      if (parsed)
        id = *parsed;
      else
        error = parsed.error().message + " (" + req.method + " " + UrlForLog(req.url) + ")";
    }
    if (error.empty()) {
      spdlog::info("comment {} on {} {}", id, what, create ? "created" : "edited");
      return store_.pushes().PrCommentPosted(repo.url, c.pr_number, id, c.body_sha256, now);
    }
  } else if (resp && resp->status == 404 && !create) {
    // Deleted on the forge: the next post creates a new one.
    spdlog::warn("comment {} on {} is gone (HTTP 404): creating a new one", c.comment_id, what);
    return store_.pushes().ForgetPrCommentId(repo.url, c.pr_number, now);
  } else if (resp) {
    error = ForgeHttpError(*resp, req.method + " " + UrlForLog(req.url));
  } else {
    error = resp.error().message;
  }
  const auto retry = NextForgeRetry(c.attempts, options_.retry_base_ms, options_.max_attempts);
  if (retry.give_up) {
    spdlog::warn("giving up on the comment on {} after {} attempts: {}", what, retry.attempt,
                 error);
  } else {
    spdlog::warn("comment on {} not posted (attempt {}/{}, next in {}): {}", what, retry.attempt,
                 options_.max_attempts, FormatDuration(retry.delay_ms), error);
  }
  return store_.pushes().PrCommentFailed(repo.url, c.pr_number, error, now + retry.delay_ms,
                                retry.give_up, now);
}

Result<int> PrCommentReporter::Step() {
  ASSIGN_OR_RETURN(auto prs, store_.pushes().PullRequestsToRender(options_.render_limit));
  for (const auto& p : prs) {
    const RepoConfig* repo = config_.FindRepo(p.repo_url);
    if (!repo || !repo->pr_comments) {
      // Comments are off: remember the head as settled so it is not looked at again.
      TRY(store_.pushes().SetPrCommentWanted(p.repo_url, p.pr_number, p.after_sha, "", "", true,
                                    clock_.Now()));
      continue;
    }
    TRY(Render(*repo, p));
  }
  TimeMs now = clock_.Now();
  ASSIGN_OR_RETURN(auto due, store_.pushes().DuePrComments(now, 20));
  int tried = 0;
  for (const auto& c : due) {
    const RepoConfig* repo = config_.FindRepo(c.repo_url);
    if (!repo || !repo->pr_comments) continue;
    // While runs go on, an edit at most every min_edit_interval_ms; the
    // settled body goes out at once.
    if (!c.comment_id.empty() && !c.settled && now - c.posted_ms < options_.min_edit_interval_ms) {
      continue;
    }
    ++tried;
    TRY(Post(*repo, c));
  }
  return tried;
}

}  // namespace trainq
