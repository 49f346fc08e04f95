#include "trainer/spec_tree.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/strings.h"

namespace trainq::trainer {
namespace {

namespace fs = std::filesystem;

SpecNode Convert(const YAML::Node& node, const std::string& file) {
  SpecNode out;
  out.file = file;
  out.line = node.Mark().line >= 0 ? node.Mark().line + 1 : 0;
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      out.kind = SpecNode::Kind::kScalar;
      out.scalar = node.Scalar();
      break;
    case YAML::NodeType::Sequence:
      out.kind = SpecNode::Kind::kSequence;
      for (const auto& item : node) out.items.push_back(Convert(item, file));
      break;
    case YAML::NodeType::Map:
      out.kind = SpecNode::Kind::kMap;
      for (const auto& kv : node) {
        std::string key = kv.first.Scalar();
        SpecNode value = Convert(kv.second, file);
        if (value.line == 0) value.line = kv.first.Mark().line + 1;
        out.Set(key, std::move(value));
      }
      break;
    default:
      out.kind = SpecNode::Kind::kNull;
      break;
  }
  return out;
}

bool IsTypedEntry(const SpecNode& n) {
  if (!n.IsMap() || n.Find("type") == nullptr) return false;
  return std::all_of(n.keys.begin(), n.keys.end(),
                     [](const std::string& k) { return k == "type" || k == "params"; });
}

bool IsTypedList(const SpecNode& n) {
  return n.IsSequence() && !n.items.empty() &&
         std::all_of(n.items.begin(), n.items.end(), IsTypedEntry);
}

std::string TypeOf(const SpecNode& entry) {
  const SpecNode* t = entry.Find("type");
  return t != nullptr && t->IsScalar() ? t->scalar : "";
}

// `read` empty: the file system.
Result<SpecNode> LoadRecursive(const std::string& path, std::vector<std::string>& chain,
                               const SpecFileReader& read) {
  std::error_code ec;
  std::string canonical = read ? fs::path(path).lexically_normal().string()
                               : fs::weakly_canonical(path, ec).string();
  if (std::find(chain.begin(), chain.end(), canonical) != chain.end()) {
    return Fail(ErrorKind::kInvalidArgument, path + ": template cycle: " + canonical +
                                                 " includes itself");
  }
  auto text = read ? read(path) : ReadFile(path);
  if (!text) {
    return Fail(ErrorKind::kNotFound, "cannot read spec " + path + ": " + text.error().message);
  }
  ASSIGN_OR_RETURN(SpecNode node, ParseSpecText(*text, path));
  if (node.IsNull()) node.kind = SpecNode::Kind::kMap;
  if (!node.IsMap()) {
    return Fail(ErrorKind::kInvalidArgument, node.Where() + ": a spec must be a map of sections");
  }
  const SpecNode* tmpl = node.Find("template");
  if (tmpl == nullptr) return node;
  if (!tmpl->IsScalar() || tmpl->scalar.empty()) {
    return Fail(ErrorKind::kInvalidArgument, tmpl->Where() + ": template: expected a file name");
  }
  fs::path tmpl_path = tmpl->scalar;
  if (tmpl_path.is_relative()) tmpl_path = fs::path(path).parent_path() / tmpl_path;
  if (read) tmpl_path = tmpl_path.lexically_normal();
  chain.push_back(canonical);
  auto base = LoadRecursive(tmpl_path.string(), chain, read);
  chain.pop_back();
  if (!base) return std::unexpected(base.error().Wrap(tmpl->Where() + ": template"));
  node.Erase("template");
  MergeOver(*base, node);
  return *base;
}

void Emit(YAML::Emitter& out, const SpecNode& n) {
  switch (n.kind) {
    case SpecNode::Kind::kNull:
      out << YAML::Null;
      break;
    case SpecNode::Kind::kScalar:
      out << n.scalar;
      break;
    case SpecNode::Kind::kSequence:
      out << YAML::BeginSeq;
      for (const auto& item : n.items) Emit(out, item);
      out << YAML::EndSeq;
      break;
    case SpecNode::Kind::kMap:
      out << YAML::BeginMap;
      for (std::size_t i = 0; i < n.keys.size(); ++i) {
        out << YAML::Key << n.keys[i] << YAML::Value;
        Emit(out, n.values[i]);
      }
      out << YAML::EndMap;
      break;
  }
}

bool IsIndex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

const SpecNode* SpecNode::Find(std::string_view key) const {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return &values[i];
  }
  return nullptr;
}

SpecNode* SpecNode::Find(std::string_view key) {
  return const_cast<SpecNode*>(static_cast<const SpecNode*>(this)->Find(key));
}

void SpecNode::Set(const std::string& key, SpecNode value) {
  if (SpecNode* existing = Find(key)) {
    *existing = std::move(value);
    return;
  }
  keys.push_back(key);
  values.push_back(std::move(value));
}

