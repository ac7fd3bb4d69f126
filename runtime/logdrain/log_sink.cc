#include "runtime/logdrain/log_sink.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace knap::logdrain {

namespace {
uint64_t linesIn(std::string_view data) {
  uint64_t n = static_cast<uint64_t>(std::count(data.begin(), data.end(), '\n'));
  return n == 0 && !data.empty() ? 1 : n;  // a partial line counts as one
}
}  // namespace

LogSink::LogSink(std::string path, int64_t max_bytes, WriteFn write)
    : path_(std::move(path)), max_bytes_(max_bytes), write_(std::move(write)) {
  if (!write_) write_ = [](int fd, const char* d, size_t n) { return static_cast<long>(::write(fd, d, n)); };
  open();
}

LogSink::~LogSink() {
  if (fd_ >= 0) ::close(fd_);
}

bool LogSink::open() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd_ < 0) return false;
  struct stat st {};
  size_ = ::fstat(fd_, &st) == 0 ? st.st_size : 0;
  return true;
}

bool LogSink::writeAll(std::string_view data) {
  while (!data.empty()) {
    long r = write_(fd_, data.data(), data.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) {
      errno = ENOSPC;
      return false;
    }
    size_ += r;
    data.remove_prefix(static_cast<size_t>(r));
  }
  return true;
}

void LogSink::drop(std::string_view data, int err) {
  uint64_t lines = linesIn(data);
  dropped_lines_ += lines;
  dropped_bytes_ += data.size();
  dropped_lines_total_ += lines;
  dropped_bytes_total_ += data.size();
  last_errno_ = err;
}

void LogSink::append(std::string_view data) {
  if (data.empty()) return;
  if (fd_ < 0 && !open()) {
    drop(data, errno);
    return;
  }
  if (max_bytes_ > 0 && size_ > 0 && size_ + static_cast<int64_t>(data.size()) > max_bytes_) {
    // Rotate. If the rename fails (read-only disk) keep appending to the old file.
    if (::rename(path_.c_str(), (path_ + ".1").c_str()) == 0) {
      ++rotations_;
      if (!open()) {
        drop(data, errno);
        return;
      }
    }
  }
  if (dropped_bytes_ > 0) {
    char note[256];
    std::snprintf(note, sizeof note,
                  "knap-logdrain: dropped %llu lines (%llu bytes) while writing failed: %s\n",
                  static_cast<unsigned long long>(dropped_lines_),
                  static_cast<unsigned long long>(dropped_bytes_), std::strerror(last_errno_));
    if (!writeAll(note)) {
      drop(data, errno);
      return;
    }
    dropped_lines_ = dropped_bytes_ = 0;
  }
  if (!writeAll(data)) drop(data, errno);
}

}  // namespace knap::logdrain
