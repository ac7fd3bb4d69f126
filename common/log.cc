#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "common/clock.h"

namespace knap::log {
namespace {
std::atomic<int> g_min_level{static_cast<int>(Level::kInfo)};
const char* levelName(Level l) {
  switch (l) {
    case Level::kDebug: return "D";
    case Level::kInfo: return "I";
    case Level::kWarning: return "W";
    case Level::kError: return "E";
  }
  return "?";
}
}  // namespace

void setMinLevel(Level level) { g_min_level = static_cast<int>(level); }
Level minLevel() { return static_cast<Level>(g_min_level.load()); }

Line::Line(Level level, const char* file, int line)
    : enabled_(static_cast<int>(level) >= g_min_level.load()) {
  if (!enabled_) return;
  const char* base = std::strrchr(file, '/');
  os_ << levelName(level) << ' ' << formatRfc3339(std::chrono::system_clock::now()) << ' '
      << (base ? base + 1 : file) << ':' << line << "] ";
}

Line::~Line() {
  if (!enabled_) return;
  os_ << '\n';
  std::string s = os_.str();
  ssize_t ignored = ::write(2, s.data(), s.size());
  (void)ignored;
}

}  // namespace knap::log
