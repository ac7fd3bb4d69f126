#include "api/codec.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <optional>
#include <set>
#include <string_view>

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

// Hand-written recognisers for the YAML 1.1 scalar forms below: one linear
// scan each, no std::regex (its backtracking recursed once per character and
// overflowed the stack on a 30,000-digit scalar, issue 9).
bool isDigitChar(char c) {
  return c >= '0' && c <= '9';
}

bool isHexChar(char c) {
  return isDigitChar(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Whether s[from..] is non-empty and every character passes `ok` or is '_'.
template <typename Pred>
bool allDigitsOrUnderscore(std::string_view s, size_t from, Pred ok) {
  if (from >= s.size()) return false;
  for (size_t i = from; i < s.size(); ++i) {
    if (s[i] != '_' && !ok(s[i])) return false;
  }
  return true;
}

size_t signLength(std::string_view s) {
  return !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
}

// [-+]?(0|[1-9][0-9_]*)
bool isDecimalInt(std::string_view s) {
  size_t i = signLength(s);
  if (i >= s.size() || !isDigitChar(s[i])) return false;
  if (s[i] == '0') return i + 1 == s.size();
  return allDigitsOrUnderscore(s, i + 1, isDigitChar) || i + 1 == s.size();
}

// [-+]?0<letter><digits-or-_>+ for 0x (hex) and 0b (binary).
template <typename Pred>
bool isPrefixedInt(std::string_view s, char letter, Pred ok) {
  size_t i = signLength(s);
  return s.size() > i + 2 && s[i] == '0' && s[i + 1] == letter && allDigitsOrUnderscore(s, i + 2, ok);
}

// [-+]?0o?[0-7_]+
bool isOctalInt(std::string_view s) {
  size_t i = signLength(s);
  if (i >= s.size() || s[i] != '0') return false;
  ++i;
  if (i < s.size() && s[i] == 'o') ++i;
  return allDigitsOrUnderscore(s, i, [](char c) { return c >= '0' && c <= '7'; });
}

// [-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?
bool isFloatText(std::string_view s) {
  size_t i = signLength(s);
  if (i >= s.size()) return false;
  if (s[i] == '.') {
    ++i;
    size_t digits = 0;
    while (i < s.size() && isDigitChar(s[i])) ++i, ++digits;
    if (digits == 0) return false;
  } else {
    if (!isDigitChar(s[i])) return false;
    ++i;
    while (i < s.size() && (isDigitChar(s[i]) || s[i] == '_')) ++i;
    if (i < s.size() && s[i] == '.') {
      ++i;
      while (i < s.size() && (isDigitChar(s[i]) || s[i] == '_')) ++i;
    }
  }
  if (i == s.size()) return true;
  if (s[i] != 'e' && s[i] != 'E') return false;
  ++i;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  if (i >= s.size()) return false;
  while (i < s.size() && isDigitChar(s[i])) ++i;
  return i == s.size();
}

std::string withoutUnderscores(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c != '_') out.push_back(c);
  }
  return out;
}

// A finite double for `clean`, or nullopt when it is out of range: go-yaml v2
// then keeps the scalar a string (strconv.ParseFloat fails with ErrRange),
// and so does knap.
std::optional<json> finiteDouble(const std::string& clean) {
  errno = 0;
  double d = std::strtod(clean.c_str(), nullptr);
  if (errno == ERANGE && std::isinf(d)) return std::nullopt;
  return json(d);
}

std::optional<json> resolveInt(const std::string& raw) {
  std::string s = withoutUnderscores(raw);
  int base = 0;
  std::string digits = s;
  bool negative = false;
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
    negative = digits[0] == '-';
    digits = digits.substr(1);
  }
  if (isDecimalInt(raw)) {
    base = 10;
  } else if (isPrefixedInt(raw, 'x', isHexChar)) {
    base = 16;
    digits = digits.substr(2);
  } else if (isPrefixedInt(raw, 'b', [](char c) { return c == '0' || c == '1'; })) {
    base = 2;
    digits = digits.substr(2);
  } else if (isOctalInt(raw)) {
    base = 8;
    digits = digits.substr(digits.size() > 1 && digits[1] == 'o' ? 2 : 1);
    if (digits.empty()) digits = "0";
  } else {
    return std::nullopt;
  }
  errno = 0;
  unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
  if (errno == ERANGE) return base == 10 ? finiteDouble(s) : std::nullopt;
  if (negative) {
    if (v > static_cast<unsigned long long>(INT64_MAX) + 1) return json(-static_cast<double>(v));
    return json(static_cast<int64_t>(0 - v));
  }
  if (v <= static_cast<unsigned long long>(INT64_MAX)) return json(static_cast<int64_t>(v));
  return json(static_cast<uint64_t>(v));
}

std::optional<json> resolveFloat(const std::string& s) {
  if (!isFloatText(s)) return std::nullopt;
  return finiteDouble(withoutUnderscores(s));
}

// [-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)
bool isSpecialFloat(const std::string& s) {
  std::string_view v(s);
  if (v == ".nan" || v == ".NaN" || v == ".NAN") return true;
  v.remove_prefix(signLength(v));
  return v == ".inf" || v == ".Inf" || v == ".INF";
}

// [0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ].*)?
bool isTimestampLike(std::string_view s) {
  size_t i = 0;
  auto digitRun = [&](size_t min, size_t max) {
    size_t n = 0;
    while (i < s.size() && n < max && isDigitChar(s[i])) ++i, ++n;
    return n >= min;
  };
  if (!digitRun(4, 4) || i >= s.size() || s[i++] != '-') return false;
  if (!digitRun(1, 2) || i >= s.size() || s[i++] != '-') return false;
  if (!digitRun(1, 2)) return false;
  return i == s.size() || s[i] == 'T' || s[i] == 't' || s[i] == ' ';
}

// The JSON value a plain scalar stands for; nullopt means "a string".
std::optional<json> resolvePlain(const std::string& s) {
  if (isNullLiteral(s)) return json(nullptr);
  if (auto b = resolveBool(s)) return b;
  // Numbers start with a digit, a sign or a dot: skip the recognisers for everything else.
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
  if (isTimestampLike(s)) return true;
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
