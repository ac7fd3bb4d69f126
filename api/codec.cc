#include "api/codec.h"

#include <libfyaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
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

// ---- decoding: one Builder for YAML events and JSON SAX callbacks ----

// Assembles one JSON value from a stream of begin/key/value/end calls and
// enforces the DecodeLimits as it goes, so that no input can make it build more
// than max_nodes values, nest deeper than max_depth or hold a longer string
// than max_scalar_bytes, whatever the syntax. Errors name the field path.
class Builder {
 public:
  Builder(const DecodeLimits& limits, size_t* nodes) : limits_(limits), nodes_(nodes) {}

  bool done() const { return done_; }
  json take() {
    done_ = false;
    return std::move(root_);
  }
  bool expectingKey() const { return !stack_.empty() && stack_.back().is_object && !stack_.back().have_key; }

  // "spec.template.spec.containers[0]": where the next value goes.
  std::string path() const {
    std::string out;
    for (const Frame& f : stack_) {
      if (f.is_object) {
        if (!f.have_key) break;
        if (!out.empty()) out += '.';
        out += f.key;
      } else {
        out += "[" + std::to_string(f.value.size()) + "]";
      }
    }
    return out;
  }

  Status begin(bool object, std::string anchor) {
    if (stack_.size() >= limits_.max_depth)
      return fieldError("nests deeper than " + std::to_string(limits_.max_depth) + " levels");
    KNAP_RETURN_IF_ERROR(count(1));
    stack_.push_back(
        Frame{object ? json::object() : json::array(), object, "", false, std::move(anchor), *nodes_});
    return Status::ok();
  }

  Status key(std::string k) {
    if (k.size() > limits_.max_scalar_bytes) return scalarTooLong(k.size());
    Frame& f = stack_.back();
    if (f.value.contains(k)) return fieldError("duplicate key \"" + k + "\"");
    f.key = std::move(k);
    f.have_key = true;
    return Status::ok();
  }

  // A scalar (weight 1) or an alias's copy (weight = the anchored value's nodes).
  Status value(json v, size_t weight, std::string anchor) {
    if (v.is_string() && v.get_ref<const std::string&>().size() > limits_.max_scalar_bytes)
      return scalarTooLong(v.get_ref<const std::string&>().size());
    if (v.is_number_float() && !std::isfinite(v.get<double>())) return fieldError("number is out of range");
    KNAP_RETURN_IF_ERROR(count(weight));
    if (!anchor.empty()) anchors_[anchor] = Anchored{v, weight};
    place(std::move(v));
    return Status::ok();
  }

  Status end() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (!f.anchor.empty()) anchors_[f.anchor] = Anchored{f.value, *nodes_ - f.nodes_at_start};
    place(std::move(f.value));
    return Status::ok();
  }

  Status alias(const std::string& name) {
    auto it = anchors_.find(name);
    if (it == anchors_.end()) return fieldError("unknown anchor \"" + name + "\" referenced");
    if (++aliases_ > limits_.max_aliases)
      return fieldError("more than " + std::to_string(limits_.max_aliases) + " alias expansions");
    return value(it->second.value, it->second.nodes, "");
  }

  void resetDocument() {
    stack_.clear();
    anchors_.clear();
    root_ = json();
    done_ = false;
  }

  Status scalarTooLong(size_t n) const {
    return fieldError("a scalar of " + std::to_string(n) + " bytes is longer than the limit of " +
                      std::to_string(limits_.max_scalar_bytes));
  }

  Status fieldError(const std::string& what) const {
    std::string p = path();
    return invalidArgument(p.empty() ? what : "field \"" + p + "\": " + what);
  }

 private:
  struct Frame {
    json value;
    bool is_object;
    std::string key;
    bool have_key;
    std::string anchor;
    size_t nodes_at_start;
  };
  struct Anchored {
    json value;
    size_t nodes;
  };

  Status count(size_t weight) {
    if (weight > limits_.max_nodes || *nodes_ > limits_.max_nodes - weight)
      return fieldError("more than " + std::to_string(limits_.max_nodes) +
                        " values in the document (alias expansions included)");
    *nodes_ += weight;
    return Status::ok();
  }

  void place(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      done_ = true;
      return;
    }
    Frame& f = stack_.back();
    if (f.is_object) {
      f.value[f.key] = std::move(v);
      f.have_key = false;
    } else {
      f.value.push_back(std::move(v));
    }
  }

  const DecodeLimits& limits_;
  size_t* nodes_;
  size_t aliases_ = 0;
  std::vector<Frame> stack_;
  std::map<std::string, Anchored> anchors_;
  json root_;
  bool done_ = false;
};

// ---- YAML (libfyaml's event parser; it never builds a tree of its own) ----

