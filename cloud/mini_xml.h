// A minimal XML reader for the responses of AWS's query APIs: elements, text,
// entities; attributes, comments, processing instructions and CDATA are
// skipped or taken as text. Not a validating parser.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace trainq::cloud {

struct XmlNode {
  std::string name;  // without namespace prefix
  std::string text;  // the concatenated character data directly inside
  std::vector<XmlNode> children;

  // The first child named `name`, or nullptr.
  const XmlNode* Child(std::string_view name) const;
  // The children named `name`.
  std::vector<const XmlNode*> Children(std::string_view name) const;
  // Follows a path of child names ("instanceState/name"); "" when absent.
  std::string Text(std::string_view path) const;
  const XmlNode* Find(std::string_view path) const;
};

// Parses `xml` into its root element.
Result<XmlNode> ParseXml(std::string_view xml);

}  // namespace trainq::cloud