void SpecNode::Erase(std::string_view key) {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) {
      keys.erase(keys.begin() + static_cast<std::ptrdiff_t>(i));
      values.erase(values.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

std::string SpecNode::Where() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line);
}

Result<SpecNode> ParseSpecText(std::string_view text, const std::string& file) {
  try {
    YAML::Node root = YAML::Load(std::string(text));
    return Convert(root, file);
  } catch (const YAML::Exception& e) {
    return Fail(ErrorKind::kInvalidArgument,
                file + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
  }
}

Result<SpecNode> LoadSpecTree(const std::string& path) {
  std::vector<std::string> chain;
  return LoadRecursive(path, chain, nullptr);
}

Result<SpecNode> LoadSpecTree(const std::string& path, const SpecFileReader& read) {
  std::vector<std::string> chain;
  return LoadRecursive(path, chain, read);
}

void MergeOver(SpecNode& base, const SpecNode& over) {
  if (base.IsMap() && over.IsMap()) {
    for (std::size_t i = 0; i < over.keys.size(); ++i) {
      SpecNode* existing = base.Find(over.keys[i]);
      if (existing != nullptr) {
        MergeOver(*existing, over.values[i]);
      } else {
        base.Set(over.keys[i], over.values[i]);
      }
    }
    return;
  }
  if (IsTypedList(base) && IsTypedList(over)) {
    for (const SpecNode& entry : over.items) {
      auto match = std::find_if(base.items.begin(), base.items.end(), [&](const SpecNode& b) {
        return TypeOf(b) == TypeOf(entry);
      });
      if (match == base.items.end()) {
        base.items.push_back(entry);
      } else {
        MergeOver(*match, entry);
      }
    }
    return;
  }
  base = over;
}

Status ApplyOverride(SpecNode& root, std::string_view assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "--set " + std::string(assignment) + ": expected key.path=value");
  }
  std::string key_path(Trim(assignment.substr(0, eq)));
  std::string value_text(assignment.substr(eq + 1));
  ASSIGN_OR_RETURN(SpecNode value, ParseSpecText(value_text, "--set " + key_path));
  value.file = "--set " + key_path;
  value.line = 0;
  // Nested nodes of the value should also say where they came from.
  std::vector<SpecNode*> stack{&value};
  while (!stack.empty()) {
    SpecNode* n = stack.back();
    stack.pop_back();
    n->file = value.file;
    n->line = 0;
    for (auto& c : n->items) stack.push_back(&c);
    for (auto& c : n->values) stack.push_back(&c);
  }

  std::vector<std::string> parts = trainq::Split(key_path, '.');
  SpecNode* node = &root;
  std::string walked;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    bool last = i + 1 == parts.size();
    walked += (walked.empty() ? "" : ".") + part;
    if (part.empty()) {
      return Fail(ErrorKind::kInvalidArgument, "--set " + key_path + ": empty path segment");
    }
    if (node->IsSequence()) {
      SpecNode* next = nullptr;
      if (IsIndex(part)) {
        std::size_t idx = std::stoul(part);
        if (idx >= node->items.size()) {
          return Fail(ErrorKind::kInvalidArgument, "--set " + key_path + ": " + walked +
                                                       ": index out of range (the list has " +
                                                       std::to_string(node->items.size()) +
                                                       " entries)");
        }
        next = &node->items[idx];
      } else {
        for (auto& item : node->items) {
          if (IsTypedEntry(item) && TypeOf(item) == part) next = &item;
        }
        if (next == nullptr) {
          return Fail(ErrorKind::kInvalidArgument,
                      "--set " + key_path + ": " + walked + ": no list entry of type '" + part + "'");
        }
        // Keys under a typed entry go to its params unless they name type/params.
        if (!last && parts[i + 1] != "params" && parts[i + 1] != "type") {
          if (next->Find("params") == nullptr) {
            SpecNode params;
            params.kind = SpecNode::Kind::kMap;
            params.file = value.file;
            next->Set("params", params);
          }
          next = next->Find("params");
        }
      }
      if (last) {
        *next = value;
        return {};
      }
      node = next;
      continue;
    }
    if (node->IsNull()) {
      node->kind = SpecNode::Kind::kMap;
      node->file = value.file;
    }
    if (!node->IsMap()) {
      return Fail(ErrorKind::kInvalidArgument,
                  "--set " + key_path + ": " + walked + ": cannot set a key inside a scalar");
    }
    if (last) {
      node->Set(part, value);
      return {};
    }
    if (node->Find(part) == nullptr) {
      SpecNode child;
      child.kind = SpecNode::Kind::kMap;
      child.file = value.file;
      node->Set(part, child);
    }
    node = node->Find(part);
  }
  return {};
}

std::string ToYaml(const SpecNode& node) {
  YAML::Emitter out;
  Emit(out, node);
  return std::string(out.c_str()) + "\n";
}

}  // namespace trainq::trainer
