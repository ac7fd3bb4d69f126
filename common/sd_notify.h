// The systemd service notification protocol (sd_notify(3)) without libsystemd:
// READY=1, STATUS=..., WATCHDOG=1, STOPPING=1 and MAINPID= sent as one
// datagram each to the unix socket named by $NOTIFY_SOCKET (a path, or an
// abstract socket written "@name").
//
// Use: `auto n = sd::Notifier::fromEnvironment();` once at the top of main(),
// before any thread starts (it unsets NOTIFY_SOCKET, WATCHDOG_USEC and
// WATCHDOG_PID so that processes knapd starts do not talk to systemd in its
// name). Without $NOTIFY_SOCKET every call is a no-op returning OK, so knapd
// behaves the same when it is not run by systemd.
//
// Thread safety: const methods may be called from any thread; each send opens
// and closes its own socket. Failures are Status values naming the socket and
// errno; a failed notification never aborts the caller.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

#include "common/status.h"

namespace knap::sd {

// Parses WATCHDOG_USEC / WATCHDOG_PID as systemd sets them. Returns the
// interval at which to send WATCHDOG=1 (half of WATCHDOG_USEC, as sd_watchdog_enabled(3)
// advises), nullopt when no watchdog is wanted (usec unset or 0, or pid names another
// process), or an error naming the bad variable.
StatusOr<std::optional<std::chrono::microseconds>> parseWatchdog(const char* usec, const char* pid,
                                                                 pid_t self);

class Notifier {
 public:
  // No socket: every call is a no-op.
  Notifier() = default;
  // `socket` as in $NOTIFY_SOCKET ("" = disabled); `watchdog_interval` from parseWatchdog().
  Notifier(std::string socket, std::optional<std::chrono::microseconds> watchdog_interval);

  // Reads (and unsets) NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID. A malformed
  // WATCHDOG_* is logged and the watchdog left off (systemd then restarts us on its
  // timeout, which says more than refusing to start).
  static Notifier fromEnvironment();

  bool enabled() const { return !socket_.empty(); }
  const std::string& socket() const { return socket_; }
  // How often to call watchdog(); nullopt when systemd does not watch us.
  std::optional<std::chrono::microseconds> watchdogInterval() const { return watchdog_interval_; }

  // Sends `state`: newline-separated KEY=VALUE assignments, one datagram.
  Status send(const std::string& state) const;
  // READY=1 with our MAINPID and a STATUS line.
  Status ready(const std::string& status) const;
  Status status(const std::string& status) const;
  Status watchdog() const;
  Status stopping(const std::string& status) const;

 private:
  std::string socket_;
  std::optional<std::chrono::microseconds> watchdog_interval_;
};

}  // namespace knap::sd
