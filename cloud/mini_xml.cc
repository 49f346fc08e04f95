#include "cloud/mini_xml.h"

#include <pugixml.hpp>
#include <string>

#include "core/strings.h"

namespace trainq::cloud {

const XmlNode* XmlNode::Child(std::string_view n) const {
  for (const auto& c : children) {
    if (c.name == n) return &c;
  }
  return nullptr;
}

std::vector<const XmlNode*> XmlNode::Children(std::string_view n) const {
  std::vector<const XmlNode*> out;
  for (const auto& c : children) {
    if (c.name == n) out.push_back(&c);
  }
  return out;
}

const XmlNode* XmlNode::Find(std::string_view path) const {
  const XmlNode* node = this;
  for (const auto& part : Split(path, '/')) {
    node = node->Child(part);
    if (!node) return nullptr;
  }
  return node;
}

std::string XmlNode::Text(std::string_view path) const {
  const XmlNode* n = Find(path);
  return n ? std::string(Trim(n->text)) : "";
}

namespace {

constexpr int kMaxDepth = 256;  // EC2 answers nest about 8 deep

// pugixml's tree into ours: element names without their namespace prefix,
// the character data (text and CDATA) directly inside each element.
Status Convert(const pugi::xml_node& in, XmlNode& out, int depth) {
  if (depth > kMaxDepth) {
    return Fail(ErrorKind::kCorruption,
                "malformed XML: nested deeper than " + std::to_string(kMaxDepth));
  }
  std::string_view name = in.name();
  if (auto colon = name.find(':'); colon != std::string_view::npos) name.remove_prefix(colon + 1);
  out.name = std::string(name);
  for (pugi::xml_node c = in.first_child(); c; c = c.next_sibling()) {
    switch (c.type()) {
      case pugi::node_pcdata:
      case pugi::node_cdata:
        out.text += c.value();
        break;
      case pugi::node_element:
        out.children.emplace_back();
        TRY(Convert(c, out.children.back(), depth + 1));
        break;
      default:
        break;
    }
  }
  return {};
}

}  // namespace

Result<XmlNode> ParseXml(std::string_view xml) {
  pugi::xml_document doc;
  pugi::xml_parse_result r =
      doc.load_buffer(xml.data(), xml.size(), pugi::parse_default, pugi::encoding_utf8);
  if (!r) {
    return Fail(ErrorKind::kCorruption, std::string("malformed XML: ") + r.description() +
                                            " at offset " + std::to_string(r.offset));
  }
  pugi::xml_node root = doc.document_element();
  if (!root) return Fail(ErrorKind::kCorruption, "malformed XML: no root element");
  XmlNode out;
  TRY(Convert(root, out, 0));
  return out;
}

}  // namespace trainq::cloud
