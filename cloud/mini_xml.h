// The responses of AWS's query APIs as a small tree: elements, their text
// (entities decoded, CDATA included) and children; attributes, comments and
// processing instructions are dropped. Parsed by pugixml (a well-kept parser
// on this network boundary); this header only keeps the callers' shape.
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