std::string tokenText(fy_token* t) {
  if (!t) return "";
  size_t len = 0;
  const char* p = fy_token_get_text(t, &len);
  return p ? std::string(p, len) : std::string();
}

// The value of a single-quoted scalar, read from the input itself: the
// scalar's content between its quotes with '' read as ' and line breaks
// folded (YAML 1.2, 7.3.2: white space around a break dropped, one break a
// space, n breaks n-1 newlines). libfyaml 0.7.12 (Debian 12) produces the
// wrong text for two escaped quotes in a row ('a''''b' gave "a'''"), and
// when that text outgrows its buffer it also leaks the iterator's chunk
// array (both fixed upstream in 0.9.5: "atom: Correctly handle streams of
// single quoted single quotes", "atom: Call iter_finish on error in
// fy_atom_format_text()"); docs/fuzzing.md has the evidence.
std::optional<std::string> singleQuotedText(const std::string& input, fy_token* t) {
  const fy_mark* start = fy_token_start_mark(t);
  const fy_mark* end = fy_token_end_mark(t);
  if (!start || !end || start->input_pos > end->input_pos || end->input_pos > input.size())
    return std::nullopt;
  std::string_view raw(input.data() + start->input_pos, end->input_pos - start->input_pos);
  auto white = [](char c) { return c == ' ' || c == '\t'; };
  auto lineBreak = [&](size_t i) -> size_t {  // the length of the break at raw[i] (0: none)
    if (raw[i] == '\n') return 1;
    if (raw[i] == '\r') return i + 1 < raw.size() && raw[i + 1] == '\n' ? 2 : 1;
    return 0;
  };
  std::string out;
  out.reserve(raw.size());
  size_t i = 0;
  while (i < raw.size()) {
    char c = raw[i];
    if (c == '\'') {
      out += '\'';
      i += i + 1 < raw.size() && raw[i + 1] == '\'' ? 2 : 1;
      continue;
    }
    size_t br = lineBreak(i);
    if (br == 0) {
      out += c;
      ++i;
      continue;
    }
    // Fold: drop the white space before the break, count the breaks (lines
    // of white space only are empty lines), drop the next line's indent.
    while (!out.empty() && white(out.back())) out.pop_back();
    size_t breaks = 0;
    while (i < raw.size()) {
      size_t b = lineBreak(i);
      if (b == 0) break;
      ++breaks;
      i += b;
      while (i < raw.size() && white(raw[i])) ++i;
    }
    if (breaks == 1)
      out += ' ';
    else
      out.append(breaks - 1, '\n');
  }
  return out;
}

// The text of a scalar event's value (its style's escapes and folding applied).
std::string scalarTokenText(const std::string& input, fy_token* t) {
  if (t && fy_scalar_token_get_style(t) == FYSS_SINGLE_QUOTED) {
    if (auto s = singleQuotedText(input, t)) return std::move(*s);
  }
  return tokenText(t);
}

std::string where(const fy_mark* mark) {
  if (!mark) return "";
  return "line " + std::to_string(mark->line + 1) + ", column " + std::to_string(mark->column + 1) + ": ";
}

Status yamlError(fy_event* ev, const Status& st) {
  return invalidArgument("yaml: " + where(fy_event_start_mark(ev)) + st.message());
}

// The JSON value of one scalar event, by tag and style as go-yaml v2 (kubectl) resolves it.
StatusOr<json> scalarValue(const std::string& input, fy_event* ev) {
  fy_token* value = ev->scalar.value;
  std::string text = scalarTokenText(input, value);
  std::string tag = ev->scalar.tag ? tokenText(ev->scalar.tag) : "";
  enum fy_scalar_style style = value ? fy_scalar_token_get_style(value) : FYSS_PLAIN;
  bool plain = style != FYSS_SINGLE_QUOTED && style != FYSS_DOUBLE_QUOTED && style != FYSS_LITERAL &&
               style != FYSS_FOLDED;
  if (tag == "!" || tag == kTagStr) return json(text);
  if (tag == kTagNull) return json(nullptr);
  if (tag == kTagBool) {
    if (auto b = resolveBool(text)) return *b;
    return invalidArgument("cannot decode \"" + text + "\" as !!bool");
  }
  if (tag == kTagInt) {
    if (auto i = resolveInt(text)) return *i;
    return invalidArgument("cannot decode \"" + text + "\" as !!int");
  }
  if (tag == kTagFloat) {
    if (auto i = resolveInt(text)) return json(i->get<double>());
    if (auto f = resolveFloat(text)) return *f;
    return invalidArgument("cannot decode \"" + text + "\" as !!float");
  }
  if (!tag.empty()) return json(text);  // other explicit tags: keep the text
  if (!plain) return json(text);        // quoted and block scalars are strings
  if (isSpecialFloat(text))
    return invalidArgument("\"" + text + "\" (infinity/NaN) has no JSON representation");
  if (auto v = resolvePlain(text)) return *v;
  return json(text);
}

