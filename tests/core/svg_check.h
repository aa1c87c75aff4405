// A minimal XML well-formedness checker for the SVG figures, and the accessors the tests
// need: every tag closed in order, one root, attributes quoted and not repeated, no raw
// '<' or stray '&' in text or attribute values. Enough to catch what a hand-written SVG
// writer gets wrong (an unescaped name, a missing quote or end tag); not a full parser
// (no DTDs, no CDATA).
#pragma once

#include <cctype>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace svg_check {

struct Element {
  std::string name;
  std::map<std::string, std::string> attributes;  // values unescaped
  int parent = -1;                                // index into Document::elements
  std::string text;                               // direct text content, unescaped
};

struct Document {
  std::vector<Element> elements;  // in document order; elements[0] is the root
  std::string error;              // empty when well-formed
  bool ok() const { return error.empty(); }

  // The nearest enclosing element (itself excluded) named `name`, or -1.
  int ancestor(int index, const std::string& name) const {
    for (int p = elements[size_t(index)].parent; p >= 0; p = elements[size_t(p)].parent)
      if (elements[size_t(p)].name == name) return p;
    return -1;
  }
};

namespace detail {

inline bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.';
}

// Replaces the five named entities and numeric references; false on a stray '&'.
inline bool unescape(const std::string& raw, std::string& out) {
  out.clear();
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '&') {
      out += raw[i];
      continue;
    }
    const size_t semi = raw.find(';', i);
    if (semi == std::string::npos) return false;
    const std::string entity = raw.substr(i + 1, semi - i - 1);
    if (entity == "amp") out += '&';
    else if (entity == "lt") out += '<';
    else if (entity == "gt") out += '>';
    else if (entity == "quot") out += '"';
    else if (entity == "apos") out += '\'';
    else if (entity.size() > 1 && entity[0] == '#') out += '?';
    else return false;
    i = semi;
  }
  return true;
}

}  // namespace detail

inline Document parse(const std::string& xml) {
  Document doc;
  std::vector<int> open;  // indices of the elements not closed yet
  size_t i = 0;
  auto fail = [&](const std::string& what) {
    doc.error = what + " at offset " + std::to_string(i);
    return doc;
  };
  auto skip_space = [&] {
    while (i < xml.size() && std::isspace(static_cast<unsigned char>(xml[i]))) ++i;
  };
  auto read_name = [&] {
    const size_t start = i;
    while (i < xml.size() && detail::name_char(xml[i])) ++i;
    return xml.substr(start, i - start);
  };

  if (xml.compare(0, 5, "<?xml") == 0) {
    i = xml.find("?>");
    if (i == std::string::npos) return fail("unterminated XML declaration");
    i += 2;
  }
  bool root_seen = false;
  while (i < xml.size()) {
    const size_t lt = xml.find('<', i);
    const std::string raw_text = xml.substr(i, lt == std::string::npos ? std::string::npos : lt - i);
    std::string text;
    if (!detail::unescape(raw_text, text)) return fail("stray '&' in text");
    if (raw_text.find('>') != std::string::npos) return fail("raw '>' in text");
    if (open.empty() && raw_text.find_first_not_of(" \t\r\n") != std::string::npos)
      return fail("text outside the root element");
    if (!open.empty()) doc.elements[size_t(open.back())].text += text;
    if (lt == std::string::npos) break;
    i = lt;

    if (xml.compare(i, 4, "<!--") == 0) {
      const size_t end = xml.find("-->", i);
      if (end == std::string::npos) return fail("unterminated comment");
      i = end + 3;
      continue;
    }
    if (xml.compare(i, 2, "</") == 0) {
      i += 2;
      const std::string name = read_name();
      skip_space();
      if (i >= xml.size() || xml[i] != '>') return fail("malformed end tag </" + name);
      ++i;
      if (open.empty() || doc.elements[size_t(open.back())].name != name)
        return fail("end tag </" + name + "> does not close the open element");
      open.pop_back();
      continue;
    }

    ++i;  // '<'
    Element element;
    element.name = read_name();
    if (element.name.empty()) return fail("'<' not followed by a tag name");
    if (open.empty() && root_seen) return fail("a second root element <" + element.name + ">");
    root_seen = true;
    element.parent = open.empty() ? -1 : open.back();
    bool self_closing = false;
    while (true) {
      const size_t before = i;
      skip_space();
      if (xml.compare(i, 2, "/>") == 0) {
        self_closing = true;
        i += 2;
        break;
      }
      if (i < xml.size() && xml[i] == '>') {
        ++i;
        break;
      }
      if (i == before) return fail("attributes of <" + element.name + "> not separated by space");
      const std::string attribute = read_name();
      if (attribute.empty()) return fail("malformed attribute in <" + element.name + ">");
      skip_space();
      if (i >= xml.size() || xml[i] != '=') return fail("attribute " + attribute + " without a value");
      ++i;
      skip_space();
      if (i >= xml.size() || (xml[i] != '"' && xml[i] != '\'')) return fail("unquoted attribute " + attribute);
      const char quote = xml[i++];
      const size_t end = xml.find(quote, i);
      if (end == std::string::npos) return fail("unterminated attribute " + attribute);
      const std::string raw_value = xml.substr(i, end - i);
      if (raw_value.find('<') != std::string::npos) return fail("raw '<' in attribute " + attribute);
      std::string value;
      if (!detail::unescape(raw_value, value)) return fail("stray '&' in attribute " + attribute);
      if (!element.attributes.emplace(attribute, value).second) return fail("repeated attribute " + attribute);
      i = end + 1;
    }
    doc.elements.push_back(std::move(element));
    if (!self_closing) open.push_back(int(doc.elements.size()) - 1);
  }
  if (!open.empty()) return fail("<" + doc.elements[size_t(open.back())].name + "> is never closed");
  if (!root_seen) return fail("no root element");
  return doc;
}

// "x1,y1 x2,y2 ..." → pairs.
inline std::vector<std::pair<double, double>> points(const std::string& attribute) {
  std::vector<std::pair<double, double>> out;
  const char* p = attribute.c_str();
  char* end = nullptr;
  while (true) {
    const double x = std::strtod(p, &end);
    if (end == p) break;
    if (*end != ',') break;
    p = end + 1;
    const double y = std::strtod(p, &end);
    if (end == p) break;
    out.emplace_back(x, y);
    p = end;
  }
  return out;
}

// The index of the <polyline> with data-series == `series`, or -1 (and -2 if repeated).
inline int polyline(const Document& doc, const std::string& series) {
  int found = -1;
  for (size_t k = 0; k < doc.elements.size(); ++k) {
    const auto& e = doc.elements[k];
    const auto it = e.attributes.find("data-series");
    if (e.name != "polyline" || it == e.attributes.end() || it->second != series) continue;
    if (found >= 0) return -2;
    found = int(k);
  }
  return found;
}

}  // namespace svg_check
