// Small ASCII string helpers every folder needs, written once. Pure
// functions on bytes (no locale): protocol text — HTTP field names, DNS
// names, media types, config words — is ASCII whatever the machine's locale.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace knap {

// "Content-Type" -> "content-type"; bytes outside A-Z are kept as they are.
inline std::string asciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Without leading and trailing spaces and tabs: HTTP's optional whitespace
// (RFC 9110 §5.6.3) around field values and list elements.
inline std::string_view trimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls fn(element) for each non-empty element of an HTTP comma-separated
// list value (RFC 9110 §5.6.1), OWS trimmed, in order. Views into `v`.
template <typename Fn>
void forEachListElement(std::string_view v, Fn&& fn) {
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    if (comma == std::string_view::npos) comma = v.size();
    std::string_view element = trimOws(v.substr(start, comma - start));
    if (!element.empty()) fn(element);
    start = comma + 1;
  }
}

// Without leading and trailing ASCII whitespace (space, \t, \n, \v, \f, \r):
// lines of files and command output.
inline std::string_view trimSpace(std::string_view s) {
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

struct HostPort {
  std::string host;  // without the brackets of an IPv6 literal
  int port = 0;      // 0..65535
};

// "127.0.0.1:8080", "[::1]:6443", "localhost:0" -> host and port. nullopt
// when there is no ":port", the host is empty, an IPv6 literal is not in
// brackets (or a bracket is unbalanced), or the port is not 1 to 5 digits
// up to 65535. The host is not resolved or otherwise checked.
std::optional<HostPort> splitHostPort(std::string_view s);

}  // namespace knap