// The first error libfyaml collected, as "line L, column C: message".
std::string parserError(fy_diag* diag) {
  void* iter = nullptr;
  if (fy_diag_error* err = fy_diag_errors_iterate(diag, &iter)) {
    return "line " + std::to_string(err->line) + ", column " + std::to_string(err->column) + ": " +
           (err->msg ? err->msg : "invalid YAML");
  }
  return "invalid YAML";
}

void discardDiagnostics(fy_diag*, void*, const char*, size_t) {}

struct ParserDeleter {
  void operator()(fy_parser* p) const { fy_parser_destroy(p); }
};
struct DiagDeleter {
  void operator()(fy_diag* d) const { fy_diag_destroy(d); }
};
struct EventDeleter {
  fy_parser* parser;
  void operator()(fy_event* e) const { fy_parser_event_free(parser, e); }
};

// ---- JSON (nlohmann's SAX parser, iterative: no recursion on nesting) ----

class JsonSax {
 public:
  explicit JsonSax(Builder& b) : b_(b) {}
  Status status = Status::ok();

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return put(json(v)); }
  bool string(std::string& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t&) { return fail(invalidArgument("binary values are not JSON")); }
  bool start_object(std::size_t) { return check(b_.begin(true, "")); }
  bool key(std::string& k) { return check(b_.key(std::move(k))); }
  bool end_object() { return check(b_.end()); }
  bool start_array(std::size_t) { return check(b_.begin(false, "")); }
  bool end_array() { return check(b_.end()); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix; keep line/column and the reason.
    if (auto close = what.find("] "); what.rfind("[json.exception", 0) == 0 && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    return fail(invalidArgument("invalid JSON at byte " + std::to_string(position) + ": " + what));
  }

 private:
  bool put(json v) { return check(b_.value(std::move(v), 1, "")); }
  bool check(Status st) {
    if (st.isOk()) return true;
    return fail(invalidArgument("json: " + st.message()));
  }
  bool fail(Status st) {
    if (status.isOk()) status = std::move(st);
    return false;
  }
  Builder& b_;
};

bool startsLikeJson(const std::string& text) {
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    return c == '{' || c == '[';
  }
  return false;
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

// The offset of the first byte that is not part of well-formed UTF-8
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
std::optional<size_t> firstInvalidUtf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned char c = p[i];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::nullopt;
}

}  // namespace

