// Minimal structured logging to stderr: `LOG(INFO) << "pod started " << id;`
// Thread-safe: each statement is written with one write(2).
#pragma once

#include <sstream>

namespace knap::log {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void setMinLevel(Level level);
Level minLevel();

class Line {
 public:
  Line(Level level, const char* file, int line);
  ~Line();
  template <typename T>
  Line& operator<<(const T& v) {
    if (enabled_) os_ << v;
    return *this;
  }

 private:
  bool enabled_;
  std::ostringstream os_;
};

}  // namespace knap::log

#define KNAP_LOG_DEBUG ::knap::log::Level::kDebug
#define KNAP_LOG_INFO ::knap::log::Level::kInfo
#define KNAP_LOG_WARNING ::knap::log::Level::kWarning
#define KNAP_LOG_ERROR ::knap::log::Level::kError
#define LOG(level) ::knap::log::Line(KNAP_LOG_##level, __FILE__, __LINE__)
