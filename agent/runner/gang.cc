#include "agent/runner/gang.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "agent/runner/protocol.h"
#include "core/strings.h"

namespace trainq {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::int64_t SizeOf(const std::string& path) {
  std::error_code ec;
  auto n = fs::file_size(path, ec);
  return ec ? 0 : static_cast<std::int64_t>(n);
}

std::string ReadTail(const std::string& path, std::int64_t from) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(from);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A log as a JSON string: invalid UTF-8 becomes U+FFFD (json::dump throws on it).
std::string ValidUtf8(const std::string& text) {
  return json::parse(json(text).dump(-1, ' ', false, json::error_handler_t::replace))
      .get<std::string>();
}

}  // namespace

std::map<std::string, std::string> TorchrunEnv(const GangLayout& g, int local_rank) {
  const int rank = g.node_rank * g.procs_per_node + local_rank;
  return {{"MASTER_ADDR", g.master_addr},
          {"MASTER_PORT", std::to_string(g.master_port)},
          {"WORLD_SIZE", std::to_string(g.nodes * g.procs_per_node)},
          {"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(local_rank)},
          {"NODE_RANK", std::to_string(g.node_rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(g.procs_per_node)}};
}

std::vector<std::vector<int>> SplitDevices(const std::vector<int>& devices, int procs) {
  std::vector<std::vector<int>> out(static_cast<size_t>(std::max(procs, 0)));
  if (devices.empty() || procs <= 0) return out;
  const size_t n = devices.size();
  const size_t p = static_cast<size_t>(procs);
  if (n >= p) {
    size_t next = 0;
    for (size_t r = 0; r < p; ++r) {
      size_t share = n / p + (r < n % p ? 1 : 0);
      for (size_t k = 0; k < share; ++k) out[r].push_back(devices[next++]);
    }
  } else {
    for (size_t r = 0; r < p; ++r) out[r].push_back(devices[r % n]);
  }
  return out;
}

Result<int> FreeTcpPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Fail(ErrorKind::kIo, std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::string e = std::strerror(errno);
    close(fd);
    return Fail(ErrorKind::kIo, "finding a free port: " + e);
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

Result<std::string> AddressTowards(const std::string& server_url) {
  static const std::regex re(R"(^[a-zA-Z][a-zA-Z0-9+.-]*://(\[[^\]]+\]|[^/:]+)(:([0-9]+))?)");
  std::smatch m;
  if (!std::regex_search(server_url, m, re)) {
    return Fail(ErrorKind::kInvalidArgument, "cannot read a host in server URL " + server_url);
  }
  std::string host = m[1].str();
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  std::string port = m[3].matched ? m[3].str() : "80";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0 || !res) {
    return Fail(ErrorKind::kUnavailable, "resolving " + host + ": " + gai_strerror(rc));
  }
  int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  std::string out;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {};
      if (local.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, buf, sizeof(buf));
      } else {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, buf, sizeof(buf));
      }
      out = buf;
    }
  }
  std::string why = std::strerror(errno);
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  if (out.empty()) return Fail(ErrorKind::kUnavailable, "no route towards " + host + ": " + why);
  return out;
}

// ---- GangProcesses ------------------------------------------------------------

Status GangProcesses::Start(const std::vector<ProcessSpec>& specs) {
  for (const auto& spec : specs) {
    auto pid = runner_.Spawn(spec);
    if (!pid) {
      KillAll();
      return std::unexpected(pid.error());
    }
    pids_.push_back(*pid);
    outputs_.push_back(spec.output_path);
    ended_.emplace_back();
  }
  return {};
}

std::optional<ExitStatus> GangProcesses::Poll() {
  if (result_) return result_;
  bool all_ok = !pids_.empty();
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (!ended_[i]) {
      ended_[i] = runner_.Poll(pids_[i]);
      if (ended_[i]) runner_.KillGroup(pids_[i], SIGKILL);  // what it left in its group
    }
    if (!ended_[i]) {
      all_ok = false;
    } else if (!ended_[i]->ok()) {
      result_ = *ended_[i];
      first_failed_ = i;
      KillAll();  // the others would wait for it in a collective
      return result_;
    }
  }
  if (all_ok) result_ = ExitStatus{0, 0};
  return result_;
}

