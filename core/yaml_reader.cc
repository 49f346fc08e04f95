#include "core/yaml_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/strings.h"

namespace trainq {

std::unexpected<Error> ConfigError(std::string_view where, std::string_view path,
                                   std::string_view msg) {
  std::string m(where);
  m += ": ";
  if (!path.empty()) {
    m += path;
    m += ": ";
  }
  m += msg;
  return Fail(ErrorKind::kInvalidArgument, m);
}

std::string UnknownKeyMessage(const std::vector<std::string>& allowed) {
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return "unknown key (expected one of: " + list + ")";
}

std::string ChildPath(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

namespace {

// Values once aliases are expanded (every *name visits its anchor's nodes
// again): far more than any real file, far fewer than an alias bomb.
constexpr std::int64_t kMaxExpandedValues = 200'000;

// False once more than `budget` values have been visited.
bool WithinBudget(const YAML::Node& n, std::int64_t& budget) {
  if (--budget < 0) return false;
  if (n.IsMap()) {
    for (const auto& kv : n) {
      if (!WithinBudget(kv.first, budget) || !WithinBudget(kv.second, budget)) return false;
    }
  } else if (n.IsSequence()) {
    for (const auto& item : n) {
      if (!WithinBudget(item, budget)) return false;
    }
  }
  return true;
}

}  // namespace

Result<YAML::Node> YamlReader::Load(std::string_view text, std::string_view invalid) {
  YAML::Node root;
  // yaml-cpp 0.7 accepts a quoted scalar left open when a line break ends
  // the file: its scanner checks for the end of the input only within a line
  // (src/scanscalar.cpp, ScanScalar: the EOF_IN_SCALAR throw is reached in
  // phase 1 only), and the loop over lines just stops. A last line that is a
  // comment without a line break puts the end of input within a line, so an
  // open quote is "end of file reached without closing quote"; for any valid
  // file the comment changes nothing (the line numbers included).
  std::string input(text);
  if (!input.empty() && input.back() != '\n' && input.back() != '\r') input += '\n';
  input += "#";
  try {
    root = YAML::Load(input);
  } catch (const YAML::Exception& e) {
    // The added comment line is not the user's. A quote left open is at the
    // file's last line; any other error there is where the file ends (the
    // line after a final line break, as yaml-cpp says without the comment).
    const std::int64_t breaks = std::count(text.begin(), text.end(), '\n');
    const bool open_quote = e.msg == YAML::ErrorMsg::EOF_IN_SCALAR;
    const std::int64_t last_line =
        open_quote ? std::max<std::int64_t>(breaks + (text.empty() || text.back() == '\n' ? 0 : 1), 1)
                   : breaks + 1;
    const auto line = std::min<std::int64_t>(e.mark.line + 1, last_line);
    return Fail(ErrorKind::kInvalidArgument,
                file_ + ":" + std::to_string(line) + ": " + std::string(invalid) + ": " + e.msg);
  }
  // Aliases share their anchor's nodes, so loading is cheap, but every walk
  // below (and the callers') visits them once per alias: refuse an
  // exponential expansion before any of that.
  if (std::int64_t budget = kMaxExpandedValues; !WithinBudget(root, budget)) {
    return Fail(ErrorKind::kInvalidArgument,
                file_ + ": more than " + std::to_string(kMaxExpandedValues) +
                    " values once its aliases (*name) are expanded: refused (an alias bomb?)");
  }
  IndexEmptyValues(root, "");
  TRY(CheckDuplicates(root, ""));
  return root;
}

std::unexpected<Error> YamlReader::Err(const YAML::Node& node, const std::string& path,
                                       const std::string& msg) const {
  std::string where = file_;
  auto key_line = null_key_lines_.find(path);
  if (node.IsDefined() && node.IsNull() && key_line != null_key_lines_.end()) {
    where += ":" + std::to_string(key_line->second);
  } else if (node.IsDefined() && node.Mark().line >= 0) {
    where += ":" + std::to_string(node.Mark().line + 1);
  }
  return ConfigError(where, path, msg);
}

void YamlReader::IndexEmptyValues(const YAML::Node& n, const std::string& path) {
  if (n.IsMap()) {
    for (const auto& kv : n) {
      std::string p = ChildPath(path, kv.first.Scalar());
      if (kv.second.IsNull()) null_key_lines_[p] = kv.first.Mark().line + 1;
      IndexEmptyValues(kv.second, p);
    }
  } else if (n.IsSequence()) {
    for (const auto& item : n) IndexEmptyValues(item, path);
  }
}

// yaml-cpp keeps both pairs of a key written twice, and a lookup finds only
// the first, so the second would be ignored silently.
Status YamlReader::CheckDuplicates(const YAML::Node& n, const std::string& path) const {
  if (n.IsMap()) {
    std::map<std::string, int> seen;
    for (const auto& kv : n) {
      const std::string& key = kv.first.Scalar();
      std::string p = ChildPath(path, key);
      auto [it, fresh] = seen.try_emplace(key, kv.first.Mark().line + 1);
      if (!fresh) {
        return Err(kv.first, p,
                   "duplicate key (first written at line " + std::to_string(it->second) +
                       "; YAML would keep only one of them)");
      }
      TRY(CheckDuplicates(kv.second, p));
    }
  } else if (n.IsSequence()) {
    for (const auto& item : n) TRY(CheckDuplicates(item, path));
  }
  return {};
}

std::string YamlReader::Show(const YAML::Node& n) {
  if (n.IsScalar()) return "\"" + n.Scalar() + "\"";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

Status YamlReader::CheckKeys(const YAML::Node& map, const std::string& path,
                             const std::set<std::string>& allowed) const {
  for (const auto& kv : map) {
    const std::string& key = kv.first.Scalar();
    if (!allowed.count(key)) {
      return Err(kv.first, ChildPath(path, key),
                 UnknownKeyMessage(std::vector<std::string>(allowed.begin(), allowed.end())));
    }
  }
  return {};
}

Result<std::string> YamlReader::Str(const YAML::Node& n, const std::string& path) const {
  if (!n.IsScalar()) return Err(n, path, "expected a string, got " + Show(n));
  return n.Scalar();
}

Result<std::string> YamlReader::NonEmptyStr(const YAML::Node& n, const std::string& path) const {
  if (!n.IsScalar() || n.Scalar().empty()) {
    return Err(n, path, "expected a non-empty string, got " + Show(n));
  }
  return n.Scalar();
}

Result<std::vector<std::string>> YamlReader::StrList(const YAML::Node& n,
                                                     const std::string& path) const {
  std::vector<std::string> out;
  if (n.IsScalar()) {
    ASSIGN_OR_RETURN(auto s, NonEmptyStr(n, path));
    out.push_back(s);
  } else if (n.IsSequence()) {
    for (const auto& item : n) {
      ASSIGN_OR_RETURN(auto s, NonEmptyStr(item, path));
      out.push_back(s);
    }
  } else {
    return Err(n, path, "expected a list of strings, got " + Show(n));
  }
  return out;
}

Result<bool> YamlReader::Bool(const YAML::Node& n, const std::string& path) const {
  if (n.IsScalar()) {
    const auto& s = n.Scalar();
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  return Err(n, path, "expected true or false, got " + Show(n));
}

Result<double> YamlReader::Number(const YAML::Node& n, const std::string& path) const {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0' && std::isfinite(v)) return v;
  }
  return Err(n, path, "expected a number, got " + Show(n));
}

Result<std::int64_t> YamlReader::Int(const YAML::Node& n, const std::string& path,
                                     std::int64_t min, const char* what) const {
  auto fail = [&] {
    std::string expected = what ? what : "an integer of at least " + std::to_string(min);
    return Err(n, path, "expected " + expected + ", got " + Show(n));
  };
  if (!what) TRY(Number(n, path));  // not a number at all: says so
  if (!n.IsScalar()) return fail();
  const std::string& s = n.Scalar();
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    // "4.0" and "1e3" are whole numbers too.
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (s.empty() || !end || *end != '\0' || !std::isfinite(d) || d != std::floor(d) ||
        std::fabs(d) > 1e15) {
      return fail();
    }
    v = static_cast<std::int64_t>(d);
  }
  if (v < min) return fail();
  return v;
}

Result<std::int64_t> YamlReader::DurationSeconds(const YAML::Node& n,
                                                 const std::string& path) const {
  if (!n.IsScalar()) {
    return Err(n, path, "expected a duration such as 90s, 15m or 2h, got " + Show(n));
  }
  auto d = ParseDurationSeconds(n.Scalar());
  if (!d) return Err(n, path, d.error().message);
  if (*d <= 0) return Err(n, path, "expected a positive duration, got " + Show(n));
  return *d;
}

Result<SecretValue> YamlReader::Secret(const YAML::Node& n, const std::string& path) const {
  if (!n.IsMap()) {
    return Err(n, path,
               "expected {env: VARIABLE} or {file: PATH} (the value itself does not belong in "
               "the config file)");
  }
  TRY(CheckKeys(n, path, {"env", "file"}));
  if (n["env"] && n["file"]) return Err(n, path, "give either env or file, not both");
  SecretValue s;
  if (auto e = n["env"]) {
    ASSIGN_OR_RETURN(auto name, NonEmptyStr(e, path + ".env"));
    const char* v = std::getenv(name.c_str());
    if (!v || !*v) {
      return Err(e, path + ".env", "environment variable " + name + " is not set or empty");
    }
    s.value = v;
    s.source = "env " + name;
  } else if (auto f = n["file"]) {
    ASSIGN_OR_RETURN(auto file, NonEmptyStr(f, path + ".file"));
    auto text = ReadFile(file);
    if (!text) return Err(f, path + ".file", "cannot read " + file + ": " + text.error().message);
    s.value = std::string(Trim(*text));
    if (s.value.empty()) return Err(f, path + ".file", file + " is empty");
    s.source = "file " + file;
  } else {
    return Err(n, path, "expected {env: VARIABLE} or {file: PATH}");
  }
  return s;
}

}  // namespace trainq
