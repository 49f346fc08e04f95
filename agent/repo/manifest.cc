#include "agent/repo/manifest.h"

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <regex>
#include <set>

#include "agent/repo/sweep_spec.h"
#include "core/placeholders.h"
#include "core/process.h"
#include "core/strings.h"
#include "core/yaml_reader.h"

namespace trainq {

namespace {

// More seeds than any batch gets (repeats stop at 100000): what a seed must
// leave room for below INT64_MAX.
constexpr std::int64_t kMaxSeedCount = 1'000'000;

// The trainq.yaml reader: the shared YAML layer (core/yaml_reader.h) plus
// what only the manifest reads.
class Parser : public YamlReader {
 public:
  using YamlReader::YamlReader;

  // Applies the keys shared by `defaults` and experiments onto `e`.
  Status ApplyCommon(const YAML::Node& map, const std::string& path, Experiment& e) const {
    if (auto n = map["repeats"]) {
      std::string rp = path + ".repeats";
      if (n.IsMap()) {
        TRY(CheckKeys(n, rp, {"min", "max", "step", "until", "design"}));
        AdaptiveRepeats a;
        if (!n["min"]) return Err(n, rp + ".min", "missing (the runs queued at first)");
        if (!n["max"]) return Err(n, rp + ".max", "missing (the most runs ever queued)");
        if (!n["until"]) {
          return Err(n, rp + ".until", "missing (`decided` or {ci_halfwidth: 0.005})");
        }
        ASSIGN_OR_RETURN(auto lo, Int(n["min"], rp + ".min", 2, "an integer of at least 2"));
        ASSIGN_OR_RETURN(auto hi, Int(n["max"], rp + ".max", 2, "an integer of at least 2"));
        if (hi < lo) return Err(n["max"], rp + ".max", "must be at least min (" +
                                                           std::to_string(lo) + ")");
        if (hi > 100000) return Err(n["max"], rp + ".max", "at most 100000 repeats");
        a.max = static_cast<int>(hi);
        a.step = static_cast<int>(lo);
        if (auto st = n["step"]) {
          ASSIGN_OR_RETURN(auto v, Int(st, rp + ".step", 1, "a positive integer"));
          a.step = static_cast<int>(v);
        }
        auto until = n["until"];
        if (until.IsScalar() && until.Scalar() == "decided") {
          a.decided = true;
        } else if (until.IsMap()) {
          TRY(CheckKeys(until, rp + ".until", {"ci_halfwidth"}));
          auto hw = until["ci_halfwidth"];
          if (!hw) return Err(until, rp + ".until.ci_halfwidth", "missing");
          ASSIGN_OR_RETURN(auto v, Positive(hw, rp + ".until.ci_halfwidth"));
          a.ci_halfwidth = v;
        } else {
          return Err(until, rp + ".until",
                     "expected `decided` or {ci_halfwidth: NUMBER}, got " + Show(until));
        }
        if (auto d = n["design"]) {
          if (!d.IsScalar() || (d.Scalar() != "spending" && d.Scalar() != "bonferroni")) {
            return Err(d, rp + ".design",
                       "expected `spending` (the default) or `bonferroni`, got " + Show(d));
          }
          a.design = d.Scalar();
        }
        e.repeats = static_cast<int>(lo);
        e.adaptive = a;
        return ApplyRest(map, path, e);
      }
      ASSIGN_OR_RETURN(auto v, Int(n, rp, 1, "a positive integer"));
      if (v > 100000) return Err(n, rp, "at most 100000 repeats, got " + Show(n));
      e.repeats = static_cast<int>(v);
      e.adaptive.reset();
    }
    return ApplyRest(map, path, e);
  }

