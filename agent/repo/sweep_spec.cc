#include "agent/repo/sweep_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

#include "agent/repo/manifest.h"
#include "core/placeholders.h"
#include "core/strings.h"
#include "core/yaml_reader.h"

namespace trainq {

using nlohmann::json;

std::string_view ParamKindName(ParamKind k) {
  switch (k) {
    case ParamKind::kUniform: return "uniform";
    case ParamKind::kLogUniform: return "log_uniform";
    case ParamKind::kInt: return "int";
    case ParamKind::kChoice: return "choice";
    case ParamKind::kValues: return "values";
    case ParamKind::kValue: return "value";
    case ParamKind::kExpr: return "expr";
  }
  return "?";
}

std::string_view ModelName(SweepParam::Model m) {
  switch (m) {
    case SweepParam::Model::kRandom: return "random";
    case SweepParam::Model::kBayes: return "bayes";
    case SweepParam::Model::kTpe: return "tpe";
  }
  return "?";
}

namespace {

// ---- the expression language ------------------------------------------------

class ExprParser {
 public:
  ExprParser(std::string_view s, const std::map<std::string, double>* vars)
      : s_(s), vars_(vars) {}

  Result<double> Parse() {
    ASSIGN_OR_RETURN(double v, Sum());
    Skip();
    if (i_ != s_.size()) return Bad("unexpected '" + std::string(1, s_[i_]) + "'");
    return v;
  }
  std::vector<std::string> names;

 private:
  std::unexpected<Error> Bad(const std::string& msg) const {
    return Fail(ErrorKind::kInvalidArgument,
                "expression \"" + std::string(s_) + "\" at character " + std::to_string(i_ + 1) +
                    ": " + msg);
  }
  void Skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool Eat(char c) {
    Skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  Result<double> Sum() {
    ASSIGN_OR_RETURN(double v, Product());
    while (true) {
      if (Eat('+')) {
        ASSIGN_OR_RETURN(double r, Product());
        v += r;
      } else if (Eat('-')) {
        ASSIGN_OR_RETURN(double r, Product());
        v -= r;
      } else {
        return v;
      }
    }
  }
  Result<double> Product() {
    ASSIGN_OR_RETURN(double v, Unary());
    while (true) {
      if (Eat('*')) {
        ASSIGN_OR_RETURN(double r, Unary());
        v *= r;
      } else if (Eat('/')) {
        ASSIGN_OR_RETURN(double r, Unary());
        if (vars_ && r == 0) return Bad("division by zero");
        v = vars_ ? v / r : 0;
      } else {
        return v;
      }
    }
  }
  Result<double> Unary() {
    if (Eat('-')) {
      ASSIGN_OR_RETURN(double v, Unary());
      return -v;
    }
    if (Eat('+')) return Unary();
    return Primary();
  }
  Result<double> Primary() {
    Skip();
    if (i_ >= s_.size()) return Bad("unexpected end");
    if (Eat('(')) {
      ASSIGN_OR_RETURN(double v, Sum());
      if (!Eat(')')) return Bad("expected ')'");
      return v;
    }
    char c = s_[i_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      std::string num(s_.substr(i_));
      char* end = nullptr;
      double v = std::strtod(num.c_str(), &end);
      if (end == num.c_str()) return Bad("bad number");
      i_ += static_cast<size_t>(end - num.c_str());
      return v;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = i_;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) ||
                                s_[i_] == '_' || s_[i_] == '.')) {
        ++i_;
      }
      std::string id(s_.substr(start, i_ - start));
      Skip();
      if (i_ < s_.size() && s_[i_] == '(') {
        ++i_;
        std::vector<double> args;
        if (!Eat(')')) {
          do {
            ASSIGN_OR_RETURN(double a, Sum());
            args.push_back(a);
          } while (Eat(','));
          if (!Eat(')')) return Bad("expected ')' after the arguments of " + id);
        }
        return Call(id, args);
      }
      names.push_back(id);
      if (!vars_) return 1.0;
      auto it = vars_->find(id);
      if (it == vars_->end()) return Bad("unknown name '" + id + "'");
      return it->second;
    }
    return Bad("unexpected '" + std::string(1, c) + "'");
  }
  Result<double> Call(const std::string& f, const std::vector<double>& a) {
    bool two = f == "min" || f == "max";
    bool one = f == "log" || f == "exp" || f == "int";
    if (!one && !two) return Bad("unknown function '" + f + "' (min, max, log, exp, int)");
    if (a.size() != (two ? 2u : 1u)) {
      return Bad(f + "() takes " + (two ? "2 arguments" : "1 argument"));
    }
    if (!vars_) return 1.0;
    if (f == "min") return std::min(a[0], a[1]);
    if (f == "max") return std::max(a[0], a[1]);
    if (f == "exp") return std::exp(a[0]);
    if (f == "int") return std::trunc(a[0]);
    if (!(a[0] > 0)) return Bad("log() of a value <= 0");
    return std::log(a[0]);
  }

