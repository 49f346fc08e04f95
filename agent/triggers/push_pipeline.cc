#include "agent/triggers/push_pipeline.h"

#include "agent/triggers/coalesce.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "agent/repo/change_detect.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/repo/manifest_check.h"
#include "agent/results/submit.h"
#include "agent/results/analysis.h"
#include "agent/results/baseline.h"
#include "core/strings.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"

namespace trainq {

namespace {

std::string RefName(const std::string& ref) {
  for (std::string_view p : {"refs/heads/", "refs/tags/"}) {
    if (ref.starts_with(p)) return ref.substr(p.size());
  }
  return ref;
}

}  // namespace

PushProcessor::PushProcessor(Store& store, const ServerConfig& config, MirrorCache& mirrors,
                             const Clock& clock, PushPipelineOptions options)
    : store_(store), config_(config), mirrors_(mirrors), clock_(clock),
      options_(std::move(options)) {}

Result<int> PushProcessor::ProcessDue(int limit) {
  ASSIGN_OR_RETURN(auto due, store_.pushes().DuePushes(clock_.Now(), limit));
  for (const auto& p : due) TRY(Process(p));
  return static_cast<int>(due.size());
}

Status PushProcessor::Process(const Pushes::Push& push) {
  const RepoConfig* repo = config_.FindRepo(push.repo_url);
  if (!repo) {
    return store_.pushes().FinishPush(push.id, "failed", "",
                             push.repo_url + " is no longer in the server config", clock_.Now());
  }
  auto outcome = Run(*repo, push);
  TimeMs now = clock_.Now();
  if (outcome) {
    spdlog::info("push {} ({} {} {}): {}", push.id, push.source, RefName(push.ref),
                 ShortSha(push.after_sha), *outcome);
    TRY(store_.pushes().FinishPush(push.id, "done", *outcome, "", now));
    // The heads this push superseded stop waiting for machines (coalesce.h).
    auto coalesced = [&]() -> Result<CoalesceOutcome> {
      ASSIGN_OR_RETURN(Mirror * m, mirrors_.Get(repo->url));
      return CoalesceSuperseded(store_, *repo, push, m->location(), now);
    }();
    if (!coalesced) {
      spdlog::warn("push {}: cancelling the runs it superseded: {}", push.id,
                   coalesced.error().message);
    } else if (coalesced->runs > 0) {
      spdlog::info("push {} ({}): cancelled {} queued run(s) of {} batch(es) it superseded "
                   "(coalesce: {})",
                   push.id, RefName(push.ref), coalesced->runs, coalesced->batches,
                   repo->coalesce == RepoConfig::Coalesce::kAll ? "all" : "branches");
    }
    return {};
  }
  const Error& e = outcome.error();
  int attempt = push.attempts + 1;
  if (e.retryable() && attempt < options_.fetch_attempts) {
    TimeMs delay = options_.fetch_retry_base_ms;
    for (int i = 1; i < attempt; ++i) delay *= 2;
    spdlog::warn("push {} ({} {}): {} (attempt {}/{}, next in {})", push.id, repo->url,
                 RefName(push.ref), e.message, attempt, options_.fetch_attempts,
                 FormatDuration(delay));
    return store_.pushes().RetryPush(push.id, e.message, now + delay, now);
  }
  spdlog::error("push {} ({} {}) failed: {}", push.id, repo->url, RefName(push.ref), e.message);
  TRY(store_.pushes().FinishPush(push.id, "failed", "", e.message, now));
  if (repo->status && !IsZeroSha(push.after_sha)) {
    // Nothing was queued, so no batch will ever report on this commit: its
    // status says why instead. A bad trainq.yaml fails the commit; a fetch
    // that kept failing is trainq's error, not the commit's.
    Pushes::CommitStatus cs;
    cs.push_id = push.id;
    cs.repo_url = repo->url;
    cs.sha = push.after_sha;
    cs.context = repo->status_context;
    cs.state = e.kind == ErrorKind::kInvalidArgument ? "failure" : "error";
    cs.description = FailedPushDescription(e.message, repo->url);
    TRY(store_.pushes().AddPushStatus(cs, now));
  }
  return Status{};
}

std::string FailedPushDescription(std::string_view message, std::string_view repo_url) {
  std::string text(message);
  // "<url> at <sha>: trainq.yaml:12: ..." -> "trainq.yaml:12: ..."
  if (std::string prefix = std::string(repo_url) + " at "; text.starts_with(prefix)) {
    if (auto colon = text.find(": ", prefix.size()); colon != std::string::npos) {
      text = text.substr(colon + 2);
    }
  }
  for (auto& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return FitStatusDescription(std::move(text));
}

namespace {

// The mirror of a push's repository, fetched at most once while one push is
// handled: before anything when the push is a pull request (its target as it
// is now), else only when a commit the push names is missing or the pushed
// branch's ref in the mirror is not the push's head.
class PushFetch {
 public:
  PushFetch(Mirror& mirror, const RepoConfig& repo, const Pushes::Push& push)
      : mirror_(mirror), auth_{repo.username, repo.token.value, repo.ssh_key}, push_(push) {}
  Status Once() {
    if (fetched_) return {};
    fetched_ = true;
    // A pull request's head lives under the forge's ref for it.
    return push_.pr_number > 0 ? mirror_.Fetch(auth_, {push_.ref}) : mirror_.Fetch(auth_);
  }
  bool fetched() const { return fetched_; }

 private:
  Mirror& mirror_;
  FetchAuth auth_;
  const Pushes::Push& push_;
  bool fetched_ = false;
};

// What a push's commits are compared with, and why ("force push: compared
// with the merge-base ...").
struct PushBase {
  std::string base;         // "" = nothing
  std::string how;
  bool everything = false;  // every experiment runs, whatever changed
};

// The head of `branch` in the mirror, fetching once when it is not there yet.
Result<std::optional<std::string>> BranchHead(Mirror& m, PushFetch& fetch,
                                              const std::string& branch) {
  if (branch.empty()) return std::optional<std::string>();
  ASSIGN_OR_RETURN(auto head, m.ResolveRef("refs/heads/" + branch));
  if (!head && !fetch.fetched()) {
    TRY(fetch.Once());
    ASSIGN_OR_RETURN(head, m.ResolveRef("refs/heads/" + branch));
  }
  return head;
}

// A pull request: its head against the merge-base with its target branch,
// which is what merging it would change.
Result<PushBase> PullRequestBase(Mirror& m, const Pushes::Push& push) {
  PushBase out;
  ASSIGN_OR_RETURN(auto target, m.ResolveRef("refs/heads/" + push.target_branch));
  std::optional<std::string> mb;
  if (target) { ASSIGN_OR_RETURN(mb, m.MergeBase(*target, push.after_sha)); }
  if (mb) {
    out.base = *mb;
    out.how = "compared with the merge-base " + ShortSha(out.base) + " with " + push.target_branch;
  } else {
    out.how = (target ? "no common history with " : "no branch ") + push.target_branch +
              ", compared with nothing";
  }
  return out;
}

// A branch whose old head is unknown (new, or rewritten and never fetched).
Result<PushBase> UnknownOldHeadBase(Mirror& m, PushFetch& fetch, const Pushes::Push& push,
                                    const std::string& default_branch) {
  PushBase out;
  std::string what = IsZeroSha(push.before_sha)
                         ? std::string("new branch")
                         : "old head " + ShortSha(push.before_sha) + " unknown";
  if (push.ref == "refs/heads/" + default_branch) {
    if (IsZeroSha(push.before_sha)) {
      out.how = what + " (the default branch): compared with nothing";
    } else {
      // The old head of the default branch is gone (rewritten history that
      // was never fetched): the pushed commit's own change is what is known.
      ASSIGN_OR_RETURN(auto parent, m.FirstParent(push.after_sha));
      out.base = parent.value_or("");
      out.how = what + ": compared with the parent of " + ShortSha(push.after_sha);
    }
    return out;
  }
  ASSIGN_OR_RETURN(auto head, BranchHead(m, fetch, default_branch));
  std::optional<std::string> mb;
  if (head) { ASSIGN_OR_RETURN(mb, m.MergeBase(*head, push.after_sha)); }
  if (mb) {
    out.base = *mb;
    out.how = what + ": compared with the merge-base " + ShortSha(out.base) + " with " +
              default_branch;
  } else {
    out.how = what + ": no common history with " +
              (default_branch.empty() ? std::string("a default branch") : default_branch) +
              ", compared with nothing";
  }
  return out;
}

// What the push compares with (push_pipeline.h lists the cases).
Result<PushBase> ChooseBase(Mirror& m, PushFetch& fetch, const RepoConfig& repo,
                            const Pushes::Push& push) {
  const std::string default_branch = !repo.default_branch.empty()  ? repo.default_branch
                                     : !push.default_branch.empty() ? push.default_branch
                                                                    : m.DefaultBranch();
  bool before_known = !IsZeroSha(push.before_sha) && m.HasCommit(push.before_sha);
  if (!IsZeroSha(push.before_sha) && !before_known && !fetch.fetched()) {
    TRY(fetch.Once());
    before_known = m.HasCommit(push.before_sha);
  }
  if (push.pr_number > 0) return PullRequestBase(m, push);
  if (push.ref.starts_with("refs/tags/")) {
    // A tag marks a release: it runs every experiment at its commit.
    PushBase out;
    out.everything = true;
    out.how = IsZeroSha(push.before_sha) ? "new tag: every experiment runs"
                                         : "moved tag: every experiment runs";
    return out;
  }
  if (!before_known) return UnknownOldHeadBase(m, fetch, push, default_branch);
  PushBase out;
  ASSIGN_OR_RETURN(bool ff, m.IsAncestor(push.before_sha, push.after_sha));
  if (ff) {
    out.base = push.before_sha;
  } else {
    ASSIGN_OR_RETURN(auto mb, m.MergeBase(push.before_sha, push.after_sha));
    out.base = mb.value_or("");
    out.how = "force push: compared with the merge-base " + (mb ? ShortSha(*mb) : "(none)") +
              " of " + ShortSha(push.before_sha) + " and " + ShortSha(push.after_sha);
  }
  return out;
}

// "github push to main", "poll of main", "catch-up of main", "github pull
// request #7 into main".
std::string PushSource(const Pushes::Push& push) {
  if (push.pr_number > 0) {
    return push.source + (push.source == "gitlab" ? " merge request !" : " pull request #") +
           std::to_string(push.pr_number) + " into " + push.target_branch;
  }
  if (push.source == "poll") return "poll of " + RefName(push.ref);
  // A push serve missed, found by the catch-up fetch (poller.h).
  if (push.source == "catch-up") return "catch-up of " + RefName(push.ref);
  return push.source + " push to " + RefName(push.ref);
}

// trainq.yaml at `sha`: nullopt when the commit has none; an error naming
// the repository and commit when it is too large or does not parse.
Result<std::optional<Manifest>> ManifestAt(GitRepo& git, const RepoConfig& repo,
                                           const std::string& sha) {
  auto text = git.ReadFile(sha, kManifestName);
  if (!text) {
    if (text.error().kind == ErrorKind::kNotFound) return std::optional<Manifest>();
    return std::unexpected(text.error());
  }
  if (auto st = CheckManifestSize(text->size(), kManifestName, repo.limits); !st) {
    return std::unexpected(st.error().Wrap(repo.url + " at " + ShortSha(sha)));
  }
  auto parsed = ParseManifest(*text, kManifestName);
  if (!parsed) return std::unexpected(parsed.error().Wrap(repo.url + " at " + ShortSha(sha)));
  return std::optional<Manifest>(std::move(*parsed));
}

}  // namespace

// The push's commits (the head, or each new one with per_commit), each
// planned and queued by QueueCommit.
Result<std::string> PushProcessor::Run(const RepoConfig& repo, const Pushes::Push& push) {
  ASSIGN_OR_RETURN(Mirror * m, mirrors_.Get(repo.url));
  PushFetch fetch(*m, repo, push);
  // A pull request is compared with its target as it is now.
  if (push.pr_number > 0) TRY(fetch.Once());
  if (!m->HasCommit(push.after_sha)) {
    TRY(fetch.Once());
    if (!m->HasCommit(push.after_sha)) {
      return Fail(ErrorKind::kUnavailable, "commit " + ShortSha(push.after_sha) + " not found in " +
                                               UrlForLog(repo.url) + " after fetching");
    }
  }
  // A branch push of a commit the mirror already holds (a pull request's
  // head merged by fast-forward) still moves that branch in the mirror: the
  // history views (report, branch pages) follow the mirror's branches.
  if (push.pr_number == 0 && push.ref.starts_with("refs/heads/") && !fetch.fetched()) {
    auto refs = m->Refs();
    if (refs && (*refs)[push.ref] != push.after_sha) {
      if (auto st = fetch.Once(); !st) {
        spdlog::warn("{}: {} not moved in the mirror ({}); history views may lag until the next fetch",
                     ShortSha(push.after_sha), push.ref, st.error().message);
      }
    }
  }
  ASSIGN_OR_RETURN(auto base, ChooseBase(*m, fetch, repo, push));

  std::vector<std::string> commits;
  if (repo.per_commit) {
    ASSIGN_OR_RETURN(commits, m->CommitsBetween(base.base, push.after_sha,
                                                options_.max_commits_per_push));
  } else if (base.everything || base.base != push.after_sha) {
    commits = {push.after_sha};
  }
  if (commits.empty()) return std::string("no new commits: nothing runs");

  PushCommit c{repo, push, *m, PushSource(push), base.how, base.everything};
  std::vector<std::string> lines;
  for (const auto& sha : commits) {
    std::string commit_base = base.base;
    if (repo.per_commit) {
      ASSIGN_OR_RETURN(auto parent, m->FirstParent(sha));
      commit_base = parent.value_or("");
    }
    ASSIGN_OR_RETURN(auto line, QueueCommit(c, sha, commit_base));
    lines.push_back(ShortSha(sha) + ": " + line);
  }
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "; ") + l;
  return out;
}

// One commit of a push: which experiments run (change detection against
// `commit_base`), checked at the commit, then queued (QueueTriggered). What
// happened, as one line ("" when nothing is worth saying).
Result<std::string> PushProcessor::QueueCommit(const PushCommit& c, const std::string& sha,
                                               const std::string& commit_base) {
  const RepoConfig& repo = c.repo;
  GitRepo& git = c.mirror;
  ASSIGN_OR_RETURN(auto after, ManifestAt(git, repo, sha));
  if (!after) return std::string("no trainq.yaml");
  std::optional<Manifest> before;
  if (!commit_base.empty()) {
    auto b = ManifestAt(git, repo, commit_base);
    if (b) {
      before = std::move(*b);
    } else {
      spdlog::debug("{}: trainq.yaml at {} unreadable ({}); every experiment counts as new",
                    repo.url, ShortSha(commit_base), b.error().message);
    }
  }
  std::vector<ExperimentTrigger> triggers;
  if (c.everything) {
    for (const auto& e : after->experiments) triggers.push_back({e.name, {}, true});
  } else {
    ASSIGN_OR_RETURN(auto changes, git.Diff(commit_base, sha));
    triggers = DetectChanges(changes, before ? &*before : nullptr, *after);
  }
  // A swept command without a default point has no plain batch.
  std::string not_queued;
  std::erase_if(triggers, [&](const ExperimentTrigger& t) {
    const Experiment* e = after->Find(t.experiment);
    if (!e || !e->NoPlainBatch()) return false;
    not_queued += (not_queued.empty() ? "" : ", ") + t.experiment;
    return true;
  });
  std::string line;
  if (!not_queued.empty()) line = "not queued (swept, no explicit point): " + not_queued;
  if (triggers.empty()) {
    if (not_queued.empty()) {
      TRY(RecordQuietCommit(c, sha, *after));
      return std::string("no watched path or experiment changed");
    }
    return line;
  }
  // The experiments about to run are checked at this commit: a bad spec,
  // a missing file or a broken command fails the push, nothing is queued.
  std::vector<const Experiment*> chosen;
  for (const auto& t : triggers) chosen.push_back(after->Find(t.experiment));
  auto read = [&](const std::string& path) { return git.ReadFile(sha, path); };
  if (auto st = CheckExperiments(chosen, kManifestName, read); !st) {
    return std::unexpected(st.error().Wrap(repo.url + " at " + ShortSha(sha)));
  }
  ASSIGN_OR_RETURN(auto queued, QueueTriggered(c, sha, commit_base, *after, triggers));
  // Two lines for one commit when some experiments were swept: the note first.
  if (!line.empty()) return line + "; " + ShortSha(sha) + ": " + queued;
  return queued;
}

// Nothing to judge: decided. `trainq gate` passes the commit, and each
// experiment's context gets a success status, so a required check turns
// green on a change that touched no experiment.
Status PushProcessor::RecordQuietCommit(const PushCommit& c, const std::string& sha,
                                        const Manifest& after) {
  const std::string note = "no watched path or experiment changed";
  TRY(store_.pushes().AddQuietCommit({c.repo.url, sha, c.push.id, note}, clock_.Now()));
  if (!c.repo.status) return {};
  for (const auto& e : after.experiments) {
    Pushes::CommitStatus cs;
    cs.push_id = c.push.id;
    cs.repo_url = c.repo.url;
    cs.sha = sha;
    cs.context = c.repo.status_context + "/" + e.name;
    cs.state = "success";
    cs.description = "no experiment changed";
    TRY(store_.pushes().AddPushStatus(cs, clock_.Now()));
  }
  return {};
}

// The batches of one commit: each triggered experiment reuses an ancestor's
// batch with the same inputs or is submitted (with its determinism check);
// then each new batch gets its baseline and a pending commit status.
Result<std::string> PushProcessor::QueueTriggered(const PushCommit& c, const std::string& sha,
                                                  const std::string& commit_base,
                                                  const Manifest& after,
                                                  const std::vector<ExperimentTrigger>& triggers) {
  const RepoConfig& repo = c.repo;
  GitRepo& git = c.mirror;
  SubmitRequest req;
  ASSIGN_OR_RETURN(req.commit, git.Resolve(sha));
  for (const auto& t : triggers) {
    std::string why = t.Reason();
    req.specs.push_back(after.Find(t.experiment)->ToBatchSpec(
        c.source + ": " + c.how + (c.how.empty() || why.empty() ? "" : "; ") + why));
  }
  // Each experiment's spec with the fingerprint of its inputs at this
  // commit, which an equal ancestor's batch carries too.
  TRY(AddInputsFingerprints(git, sha, after, req.specs));
  const std::string where = std::string(kManifestName) + " at " + ShortSha(sha);
  req.limits = &repo.limits;
  req.limits_where = where;
  req.base_sha = commit_base;
  req.ref = c.push.ref;
  ASSIGN_OR_RETURN(auto batches, SubmitCommit(store_, git, req, clock_.Now()));
  std::string names;
  std::string reused;
  std::string kept_names;
  std::string checks;  // determinism checks queued for batches reused as they are
  for (const auto& b : batches) {
    const SubmitResult& r = b.result;
    // A determinism check's companion batch is read with its experiment's:
    // no commit status of its own.
    if (IsReproExperiment(r.experiment)) {
      const std::string of = ReproTargetOf(r.experiment);
      bool reused_target = std::any_of(batches.begin(), batches.end(), [&](const SubmittedBatch& t) {
        return t.result.experiment == of && t.result.reuses_batch_id;
      });
      if (reused_target && r.created) checks += (checks.empty() ? "" : ", ") + of;
      continue;
    }
    if (b.baseline_error) {
      spdlog::warn("push {}: choosing the baseline of batch {}: {}", c.push.id, r.batch_id,
                   b.baseline_error->message);
    }
    if (b.reused) {
      reused += (reused.empty() ? "" : ", ") + r.experiment + " (batch " +
                std::to_string(b.reused->batch.id) + " of " + ShortSha(b.reused->at_sha) + ")";
    }
    // The commit had this batch already (a merged pull request's head):
    // nothing is queued, and the log must not say otherwise.
    bool kept = !r.reuses_batch_id && !r.created && r.runs_added == 0;
    if (kept) {
      kept_names += (kept_names.empty() ? "" : ", ") + r.experiment + " (batch " +
                    std::to_string(r.batch_id) + ")";
    } else if (b.already_reusing) {
      // The commit's batch reused another's runs already (a merged pull
      // request whose head changed nothing since an earlier head).
      kept_names += (kept_names.empty() ? "" : ", ") + r.experiment + " (batch " +
                    std::to_string(r.batch_id) + ", the runs of batch " +
                    std::to_string(*r.reuses_batch_id) + ")";
    } else if (!r.reuses_batch_id) {
      names += (names.empty() ? "" : ", ") + r.experiment;
      // What this batch is compared with: found, reused from an equivalent
      // ancestor, or queued at the base with the same seeds.
      if (!b.baseline.empty()) names += " (baseline: " + b.baseline + ")";
    }
    if (r.created && repo.status) {
      Pushes::CommitStatus cs;
      cs.batch_id = r.batch_id;
      cs.repo_url = repo.url;
      cs.sha = sha;
      cs.context = repo.status_context + "/" + r.experiment;
      cs.state = "pending";
      cs.description = r.reuses_batch_id
                           ? "reused batch " + std::to_string(*r.reuses_batch_id) + " (same inputs)"
                           : "queued: " + std::to_string(r.runs_added) + " runs";
      TRY(store_.pushes().AddCommitStatus(cs, clock_.Now()));
    }
  }
  std::string line;
  if (!names.empty()) line = "queued " + names;
  if (!reused.empty()) line += (line.empty() ? "" : "; ") + ("reused " + reused);
  if (!kept_names.empty()) line += (line.empty() ? "" : "; ") + ("already run " + kept_names);
  if (!checks.empty()) line += (line.empty() ? "" : "; ") + ("determinism check queued: " + checks);
  if (line.empty()) line = "nothing queued: every batch of this commit exists already";
  return line;
}

PushPipeline::PushPipeline(std::string db_path, const ServerConfig& config, HttpClient& http,
                           const Clock& clock, PushPipelineOptions options)
    : db_path_(std::move(db_path)), config_(config), http_(http), clock_(clock),
      options_(std::move(options)) {}

PushPipeline::~PushPipeline() { Stop(); }

Status PushPipeline::Start() {
  ASSIGN_OR_RETURN(auto push_store, Store::Open(db_path_));
  ASSIGN_OR_RETURN(auto status_store, Store::Open(db_path_));
  push_thread_ = std::thread(
      [this, s = std::move(push_store)]() mutable { PushLoop(std::move(s)); });
  status_thread_ = std::thread(
      [this, s = std::move(status_store)]() mutable { StatusLoop(std::move(s)); });
  return {};
}

void PushPipeline::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    push_woken_ = true;
  }
  cv_.notify_all();
}

