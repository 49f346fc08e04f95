// One way to read the YAML files a user writes (trainq.yaml, server.yaml, the
// sweep section; the trainer spec shares the messages): every error names the
// file, the line and the key path, unknown keys list the known ones, and values
// are read with the same rules and the same words everywhere.
//
//   trainq.yaml:5: experiments.a.timeout: expected a positive duration, got "0s"
//
// A reader is made per file; parsers of a format derive from it and add what
// only they read.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace trainq {

// "<where>: <path>: <msg>" as kInvalidArgument; `where` is "file" or "file:line".
std::unexpected<Error> ConfigError(std::string_view where, std::string_view path,
                                   std::string_view msg);
// "unknown key (expected one of: a, b, c)".
std::string UnknownKeyMessage(const std::vector<std::string>& allowed);
// "a.b" from "a" and "b"; "b" when the path is empty.
std::string ChildPath(const std::string& path, const std::string& key);

// A secret value with a printable description of where it came from
// ("env TRAINQ_SECRET", "file /etc/x"). Only `source` may be logged.
struct SecretValue {
  std::string value;
  std::string source;
  bool empty() const { return value.empty(); }
};

class YamlReader {
 public:
  explicit YamlReader(std::string_view file) : file_(file) {}
  const std::string& file() const { return file_; }

  // Parses `text`; a syntax error is "file:line: <invalid>: ...". Also
  // indexes the lines of keys with empty values (for Err) and refuses a key
  // written twice in one mapping.
  Result<YAML::Node> Load(std::string_view text, std::string_view invalid = "invalid YAML");

  // The error at `node`: its line, or for an empty value the line of its key
  // (yaml-cpp marks an empty value at the token after it).
  std::unexpected<Error> Err(const YAML::Node& node, const std::string& path,
                             const std::string& msg) const;
  // "\"text\"", "a list", "a mapping" or "nothing": never more of a value
  // than the user wrote, and callers do not pass secrets.
  static std::string Show(const YAML::Node& n);

  Status CheckKeys(const YAML::Node& map, const std::string& path,
                   const std::set<std::string>& allowed) const;

  // A string (possibly empty); a non-empty string.
  Result<std::string> Str(const YAML::Node& n, const std::string& path) const;
  Result<std::string> NonEmptyStr(const YAML::Node& n, const std::string& path) const;
  // One non-empty string or a list of them.
  Result<std::vector<std::string>> StrList(const YAML::Node& n, const std::string& path) const;
  // true/yes/on or false/no/off.
  Result<bool> Bool(const YAML::Node& n, const std::string& path) const;
  // A finite number.
  Result<double> Number(const YAML::Node& n, const std::string& path) const;
  // A whole number >= min ("4" or "4.0"). The message says "expected <what>";
  // without `what`, "expected a number" for what is not one and "expected an
  // integer of at least <min>" for the rest.
  Result<std::int64_t> Int(const YAML::Node& n, const std::string& path, std::int64_t min,
                           const char* what = nullptr) const;
  // A positive duration ("90s", "15m", "2h", or seconds), in seconds.
  Result<std::int64_t> DurationSeconds(const YAML::Node& n, const std::string& path) const;
  // {env: NAME} or {file: PATH}; a literal value is refused, since secrets do
  // not belong in a file that is copied around and shown in reviews.
  Result<SecretValue> Secret(const YAML::Node& n, const std::string& path) const;

 private:
  void IndexEmptyValues(const YAML::Node& n, const std::string& path);
  Status CheckDuplicates(const YAML::Node& n, const std::string& path) const;

  std::string file_;
  std::map<std::string, int> null_key_lines_;  // key path -> line, for empty values
};

}  // namespace trainq