  std::string_view s_;
  const std::map<std::string, double>* vars_;
  size_t i_ = 0;
};

// ---- the YAML parser ----------------------------------------------------------

// The sweep section's reader: the shared YAML layer (core/yaml_reader.h)
// plus parameters, expressions and budgets.
class SweepParser : public YamlReader {
 public:
  using YamlReader::YamlReader;

  // A scalar as JSON: a number when it reads as one, else a string.
  static json Value(const YAML::Node& n) {
    const std::string& s = n.Scalar();
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0' && std::isfinite(v) && n.Tag() != "!") {
      if (v == std::floor(v) && std::fabs(v) < 1e15 && s.find_first_of(".eE") == std::string::npos) {
        return static_cast<std::int64_t>(v);
      }
      return v;
    }
    if (s == "true" || s == "false") return s == "true";
    return s;
  }
  Result<std::vector<json>> List(const YAML::Node& n, const std::string& path) const {
    if (!n.IsSequence()) return Err(n, path, "expected a list, got " + Show(n));
    if (n.size() == 0) return Err(n, path, "must not be empty");
    std::vector<json> out;
    for (const auto& item : n) {
      if (!item.IsScalar()) return Err(item, path, "expected plain values, got " + Show(item));
      out.push_back(Value(item));
    }
    return out;
  }
  Result<std::pair<double, double>> Bounds(const YAML::Node& n, const std::string& path,
                                           bool positive) const {
    if (!n.IsSequence() || n.size() != 2) {
      return Err(n, path, "expected [low, high], got " + Show(n));
    }
    ASSIGN_OR_RETURN(double lo, Number(n[0], path));
    ASSIGN_OR_RETURN(double hi, Number(n[1], path));
    if (lo >= hi) return Err(n, path, "low must be below high");
    if (positive && lo <= 0) return Err(n, path, "bounds must be > 0 (a log scale)");
    return std::pair{lo, hi};
  }

  Result<SweepParam> Param(const std::string& name, const YAML::Node& n, const std::string& path,
                           const std::string& default_strategy) const {
    SweepParam p;
    p.name = name;
    if (!n.IsMap()) {
      return Err(n, path, "expected a mapping such as {uniform: [0, 1]}, got " + Show(n));
    }
    TRY(CheckKeys(n, path, {"uniform", "log_uniform", "int", "log", "choice", "values", "value",
                       "expr", "strategy"}));
    int kinds = 0;
    for (const char* k : {"uniform", "log_uniform", "int", "choice", "values", "value", "expr"}) {
      if (n[k]) ++kinds;
    }
    if (kinds != 1) {
      return Err(n, path, kinds == 0 ? "needs one of uniform, log_uniform, int, choice, values, "
                                       "value, expr"
                                     : "has more than one of uniform, log_uniform, int, choice, "
                                       "values, value, expr");
    }
    if (auto v = n["uniform"]) {
      p.kind = ParamKind::kUniform;
      ASSIGN_OR_RETURN(auto b, Bounds(v, path + ".uniform", false));
      std::tie(p.lo, p.hi) = b;
    } else if (auto v = n["log_uniform"]) {
      p.kind = ParamKind::kLogUniform;
      ASSIGN_OR_RETURN(auto b, Bounds(v, path + ".log_uniform", true));
      std::tie(p.lo, p.hi) = b;
    } else if (auto v = n["int"]) {
      p.kind = ParamKind::kInt;
      if (!v.IsSequence() || v.size() != 2) {
        return Err(v, path + ".int", "expected [low, high], got " + Show(v));
      }
      ASSIGN_OR_RETURN(auto lo, Int(v[0], path + ".int", -1'000'000'000'000LL));
      ASSIGN_OR_RETURN(auto hi, Int(v[1], path + ".int", -1'000'000'000'000LL));
      if (lo >= hi) return Err(v, path + ".int", "low must be below high");
      p.lo = static_cast<double>(lo);
      p.hi = static_cast<double>(hi);
      if (auto l = n["log"]) {
        if (!l.IsScalar() || (l.Scalar() != "true" && l.Scalar() != "false")) {
          return Err(l, path + ".log", "expected true or false, got " + Show(l));
        }
        p.log = l.Scalar() == "true";
        if (p.log && lo <= 0) return Err(v, path + ".int", "bounds must be > 0 with log: true");
      }
    } else if (auto v = n["choice"]) {
      p.kind = ParamKind::kChoice;
      ASSIGN_OR_RETURN(p.options, List(v, path + ".choice"));
    } else if (auto v = n["values"]) {
      p.kind = ParamKind::kValues;
      ASSIGN_OR_RETURN(p.options, List(v, path + ".values"));
    } else if (auto v = n["value"]) {
      p.kind = ParamKind::kValue;
      if (!v.IsScalar()) return Err(v, path + ".value", "expected a plain value, got " + Show(v));
      p.options = {Value(v)};
    } else if (auto v = n["expr"]) {
      p.kind = ParamKind::kExpr;
      if (!v.IsScalar() || v.Scalar().empty()) {
        return Err(v, path + ".expr", "expected an expression such as \"lr / 100\", got " + Show(v));
      }
      p.expr = v.Scalar();
      auto names = ExprNames(p.expr);
      if (!names) return Err(v, path + ".expr", names.error().message);
    }
    if (n["log"] && p.kind != ParamKind::kInt) {
      return Err(n["log"], path + ".log", "only for int (use log_uniform for real numbers)");
    }
    bool discrete = p.kind == ParamKind::kChoice || p.kind == ParamKind::kValues;
    bool range = p.kind == ParamKind::kUniform || p.kind == ParamKind::kLogUniform ||
                 p.kind == ParamKind::kInt;
    std::string strategy = p.kind == ParamKind::kValues ? "grid" : "random";
    // The sweep's default: grid/random for lists, bayes for ranges, tpe for both.
    const std::string& d = default_strategy;
    if (discrete && (d == "grid" || d == "random" || d == "tpe")) strategy = d;
    if (range && (d == "bayes" || d == "tpe")) strategy = d;
    if (auto s = n["strategy"]) {
      if (!s.IsScalar()) return Err(s, path + ".strategy", "expected random, grid, bayes or tpe");
      strategy = s.Scalar();
      if (strategy != "random" && strategy != "grid" && strategy != "bayes" && strategy != "tpe") {
        return Err(s, path + ".strategy", "expected random, grid, bayes or tpe, got " + Show(s));
      }
      if (strategy == "grid" && !discrete) {
        return Err(s, path + ".strategy",
                   "grid needs a finite list: use values: [...] or choice: [...]");
      }
      if (strategy == "bayes" && !range) {
        return Err(s, path + ".strategy",
                   "bayes models a range (uniform, log_uniform, int); use tpe for a list");
      }
      if ((strategy == "bayes" || strategy == "tpe") && !range && !discrete) {
        return Err(s, path + ".strategy", "a fixed or derived parameter is not searched");
      }
    }
    p.grid = discrete && strategy == "grid";
    if (strategy == "bayes") p.model = SweepParam::Model::kBayes;
    if (strategy == "tpe") p.model = SweepParam::Model::kTpe;
    return p;
  }

};

