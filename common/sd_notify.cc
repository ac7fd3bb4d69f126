#include "common/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace knap::sd {
namespace {

// A STATUS= value is one line: a newline would start a new assignment.
std::string oneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

StatusOr<uint64_t> parseUnsigned(const char* name, const char* text) {
  if (text[0] < '0' || text[0] > '9')
    return invalidArgument(std::string(name) + "=\"" + text + "\" is not a number");
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (*end != '\0' || errno == ERANGE)
    return invalidArgument(std::string(name) + "=\"" + text + "\" is not a number");
  return static_cast<uint64_t>(v);
}

}  // namespace

StatusOr<std::optional<std::chrono::microseconds>> parseWatchdog(const char* usec, const char* pid,
                                                                 pid_t self) {
  using Result = std::optional<std::chrono::microseconds>;
  if (usec == nullptr || usec[0] == '\0') return Result();
  auto us = parseUnsigned("WATCHDOG_USEC", usec);
  if (!us.isOk()) return us.status();
  if (*us == 0) return Result();
  // systemd caps timeouts far below this; a larger value is a corrupt variable.
  if (*us > uint64_t{1} << 50)
    return invalidArgument(std::string("WATCHDOG_USEC=\"") + usec + "\" is out of range");
  if (pid != nullptr && pid[0] != '\0') {
    auto p = parseUnsigned("WATCHDOG_PID", pid);
    if (!p.isOk()) return p.status();
    if (*p != static_cast<uint64_t>(self)) return Result();  // meant for another process
  }
  return Result(std::chrono::microseconds(std::max<uint64_t>(*us / 2, 1)));
}

Notifier::Notifier(std::string socket, std::optional<std::chrono::microseconds> watchdog_interval)
    : socket_(std::move(socket)), watchdog_interval_(watchdog_interval) {}

Notifier Notifier::fromEnvironment() {
  const char* sock = std::getenv("NOTIFY_SOCKET");
  std::string socket = sock ? sock : "";
  auto wd = parseWatchdog(std::getenv("WATCHDOG_USEC"), std::getenv("WATCHDOG_PID"), ::getpid());
  std::optional<std::chrono::microseconds> interval;
  if (wd.isOk())
    interval = *wd;
  else
    LOG(WARNING) << "systemd watchdog left off: " << wd.status().message();
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");
  return Notifier(std::move(socket), interval);
}

Status Notifier::send(const std::string& state) const {
  if (socket_.empty()) return Status::ok();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  socklen_t len = 0;
  if (socket_[0] == '@') {
    // Abstract namespace: a leading NUL, and the length counts exactly the name.
    if (socket_.size() > sizeof(addr.sun_path))
      return invalidArgument("NOTIFY_SOCKET " + socket_ + " is too long");
    std::memcpy(addr.sun_path + 1, socket_.data() + 1, socket_.size() - 1);
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_.size());
  } else if (socket_[0] == '/') {
    if (socket_.size() >= sizeof(addr.sun_path))
      return invalidArgument("NOTIFY_SOCKET " + socket_ + " is too long");
    std::memcpy(addr.sun_path, socket_.data(), socket_.size());
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_.size() + 1);
  } else {
    return invalidArgument("NOTIFY_SOCKET \"" + socket_ + "\" is neither an absolute path nor @abstract");
  }
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return unavailable(std::string("sd_notify: socket: ") + std::strerror(errno));
  ssize_t n;
  do {
    n = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&addr), len);
  } while (n < 0 && errno == EINTR);
  int err = errno;
  ::close(fd);
  if (n < 0) return unavailable("sd_notify to " + socket_ + ": " + std::strerror(err));
  if (static_cast<size_t>(n) != state.size()) return unavailable("sd_notify to " + socket_ + ": short write");
  return Status::ok();
}

Status Notifier::ready(const std::string& status) const {
  return send("READY=1\nSTATUS=" + oneLine(status) + "\nMAINPID=" + std::to_string(::getpid()));
}

Status Notifier::status(const std::string& status) const {
  return send("STATUS=" + oneLine(status));
}

Status Notifier::watchdog() const {
  if (!watchdog_interval_) return Status::ok();
  return send("WATCHDOG=1");
}

Status Notifier::stopping(const std::string& status) const {
  return send("STOPPING=1\nSTATUS=" + oneLine(status));
}

}  // namespace knap::sd
