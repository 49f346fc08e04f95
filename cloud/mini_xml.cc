#include "cloud/mini_xml.h"

#include <cstdint>
#include <optional>

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

void AppendUtf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string Decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    auto semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10) {
      out += s[i];
      continue;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (!ent.empty() && ent[0] == '#') {
      try {
        std::uint32_t cp = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X')
                               ? std::stoul(std::string(ent.substr(2)), nullptr, 16)
                               : std::stoul(std::string(ent.substr(1)));
        AppendUtf8(out, cp);
      } catch (...) {
        out += std::string(s.substr(i, semi - i + 1));
      }
    } else {
      out += std::string(s.substr(i, semi - i + 1));
    }
    i = semi;
  }
  return out;
}

std::string LocalName(std::string_view qname) {
  auto colon = qname.find(':');
  return std::string(colon == std::string_view::npos ? qname : qname.substr(colon + 1));
}

}  // namespace

Result<XmlNode> ParseXml(std::string_view xml) {
  auto bad = [](const std::string& why) {
    return Fail(ErrorKind::kCorruption, "malformed XML: " + why);
  };
  std::vector<XmlNode> stack;
  std::optional<XmlNode> root;
  size_t i = 0;
  while (i < xml.size()) {
    if (xml[i] != '<') {
      auto next = xml.find('<', i);
      if (next == std::string_view::npos) next = xml.size();
      if (!stack.empty()) stack.back().text += Decode(xml.substr(i, next - i));
      i = next;
      continue;
    }
    if (xml.substr(i, 4) == "<!--") {
      auto end = xml.find("-->", i);
      if (end == std::string_view::npos) return bad("unterminated comment");
      i = end + 3;
      continue;
    }
    if (xml.substr(i, 9) == "<![CDATA[") {
      auto end = xml.find("]]>", i);
      if (end == std::string_view::npos) return bad("unterminated CDATA");
      if (!stack.empty()) stack.back().text += std::string(xml.substr(i + 9, end - i - 9));
      i = end + 3;
      continue;
    }
    if (xml.substr(i, 2) == "<?" || xml.substr(i, 2) == "<!") {
      auto end = xml.find('>', i);
      if (end == std::string_view::npos) return bad("unterminated declaration");
      i = end + 1;
      continue;
    }
    // A tag; quoted attribute values may hold '>'.
    size_t j = i + 1;
    char quote = 0;
    while (j < xml.size() && (quote || xml[j] != '>')) {
      if (quote) {
        if (xml[j] == quote) quote = 0;
      } else if (xml[j] == '"' || xml[j] == '\'') {
        quote = xml[j];
      }
      ++j;
    }
    if (j >= xml.size()) return bad("unterminated tag");
    std::string_view tag = xml.substr(i + 1, j - i - 1);
    i = j + 1;
    if (!tag.empty() && tag[0] == '/') {
      std::string name = LocalName(Trim(tag.substr(1)));
      if (stack.empty() || stack.back().name != name) return bad("unexpected </" + name + ">");
      XmlNode done = std::move(stack.back());
      stack.pop_back();
      if (stack.empty()) {
        if (root) return bad("more than one root element");
        root = std::move(done);
      } else {
        stack.back().children.push_back(std::move(done));
      }
      continue;
    }
    bool self_closing = !tag.empty() && tag.back() == '/';
    if (self_closing) tag.remove_suffix(1);
    auto end_name = tag.find_first_of(" \t\r\n");
    XmlNode node;
    node.name = LocalName(tag.substr(0, end_name));
    if (node.name.empty()) return bad("empty tag name");
    if (self_closing) {
      if (stack.empty()) {
        if (root) return bad("more than one root element");
        root = std::move(node);
      } else {
        stack.back().children.push_back(std::move(node));
      }
    } else {
      stack.push_back(std::move(node));
    }
  }
  if (!stack.empty()) return bad("<" + stack.back().name + "> is not closed");
  if (!root) return bad("no element");
  return std::move(*root);
}

}  // namespace trainq::cloud
