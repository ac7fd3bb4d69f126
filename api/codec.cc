#include "api/codec.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <regex>
#include <set>

namespace knap::api {
namespace {

using nlohmann::json;

constexpr const char* kTagStr = "tag:yaml.org,2002:str";
constexpr const char* kTagInt = "tag:yaml.org,2002:int";
constexpr const char* kTagFloat = "tag:yaml.org,2002:float";
constexpr const char* kTagBool = "tag:yaml.org,2002:bool";
constexpr const char* kTagNull = "tag:yaml.org,2002:null";

std::string where(const YAML::Mark& mark) {
  if (mark.is_null()) return "";
  return "line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1) + ": ";
}

// Resolution of plain (unquoted) scalars, as kubectl's YAML decoder
// (go-yaml v2, YAML 1.1 booleans) does it. Returns nullopt for plain strings.
std::optional<json> resolveBool(const std::string& s) {
  static const std::set<std::string> kTrue = {"y",    "Y",    "yes", "Yes", "YES", "true",
                                              "True", "TRUE", "on",  "On",  "ON"};
  static const std::set<std::string> kFalse = {"n",     "N",     "no",  "No",  "NO", "false",
                                               "False", "FALSE", "off", "Off", "OFF"};
  if (kTrue.count(s)) return json(true);
  if (kFalse.count(s)) return json(false);
  return std::nullopt;
}

bool isNullLiteral(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

std::optional<json> resolveInt(const std::string& raw) {
  static const std::regex kDec("[-+]?(0|[1-9][0-9_]*)");
  static const std::regex kHex("[-+]?0x[0-9a-fA-F_]+");
  static const std::regex kOct("[-+]?0o?[0-7_]+");
  static const std::regex kBin("[-+]?0b[01_]+");
  std::string s;
  for (char c : raw) {
    if (c != '_') s.push_back(c);
  }
  int base = 0;
  std::string digits = s;
  bool negative = false;
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
    negative = digits[0] == '-';
    digits = digits.substr(1);
  }
  if (std::regex_match(raw, kDec)) {
    base = 10;
  } else if (std::regex_match(raw, kHex)) {
    base = 16;
    digits = digits.substr(2);
  } else if (std::regex_match(raw, kBin)) {
    base = 2;
    digits = digits.substr(2);
  } else if (std::regex_match(raw, kOct)) {
    base = 8;
    digits = digits.substr(digits.size() > 1 && digits[1] == 'o' ? 2 : 1);
    if (digits.empty()) digits = "0";
  } else {
    return std::nullopt;
  }
  errno = 0;
  unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
  if (errno == ERANGE) return json(std::strtod(s.c_str(), nullptr));
  if (negative) {
    if (v > static_cast<unsigned long long>(INT64_MAX) + 1) return json(-static_cast<double>(v));
    return json(static_cast<int64_t>(0 - v));
  }
  if (v <= static_cast<unsigned long long>(INT64_MAX)) return json(static_cast<int64_t>(v));
  return json(static_cast<uint64_t>(v));
}

std::optional<json> resolveFloat(const std::string& s) {
  static const std::regex kFloat("[-+]?(\\.[0-9]+|[0-9][0-9_]*(\\.[0-9_]*)?)([eE][-+]?[0-9]+)?");
  if (!std::regex_match(s, kFloat)) return std::nullopt;
  std::string clean;
  for (char c : s) {
    if (c != '_') clean.push_back(c);
  }
  return json(std::strtod(clean.c_str(), nullptr));
}

bool isSpecialFloat(const std::string& s) {
  if (s.find('.') == std::string::npos) return false;
  static const std::regex kSpecial("[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)");
  return std::regex_match(s, kSpecial);
}

// The JSON value a plain scalar stands for; nullopt means "a string".
std::optional<json> resolvePlain(const std::string& s) {
  if (isNullLiteral(s)) return json(nullptr);
  if (auto b = resolveBool(s)) return b;
  // Numbers start with a digit, a sign or a dot: skip the regexes for everything else.
  char c = s.front();
  if (!(c >= '0' && c <= '9') && c != '-' && c != '+' && c != '.') return std::nullopt;
  if (auto i = resolveInt(s)) return i;
  if (auto f = resolveFloat(s)) return f;
  return std::nullopt;
}

Status scalarError(const YAML::Node& node, const std::string& what) {
  return invalidArgument("yaml: " + where(node.Mark()) + what);
}

StatusOr<json> toJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      const std::string& tag = node.Tag();
      if (tag == "!" || tag == kTagStr) return json(text);  // quoted or !!str
      if (tag == kTagNull) return json(nullptr);
      if (tag == kTagBool) {
        if (auto b = resolveBool(text)) return *b;
        return scalarError(node, "cannot decode \"" + text + "\" as !!bool");
      }
      if (tag == kTagInt) {
        if (auto i = resolveInt(text)) return *i;
        return scalarError(node, "cannot decode \"" + text + "\" as !!int");
      }
      if (tag == kTagFloat) {
        if (auto i = resolveInt(text)) return json(i->get<double>());
        if (auto f = resolveFloat(text)) return *f;
        return scalarError(node, "cannot decode \"" + text + "\" as !!float");
      }
      if (tag != "?" && !tag.empty()) return json(text);  // other explicit tags: keep the text
      if (isSpecialFloat(text))
        return scalarError(node, "\"" + text + "\" (infinity/NaN) has no JSON representation");
      if (auto v = resolvePlain(text)) return *v;
      return json(text);
    }
    case YAML::NodeType::Sequence: {
      json arr = json::array();
      for (const auto& item : node) {
        KNAP_ASSIGN_OR_RETURN(json v, toJson(item));
        arr.push_back(std::move(v));
      }
      return arr;
    }
    case YAML::NodeType::Map: {
      json obj = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar() && !kv.first.IsNull()) {
          return invalidArgument("yaml: " + where(kv.first.Mark()) + "mapping keys must be scalars");
        }
        std::string key = kv.first.IsNull() ? "null" : kv.first.Scalar();
        if (obj.contains(key)) {
          return invalidArgument("yaml: " + where(kv.first.Mark()) + "duplicate key \"" + key + "\"");
        }
        KNAP_ASSIGN_OR_RETURN(json v, toJson(kv.second));
        obj[key] = std::move(v);
      }
      return obj;
    }
  }
  return json(nullptr);
}

