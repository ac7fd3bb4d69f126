#include "api/quantity.h"

#include <cmath>
#include <cstdlib>
#include <string_view>

namespace knap::api {
namespace {

// Longer than any meaningful quantity ("9223372036854775807", "0.000000001"),
// short enough that strtod is cheap. Kubernetes itself refuses values whose
// digits do not fit an int64 scale; knap refuses them by length first.
constexpr size_t kMaxQuantityLength = 64;

const char* kQuantityRule =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

bool isDigit(char c) {
  return c >= '0' && c <= '9';
}

}  // namespace

// Grammar (one linear scan, no backtracking):
//   number = [+-]? ( digits ( "." digits? )? | "." digits )
//   suffix = ( [eE] [+-]? digits ) | [numkMGTPE] | [KMGTPE] "i"
StatusOr<double> parseQuantity(const std::string& text) {
  if (text.size() > kMaxQuantityLength) {
    return invalidArgument("quantity is too long (" + std::to_string(text.size()) + " characters; at most " +
                           std::to_string(kMaxQuantityLength) + ")");
  }
  std::string_view s(text);
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && isDigit(s[i])) ++i, ++int_digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && isDigit(s[i])) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return invalidArgument(kQuantityRule);
  const size_t number_end = i;
  double v = std::strtod(std::string(s.substr(0, number_end)).c_str(), nullptr);
  std::string_view suffix = s.substr(number_end);
  if (suffix.empty()) return v;
  if (suffix[0] == 'e' || suffix[0] == 'E') {
    size_t j = 1;
    bool negative = false;
    if (j < suffix.size() && (suffix[j] == '+' || suffix[j] == '-')) negative = suffix[j++] == '-';
    if (j == suffix.size()) return invalidArgument(kQuantityRule);
    int exponent = 0;
    for (; j < suffix.size(); ++j) {
      if (!isDigit(suffix[j])) return invalidArgument(kQuantityRule);
      if (exponent < 10000) exponent = exponent * 10 + (suffix[j] - '0');  // saturates: 1e10000 is inf anyway
    }
    return v * std::pow(10.0, negative ? -exponent : exponent);
  }
  if (suffix.size() == 2 && suffix[1] == 'i') {  // binary SI
    static constexpr std::string_view kBin = "KMGTPE";
    size_t power = kBin.find(suffix[0]);
    if (power == std::string_view::npos) return invalidArgument(kQuantityRule);
    return v * std::pow(1024.0, static_cast<double>(power + 1));
  }
  if (suffix.size() != 1) return invalidArgument(kQuantityRule);
  switch (suffix[0]) {
    case 'n':
      return v * 1e-9;
    case 'u':
      return v * 1e-6;
    case 'm':
      return v * 1e-3;
    case 'k':
      return v * 1e3;
    case 'M':
      return v * 1e6;
    case 'G':
      return v * 1e9;
    case 'T':
      return v * 1e12;
    case 'P':
      return v * 1e15;
    case 'E':
      return v * 1e18;
  }
  return invalidArgument(kQuantityRule);
}

StatusOr<double> parseQuantity(const nlohmann::json& value) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) return parseQuantity(value.get<std::string>());
  return invalidArgument("a quantity must be a string or a number");
}

}  // namespace knap::api
