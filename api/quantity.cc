#include "api/quantity.h"

#include <cmath>
#include <cstdlib>
#include <regex>

namespace knap::api {

StatusOr<double> parseQuantity(const std::string& text) {
  static const std::regex kQuantity(
      "([+-]?(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+))([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?");
  std::smatch m;
  if (!std::regex_match(text, m, kQuantity)) {
    return invalidArgument(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
  }
  double v = std::strtod(m[1].str().c_str(), nullptr);
  std::string suffix = m[2].str();
  if (suffix.empty()) return v;
  if (suffix[0] == 'e' || suffix[0] == 'E') return v * std::pow(10.0, std::atoi(suffix.c_str() + 1));
  if (suffix.size() == 2) {  // binary SI
    static const std::string kBin = "KMGTPE";
    return v * std::pow(1024.0, static_cast<double>(kBin.find(suffix[0]) + 1));
  }
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
  return invalidArgument("unknown quantity suffix \"" + suffix + "\"");
}

StatusOr<double> parseQuantity(const nlohmann::json& value) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) return parseQuantity(value.get<std::string>());
  return invalidArgument("a quantity must be a string or a number");
}

}  // namespace knap::api
