#include "common/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/clock.h"

namespace knap::log {
namespace {
std::atomic<int> g_min_level{static_cast<int>(Level::kInfo)};
std::atomic<int> g_journal{-1};  // -1: not looked at yet; 0/1: stderr is (not) the journal
const char* levelName(Level l) {
  switch (l) {
    case Level::kDebug:
      return "D";
    case Level::kInfo:
      return "I";
    case Level::kWarning:
      return "W";
    case Level::kError:
      return "E";
  }
  return "?";
}
const char* syslogPrefix(Level l) {
  switch (l) {
    case Level::kDebug:
      return "<7>";
    case Level::kInfo:
      return "<6>";
    case Level::kWarning:
      return "<4>";
    case Level::kError:
      return "<3>";
  }
  return "<6>";
}
}  // namespace

bool isJournalStream(const char* journal_stream, int fd) {
  if (journal_stream == nullptr || !std::isdigit(static_cast<unsigned char>(journal_stream[0]))) return false;
  // Both numbers are decimal (systemd writes "%lu:%lu").
  char* end = nullptr;
  errno = 0;
  unsigned long long dev = std::strtoull(journal_stream, &end, 10);
  if (end == journal_stream || *end != ':' || errno == ERANGE) return false;
  const char* ino_text = end + 1;
  if (!std::isdigit(static_cast<unsigned char>(ino_text[0]))) return false;
  unsigned long long ino = std::strtoull(ino_text, &end, 10);
  if (end == ino_text || *end != '\0' || errno == ERANGE) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  return st.st_dev == dev && st.st_ino == ino;
}

void detectJournal() {
  g_journal = isJournalStream(std::getenv("JOURNAL_STREAM"), 2) ? 1 : 0;
}

void setMinLevel(Level level) {
  g_min_level = static_cast<int>(level);
}
Level minLevel() {
  return static_cast<Level>(g_min_level.load());
}

Line::Line(Level level, const char* file, int line)
    : enabled_(static_cast<int>(level) >= g_min_level.load()) {
  if (!enabled_) return;
  if (g_journal.load(std::memory_order_relaxed) < 0) detectJournal();
  if (g_journal.load(std::memory_order_relaxed) == 1) os_ << syslogPrefix(level);
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