  // resources.nodes / processes_per_node: a gang run (docs/trainq-yaml.md,
  // "Runs over several processes and machines (gangs)").
  Status ApplyGang(const YAML::Node& n, const std::string& rp, Experiment& e) const {
    if (auto k = n["nodes"]) {
      ASSIGN_OR_RETURN(auto v, Int(k, rp + ".nodes", 1, "a positive integer (machines)"));
      if (v > kMaxGangNodes) {
        return Err(k, rp + ".nodes", "at most " + std::to_string(kMaxGangNodes) +
                                         " machines, got " + Show(k));
      }
      e.nodes = static_cast<int>(v);
      e.gang = true;
    }
    if (auto k = n["processes_per_node"]) {
      ASSIGN_OR_RETURN(auto v, Int(k, rp + ".processes_per_node", 1,
                                   "a positive integer (processes on each machine)"));
      if (v > kMaxProcessesPerNode) {
        return Err(k, rp + ".processes_per_node",
                   "at most " + std::to_string(kMaxProcessesPerNode) + " processes, got " +
                       Show(k));
      }
      e.processes_per_node = static_cast<int>(v);
      e.gang = true;
    }
    return {};
  }

  Result<double> Positive(const YAML::Node& n, const std::string& path) const {
    if (!n.IsScalar()) return Err(n, path, "expected a positive number, got " + Show(n));
    char* end = nullptr;
    double v = std::strtod(n.Scalar().c_str(), &end);
    if (!end || *end != '\0' || n.Scalar().empty() || !(v > 0) || !std::isfinite(v)) {
      return Err(n, path, "expected a positive number, got " + Show(n));
    }
    return v;
  }