StatusOr<std::vector<json>> parseYamlDocuments(const std::string& text, const DecodeLimits& limits) {
  // YAML streams are Unicode; libfyaml 0.7.12 (Debian 12) loops forever on some invalid
  // UTF-8 (a directive line "%\xff" was found by fuzz_admission), so bytes
  // that are not UTF-8 never reach it.
  if (auto bad = firstInvalidUtf8(text)) {
    size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + *bad, '\n'));
    size_t line_start = text.rfind('\n', *bad == 0 ? 0 : *bad - 1);
    size_t column = line_start == std::string::npos || *bad == 0 ? *bad + 1 : *bad - line_start;
    return invalidArgument("yaml: invalid UTF-8 at line " + std::to_string(line) + ", column " +
                           std::to_string(column) + " (byte " + std::to_string(*bad) + ")");
  }
  // Diagnostics are collected (for the error message), never printed.
  fy_diag_cfg dcfg;
  fy_diag_cfg_default(&dcfg);
  dcfg.fp = nullptr;
  dcfg.output_fn = discardDiagnostics;
  dcfg.colorize = false;
  std::unique_ptr<fy_diag, DiagDeleter> diag(fy_diag_create(&dcfg));
  if (!diag) return internalError("yaml: cannot create a diagnostics object");
  fy_diag_set_collect_errors(diag.get(), true);
  fy_parse_cfg cfg{};
  cfg.flags = static_cast<fy_parse_cfg_flags>(FYPCF_QUIET | FYPCF_COLLECT_DIAG | FYPCF_JSON_NONE);
  cfg.diag = diag.get();
  std::unique_ptr<fy_parser, ParserDeleter> parser(fy_parser_create(&cfg));
  if (!parser) return internalError("yaml: cannot create a parser");
  if (fy_parser_set_string(parser.get(), text.data(), text.size()) != 0)
    return internalError("yaml: cannot set the parser input");
  size_t nodes = 0;
  Builder b(limits, &nodes);
  std::vector<json> out;
  for (;;) {
    std::unique_ptr<fy_event, EventDeleter> ev(fy_parser_parse(parser.get()), EventDeleter{parser.get()});
    if (!ev) {
      if (fy_parser_get_stream_error(parser.get()))
        return invalidArgument("yaml: " + parserError(diag.get()));
      break;
    }
    fy_event* e = ev.get();
    Status st = Status::ok();
    switch (e->type) {
      case FYET_DOCUMENT_START:
        b.resetDocument();
        break;
      case FYET_DOCUMENT_END:
        if (b.done()) {
          json doc = b.take();
          // empty documents ("---\n---") are skipped, as kubectl does
          if (!doc.is_null()) out.push_back(std::move(doc));
        }
        break;
      case FYET_MAPPING_START:
      case FYET_SEQUENCE_START:
        if (b.expectingKey()) return yamlError(e, invalidArgument("mapping keys must be scalars"));
        st = b.begin(
            e->type == FYET_MAPPING_START,
            tokenText(e->type == FYET_MAPPING_START ? e->mapping_start.anchor : e->sequence_start.anchor));
        break;
      case FYET_MAPPING_END:
      case FYET_SEQUENCE_END:
        st = b.end();
        break;
      case FYET_SCALAR: {
        if (b.expectingKey()) {
          std::string k = scalarTokenText(text, e->scalar.value);
          enum fy_scalar_style style =
              e->scalar.value ? fy_scalar_token_get_style(e->scalar.value) : FYSS_PLAIN;
          bool plain = (style == FYSS_PLAIN || style == FYSS_ANY) && !e->scalar.tag;
          st = b.key(plain && isNullLiteral(k) ? "null" : std::move(k));
          break;
        }
        if (size_t n = fy_token_get_text_length(e->scalar.value); n > limits.max_scalar_bytes) {
          st = b.scalarTooLong(n);
          break;
        }
        auto v = scalarValue(text, e);
        st = v.isOk() ? b.value(std::move(*v), 1, tokenText(e->scalar.anchor))
                      : b.fieldError(v.status().message());
        break;
      }
      case FYET_ALIAS:
        if (b.expectingKey()) return yamlError(e, invalidArgument("aliases cannot be mapping keys"));
        st = b.alias(tokenText(e->alias.anchor));
        break;
      default:
        break;
    }
    if (!st.isOk()) return yamlError(e, st);
  }
  for (const json& doc : out) {
    try {
      (void)doc.dump();  // nlohmann refuses invalid UTF-8 only when serialising: find it here, not later
    } catch (const json::type_error&) {
      return invalidArgument("yaml: document is not valid UTF-8");
    }
  }
  return out;
}

StatusOr<json> parseJson(const std::string& text, const DecodeLimits& limits) {
  size_t nodes = 0;
  Builder b(limits, &nodes);
  JsonSax sax(b);
  bool ok = json::sax_parse(text, &sax);
  if (!ok || !sax.status.isOk()) {
    if (!sax.status.isOk()) return sax.status;
    return invalidArgument("invalid JSON");
  }
  return b.take();
}

StatusOr<json> parseDocument(const std::string& text, bool yaml, const DecodeLimits& limits) {
  if (!yaml) return parseJson(text, limits);
  if (startsLikeJson(text)) {
    auto v = parseJson(text, limits);
    if (v.isOk()) return v;
    // fall through: YAML flow style that is not valid JSON
  }
  KNAP_ASSIGN_OR_RETURN(std::vector<json> docs, parseYamlDocuments(text, limits));
  if (docs.size() != 1)
    return invalidArgument("expected exactly one YAML document, got " + std::to_string(docs.size()));
  return std::move(docs[0]);
}

Status checkDocumentSize(const json& doc, const DecodeLimits& limits) {
  size_t nodes = 0, bytes = 0;
  std::vector<const json*> todo{&doc};
  while (!todo.empty()) {
    const json* v = todo.back();
    todo.pop_back();
    ++nodes;
    if (v->is_string())
      bytes += v->get_ref<const std::string&>().size();
    else
      bytes += 8;
    if (v->is_object()) {
      for (auto it = v->begin(); it != v->end(); ++it) {
        bytes += it.key().size();
        todo.push_back(&it.value());
      }
    } else if (v->is_array()) {
      for (const json& item : *v) todo.push_back(&item);
    }
    if (nodes > limits.max_nodes)
      return Status(Code::kResourceExhausted,
                    "the result has more than " + std::to_string(limits.max_nodes) + " values");
    if (bytes > limits.max_document_bytes)
      return Status(Code::kResourceExhausted,
                    "the result is larger than " + std::to_string(limits.max_document_bytes) + " bytes");
  }
  return Status::ok();
}

std::string toYaml(const json& value) {
  std::string out;
  emit(value, 0, out);
  return out;
}

}  // namespace knap::api