// ---- emitter ----

bool needsQuotes(const std::string& s) {
  if (s.empty()) return true;
  if (resolvePlain(s) || isSpecialFloat(s)) return true;
  if (s.front() == ' ' || s.back() == ' ' || s.back() == ':') return true;
  static const std::string kIndicators = "-?:,[]{}#&*!|>'\"%@`";
  if (kIndicators.find(s.front()) != std::string::npos) {
    // "-foo" and "?x" would be fine in some positions, but quoting is always safe.
    return true;
  }
  if (s.find(": ") != std::string::npos || s.find(" #") != std::string::npos) return true;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;  // newlines, tabs, control characters
  }
  if (s == "<<" || s == "=") return true;
  // kubectl's decoder (go-yaml v2) reads unquoted dates as timestamps; keep them strings.
  static const std::regex kTimestampLike("[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ].*)?");
  if (s.front() >= '0' && s.front() <= '9' && std::regex_match(s, kTimestampLike)) return true;
  return false;
}

std::string quoteIfNeeded(const std::string& s) {
  return needsQuotes(s) ? json(s).dump(-1, ' ', false, json::error_handler_t::replace) : s;
}

bool isScalarOrEmpty(const json& v) {
  return !v.is_structured() || v.empty();
}

std::string scalarText(const json& v) {
  if (v.is_string()) return quoteIfNeeded(v.get<std::string>());
  if (v.is_null()) return "null";
  if (v.is_object()) return "{}";
  if (v.is_array()) return "[]";
  return v.dump();
}

void emit(const json& v, int indent, std::string& out);

void emitObject(const json& obj, int indent, std::string& out, bool first_inline) {
  bool first = true;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!(first && first_inline)) out.append(indent, ' ');
    first = false;
    out += quoteIfNeeded(it.key());
    out += ":";
    const json& value = it.value();
    if (isScalarOrEmpty(value)) {
      out += " " + scalarText(value) + "\n";
    } else if (value.is_object()) {
      out += "\n";
      emitObject(value, indent + 2, out, false);
    } else {
      out += "\n";
      emit(value, indent, out);  // kubectl style: list items at the key's indent
    }
  }
}

void emit(const json& v, int indent, std::string& out) {
  if (isScalarOrEmpty(v)) {
    out.append(indent, ' ');
    out += scalarText(v) + "\n";
    return;
  }
  if (v.is_object()) {
    emitObject(v, indent, out, false);
    return;
  }
  for (const auto& item : v) {
    out.append(indent, ' ');
    out += "-";
    if (isScalarOrEmpty(item)) {
      out += " " + scalarText(item) + "\n";
    } else if (item.is_object()) {
      out += " ";
      emitObject(item, indent + 2, out, true);
    } else {
      out += "\n";
      emit(item, indent + 2, out);
    }
  }
}

}  // namespace

StatusOr<std::vector<json>> parseYamlDocuments(const std::string& text) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    return invalidArgument("yaml: " + where(e.mark) + e.msg);
  }
  std::vector<json> out;
  for (const auto& doc : docs) {
    if (doc.IsNull()) continue;  // empty documents ("---\n---") are skipped, as kubectl does
    try {
      KNAP_ASSIGN_OR_RETURN(json v, toJson(doc));
      (void)v.dump();  // nlohmann refuses invalid UTF-8 only when serialising: find it here, not later
      out.push_back(std::move(v));
    } catch (const YAML::Exception& e) {
      return invalidArgument("yaml: " + where(e.mark) + e.msg);
    } catch (const json::type_error& e) {
      return invalidArgument("yaml: document is not valid UTF-8");
    }
  }
  return out;
}

StatusOr<json> parseJson(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix; keep line/column and the reason.
    if (auto close = what.find("] "); what.rfind("[json.exception", 0) == 0 && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    return invalidArgument("invalid JSON at byte " + std::to_string(e.byte) + ": " + what);
  } catch (const json::exception& e) {
    return invalidArgument(std::string("invalid JSON: ") + e.what());
  }
}

std::string toYaml(const json& value) {
  std::string out;
  emit(value, 0, out);
  return out;
}

}  // namespace knap::api