void GangProcesses::KillAll() {
  for (size_t i = 0; i < pids_.size(); ++i) {
    runner_.KillGroup(pids_[i], SIGKILL);
    if (!ended_[i]) ended_[i] = runner_.Wait(pids_[i]);
  }
}

void GangProcesses::StopGently(TimeMs now, TimeMs grace_ms) {
  std::optional<TimeMs> sent = kill_sent_ms_;
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (ended_[i]) continue;
    std::optional<TimeMs> each = kill_sent_ms_;  // the same SIGTERM time for all
    trainq::StopGently(runner_, pids_[i], each, now, grace_ms);
    sent = each;
  }
  kill_sent_ms_ = sent;
}

std::vector<ProcessSpec> GangSpecs(const ProcessSpec& base, const GangLayout& g,
                                   const std::vector<int>& devices, const std::string& run_dir,
                                   const std::string& work_dir) {
  auto split = SplitDevices(devices, g.procs_per_node);
  std::vector<ProcessSpec> out;
  for (int local = 0; local < g.procs_per_node; ++local) {
    ProcessSpec spec = base;
    for (auto& [k, v] : TorchrunEnv(g, local)) spec.env[k] = v;
    if (!devices.empty()) {
      std::string cuda;
      for (int d : split[static_cast<size_t>(local)]) {
        cuda += (cuda.empty() ? "" : ",") + std::to_string(d);
      }
      spec.env["CUDA_VISIBLE_DEVICES"] = cuda;
    }
    const int rank = g.node_rank * g.procs_per_node + local;
    if (rank != 0) {
      // Only rank 0's metrics count; the others write beside it.
      const std::string name = "rank-" + std::to_string(rank);
      spec.env["TRAINQ_METRICS_FILE"] =
          (fs::path(work_dir.empty() ? run_dir : work_dir) / (name + ".metrics.jsonl")).string();
      if (local != 0) spec.output_path = (fs::path(run_dir) / (name + ".log")).string();
    }
    out.push_back(std::move(spec));
  }
  return out;
}

// ---- GangMember ---------------------------------------------------------------

GangMember::GangMember(LeasedRun run, GangMemberConfig config, GangIo io, ProcessRunner& runner,
                       const Clock& clock)
    : run_(std::move(run)),
      config_(std::move(config)),
      io_(std::move(io)),
      runner_(runner),
      clock_(clock),
      procs_(runner),
      created_ms_(clock.Now()) {
  paths_ = RunPathsFor(config_.data_dir, run_.run_id);
  layout_.nodes = std::max(1, run_.nodes);
  layout_.procs_per_node = std::max(1, run_.procs_per_node);
  layout_.node_rank = run_.node_rank;
}

GangMemberId GangMember::Member() const {
  return GangMemberId{run_.token, run_.node_rank, config_.worker_id};
}

std::string GangMember::Path() const {
  return "/api/v1/runs/" + std::to_string(run_.run_id) + "/gang";
}

bool GangMember::Beat(bool started) {
  GangBeat req;
  req.member = Member();
  req.started = started;
  if (run_.node_rank == 0 && layout_.master_port > 0) {
    req.master_addr = layout_.master_addr;
    req.master_port = layout_.master_port;
  }
  last_beat_ms_ = clock_.Now();
  auto a = io_.call(Path(), ToJson(req));
  if (!a) return true;  // the server is away: the next beat tries again
  if (a->first == 409 || a->first == 404) {
    spdlog::info("gang run {} node {}: stopping: {}", run_.run_id, run_.node_rank,
                 AnswerError(a->second));
    return false;
  }
  if (a->first != 200) {
    spdlog::warn("gang run {} node {}: beat refused: HTTP {} {}", run_.run_id, run_.node_rank,
                 a->first, AnswerError(a->second));
    return true;
  }
  if (run_.node_rank != 0 && layout_.master_port == 0) {
    GangBeatAnswer answer = ParseGangBeatAnswer(a->second);
    if (answer.master_port > 0 && !answer.master_addr.empty()) {
      layout_.master_addr = answer.master_addr;
      layout_.master_port = answer.master_port;
    }
  }
  return true;
}