bool IsNumeric(const SweepParam& p) {
  if (p.kind == ParamKind::kUniform || p.kind == ParamKind::kLogUniform ||
      p.kind == ParamKind::kInt || p.kind == ParamKind::kExpr) {
    return true;
  }
  for (const auto& o : p.options) {
    if (!o.is_number()) return false;
  }
  return true;
}

}  // namespace

Result<double> EvalExpr(std::string_view expr, const std::map<std::string, double>& vars) {
  ExprParser p(expr, &vars);
  return p.Parse();
}

Result<std::vector<std::string>> ExprNames(std::string_view expr) {
  ExprParser p(expr, nullptr);
  TRY(p.Parse());
  return p.names;
}

std::vector<std::string> CommandPlaceholders(std::string_view command) {
  const auto& runtime = KnownPlaceholders();
  std::vector<std::string> out;
  for (const auto& p : FindPlaceholders(command)) {
    if (std::find(runtime.begin(), runtime.end(), p.name) == runtime.end()) out.push_back(p.name);
  }
  return out;
}

std::string ValueText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d == std::floor(d) && std::fabs(d) < 1e15) {
      return std::to_string(static_cast<std::int64_t>(d));
    }
  }
  return v.dump();
}

Result<std::string> FillSweepCommand(std::string_view command, const json& params,
                                     std::string_view experiment) {
  for (const auto& name : CommandPlaceholders(command)) {
    if (!params.contains(name)) {
      return Fail(ErrorKind::kInvalidArgument,
                  "experiment " + std::string(experiment) + ": the command has a placeholder {" +
                      name + "} that is not a parameter of the sweep");
    }
  }
  return FillPlaceholders(command, [&](const std::string& name) -> std::optional<std::string> {
    if (!params.contains(name)) return std::nullopt;
    return ShellQuote(ValueText(params[name]));
  });
}

