#include "common/string_util.h"

namespace knap {

std::optional<HostPort> splitHostPort(std::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = s.substr(0, colon), port = s.substr(colon + 1);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return std::nullopt;
    host = host.substr(1, host.size() - 2);
  } else if (host.find_first_of(":[]") != std::string_view::npos) {
    return std::nullopt;
  }
  if (port.empty() || port.size() > 5) return std::nullopt;
  int p = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return std::nullopt;
    p = p * 10 + (c - '0');
  }
  if (p > 65535) return std::nullopt;
  return HostPort{std::string(host), p};
}

}  // namespace knap