Status GangMember::Start() {
  // A fresh work tree for each attempt; the logs are the worker's (outside it).
  TRY(PrepareRunWork(paths_));
  TRY(ResetWorkerFile(
      paths_.log, RunBanner(run_,
                            config_.where + fmt::format(" (node {} of {}, rendezvous {}:{})",
                                                        run_.node_rank, layout_.nodes,
                                                        layout_.master_addr, layout_.master_port),
                            clock_.Now()) +
                      PassthroughNote(run_, config_.env_passthrough)));
  log_start_ = SizeOf(paths_.log);
  ASSIGN_OR_RETURN(paths_.workdir, io_.worktree(run_));
  ProcessSpec base = BuildRunProcess(run_, paths_, config_.bin_dir, "", config_.env_passthrough);
  if (config_.devices.empty()) base.env["CUDA_VISIBLE_DEVICES"] = "";
  if (io_.sandbox) io_.sandbox(base, paths_, layout_.procs_per_node > 1);
  TRY(procs_.Start(GangSpecs(base, layout_, config_.devices, paths_.dir, paths_.work)));
  started_ = true;
  started_ms_ = clock_.Now();
  spdlog::info("gang run {} node {}/{}: {} process(es) started (pids {}), rendezvous {}:{}",
               run_.run_id, run_.node_rank, layout_.nodes, procs_.pids().size(),
               fmt::format("{}", fmt::join(procs_.pids(), ",")), layout_.master_addr,
               layout_.master_port);
  return {};
}

bool GangMember::Step() {
  if (done_) return false;
  TimeMs now = clock_.Now();
  if (!started_) {
    // Waiting for node 0's address: ask five times a second, not every pass.
    if (run_.node_rank != 0 && last_beat_ms_ > 0 && now - last_beat_ms_ < 200) return true;
    if (run_.node_rank == 0 && layout_.master_port == 0) {
      auto addr = AddressTowards(config_.server);
      auto port = FreeTcpPort();
      if (!addr || !port) {
        Report("failed", std::nullopt, std::nullopt,
               "gang rendezvous: " + (!addr ? addr.error().message : port.error().message),
               false);
        return false;
      }
      layout_.master_addr = *addr;
      layout_.master_port = *port;
    }
    if (!Beat(false)) {
      done_ = true;
      return false;
    }
    if (layout_.master_port == 0) {
      if (now - created_ms_ > config_.rendezvous_timeout_ms) {
        Report("failed", std::nullopt, std::nullopt,
               "gang rendezvous: node 0 gave no address within " +
                   FormatDuration(config_.rendezvous_timeout_ms),
               false);
        return false;
      }
      return true;  // node 0 has not said where it listens yet
    }
    if (auto st = Start(); !st) {
      Report("failed", std::nullopt, std::nullopt, "cannot start: " + st.error().message, false);
      return false;
    }
    if (!Beat(true)) {
      procs_.KillAll();
      done_ = true;
      return false;
    }
    return true;
  }
  if (auto status = procs_.Poll()) {
    Finish(*status);
    return false;
  }
  if (run_.timeout_s > 0 && now - started_ms_ > run_.timeout_s * 1000) {
    if (!timed_out_) {
      spdlog::warn("gang run {} node {}: timeout of {} reached, killing its processes",
                   run_.run_id, run_.node_rank, FormatDuration(run_.timeout_s * 1000));
    }
    timed_out_ = true;
    procs_.StopGently(now, config_.kill_grace_ms);
  }
  if (now - last_beat_ms_ >= config_.beat_ms && !Beat(true)) {
    // The run failed elsewhere (or was cancelled): stop, but keep what the
    // ranks here said, which may be the other half of the story.
    procs_.KillAll();
    UploadLogs();
    done_ = true;
    return false;
  }
  return true;
}

