// Readiness and liveness probes of one revision pod (knap has no queue-proxy:
// the runtime probes the user container itself, the way Knative's queue-proxy
// and the kubelet do; KNATIVE-CONTRACT.md §1.5, §3.5, §5.10).
//
// Three layers:
//   parseProbeSpec  Knative probe JSON -> ProbeSpec (defaults applied)
//   probeOnce       one real attempt (TCP connect, HTTP/1.1 GET, or exec via a
//                   hook the pod runner provides); blocks up to the attempt timeout
//   ProbeState      pure state machine: thresholds, initial delay, schedule;
//                   driven by times passed in, so tests need no sleeping
//   Prober          ties them together for one pod (readiness + liveness)
//
// Schedule (ProbeState), periodSeconds > 0 (kubelet semantics): first attempt at
// start + initialDelaySeconds, then every periodSeconds (measured from attempt
// start); `successThreshold` consecutive successes make it healthy,
// `failureThreshold` consecutive failures unhealthy. Readiness starts
// unhealthy, liveness starts healthy.
// periodSeconds == 0 (readiness only; Knative's "aggressive" mode):
//   | state     | attempt result | next attempt    | becomes            |
//   | not ready | success        | +1 s (recheck)  | ready              |
//   | not ready | failure        | +50 ms          | not ready          |
//   | ready     | success        | +1 s            | ready              |
//   | ready     | failure        | +50 ms          | ready until failing|
//   |           |                |                 | for 10 s, then not |
// each attempt with a 100 ms timeout. Exec probes (a process started in the
// container, ~30-60 ms each) keep their timeoutSeconds (default 1 s) and retry
// a failure after 200 ms instead of 50 ms.
// A readiness exec probe also needs the serving port to accept a TCP
// connection (Knative keeps the queue-proxy's TCP probe next to a kubelet
// exec probe), so a "ready" pod can take requests.
//
// Thread safety: probeOnce and parseProbeSpec are reentrant. ProbeState and
// Prober are not thread-safe: one thread drives each instance.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace knap::runtime {

enum class ProbeKind { kReadiness, kLiveness };
enum class ProbeHandler { kTcpSocket, kHttpGet, kExec };

struct ProbeSpec {
  ProbeHandler handler = ProbeHandler::kTcpSocket;
  int port = 0;            // 0: the serving port (the default_port argument)
  std::string path = "/";  // httpGet
  std::string host;        // httpGet: Host header override; the pod IP is always dialled
  std::vector<std::pair<std::string, std::string>> headers;  // httpGet httpHeaders
  std::vector<std::string> command;                          // exec
  bool exec_needs_port = false;  // exec: success also needs a TCP connect to the port (readiness)
  int period_seconds = 0;        // 0: aggressive (readiness only)
  int timeout_seconds = 1;
  int success_threshold = 1;
  int failure_threshold = 3;
  int initial_delay_seconds = 0;
};

// Knative's default readiness probe: tcpSocket on the serving port, aggressive.
ProbeSpec defaultReadinessProbe();

// Parses a Kubernetes/Knative probe object. Applies the defaults: readiness
// periodSeconds 0 (aggressive); liveness periodSeconds 10; timeoutSeconds 1,
// successThreshold 1, failureThreshold 3. A named port means the serving port.
// kInvalidArgument for malformed input (field path in the message);
// kUnsupported for grpc probes and scheme HTTPS.
StatusOr<ProbeSpec> parseProbeSpec(const nlohmann::json& probe, ProbeKind kind);

struct ProbeResult {
  bool success = false;
  std::string message;  // why it failed, or "HTTP 204" / "connected" on success
};

// What a command run in the container did.
struct ExecOutcome {
  int exit_code = 0;   // 128+signal when killed
  std::string output;  // the start of its stdout+stderr (for failure messages)
};
// Runs a command in the container, killing it after `timeout` (the pod
// driver implements it with containerd's Tasks.Exec). kDeadlineExceeded
// (timed out) and other errors count as probe failures.
using ExecInContainer =
    std::function<StatusOr<ExecOutcome>(const std::vector<std::string>& command, Duration timeout)>;

// The time one attempt may take: 100 ms in aggressive mode, else timeoutSeconds.
Duration attemptTimeout(const ProbeSpec& spec);

// One attempt against ip (IPv4 or IPv6 literal) and the spec's port, or
// default_port when the spec has none. HTTP: "GET <path> HTTP/1.1" with
// "User-Agent: kube-probe/1.30" and the spec's headers (which may override
// Host, User-Agent, Accept); success = status 200-399. Never throws; a failure
// is a result, not an error.
ProbeResult probeOnce(const ProbeSpec& spec, const std::string& ip, int default_port, Duration timeout,
                      const TimeSource& time, const ExecInContainer& exec = nullptr);

class ProbeState {
 public:
  ProbeState(ProbeSpec spec, ProbeKind kind, MonoTime container_started);

  // When the next attempt is due (may be in the past: probe now).
  MonoTime nextProbeAt() const { return next_; }
  Duration attemptTimeout() const { return runtime::attemptTimeout(spec_); }
  // Feeds one attempt that started at `started` and ended at `now`.
  void record(bool success, MonoTime started, MonoTime now);
  // Readiness: ready. Liveness: alive (false means restart the container).
  bool healthy() const { return healthy_; }
  int consecutiveSuccesses() const { return successes_; }
  int consecutiveFailures() const { return failures_; }
  const ProbeSpec& spec() const { return spec_; }

  static constexpr Duration kAggressiveInterval = std::chrono::milliseconds(50);
  static constexpr Duration kAggressiveExecInterval = std::chrono::milliseconds(200);
  static constexpr Duration kAggressiveAttemptTimeout = std::chrono::milliseconds(100);
  static constexpr Duration kAggressiveRecheck = std::chrono::seconds(1);
  static constexpr Duration kAggressiveFailureWindow = std::chrono::seconds(10);

 private:
  ProbeSpec spec_;
  ProbeKind kind_;
  bool healthy_;
  int successes_ = 0;
  int failures_ = 0;
  MonoTime next_;
  std::optional<MonoTime> failing_since_;  // aggressive mode, while ready
};

// Probes one pod. Owns its ProbeStates; the caller decides when to call
// runDue() (at nextDue(), from a timer or a loop).
class Prober {
 public:
  Prober(const TimeSource& time, std::string ip, int port, ProbeSpec readiness,
         std::optional<ProbeSpec> liveness = std::nullopt, ExecInContainer exec = nullptr);

  // Runs each probe whose time has come (blocking up to its attempt timeout)
  // and returns the earliest next due time.
  MonoTime runDue();
  MonoTime nextDue() const;
  bool ready() const { return readiness_.healthy(); }
  // False once liveness failed failureThreshold times: restart the container.
  bool live() const { return !liveness_ || liveness_->healthy(); }
  const ProbeResult& lastReadinessResult() const { return last_readiness_; }
  const ProbeResult& lastLivenessResult() const { return last_liveness_; }

  // Probes until ready (OK) or the deadline passes (kDeadlineExceeded with the
  // last failure) or liveness fails (kUnavailable). `wait` is called with the
  // time until the next attempt (the caller's sleep or timer).
  Status waitUntilReady(MonoTime deadline, const std::function<void(Duration)>& wait);

 private:
  const TimeSource& time_;
  std::string ip_;
  int port_;
  ExecInContainer exec_;
  ProbeState readiness_;
  std::optional<ProbeState> liveness_;
  ProbeResult last_readiness_;
  ProbeResult last_liveness_;
};

}  // namespace knap::runtime
