#include "agent/repo/change_detect.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "core/crypto.h"

namespace trainq {

namespace {

std::vector<std::string_view> Segments(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t slash = s.find('/', start);
    if (slash == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, slash - start));
    start = slash + 1;
  }
}

// `*` and `?` inside one segment (no '/' on either side).
bool SegmentMatch(std::string_view pat, std::string_view text) {
  size_t p = 0, t = 0;
  size_t star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pat.size() && (pat[p] == '?' || pat[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pat.size() && pat[p] == '*') {
      while (p < pat.size() && pat[p] == '*') ++p;  // `**` inside a segment is `*`
      star = p;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

bool MatchFrom(const std::vector<std::string_view>& pat, size_t i,
               const std::vector<std::string_view>& path, size_t j,
               std::vector<signed char>& memo) {
  signed char& m = memo[i * (path.size() + 1) + j];
  if (m >= 0) return m;
  bool result;
  if (i == pat.size()) {
    result = j == path.size();
  } else if (pat[i] == "**") {
    // Zero segments, or one more segment and stay on `**`.
    result = MatchFrom(pat, i + 1, path, j, memo) ||
             (j < path.size() && MatchFrom(pat, i, path, j + 1, memo));
  } else {
    result = j < path.size() && SegmentMatch(pat[i], path[j]) &&
             MatchFrom(pat, i + 1, path, j + 1, memo);
  }
  m = result ? 1 : 0;
  return result;
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

}  // namespace

bool GlobMatch(std::string_view pattern, std::string_view path) {
  if (pattern.empty() || path.empty()) return false;
  while (pattern.starts_with("./")) pattern.remove_prefix(2);
  if (pattern.starts_with("/")) pattern.remove_prefix(1);
  auto pat = Segments(pattern);
  auto segs = Segments(path);
  std::vector<signed char> memo((pat.size() + 1) * (segs.size() + 1), -1);
  return MatchFrom(pat, 0, segs, 0, memo);
}

std::string ExperimentTrigger::Reason() const {
  constexpr size_t kShown = 5;
  std::string out;
  for (size_t i = 0; i < reasons.size() && i < kShown; ++i) {
    out += (i ? "; " : "") + reasons[i];
  }
  if (reasons.size() > kShown) {
    out += "; and " + std::to_string(reasons.size() - kShown) + " more";
  }
  return out;
}

std::vector<ExperimentTrigger> DetectChanges(const std::vector<ChangedPath>& changes,
                                             const Manifest* before, const Manifest& after) {
  bool defaults_changed = before && before->defaults_definition != after.defaults_definition;
  std::vector<ExperimentTrigger> out;
  for (const auto& e : after.experiments) {
    ExperimentTrigger t{e.name, {}, true};
    const Experiment* old = before ? before->Find(e.name) : nullptr;
    if (!before) {
      t.reasons.push_back("new experiment (no trainq.yaml before)");
    } else if (!old) {
      t.reasons.push_back("new experiment in trainq.yaml");
    } else if (old->definition != e.definition) {
      t.reasons.push_back("its entry in trainq.yaml changed");
    }
    if (defaults_changed) t.reasons.push_back("defaults in trainq.yaml changed");
    for (const auto& c : changes) {
      std::vector<std::string_view> paths;
      if (!c.new_path.empty()) paths.push_back(c.new_path);
      if (!c.old_path.empty() && c.old_path != c.new_path) paths.push_back(c.old_path);
      std::string shown = c.new_path.empty() ? c.old_path + " (deleted)"
                          : c.kind == ChangedPath::Kind::kRenamed && c.old_path != c.new_path
                              ? c.old_path + " -> " + c.new_path + " (renamed)"
                              : c.new_path;
      bool matched = false;
      if (!e.trainer.empty()) {
        for (auto p : paths) {
          if (p == e.trainer) {
            t.reasons.push_back(shown + " is its trainer spec");
            matched = true;
            break;
          }
        }
      }
      for (const auto& glob : e.watch) {
        if (matched) break;
        for (auto p : paths) {
          if (GlobMatch(glob, p)) {
            t.reasons.push_back(shown + " matches watch " + Quote(glob));
            matched = true;
            break;
          }
        }
      }
    }
    if (t.reasons.empty() && old && e.determinism_check && !old->determinism_check) {
      t.reasons.push_back("determinism: check asked for in trainq.yaml");
      t.inputs_changed = false;
    }
    if (!t.reasons.empty()) out.push_back(std::move(t));
  }
  return out;
}

}  // namespace trainq

namespace trainq {

std::string InputsFingerprint(const Manifest& m, const Experiment& e,
                              const std::vector<std::pair<std::string, std::string>>& files) {
  std::string text = "definition\n" + e.definition + "\ndefaults\n" + m.defaults_definition + "\n";
  for (const auto& [path, oid] : files) {
    bool read = !e.trainer.empty() && path == e.trainer;
    for (const auto& glob : e.watch) read = read || GlobMatch(glob, path);
    if (read) text += path + " " + oid + "\n";
  }
  return Sha256Hex(text).substr(0, 32);
}

Status AddInputsFingerprints(GitRepo& git, const std::string& sha, const Manifest& m,
                             std::vector<BatchSpec>& specs) {
  ASSIGN_OR_RETURN(auto files, git.TreeFiles(sha));
  for (auto& s : specs) {
    const Experiment* e = m.Find(s.experiment);
    if (!e) continue;
    auto j = nlohmann::json::parse(s.spec_json.empty() ? "{}" : s.spec_json, nullptr, false);
    if (!j.is_object()) continue;
    j["inputs"] = InputsFingerprint(m, *e, files);
    s.spec_json = j.dump();
  }
  return {};
}

}  // namespace trainq
