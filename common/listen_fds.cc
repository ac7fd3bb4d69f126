#include "common/listen_fds.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace knap {
namespace {

// Plain decimal digits, no sign or spaces, at most 10 of them, value <= INT_MAX.
bool parseCount(const char* s, long long* out) {
  const size_t n = std::strlen(s);
  if (n == 0 || n > 10) return false;
  long long v = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  if (v > 0x7fffffffLL) return false;
  *out = v;
  return true;
}

std::string quoted(const char* s) {
  std::string v(s);
  if (v.size() > 64) v = v.substr(0, 64) + "...";
  std::string out = "\"";
  for (char c : v) {
    if (c >= ' ' && c < 127) {
      out += c;
    } else {
      out += '?';
    }
  }
  return out + "\"";
}

// systemd's fdname_is_valid(): 1..255 printable ASCII characters, no ':'.
bool validName(const std::string& n) {
  if (n.empty() || n.size() > 255) return false;
  for (char c : n) {
    if (c < ' ' || c >= 127 || c == ':') return false;
  }
  return true;
}

}  // namespace

StatusOr<std::vector<ListenFd>> parseListenFds(const char* listen_pid, const char* listen_fds,
                                               const char* listen_fdnames, pid_t self) {
  std::vector<ListenFd> out;
  if (listen_pid == nullptr) return out;
  long long pid = 0;
  if (!parseCount(listen_pid, &pid) || pid < 1) {
    return invalidArgument("LISTEN_PID must be a process id, got " + quoted(listen_pid));
  }
  if (pid != self) return out;  // meant for another process (our parent, say)
  if (listen_fds == nullptr) return out;
  long long n = 0;
  if (!parseCount(listen_fds, &n) || n < 1) {
    return invalidArgument("LISTEN_FDS must be a number of file descriptors >= 1, got " + quoted(listen_fds));
  }
  if (n > kMaxListenFds) {
    return invalidArgument("LISTEN_FDS=" + std::to_string(n) + " is more than the " +
                           std::to_string(kMaxListenFds) + " sockets knapd accepts");
  }
  std::vector<std::string> names;
  if (listen_fdnames != nullptr) {
    // Split on ':' without coalescing separators (as systemd does).
    std::string all(listen_fdnames);
    size_t from = 0;
    for (;;) {
      const size_t colon = all.find(':', from);
      names.push_back(all.substr(from, colon == std::string::npos ? std::string::npos : colon - from));
      if (colon == std::string::npos) break;
      from = colon + 1;
      if (names.size() > static_cast<size_t>(kMaxListenFds)) break;
    }
    if (names.size() != static_cast<size_t>(n)) {
      return invalidArgument("LISTEN_FDNAMES names " + std::to_string(names.size()) +
                             " sockets but LISTEN_FDS is " + std::to_string(n) + " (" +
                             quoted(listen_fdnames) + ")");
    }
    for (const std::string& name : names) {
      if (!name.empty() && !validName(name)) {
        return invalidArgument("LISTEN_FDNAMES has an invalid name " + quoted(name.c_str()) +
                               " (1..255 printable ASCII characters, no ':')");
      }
    }
  }
  for (int i = 0; i < static_cast<int>(n); ++i) {
    out.push_back(ListenFd{kListenFdsStart + i, names.empty() ? "unknown" : names[static_cast<size_t>(i)]});
  }
  return out;
}

StatusOr<std::vector<ListenFd>> takeListenFds() {
  auto parsed = parseListenFds(std::getenv("LISTEN_PID"), std::getenv("LISTEN_FDS"),
                               std::getenv("LISTEN_FDNAMES"), ::getpid());
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  if (!parsed.isOk()) return parsed.status();
  for (const ListenFd& f : *parsed) {
    const int flags = ::fcntl(f.fd, F_GETFD);
    if (flags < 0 || (!(flags & FD_CLOEXEC) && ::fcntl(f.fd, F_SETFD, flags | FD_CLOEXEC) < 0)) {
      return invalidArgument("LISTEN_FDS: file descriptor " + std::to_string(f.fd) + " (\"" + f.name +
                             "\") is not open: " + std::strerror(errno));
    }
  }
  return parsed;
}

Status checkListeningTcp(int fd, int* family) {
  const std::string what = "file descriptor " + std::to_string(fd);
  int type = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    return invalidArgument(what + " is not a socket: " + std::strerror(errno));
  }
  if (type != SOCK_STREAM) return invalidArgument(what + " is not a stream socket");
  int listening = 0;
  len = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) {
    return invalidArgument(what + " is a socket that is not listening");
  }
  sockaddr_storage ss{};
  len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
      (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)) {
    return invalidArgument(what + " is not a TCP (IPv4/IPv6) socket");
  }
  *family = ss.ss_family;
  return Status::ok();
}

}  // namespace knap
