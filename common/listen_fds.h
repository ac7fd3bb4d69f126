// Socket activation: the listening sockets a service manager (systemd's
// `.socket` units with FileDescriptorName=, or any parent that keeps the
// socket across daemon restarts) hands to this process.
//
// The protocol is systemd's (sd_listen_fds(3)): LISTEN_PID is the pid the
// fds are meant for, LISTEN_FDS how many there are (they are fds 3, 4, ...),
// LISTEN_FDNAMES their names joined with ':'. takeListenFds() reads them
// exactly as sd_listen_fds_with_names(unset_environment=1) does:
//   - LISTEN_PID unset, or another process's pid: no fds (not an error);
//   - LISTEN_FDS unset: no fds; not a decimal number, or < 1: error;
//   - LISTEN_FDNAMES unset: every fd is named "unknown"; set: exactly one
//     name per fd (empty names kept), else error;
//   - every fd gets FD_CLOEXEC (an fd that is not open is an error);
//   - the three variables are removed from the environment in every case,
//     so children (pods' shims, helpers) never see them.
// Stricter than libsystemd on hostile values: numbers are plain decimal
// digits (no sign, no spaces, no overflow), at most kMaxListenFds fds, and a
// name must be a valid systemd fd name (1..255 printable ASCII, no ':').
//
// Thread safety: takeListenFds() changes the environment: call it once, at
// start, before any thread is started. parseListenFds() is pure.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace knap {

inline constexpr int kListenFdsStart = 3;  // SD_LISTEN_FDS_START
inline constexpr int kMaxListenFds = 1024;

struct ListenFd {
  int fd = -1;
  std::string name;  // FileDescriptorName= of the socket unit; "unknown" when unnamed
  bool operator==(const ListenFd&) const = default;
};

// Parses the three variables' values (nullptr = unset) for process `self`.
// Does not touch the fds or the environment.
StatusOr<std::vector<ListenFd>> parseListenFds(const char* listen_pid, const char* listen_fds,
                                               const char* listen_fdnames, pid_t self);

// Reads the variables of this process, marks the fds close-on-exec and
// unsets the variables (see above). The caller owns the fds.
StatusOr<std::vector<ListenFd>> takeListenFds();

// Checks that `fd` is a listening TCP socket (IPv4 or IPv6); its address
// family (AF_INET, AF_INET6) in *family. The error says what `fd` is instead.
Status checkListeningTcp(int fd, int* family);

}  // namespace knap
