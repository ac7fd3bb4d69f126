#include "common/duration.h"

#include <cctype>
#include <cmath>
#include <cstdint>

namespace knap {

StatusOr<std::chrono::nanoseconds> parseGoDuration(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return invalidArgument("invalid duration \"" + text + "\": " + why);
  };
  if (text.empty()) return bad("empty");
  size_t i = 0;
  bool negative = false;
  if (text[i] == '-' || text[i] == '+') negative = text[i++] == '-';
  if (text.substr(i) == "0") return std::chrono::nanoseconds(0);
  if (i == text.size()) return bad("missing number");
  long double total = 0;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    if (start == i) return bad("expected a number at position " + std::to_string(start));
    std::string number = text.substr(start, i - start);
    // Go's grammar: digits, optionally '.', optionally digits; at least one digit.
    if (number.find('.') != number.rfind('.') || number == ".") return bad("bad number \"" + number + "\"");
    long double value = std::stold(number);
    size_t ustart = i;
    while (i < text.size() && !std::isdigit(static_cast<unsigned char>(text[i])) && text[i] != '.') ++i;
    std::string unit = text.substr(ustart, i - ustart);
    long double mult = 0;
    if (unit == "ns")
      mult = 1;
    else if (unit == "us" || unit == "\xC2\xB5s" || unit == "\xCE\xBCs")
      mult = 1e3;
    else if (unit == "ms")
      mult = 1e6;
    else if (unit == "s")
      mult = 1e9;
    else if (unit == "m")
      mult = 60e9;
    else if (unit == "h")
      mult = 3600e9;
    else if (unit.empty())
      return bad("missing unit (use ns, us, ms, s, m or h)");
    else
      return bad("unknown unit \"" + unit + "\" (use ns, us, ms, s, m or h)");
    total += value * mult;
  }
  if (total > 9.2e18L) return bad("out of range");
  auto ns = static_cast<int64_t>(std::llround(static_cast<double>(total)));
  return std::chrono::nanoseconds(negative ? -ns : ns);
}

std::string formatGoDuration(std::chrono::nanoseconds d) {
  int64_t ns = d.count();
  if (ns == 0) return "0s";
  std::string sign = ns < 0 ? "-" : "";
  uint64_t u = ns < 0 ? static_cast<uint64_t>(-ns) : static_cast<uint64_t>(ns);
  // Exact: integer part, then the fraction without trailing zeros (as Go prints it).
  auto fixed = [](uint64_t v, uint64_t scale, int digits) {
    std::string out = std::to_string(v / scale);
    if (uint64_t frac = v % scale) {
      std::string f = std::to_string(frac);
      f = std::string(digits - f.size(), '0') + f;
      while (f.back() == '0') f.pop_back();
      out += "." + f;
    }
    return out;
  };
  if (u < 1000) return sign + std::to_string(u) + "ns";
  if (u < 1000000) return sign + fixed(u, 1000, 3) + "µs";
  if (u < 1000000000) return sign + fixed(u, 1000000, 6) + "ms";
  std::string out = sign;
  uint64_t h = u / 3600000000000ULL;
  u %= 3600000000000ULL;
  uint64_t m = u / 60000000000ULL;
  u %= 60000000000ULL;
  if (h) out += std::to_string(h) + "h";
  if (h || m) out += std::to_string(m) + "m";
  uint64_t sec = u / 1000000000ULL, frac = u % 1000000000ULL;
  out += std::to_string(sec);
  if (frac) {
    std::string f = std::to_string(frac);
    f = std::string(9 - f.size(), '0') + f;
    while (f.back() == '0') f.pop_back();
    out += "." + f;
  }
  return out + "s";
}

}  // namespace knap
