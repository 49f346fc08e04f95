// The spec as a tree of YAML values that remember where they were written.
//
// A spec may name a `template:`; the template is loaded first (recursively) and
// the spec's own keys are merged over it, then `--set key.path=value` overrides
// are applied. Every node keeps the file and line it came from, so an error
// found after merging still names the file, line and key at fault.
//
// Merge rules (MergeOver):
//   - maps merge key by key: a key given in the override replaces or adds,
//     keys it does not give are kept from the template;
//   - a list of "typed entries" (every entry is a map with a `type` key and no
//     keys other than `type` and `params`, such as trainer.callbacks) merges by
//     `type`: a matching entry gets its `params` merged, a new type is appended;
//   - any other list, and any scalar, is replaced whole (so model.layers, whose
//     entries carry their own keys, is replaced as one list).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace trainq::trainer {

struct SpecNode {
  enum class Kind { kNull, kScalar, kSequence, kMap };
  Kind kind = Kind::kNull;
  std::string scalar;            // kScalar
  std::vector<SpecNode> items;   // kSequence
  std::vector<std::string> keys; // kMap, in file order
  std::vector<SpecNode> values;  // kMap, values[i] belongs to keys[i]
  std::string file;              // where this node was written ("--set" for overrides)
  int line = 0;                  // 1-based; 0 when unknown

  bool IsMap() const { return kind == Kind::kMap; }
  bool IsSequence() const { return kind == Kind::kSequence; }
  bool IsScalar() const { return kind == Kind::kScalar; }
  bool IsNull() const { return kind == Kind::kNull; }
  const SpecNode* Find(std::string_view key) const;
  SpecNode* Find(std::string_view key);
  // Sets (replacing or appending) `key` to `value`.
  void Set(const std::string& key, SpecNode value);
  void Erase(std::string_view key);
  // "file:line" for messages.
  std::string Where() const;
};

// Parses YAML text; `file` is recorded in every node.
Result<SpecNode> ParseSpecText(std::string_view text, const std::string& file);

// Loads a spec file and the templates it names, merged. Errors are
// kInvalidArgument (or kNotFound for a missing file) and name file and line.
Result<SpecNode> LoadSpecTree(const std::string& path);

// The same, reading each file through `read` (a path in, its text or an Error
// out) instead of the file system: trainq reads specs out of a commit this way
// to check them before it queues anything. Paths are joined and normalised
// lexically; a cycle is still refused.
using SpecFileReader = std::function<Result<std::string>(const std::string& path)>;
Result<SpecNode> LoadSpecTree(const std::string& path, const SpecFileReader& read);

// Merges `over` onto `base` by the rules above.
void MergeOver(SpecNode& base, const SpecNode& over);

// Applies one "a.b.c=value" override: the value is parsed as YAML; a path
// segment that is a number indexes a list; on a list of typed entries a
// segment names an entry by its type (trainer.callbacks.early_stopping.patience=3).
Status ApplyOverride(SpecNode& root, std::string_view assignment);

// Renders the tree back to YAML (for --print-spec and the output dir).
std::string ToYaml(const SpecNode& node);

}  // namespace trainq::trainer