void PushPipeline::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (push_thread_.joinable()) push_thread_.join();
  if (status_thread_.joinable()) status_thread_.join();
}

void PushPipeline::Wait(TimeMs ms, bool& woken) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(std::max<TimeMs>(ms, 0)),
               [&] { return stop_ || woken; });
  woken = false;
}

void PushPipeline::PushLoop(Store store) {
  store.UseFineBusyWait();
  MirrorCache mirrors(options_.data_dir);
  PushProcessor processor(store, config_, mirrors, clock_, options_);
  Poller poller(store, config_, mirrors, clock_);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    int handled = 0;
    if (auto n = processor.ProcessDue(8); n) {
      handled = *n;
    } else {
      spdlog::warn("processing pushes: {}", n.error().message);
    }
    if (auto n = poller.Step(); !n) spdlog::warn("polling: {}", n.error().message);
    if (handled > 0) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        status_woken_ = true;  // new batches want their pending status
      }
      cv_.notify_all();
      continue;  // more may be due
    }
    TimeMs now = clock_.Now();
    TimeMs wait = options_.idle_wait_ms;
    if (auto next = store.pushes().NextPushDue(); next && *next) wait = std::min(wait, **next - now);
    if (auto next = poller.NextDue()) wait = std::min(wait, *next - now);
    Wait(wait, push_woken_);
  }
}

void PushPipeline::StatusLoop(Store store) {
  StatusReporter reporter(store, config_, http_, clock_, options_.status);
  PrCommentReporter comments(store, config_, http_, clock_, options_.data_dir, options_.comments);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    auto n = reporter.Step();
    if (!n) spdlog::warn("commit statuses: {}", n.error().message);
    if (auto c = comments.Step(); !c) spdlog::warn("pull request comments: {}", c.error().message);
    Wait(options_.idle_wait_ms, status_woken_);
  }
}

}  // namespace trainq