  Status ApplyRest(const YAML::Node& map, const std::string& path, Experiment& e) const {
    if (auto n = map["seed"]) {
      ASSIGN_OR_RETURN(e.seed, Int(n, path + ".seed", 0, "a non-negative integer"));
      // Seeds are seed .. seed + repeats - 1, and repeats go up to
      // kMaxSeedCount (adaptive repeats, --repeats): that must stay a 64-bit
      // integer, or the seeds wrap to negative ones.
      if (e.seed > std::numeric_limits<std::int64_t>::max() - kMaxSeedCount) {
        return Err(n, path + ".seed",
                   "expected a seed of at most " +
                       std::to_string(std::numeric_limits<std::int64_t>::max() - kMaxSeedCount) +
                       " (the seeds seed, seed+1, ... must stay 64-bit integers), got " + Show(n));
      }
    }
    if (auto n = map["timeout"]) {
      ASSIGN_OR_RETURN(e.timeout_s, DurationSeconds(n, path + ".timeout"));
    }
    if (auto n = map["max_attempts"]) {
      ASSIGN_OR_RETURN(auto v, Int(n, path + ".max_attempts", 1, "a positive integer"));
      e.max_attempts = static_cast<int>(v);
    }
    if (auto n = map["env_passthrough"]) {
      const std::string ep = path + ".env_passthrough";
      if (!n.IsSequence()) {
        return Err(n, ep,
                   "expected a list of variable names such as [WANDB_API_KEY, \"HF_*\"], got " +
                       Show(n));
      }
      std::vector<std::string> names;
      for (std::size_t i = 0; i < n.size(); ++i) {
        const std::string at = ep + "[" + std::to_string(i) + "]";
        ASSIGN_OR_RETURN(auto name, Str(n[i], at));
        if (!ValidEnvPattern(name)) {
          return Err(n[i], at, "expected a variable name or PREFIX*, got " + Show(n[i]));
        }
        names.push_back(std::move(name));
      }
      e.env_passthrough = std::move(names);
    }
    if (auto n = map["determinism"]) {
      ASSIGN_OR_RETURN(auto d, Str(n, path + ".determinism"));
      if (d != "check" && d != "off") {
        return Err(n, path + ".determinism", "expected check or off, got " + Show(n));
      }
      e.determinism_check = d == "check";
    }
    if (auto n = map["baseline"]) {
      ASSIGN_OR_RETURN(e.baseline, Str(n, path + ".baseline"));
      if (e.baseline != "auto" && e.baseline != "reuse" && e.baseline != "off") {
        return Err(n, path + ".baseline", "expected auto, reuse or off, got " + Show(n));
      }
    }
    if (auto n = map["metric"]) {
      std::string mp = path + ".metric";
      if (n.IsScalar()) {
        e.metric.name = n.Scalar();
      } else if (n.IsMap()) {
        TRY(CheckKeys(n, mp, {"name", "goal", "regex", "min_effect"}));
        if (auto m = n["min_effect"]) {
          ASSIGN_OR_RETURN(auto v, Positive(m, mp + ".min_effect"));
          e.metric.min_effect = v;
        }
        if (auto m = n["name"]) { ASSIGN_OR_RETURN(e.metric.name, Str(m, mp + ".name")); }
        if (auto m = n["goal"]) {
          ASSIGN_OR_RETURN(e.metric.goal, Str(m, mp + ".goal"));
          if (e.metric.goal != "max" && e.metric.goal != "min") {
            return Err(m, mp + ".goal", "expected max or min, got " + Show(m));
          }
        }
        if (auto m = n["regex"]) {
          ASSIGN_OR_RETURN(e.metric.regex, Str(m, mp + ".regex"));
          try {
            std::regex re(e.metric.regex);
            if (re.mark_count() < 1) {
              return Err(m, mp + ".regex",
                         "needs one capture group around the number, e.g. 'acc=([0-9.]+)'");
            }
          } catch (const std::regex_error& ex) {
            return Err(m, mp + ".regex", std::string("invalid regular expression: ") + ex.what());
          }
        }
      } else {
        return Err(n, mp, "expected a name or {name, goal, regex}, got " + Show(n));
      }
      if (e.metric.name.empty()) return Err(n, mp + ".name", "must not be empty");
    }
    if (auto n = map["resources"]) {
      std::string rp = path + ".resources";
      if (!n.IsMap()) return Err(n, rp, "expected a mapping such as {gpus: 1}, got " + Show(n));
      TRY(CheckKeys(n, rp, {"gpus", "pool", "nodes", "processes_per_node"}));
      if (auto g = n["gpus"]) {
        ASSIGN_OR_RETURN(auto v, Int(g, rp + ".gpus", 0, "a non-negative integer"));
        e.gpus = static_cast<int>(v);
      }
      TRY(ApplyGang(n, rp, e));
      if (auto p = n["pool"]) {
        if (!p.IsScalar() || p.Scalar().empty()) {
          return Err(p, rp + ".pool", "expected a pool name such as gpu, got " + Show(p));
        }
        e.pool = p.Scalar();
      }
    }
    return {};
  }

};

std::string Normalise(const YAML::Node& n) {
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << n;
  return out.c_str();
}

// `def` (an experiment's entry, or `defaults`) less the keys that are no
// input of a run (kJudgingKeys): what change detection and the inputs'
// fingerprint compare. A metric left with its name alone is written as the
// name, so that `metric: accuracy` and `{name: accuracy, min_effect: 0.01}`
// compare equal.
YAML::Node RunInputsOf(const YAML::Node& def) {
  YAML::Node inputs = YAML::Clone(def);
  for (const char* key : {"correction", "determinism", "baseline"}) inputs.remove(key);
  const YAML::Node& read = inputs;
  if (read["metric"] && read["metric"].IsMap()) {
    YAML::Node metric = inputs["metric"];
    metric.remove("min_effect");
    if (metric.size() == 0) {
      inputs.remove("metric");
    } else if (metric.size() == 1 && read["metric"]["name"] && read["metric"]["name"].IsScalar()) {
      inputs["metric"] = read["metric"]["name"].Scalar();
    }
  }
  return inputs;
}

// Every `{name}` in a command must be a placeholder trainq substitutes
// (core/placeholders.h: a shell's `${VAR}` is not one).
std::optional<std::string> UnknownPlaceholder(std::string_view command) {
  const auto& known = KnownPlaceholders();
  for (const auto& p : FindPlaceholders(command)) {
    if (std::find(known.begin(), known.end(), p.name) == known.end()) return "{" + p.name + "}";
  }
  return std::nullopt;
}

// What is wrong with a watch glob, or nothing.
std::optional<std::string> BadGlob(std::string_view glob) {
  if (glob.empty()) return "an empty glob matches nothing";
  for (char c : {'[', ']', '{', '}', '\\'}) {
    if (glob.find(c) != std::string_view::npos) {
      return std::string("'") + c +
             "' is not supported (globs know `*`, `?` and `**` as a whole path part)";
    }
  }
  std::string_view rest = glob;
  while (rest.starts_with("./")) rest.remove_prefix(2);
  if (rest.starts_with("/")) rest.remove_prefix(1);
  size_t start = 0;
  while (start <= rest.size()) {
    size_t slash = rest.find('/', start);
    std::string_view part =
        rest.substr(start, slash == std::string_view::npos ? std::string_view::npos
                                                           : slash - start);
    if (part.empty()) return "has an empty path part ('//' or a trailing '/')";
    if (part == "." || part == "..") return "paths are relative to the repository root; no '.' or '..' parts";
    if (part != "**" && part.find("**") != std::string_view::npos) {
      return "`**` must be a whole path part, as in `src/**/*.py`";
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return std::nullopt;
}

bool ValidName(const std::string& s) {
  static const std::regex re("[A-Za-z0-9][A-Za-z0-9_.-]*");
  return std::regex_match(s, re);
}

}  // namespace

const std::vector<std::string>& KnownPlaceholders() {
  static const std::vector<std::string> known = {"seed", "repeat", "run_id", "output_dir"};
  return known;
}

std::optional<std::string> Experiment::NoPlainBatch() const {
  if (!swept || command.empty() || !sweep_default_command.empty()) return std::nullopt;
  return name + " is swept and its sweep has no explicit point to run by default: "
                "start a sweep (trainq sweep start " + name + ") or add `points:`";
}

std::string Experiment::ResolvedCommand() const {
  if (!sweep_default_command.empty()) return sweep_default_command;
  if (!command.empty()) return command;
  return "trainq-train " + ShellQuote(trainer);
}

BatchSpec Experiment::ToBatchSpec(std::string reason) const {
  BatchSpec b;
  b.experiment = name;
  b.command = ResolvedCommand();
  b.metric_name = metric.name;
  b.metric_goal = metric.goal;
  b.metric_regex = metric.regex;
  b.repeats = repeats;
  b.seed_start = seed;
  b.gpus = gpus;
  b.timeout_s = timeout_s;
  b.max_attempts = max_attempts;
  b.pool = pool;
  b.reason = std::move(reason);
  nlohmann::json j = {{"command", command},           {"trainer", trainer},
                      {"watch", watch},               {"repeats", repeats},
                      {"seed", seed},                 {"metric", {{"name", metric.name},
                                                                  {"goal", metric.goal},
                                                                  {"regex", metric.regex}}},
                      {"resources", {{"gpus", gpus}}}, {"timeout_s", timeout_s},
                      {"max_attempts", max_attempts}};
  if (!pool.empty()) j["resources"]["pool"] = pool;
  if (gang) {
    // Read by the store (json_extract) when it leases: a gang is leased whole.
    j["resources"]["nodes"] = nodes;
    j["resources"]["processes_per_node"] = processes_per_node;
  }
  if (baseline != "auto") j["baseline"] = baseline;
  if (correction != "holm") j["correction"] = correction;
  if (determinism_check) j["determinism"] = "check";
  // Read by the store (json_extract) when it leases: the run's passthrough.
  if (env_passthrough) j["env_passthrough"] = *env_passthrough;
  if (metric.min_effect) j["metric"]["min_effect"] = *metric.min_effect;
  if (adaptive) {
    nlohmann::json a = {{"min", repeats}, {"max", adaptive->max}, {"step", adaptive->step}};
    if (adaptive->decided) a["until"] = "decided";
    if (adaptive->ci_halfwidth) a["until"] = {{"ci_halfwidth", *adaptive->ci_halfwidth}};
    if (adaptive->design != "spending") a["design"] = adaptive->design;
    j["adaptive"] = a;
  }
  b.spec_json = j.dump();
  return b;
}

std::string RunInputsJson(std::string_view spec_json) {
  auto j = nlohmann::json::parse(spec_json.empty() ? std::string_view("{}") : spec_json, nullptr,
                                 false);
  if (!j.is_object()) return std::string(spec_json);
  for (const char* key : {"correction", "determinism", "baseline"}) j.erase(key);
  if (j.contains("metric") && j["metric"].is_object()) j["metric"].erase("min_effect");
  return j.dump();
}

bool IsReproExperiment(std::string_view experiment) {
  return experiment.size() > kReproSuffix.size() && experiment.ends_with(kReproSuffix);
}

std::string ReproExperimentOf(std::string_view experiment) {
  return std::string(experiment) + std::string(kReproSuffix);
}

std::string ReproTargetOf(std::string_view repro_experiment) {
  if (!IsReproExperiment(repro_experiment)) return std::string(repro_experiment);
  return std::string(repro_experiment.substr(0, repro_experiment.size() - kReproSuffix.size()));
}

BatchSpec ReproSpec(const BatchSpec& of, int runs) {
  BatchSpec r = of;
  r.experiment = ReproExperimentOf(of.experiment);
  r.repeats = runs;
  r.reason = "determinism check of " + of.experiment + ": seed" + (runs == 1 ? " " : "s ") +
             std::to_string(of.seed_start) +
             (runs == 1 ? "" : ".." + std::to_string(of.seed_start + runs - 1)) + " run again";
  auto j = nlohmann::json::parse(of.spec_json.empty() ? "{}" : of.spec_json, nullptr, false);
  if (!j.is_object()) j = nlohmann::json::object();
  j["baseline"] = "off";
  j["repro_of"] = of.experiment;
  j.erase("adaptive");
  r.spec_json = j.dump();
  return r;
}

std::vector<BatchSpec> WithDeterminismChecks(std::vector<BatchSpec> specs) {
  size_t n = specs.size();
  for (size_t i = 0; i < n; ++i) {
    auto j = nlohmann::json::parse(specs[i].spec_json.empty() ? "{}" : specs[i].spec_json, nullptr,
                                   false);
    if (j.is_object() && j.value("determinism", "") == "check" &&
        !IsReproExperiment(specs[i].experiment)) {
      specs.push_back(ReproSpec(specs[i], 1));
    }
  }
  return specs;
}

const Experiment* Manifest::Find(std::string_view name) const {
  for (const auto& e : experiments) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::vector<std::string> Manifest::Names() const {
  std::vector<std::string> out;
  for (const auto& e : experiments) out.push_back(e.name);
  return out;
}

Result<Manifest> ParseManifest(std::string_view text, std::string_view filename) {
  Parser p(filename);
  ASSIGN_OR_RETURN(YAML::Node root, p.Load(text));
  if (!root.IsMap()) {
    return Fail(ErrorKind::kInvalidArgument,
                std::string(filename) + ":1: expected a mapping with `version` and `experiments`");
  }
  TRY(p.CheckKeys(root, "", {"version", "defaults", "experiments"}));
  Manifest m;
  auto version = root["version"];
  if (!version) {
    return Fail(ErrorKind::kInvalidArgument,
                std::string(filename) + ":1: version: missing (write `version: 1`)");
  }
  ASSIGN_OR_RETURN(auto v, p.Int(version, "version", 1, "1"));
  if (v != 1) return p.Err(version, "version", "unsupported version " + version.Scalar() +
                                                   " (this trainq reads version 1)");

  Experiment defaults;
  if (auto d = root["defaults"]) {
    if (!d.IsMap()) return p.Err(d, "defaults", "expected a mapping, got " + Parser::Show(d));
    TRY(p.CheckKeys(d, "defaults",
                    {"repeats", "seed", "metric", "resources", "timeout", "max_attempts",
                     "baseline", "env_passthrough", "correction", "determinism"}));
    TRY(p.ApplyCommon(d, "defaults", defaults));
    if (auto c = d["correction"]) {
      ASSIGN_OR_RETURN(auto text, p.Str(c, "defaults.correction"));
      if (text != "holm" && text != "bh" && text != "none") {
        return p.Err(c, "defaults.correction", "expected holm, bh or none, got " + Parser::Show(c));
      }
      defaults.correction = text;
    }
    // How verdicts are read, and whether a seed runs twice, are no inputs of
    // a run: changing them reruns nothing.
    m.defaults_definition = Normalise(RunInputsOf(d));
  }

  auto exps = root["experiments"];
  if (!exps) {
    return Fail(ErrorKind::kInvalidArgument,
                std::string(filename) + ":1: experiments: missing (at least one experiment)");
  }
  if (!exps.IsMap() || exps.size() == 0) {
    return p.Err(exps, "experiments", "expected a mapping of experiment names to definitions");
  }
  for (const auto& kv : exps) {
    std::string name = kv.first.Scalar();
    std::string path = "experiments." + name;
    if (!ValidName(name)) {
      return p.Err(kv.first, path,
                   "experiment names use letters, digits, '_', '.' and '-', starting with a letter "
                   "or digit");
    }
    const YAML::Node& def = kv.second;
    if (!def.IsMap()) return p.Err(def, path, "expected a mapping, got " + Parser::Show(def));
    TRY(p.CheckKeys(def, path,
                    {"command", "trainer", "watch", "repeats", "seed", "metric", "resources",
                     "timeout", "max_attempts", "baseline", "sweep", "env_passthrough",
                     "determinism"}));
    Experiment e = defaults;
    e.name = name;
    e.line = kv.first.Mark().line + 1;
    if (auto c = def["command"]) {
      ASSIGN_OR_RETURN(e.command, p.Str(c, path + ".command"));
      e.command_line = c.Mark().line + 1;
      // With a sweep its parameters are placeholders too: CheckSweepTarget
      // checks the command against them below.
      if (auto bad = def["sweep"] ? std::nullopt : UnknownPlaceholder(e.command)) {
        std::string known;
        for (const auto& k : KnownPlaceholders()) known += (known.empty() ? "{" : ", {") + k + "}";
        return p.Err(c, path + ".command",
                     "unknown placeholder " + *bad + " (known: " + known + ")");
      }
    }
    if (auto t = def["trainer"]) {
      ASSIGN_OR_RETURN(e.trainer, p.Str(t, path + ".trainer"));
      e.trainer_line = t.Mark().line + 1;
    }
    if (e.command.empty() == e.trainer.empty()) {
      return p.Err(kv.first, path,
                   e.command.empty() ? "needs `command` (a shell command) or `trainer` (a spec)"
                                     : "has both `command` and `trainer`; keep one");
    }
    if (auto w = def["watch"]) {
      e.watch_line = w.Mark().line + 1;
      auto add = [&](const YAML::Node& g) -> Status {
        ASSIGN_OR_RETURN(auto s, p.Str(g, path + ".watch"));
        if (auto bad = BadGlob(s)) {
          return p.Err(g, path + ".watch", "glob '" + s + "': " + *bad);
        }
        e.watch.push_back(s);
        return {};
      };
      if (w.IsScalar()) {
        TRY(add(w));
      } else if (w.IsSequence()) {
        for (const auto& g : w) TRY(add(g));
      } else {
        return p.Err(w, path + ".watch", "expected a list of globs, got " + Parser::Show(w));
      }
    }
    TRY(p.ApplyCommon(def, path, e));
    // `determinism`, `baseline` and `metric.min_effect` decide whether a
    // seed runs twice and how the runs are judged, not what a run does: no
    // inputs of the experiment (changing them reruns nothing).
    YAML::Node def_inputs = RunInputsOf(def);
    e.definition = Normalise(def_inputs);
    if (auto sw = def["sweep"]) {
      // A sweep (agent/repo/sweep_spec.h) is checked here, so that a mistake fails
      // the submission; it is not part of the experiment's inputs.
      ASSIGN_OR_RETURN(auto spec, ParseSweep(sw, path + ".sweep", filename));
      TRY(CheckSweepTarget(spec, e, sw, path + ".sweep", filename));
      YAML::Node rest = YAML::Clone(def_inputs);
      rest.remove("sweep");
      e.definition = Normalise(rest);
      e.swept = true;
      // A swept command's plain batch (submit, pushes) runs the sweep's
      // first explicit point; without one it has no plain batch.
      if (!e.command.empty() && !spec.points.empty()) {
        auto point = CompletePoint(spec, spec.points[0]);
        if (!point) return p.Err(sw["points"], path + ".sweep.points", point.error().message);
        auto filled = FillSweepCommand(e.command, *point, name);
        if (!filled) return p.Err(sw["points"], path + ".sweep.points", filled.error().message);
        e.sweep_default_command = *filled;
        e.definition += " @ " + *filled;
      }
    }
    if (m.Find(name)) return p.Err(kv.first, path, "defined twice");
    m.experiments.push_back(std::move(e));
  }
  return m;
}

}  // namespace trainq
