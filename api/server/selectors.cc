#include "api/server/selectors.h"

#include <cctype>

#include "common/string_util.h"

namespace knap::api {

namespace {

// Splits on commas that are not inside parentheses.
StatusOr<std::vector<std::string>> splitTopLevel(const std::string& text) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') {
      if (--depth < 0)
        return invalidArgument("unable to parse requirement: unbalanced ')' in \"" + text + "\"");
    }
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) return invalidArgument("unable to parse requirement: unbalanced '(' in \"" + text + "\"");
  parts.push_back(cur);
  return parts;
}

bool validKey(const std::string& k) {
  if (k.empty() || k.size() > 317) return false;
  for (char c : k) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/'))
      return false;
  }
  return true;
}

bool validValue(const std::string& v) {
  if (v.size() > 63) return false;
  for (char c : v) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

Status badRequirement(const std::string& req, const std::string& why) {
  return invalidArgument("unable to parse requirement: \"" + req + "\": " + why);
}

// Finds a whitespace-delimited word (" in ", " notin ") outside parentheses.
size_t findWord(const std::string& s, const std::string& word) {
  size_t pos = 0;
  while ((pos = s.find(word, pos)) != std::string::npos) {
    bool left = pos > 0 && std::isspace(static_cast<unsigned char>(s[pos - 1]));
    size_t end = pos + word.size();
    bool right = end < s.size() && (std::isspace(static_cast<unsigned char>(s[end])) || s[end] == '(');
    if (left && right) return pos;
    pos = end;
  }
  return std::string::npos;
}

}  // namespace

StatusOr<LabelSelector> LabelSelector::parse(const std::string& text) {
  LabelSelector sel;
  if (trimSpace(text).empty()) return sel;
  KNAP_ASSIGN_OR_RETURN(auto parts, splitTopLevel(text));
  for (const std::string& raw : parts) {
    std::string part(trimSpace(raw));
    if (part.empty()) return badRequirement(raw, "empty requirement");
    Requirement r;
    size_t p;
    if (part[0] == '!') {
      r.key = trimSpace(part.substr(1));
      r.op = Op::kDoesNotExist;
    } else if ((p = findWord(part, "notin")) != std::string::npos ||
               (p = findWord(part, "in")) != std::string::npos) {
      bool notin = part.compare(p, 5, "notin") == 0;
      r.key = trimSpace(part.substr(0, p));
      r.op = notin ? Op::kNotIn : Op::kIn;
      std::string rest(trimSpace(part.substr(p + (notin ? 5 : 2))));
      if (rest.size() < 2 || rest.front() != '(' || rest.back() != ')')
        return badRequirement(part, "expected a parenthesised value list");
      std::string inner = rest.substr(1, rest.size() - 2);
      size_t start = 0;
      while (true) {
        size_t comma = inner.find(',', start);
        std::string v(
            trimSpace(inner.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
        if (!validValue(v)) return badRequirement(part, "invalid label value \"" + v + "\"");
        r.values.push_back(v);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if ((p = part.find("!=")) != std::string::npos) {
      r.key = trimSpace(part.substr(0, p));
      r.op = Op::kNotEquals;
      r.values.push_back(std::string(trimSpace(part.substr(p + 2))));
    } else if ((p = part.find("==")) != std::string::npos) {
      r.key = trimSpace(part.substr(0, p));
      r.op = Op::kEquals;
      r.values.push_back(std::string(trimSpace(part.substr(p + 2))));
    } else if ((p = part.find('=')) != std::string::npos) {
      r.key = trimSpace(part.substr(0, p));
      r.op = Op::kEquals;
      r.values.push_back(std::string(trimSpace(part.substr(p + 1))));
    } else {
      r.key = part;
      r.op = Op::kExists;
    }
    if (!validKey(r.key)) return badRequirement(part, "invalid label key \"" + r.key + "\"");
    for (const auto& v : r.values) {
      if (!validValue(v)) return badRequirement(part, "invalid label value \"" + v + "\"");
    }
    sel.reqs_.push_back(std::move(r));
  }
  return sel;
}

bool LabelSelector::matches(const nlohmann::json& labels) const {
  for (const Requirement& r : reqs_) {
    const std::string* val = nullptr;
    std::string holder;
    if (labels.is_object()) {
      auto it = labels.find(r.key);
      if (it != labels.end() && it->is_string()) {
        holder = it->get<std::string>();
        val = &holder;
      }
    }
    auto inValues = [&] {
      return val && std::find(r.values.begin(), r.values.end(), *val) != r.values.end();
    };
    switch (r.op) {
      case Op::kEquals:
      case Op::kIn:
        if (!inValues()) return false;
        break;
      case Op::kNotEquals:
      case Op::kNotIn:
        if (inValues()) return false;
        break;
      case Op::kExists:
        if (!val) return false;
        break;
      case Op::kDoesNotExist:
        if (val) return false;
        break;
    }
  }
  return true;
}

StatusOr<FieldSelector> FieldSelector::parse(const std::string& text,
                                             const std::map<std::string, std::string>& extra_fields) {
  FieldSelector sel;
  if (trimSpace(text).empty()) return sel;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string part(
        trimSpace(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    Term t;
    size_t p;
    if ((p = part.find("!=")) != std::string::npos) {
      t.negate = true;
      t.field = trimSpace(part.substr(0, p));
      t.value = trimSpace(part.substr(p + 2));
    } else if ((p = part.find("==")) != std::string::npos) {
      t.negate = false;
      t.field = trimSpace(part.substr(0, p));
      t.value = trimSpace(part.substr(p + 2));
    } else if ((p = part.find('=')) != std::string::npos) {
      t.negate = false;
      t.field = trimSpace(part.substr(0, p));
      t.value = trimSpace(part.substr(p + 1));
    } else {
      return invalidArgument("invalid field selector: \"" + part + "\": expected field=value");
    }
    auto extra = extra_fields.find(t.field);
    if (extra != extra_fields.end())
      t.field = extra->second;
    else if (t.field != "metadata.name" && t.field != "metadata.namespace")
      return invalidArgument("field label not supported: " + t.field);
    sel.terms_.push_back(std::move(t));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sel;
}

bool FieldSelector::matches(const nlohmann::json& obj) const {
  for (const Term& t : terms_) {
    // The field is a dotted path into the object; a missing or non-string value is "".
    const nlohmann::json* at = &obj;
    size_t start = 0;
    while (at) {
      size_t dot = t.field.find('.', start);
      std::string part = t.field.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      auto it = at->is_object() ? at->find(part) : at->end();
      at = at->is_object() && it != at->end() ? &*it : nullptr;
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    std::string actual = at && at->is_string() ? at->get<std::string>() : "";
    if ((actual == t.value) == t.negate) return false;
  }
  return true;
}

}  // namespace knap::api