void GangMember::UploadLogs() {
  constexpr std::int64_t kMax = std::int64_t{1} << 20;
  for (size_t i = 0; i < procs_.size(); ++i) {
    const std::string& path = procs_.output_path(i);
    // From the start, banner included (what ran where); the last 1 MiB at most.
    std::int64_t from = 0;
    std::int64_t size = SizeOf(path);
    std::string text;
    if (size - from > kMax) {
      text = "[... " + std::to_string(size - from - kMax) + " bytes cut ...]\n";
      from = size - kMax;
    }
    text += ReadTail(path, from);
    int rank = run_.node_rank * layout_.procs_per_node + static_cast<int>(i);
    auto a = io_.call(Path(), ToJson(GangLog{Member(), rank, ValidUtf8(text)}));
    if (!a || a->first != 200) {
      spdlog::warn("gang run {} node {}: log of rank {} not delivered{}", run_.run_id,
                   run_.node_rank, rank, a ? ": HTTP " + std::to_string(a->first) : "");
    }
  }
}

void GangMember::Finish(const ExitStatus& status) {
  std::string log_text = ReadTail(paths_.log, log_start_);
  std::string metrics_text = run_.node_rank == 0 ? ReadRunFile(paths_.metrics) : "";
  std::optional<int> code;
  if (status.signal == 0) code = status.code;
  UploadLogs();
  if (!status.ok() || timed_out_ || run_.node_rank != 0) {
    if (status.ok() && !timed_out_) {
      Report("succeeded", std::nullopt, code, "", false);
      return;
    }
    // The rank that failed first: its exit and its last lines, not rank 0's.
    size_t i = procs_.first_failed().value_or(0);
    int rank = run_.node_rank * layout_.procs_per_node + static_cast<int>(i);
    std::string path = i < procs_.size() ? procs_.output_path(i) : paths_.log;
    std::string text = path == paths_.log ? log_text : ReadTail(path, 0);
    RunOutcome o = JudgeRun(RunEnd{status, timed_out_, run_.timeout_s, run_.command,
                                   run_.metric_name, false, text},
                            MetricReading{});
    Report("failed", std::nullopt, code, "rank " + std::to_string(rank) + ": " + o.error,
           o.config_error);
    return;
  }
  auto [reading, outcome] = JudgeAttempt(run_, status, timed_out_, log_text, metrics_text);
  std::erase_if(reading.points, [](const MetricPoint& p) { return !std::isfinite(p.value); });
  if (!reading.points.empty()) {
    MetricsRequest m;
    m.token = run_.token;
    m.worker_id = config_.worker_id;
    m.points = std::move(reading.points);
    json body = ToJson(m);
    if (!io_.call("/api/v1/runs/" + std::to_string(run_.run_id) + "/metrics", body)) {
      unsent_points_ = std::move(body["points"]);  // kept with the result
    }
  }
  if (outcome.succeeded) {
    Report("succeeded", reading.value, code, "", false);
  } else {
    Report("failed", std::nullopt, code, outcome.error, outcome.config_error);
  }
}

void GangMember::Report(const std::string& outcome, std::optional<double> metric,
                        std::optional<int> exit_code, const std::string& error,
                        bool config_error) {
  done_ = true;
  GangComplete message;
  message.member = Member();
  message.outcome = outcome;
  message.metric_value = metric;
  message.exit_code = exit_code;
  message.error = error;
  message.retry = !config_error;
  const json req = ToJson(message);
  auto a = io_.call(Path(), req);
  if (!a && outcome != "interrupted" && io_.keep) {
    PendingResult kept;
    kept.run_id = run_.run_id;
    kept.node_rank = run_.node_rank;
    kept.complete = req;
    kept.points = unsent_points_;
    io_.keep(kept, "no answer");
  } else if (!a) {
    spdlog::error("gang run {} node {}: result not delivered; its lease will expire",
                  run_.run_id, run_.node_rank);
  } else if (a->first != 200) {
    spdlog::info("gang run {} node {}: result refused: HTTP {} {}", run_.run_id, run_.node_rank,
                 a->first, AnswerError(a->second));
  } else {
    spdlog::info("gang run {} node {}: {} (run {})", run_.run_id, run_.node_rank, outcome,
                 a->second.value("state", std::string("?")));
  }
}

void GangMember::Interrupt(const std::string& reason) {
  if (done_) return;
  procs_.KillAll();
  if (started_) UploadLogs();
  Report("interrupted", std::nullopt, std::nullopt, reason, false);
}

}  // namespace trainq
