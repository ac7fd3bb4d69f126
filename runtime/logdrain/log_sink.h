// LogSink: appends a pod's output stream to <path>, rotating by size, and
// never lets a full or read-only disk stop the reader: a write that fails
// with ENOSPC, EDQUOT, EROFS or EIO drops that data and counts its lines and
// bytes; the next write that succeeds is preceded by one line saying how much
// was dropped and why. Used by knap-logdrain (runtime/logdrain/main.cc), the
// logger containerd's shim runs for every pod (stdout URI binary://...), so
// the pod's pipes are read whether or not the disk takes the data and
// whether or not knapd is running.
//
// Rotation: when a write would take the file past max_bytes, <path> is
// renamed to <path>.1 (replacing it) and a new <path> is started, so at most
// about 2 * max_bytes are kept per stream. `knap logs` reads <path>.1 then
// <path>.
//
// Thread safety: none (one LogSink per stream, one thread).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace knap::logdrain {

class LogSink {
 public:
  // How bytes reach the file: ::write by default; tests inject failures.
  using WriteFn = std::function<long(int fd, const char* data, size_t n)>;

  LogSink(std::string path, int64_t max_bytes, WriteFn write = nullptr);
  ~LogSink();
  LogSink(const LogSink&) = delete;
  LogSink& operator=(const LogSink&) = delete;

  void append(std::string_view data);

  uint64_t droppedLines() const { return dropped_lines_total_; }
  uint64_t droppedBytes() const { return dropped_bytes_total_; }
  uint64_t rotations() const { return rotations_; }

 private:
  bool open();  // (re)opens path_; false when it cannot
  // Writes all of data; false (errno set) on a failure that drops it.
  bool writeAll(std::string_view data);
  void drop(std::string_view data, int err);

  std::string path_;
  int64_t max_bytes_;
  WriteFn write_;
  int fd_ = -1;
  int64_t size_ = 0;
  uint64_t dropped_lines_ = 0, dropped_bytes_ = 0;  // since the last successful write
  int last_errno_ = 0;
  uint64_t dropped_lines_total_ = 0, dropped_bytes_total_ = 0, rotations_ = 0;
};

}  // namespace knap::logdrain
