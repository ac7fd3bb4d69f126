#include "tools/knap/table.h"

#include <algorithm>

namespace knap::cli {

namespace {
// Display width: count UTF-8 code points, not bytes.
size_t width(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}
}  // namespace

std::string Table::render() const {
  std::vector<size_t> widths;
  for (const auto& r : rows_) {
    if (widths.size() < r.size()) widths.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) widths[i] = std::max(widths[i], width(r[i]));
  }
  std::string out;
  for (const auto& r : rows_) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(widths[i] - width(r[i]) + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace knap::cli
