// Minimal structured logging to stderr: `LOG(INFO) << "pod started " << id;`
// Thread-safe: each statement is written with one write(2).
//
// Under systemd (stderr is the journal stream named by $JOURNAL_STREAM, see
// systemd.exec(5)) each line starts with its syslog priority, `<7>` debug,
// `<6>` info, `<4>` warning, `<3>` error, so that journald stores the level
// (`journalctl -p warning`) and strips the prefix from the text.
#pragma once

#include <sstream>

namespace knap::log {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void setMinLevel(Level level);
Level minLevel();

// True when $JOURNAL_STREAM ("DEVICE:INODE") names the file open on `fd`.
bool isJournalStream(const char* journal_stream, int fd);
// Re-reads $JOURNAL_STREAM against stderr (done once, lazily, by the first line;
// call again after redirecting fd 2).
void detectJournal();

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