Result<json> CompletePoint(const SweepSpec& space, const json& given) {
  json point = json::object();
  std::map<std::string, double> numbers;
  for (const auto& p : space.params) {
    if (p.kind == ParamKind::kExpr) continue;
    json v = p.kind == ParamKind::kValue ? p.options.at(0) : given.value(p.name, json());
    if (v.is_null()) {
      return Fail(ErrorKind::kInvalidArgument, "point has no value for '" + p.name + "'");
    }
    point[p.name] = v;
    if (v.is_number()) numbers[p.name] = v.get<double>();
  }
  for (const auto& p : space.params) {
    if (p.kind != ParamKind::kExpr) continue;
    auto r = EvalExpr(p.expr, numbers);
    if (!r) return std::unexpected(r.error().Wrap("parameter " + p.name));
    numbers[p.name] = *r;
    if (*r == std::floor(*r) && std::fabs(*r) < 1e15) {
      point[p.name] = static_cast<std::int64_t>(*r);
    } else {
      point[p.name] = *r;
    }
  }
  json ordered = json::object();
  for (const auto& p : space.params) ordered[p.name] = point[p.name];
  return ordered;
}

const SweepParam* SweepSpec::Find(std::string_view name) const {
  for (const auto& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::int64_t SweepSpec::GridSize() const {
  std::int64_t n = 1;
  for (const auto& p : params) {
    if (p.grid) n *= static_cast<std::int64_t>(p.options.size());
  }
  return n;
}

void SweepSpec::ResolveRepeats(int experiment_repeats) {
  if (repeats_max < 0) repeats_max = std::max(experiment_repeats, repeats);
}

bool SweepSpec::HasModel() const {
  for (const auto& p : params) {
    if (p.model != SweepParam::Model::kRandom && !p.grid) return true;
  }
  return false;
}

int SweepSpec::InitialPoints() const {
  if (initial > 0) return initial;
  int d = 0;
  for (const auto& p : params) d += p.model != SweepParam::Model::kRandom && !p.grid;
  return std::max(4, 2 * d);
}

int SweepSpec::ConfirmSeeds() const {
  if (repeats_max != 0) return 0;  // adaptive (or until ResolveRepeats says)
  if (confirm >= 0) return confirm;
  if (budget_points && *budget_points < 3) return 0;
  if (budget_runs && *budget_runs < 4 * repeats) return 0;
  return repeats;
}

int SweepSpec::PointBudget() const {
  if (budget_points) return *budget_points;
  if (budget_runs) return (*budget_runs - ConfirmRuns() + repeats - 1) / repeats;
  return static_cast<int>(points.size() + GridSize());
}

json SweepSpec::ToJson() const {
  json ps = json::array();
  for (const auto& p : params) {
    json j = {{"name", p.name}, {"kind", ParamKindName(p.kind)}};
    if (p.kind == ParamKind::kUniform || p.kind == ParamKind::kLogUniform ||
        p.kind == ParamKind::kInt) {
      j["bounds"] = {p.lo, p.hi};
    }
    if (p.log) j["log"] = true;
    if (!p.options.empty()) j["options"] = p.options;
    if (!p.expr.empty()) j["expr"] = p.expr;
    if (p.grid) j["grid"] = true;
    if (p.model != SweepParam::Model::kRandom) j["model"] = ModelName(p.model);
    ps.push_back(j);
  }
  json j = {{"parameters", ps}, {"points", points},      {"parallel", parallel},
            {"repeats", repeats}, {"seed", seed}};
  if (repeats_max > 0) j["repeats_max"] = repeats_max;
  if (repeats_step > 0) j["repeats_step"] = repeats_step;
  if (initial > 0) j["initial"] = initial;
  if (failed_worst) j["failed_points"] = "worst";
  j["confirm"] = ConfirmSeeds();
  if (budget_points) j["budget"]["points"] = *budget_points;
  if (budget_runs) j["budget"]["runs"] = *budget_runs;
  return j;
}

Result<SweepSpec> SweepSpec::FromJson(const json& j) {
  try {
    SweepSpec s;
    for (const auto& pj : j.at("parameters")) {
      SweepParam p;
      p.name = pj.at("name").get<std::string>();
      std::string kind = pj.at("kind").get<std::string>();
      bool known = false;
      for (auto k : {ParamKind::kUniform, ParamKind::kLogUniform, ParamKind::kInt,
                     ParamKind::kChoice, ParamKind::kValues, ParamKind::kValue, ParamKind::kExpr}) {
        if (ParamKindName(k) == kind) {
          p.kind = k;
          known = true;
        }
      }
      if (!known) return Fail(ErrorKind::kInvalidArgument, "stored sweep: unknown kind " + kind);
      if (pj.contains("bounds")) {
        p.lo = pj["bounds"][0].get<double>();
        p.hi = pj["bounds"][1].get<double>();
      }
      p.log = pj.value("log", false);
      if (pj.contains("options")) p.options = pj["options"].get<std::vector<json>>();
      p.expr = pj.value("expr", "");
      p.grid = pj.value("grid", false);
      std::string model = pj.value("model", "random");
      p.model = model == "bayes" ? SweepParam::Model::kBayes
                : model == "tpe" ? SweepParam::Model::kTpe
                                 : SweepParam::Model::kRandom;
      s.params.push_back(std::move(p));
    }
    s.points = j.at("points").get<std::vector<json>>();
    s.parallel = j.at("parallel").get<int>();
    s.repeats = j.at("repeats").get<int>();
    s.seed = j.at("seed").get<std::uint64_t>();
    s.repeats_max = j.value("repeats_max", 0);
    s.repeats_step = j.value("repeats_step", 0);
    s.initial = j.value("initial", 0);
    s.failed_worst = j.value("failed_points", "exclude") == "worst";
    s.confirm = j.value("confirm", 0);  // sweeps stored before `confirm` had none
    if (j.contains("budget")) {
      if (j["budget"].contains("points")) s.budget_points = j["budget"]["points"].get<int>();
      if (j["budget"].contains("runs")) s.budget_runs = j["budget"]["runs"].get<int>();
    }
    return s;
  } catch (const json::exception& e) {
    return Fail(ErrorKind::kInvalidArgument, std::string("stored sweep spec: ") + e.what());
  }
}

namespace {

// `strategy:`, the default of every parameter ("" = each parameter's own).
Result<std::string> ParseSweepStrategy(SweepParser& p, const YAML::Node& node,
                                       const std::string& path) {
  std::string default_strategy;
  if (auto n = node["strategy"]) {
    if (!n.IsScalar()) {
      return p.Err(n, path + ".strategy", "expected random, grid, bayes or tpe");
    }
    default_strategy = n.Scalar();
    if (default_strategy != "random" && default_strategy != "grid" &&
        default_strategy != "bayes" && default_strategy != "tpe") {
      return p.Err(n, path + ".strategy",
                   "expected random, grid, bayes or tpe, got " + SweepParser::Show(n));
    }
  }
  return default_strategy;
}

// `parameters:`, in order; a derived one (expr) reads numeric parameters
// defined before it.
Status ParseSweepParameters(SweepParser& p, const YAML::Node& node, const std::string& path,
                            const std::string& default_strategy, SweepSpec& s) {
  auto params = node["parameters"];
  if (!params) return p.Err(node, path + ".parameters", "missing (at least one parameter)");
  if (!params.IsMap() || params.size() == 0) {
    return p.Err(params, path + ".parameters", "expected a mapping of names to parameters");
  }
  for (const auto& kv : params) {
    std::string name = kv.first.Scalar();
    std::string pp = path + ".parameters." + name;
    if (name.empty() || name.find_first_of("{} \t'\"$`\\") != std::string::npos) {
      return p.Err(kv.first, pp, "parameter names use letters, digits, '_', '.' and '-'");
    }
    if (s.Find(name)) return p.Err(kv.first, pp, "defined twice");
    ASSIGN_OR_RETURN(auto param, p.Param(name, kv.second, pp, default_strategy));
    s.params.push_back(std::move(param));
  }
  // Derived parameters read numeric parameters defined before them.
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (s.params[i].kind != ParamKind::kExpr) continue;
    auto node_expr = params[s.params[i].name]["expr"];
    std::string pp = path + ".parameters." + s.params[i].name + ".expr";
    auto names = ExprNames(s.params[i].expr);
    for (const auto& n : *names) {
      const SweepParam* ref = nullptr;
      for (size_t k = 0; k < i; ++k) {
        if (s.params[k].name == n) ref = &s.params[k];
      }
      if (!ref) {
        return p.Err(node_expr, pp,
                     "unknown name '" + n + "' (a parameter defined above this one)");
      }
      if (!IsNumeric(*ref)) return p.Err(node_expr, pp, "'" + n + "' is not numeric");
    }
  }
  return {};
}

// `points:`: explicit points, each a value for every parameter that is
// neither derived nor fixed, within its bounds.
Status ParseSweepPoints(SweepParser& p, const YAML::Node& node, const std::string& path,
                        SweepSpec& s) {
  if (auto n = node["points"]) {
    if (!n.IsSequence()) return p.Err(n, path + ".points", "expected a list of mappings");
    for (const auto& pt : n) {
      if (!pt.IsMap()) {
        return p.Err(pt, path + ".points", "expected a mapping of parameter values, got " +
                                               SweepParser::Show(pt));
      }
      json point = json::object();
      for (const auto& kv : pt) {
        std::string name = kv.first.Scalar();
        std::string pp = path + ".points." + name;
        const SweepParam* param = s.Find(name);
        if (!param) return p.Err(kv.first, pp, "not a parameter of this sweep");
        if (param->kind == ParamKind::kExpr || param->kind == ParamKind::kValue) {
          return p.Err(kv.first, pp, "is derived or fixed; it cannot be set in a point");
        }
        if (!kv.second.IsScalar()) return p.Err(kv.second, pp, "expected a plain value");
        json v = SweepParser::Value(kv.second);
        if (param->kind == ParamKind::kUniform || param->kind == ParamKind::kLogUniform ||
            param->kind == ParamKind::kInt) {
          if (!v.is_number()) return p.Err(kv.second, pp, "expected a number");
          double d = v.get<double>();
          if (d < param->lo || d > param->hi) {
            return p.Err(kv.second, pp, "outside the bounds of the parameter");
          }
          if (param->kind == ParamKind::kInt && d != std::floor(d)) {
            return p.Err(kv.second, pp, "expected an integer");
          }
        }
        point[name] = v;
      }
      for (const auto& param : s.params) {
        if (param.kind == ParamKind::kExpr || param.kind == ParamKind::kValue) continue;
        if (!point.contains(param.name)) {
          return p.Err(pt, path + ".points", "missing a value for '" + param.name + "'");
        }
      }
      s.points.push_back(point);
    }
  }
  return {};
}

// `budget:`, `parallel:`, `repeats:` (fixed or adaptive), `initial:`,
// `failed_points:`, `confirm:` and `seed:`.
Status ParseSweepLimits(SweepParser& p, const YAML::Node& node, const std::string& path,
                        SweepSpec& s) {
  if (auto n = node["budget"]) {
    std::string bp = path + ".budget";
    if (!n.IsMap() || n.size() != 1) {
      return p.Err(n, bp, "expected {points: N} or {runs: N}, got " + SweepParser::Show(n));
    }
    TRY(p.CheckKeys(n, bp, {"points", "runs"}));
    if (auto b = n["points"]) {
      ASSIGN_OR_RETURN(auto v, p.Int(b, bp + ".points", 1));
      s.budget_points = static_cast<int>(std::min<std::int64_t>(v, 100000));
    } else {
      ASSIGN_OR_RETURN(auto v, p.Int(n["runs"], bp + ".runs", 1));
      s.budget_runs = static_cast<int>(std::min<std::int64_t>(v, 1000000));
    }
  }
  if (auto n = node["parallel"]) {
    ASSIGN_OR_RETURN(auto v, p.Int(n, path + ".parallel", 1));
    s.parallel = static_cast<int>(std::min<std::int64_t>(v, 10000));
  }
  if (auto n = node["repeats"]) {
    std::string rp = path + ".repeats";
    if (n.IsMap()) {
      // Adaptive: {min: 3, max: 10, step: 2}.
      TRY(p.CheckKeys(n, rp, {"min", "max", "step"}));
      if (!n["min"]) {
        return p.Err(n, rp, "expected {min: N} and optionally max: M (default: the "
                            "experiment's repeats) and step: K");
      }
      ASSIGN_OR_RETURN(auto lo, p.Int(n["min"], rp + ".min", 1));
      if (lo > 1000) return p.Err(n["min"], rp + ".min", "at most 1000 seeds per point");
      s.repeats = static_cast<int>(lo);
      s.repeats_max = -1;  // the experiment's repeats (ResolveRepeats)
      if (auto m = n["max"]) {
        ASSIGN_OR_RETURN(auto hi, p.Int(m, rp + ".max", 1));
        if (hi > 1000) return p.Err(m, rp + ".max", "at most 1000 seeds per point");
        if (hi < lo) return p.Err(m, rp + ".max", "smaller than min");
        s.repeats_max = static_cast<int>(hi);
      }
      if (auto st = n["step"]) {
        ASSIGN_OR_RETURN(auto v, p.Int(st, rp + ".step", 1));
        s.repeats_step = static_cast<int>(std::min<std::int64_t>(v, 1000));
      }
    } else {
      ASSIGN_OR_RETURN(auto v, p.Int(n, rp, 1));
      if (v > 1000) return p.Err(n, rp, "at most 1000 seeds per point");
      s.repeats = static_cast<int>(v);
    }
  }
  if (auto n = node["initial"]) {
    ASSIGN_OR_RETURN(auto v, p.Int(n, path + ".initial", 1));
    s.initial = static_cast<int>(std::min<std::int64_t>(v, 100000));
  }
  if (auto n = node["failed_points"]) {
    ASSIGN_OR_RETURN(auto v, p.Str(n, path + ".failed_points"));
    if (v != "exclude" && v != "worst") {
      return p.Err(n, path + ".failed_points", "expected exclude or worst, got " + v);
    }
    s.failed_worst = v == "worst";
  }
  if (auto n = node["confirm"]) {
    ASSIGN_OR_RETURN(auto v, p.Int(n, path + ".confirm", 0));
    if (v > 1000) return p.Err(n, path + ".confirm", "at most 1000 seeds");
    if (v > 0 && s.repeats_max != 0) {
      return p.Err(n, path + ".confirm",
                   "applies to fixed repeats; adaptive repeats already give the leading "
                   "points fresh seeds (drop confirm, or say repeats: N)");
    }
    s.confirm = static_cast<int>(v);
  }
  if (auto n = node["seed"]) {
    ASSIGN_OR_RETURN(auto v, p.Int(n, path + ".seed", 0));
    s.seed = static_cast<std::uint64_t>(v);
  }
  return {};
}

// What the keys say together: the budget holds a point's runs, and a sweep
// that draws at random has a budget.
Status CheckSweepBudget(SweepParser& p, const YAML::Node& node, const std::string& path,
                        const SweepSpec& s) {
  if (s.budget_runs && *s.budget_runs < s.repeats) {
    return p.Err(node["budget"], path + ".budget.runs",
                 "smaller than one point's repeats (" + std::to_string(s.repeats) + ")");
  }
  if (s.budget_runs && s.confirm > 0 && *s.budget_runs < s.repeats + s.confirm) {
    return p.Err(node["budget"], path + ".budget.runs",
                 "smaller than one point's repeats plus confirm (" +
                     std::to_string(s.repeats + s.confirm) + ")");
  }
  if (!s.budget_points && !s.budget_runs) {
    for (const auto& param : s.params) {
      if (!param.grid && param.kind != ParamKind::kValue && param.kind != ParamKind::kExpr) {
        return p.Err(node, path + ".budget",
                     "missing: '" + param.name + "' is drawn at random, so say how many "
                     "{points: N} or {runs: N}");
      }
    }
  }
  if (s.GridSize() > 1'000'000) {
    return p.Err(node["parameters"], path + ".parameters", "more than 1000000 grid combinations");
  }
  return {};
}

}  // namespace

Result<SweepSpec> ParseSweep(const YAML::Node& node, const std::string& path,
                             std::string_view file) {
  SweepParser p(file);
  if (!node.IsMap()) return p.Err(node, path, "expected a mapping, got " + SweepParser::Show(node));
  TRY(p.CheckKeys(node, path,
             {"parameters", "points", "budget", "parallel", "repeats", "seed", "strategy",
              "initial", "failed_points", "confirm"}));
  SweepSpec s;
  ASSIGN_OR_RETURN(auto default_strategy, ParseSweepStrategy(p, node, path));
  TRY(ParseSweepParameters(p, node, path, default_strategy, s));
  TRY(ParseSweepPoints(p, node, path, s));
  TRY(ParseSweepLimits(p, node, path, s));
  TRY(CheckSweepBudget(p, node, path, s));
  return s;
}

Status CheckSweepTarget(const SweepSpec& spec, const Experiment& e, const YAML::Node& node,
                        const std::string& path, std::string_view file) {
  if (e.command.empty()) return {};
  SweepParser p(file);
  for (const auto& name : CommandPlaceholders(e.command)) {
    if (!spec.Find(name)) {
      return p.Err(node["parameters"], path + ".parameters",
                   "the command has a placeholder {" + name + "} that is not a parameter");
    }
  }
  auto used = CommandPlaceholders(e.command);
  for (const auto& param : spec.params) {
    if (param.kind == ParamKind::kExpr) continue;  // may only feed other expressions
    if (std::find(used.begin(), used.end(), param.name) == used.end()) {
      return p.Err(node["parameters"][param.name], path + ".parameters." + param.name,
                   "the command has no {" + param.name + "}: its value would reach no run");
    }
  }
  return {};
}

Result<SweepSpec> LoadSweep(std::string_view text, std::string_view file,
                            const std::string& experiment) {
  YamlReader reader(file);
  ASSIGN_OR_RETURN(YAML::Node root, reader.Load(text));
  YAML::Node exp;
  if (root.IsMap() && root["experiments"] && root["experiments"].IsMap()) {
    exp = root["experiments"][experiment];
  }
  if (!exp || !exp.IsMap()) {
    return Fail(ErrorKind::kNotFound, std::string(file) + ": no experiment '" + experiment + "'");
  }
  auto sweep = exp["sweep"];
  if (!sweep) {
    return Fail(ErrorKind::kNotFound, std::string(file) + ":" +
                                          std::to_string(exp.Mark().line + 1) + ": experiments." +
                                          experiment + ": has no `sweep:`");
  }
  return ParseSweep(sweep, "experiments." + experiment + ".sweep", file);
}

}  // namespace trainq
