#include "runtime/pod/probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/string_util.h"

namespace knap::runtime {
namespace {

using nlohmann::json;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr const char* kUserAgent = "kube-probe/1.30";

std::string hostPort(const std::string& ip, int port) {
  if (ip.find(':') != std::string::npos) return "[" + ip + "]:" + std::to_string(port);
  return ip + ":" + std::to_string(port);
}

int remainingMs(MonoTime deadline, const TimeSource& time) {
  auto left = duration_cast<milliseconds>(deadline - time.monotonic()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 60000));
}

class Socket {
 public:
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd_ = -1;
};

// Non-blocking connect bounded by `deadline`. Returns "" on success, else why not.
std::string connectTo(Socket& s, const std::string& ip, int port, MonoTime deadline, const TimeSource& time) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  if (ip.find(':') != std::string::npos) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET6, ip.c_str(), &a6->sin6_addr) != 1) return "bad address " + ip;
    len = sizeof(sockaddr_in6);
    family = AF_INET6;
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, ip.c_str(), &a4->sin_addr) != 1) return "bad address " + ip;
    len = sizeof(sockaddr_in);
  }
  s.fd_ = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s.fd_ < 0) return std::string("socket: ") + std::strerror(errno);
  int one = 1;
  ::setsockopt(s.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(s.fd_, reinterpret_cast<sockaddr*>(&ss), len) == 0) return "";
  if (errno != EINPROGRESS) return std::strerror(errno);
  while (true) {
    pollfd p{s.fd_, POLLOUT, 0};
    int ms = remainingMs(deadline, time);
    if (ms == 0) return "timeout while connecting";
    int r = ::poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::string("poll: ") + std::strerror(errno);
    if (r == 0) continue;  // re-check the deadline
    int err = 0;
    socklen_t el = sizeof err;
    ::getsockopt(s.fd_, SOL_SOCKET, SO_ERROR, &err, &el);
    return err == 0 ? "" : std::strerror(err);
  }
}

ProbeResult httpProbe(const ProbeSpec& spec, const std::string& ip, int port, MonoTime deadline,
                      const TimeSource& time) {
  std::string path = spec.path.empty() ? "/" : spec.path;
  if (path[0] != '/') path = "/" + path;
  const std::string url = "http://" + hostPort(ip, port) + path;
  Socket s;
  if (std::string err = connectTo(s, ip, port, deadline, time); !err.empty()) {
    return {false, "GET " + url + ": " + err};
  }
  // Default headers first; the user's httpHeaders replace same-named ones.
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Host", spec.host.empty() ? hostPort(ip, port) : spec.host},
      {"User-Agent", kUserAgent},
      {"Accept", "*/*"}};
  for (const auto& [k, v] : spec.headers) {
    auto it = std::find_if(headers.begin(), headers.end(),
                           [&](const auto& h) { return asciiLower(h.first) == asciiLower(k); });
    if (it != headers.end())
      it->second = v;
    else
      headers.emplace_back(k, v);
  }
  std::string req = "GET " + path + " HTTP/1.1\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  req += "Connection: close\r\n\r\n";

  size_t sent = 0;
  while (sent < req.size()) {
    ssize_t w = ::send(s.fd_, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (w > 0) {
      sent += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR) {
      return {false, "GET " + url + ": send: " + std::strerror(errno)};
    }
    pollfd p{s.fd_, POLLOUT, 0};
    int ms = remainingMs(deadline, time);
    if (ms == 0) return {false, "GET " + url + ": timeout while sending"};
    ::poll(&p, 1, ms);
  }
  // Read up to the end of the headers: the status line decides.
  std::string resp;
  char buf[4096];
  while (resp.find("\r\n\r\n") == std::string::npos && resp.size() < 65536) {
    ssize_t r = ::recv(s.fd_, buf, sizeof buf, 0);
    if (r > 0) {
      resp.append(buf, static_cast<size_t>(r));
      continue;
    }
    if (r == 0) break;
    if (errno != EAGAIN && errno != EINTR) {
      if (resp.empty()) return {false, "GET " + url + ": recv: " + std::strerror(errno)};
      break;
    }
    pollfd p{s.fd_, POLLIN, 0};
    int ms = remainingMs(deadline, time);
    if (ms == 0) {
      return {false, "GET " + url + ": timeout waiting for the response"};
    }
    ::poll(&p, 1, ms);
  }
  // "HTTP/1.1 204 No Content"
  if (resp.size() < 12 || resp.compare(0, 7, "HTTP/1.") != 0 || resp[8] != ' ' ||
      !std::isdigit(static_cast<unsigned char>(resp[9])) ||
      !std::isdigit(static_cast<unsigned char>(resp[10])) ||
      !std::isdigit(static_cast<unsigned char>(resp[11]))) {
    std::string head = resp.substr(0, std::min<size_t>(resp.size(), 40));
    return {false, "GET " + url + ": not an HTTP response" +
                       (head.empty() ? " (connection closed)" : ": \"" + head + "\"")};
  }
  const int status = std::stoi(resp.substr(9, 3));
  const bool ok = status >= 200 && status < 400;
  return {ok, "GET " + url + ": HTTP " + std::to_string(status)};
}

StatusOr<int> intField(const json& obj, const char* key, const std::string& path, int dflt) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_number_integer()) return invalidArgument(path + "." + key + ": must be an integer");
  const int64_t v = it->get<int64_t>();
  if (v < 0 || v > 1000000) return invalidArgument(path + "." + key + ": must be in [0, 1000000]");
  return static_cast<int>(v);
}

StatusOr<int> portField(const json& handler, const std::string& path) {
  auto it = handler.find("port");
  if (it == handler.end() || it->is_null()) return 0;
  if (it->is_string()) return 0;  // a named port can only be the serving port (admission)
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 65535) {
    return invalidArgument(path + ".port: must be a port number or the serving port's name");
  }
  return static_cast<int>(it->get<int64_t>());
}

StatusOr<ProbeSpec> parse(const json& probe, ProbeKind kind) {
  const std::string path = kind == ProbeKind::kReadiness ? "readinessProbe" : "livenessProbe";
  if (!probe.is_object()) return invalidArgument(path + ": must be an object");
  ProbeSpec spec;
  int handlers = 0;
  if (probe.contains("grpc") && !probe["grpc"].is_null()) {
    return Status(Code::kUnsupported, path + ".grpc: gRPC probes are not supported by knap yet");
  }
  if (auto it = probe.find("httpGet"); it != probe.end() && !it->is_null()) {
    ++handlers;
    const json& h = *it;
    if (!h.is_object()) return invalidArgument(path + ".httpGet: must be an object");
    spec.handler = ProbeHandler::kHttpGet;
    KNAP_ASSIGN_OR_RETURN(spec.port, portField(h, path + ".httpGet"));
    if (h.contains("path") && h["path"].is_string()) spec.path = h["path"].get<std::string>();
    if (h.contains("host") && h["host"].is_string()) spec.host = h["host"].get<std::string>();
    if (h.contains("scheme") && h["scheme"].is_string() && h["scheme"] != "HTTP" && h["scheme"] != "") {
      return Status(Code::kUnsupported, path + ".httpGet.scheme: only HTTP is supported by knap");
    }
    if (h.contains("httpHeaders") && !h["httpHeaders"].is_null()) {
      if (!h["httpHeaders"].is_array()) return invalidArgument(path + ".httpGet.httpHeaders: must be a list");
      for (size_t i = 0; i < h["httpHeaders"].size(); ++i) {
        const json& hh = h["httpHeaders"][i];
        const std::string hp = path + ".httpGet.httpHeaders[" + std::to_string(i) + "]";
        if (!hh.is_object() || !hh.contains("name") || !hh["name"].is_string() ||
            hh["name"].get<std::string>().empty()) {
          return invalidArgument(hp + ".name: required");
        }
        std::string value =
            hh.contains("value") && hh["value"].is_string() ? hh["value"].get<std::string>() : "";
        const std::string name = hh["name"].get<std::string>();
        if (name.find_first_of(":\r\n ") != std::string::npos ||
            value.find_first_of("\r\n") != std::string::npos) {
          return invalidArgument(hp + ": header name or value contains a forbidden character");
        }
        spec.headers.emplace_back(name, value);
      }
    }
    if (spec.path.find_first_of("\r\n ") != std::string::npos) {
      return invalidArgument(path + ".httpGet.path: must not contain spaces or line breaks");
    }
  }
  if (auto it = probe.find("tcpSocket"); it != probe.end() && !it->is_null()) {
    ++handlers;
    if (!it->is_object()) return invalidArgument(path + ".tcpSocket: must be an object");
    spec.handler = ProbeHandler::kTcpSocket;
    KNAP_ASSIGN_OR_RETURN(spec.port, portField(*it, path + ".tcpSocket"));
  }
  if (auto it = probe.find("exec"); it != probe.end() && !it->is_null()) {
    ++handlers;
    spec.handler = ProbeHandler::kExec;
    const json* cmd = it->is_object() && it->contains("command") ? &(*it)["command"] : nullptr;
    if (cmd == nullptr || !cmd->is_array() || cmd->empty()) {
      return invalidArgument(path + ".exec.command: required");
    }
    for (const auto& a : *cmd) {
      if (!a.is_string()) return invalidArgument(path + ".exec.command: must be a list of strings");
      spec.command.push_back(a.get<std::string>());
    }
    spec.exec_needs_port = kind == ProbeKind::kReadiness;
  }
  if (handlers > 1) return invalidArgument(path + ": expected exactly one of httpGet, tcpSocket, exec");
  // handlers == 0: Knative's readiness default, tcpSocket on the serving port.
  const int default_period = kind == ProbeKind::kReadiness ? 0 : 10;
  KNAP_ASSIGN_OR_RETURN(spec.period_seconds, intField(probe, "periodSeconds", path, default_period));
  if (kind == ProbeKind::kLiveness && spec.period_seconds == 0) spec.period_seconds = 10;
  KNAP_ASSIGN_OR_RETURN(spec.initial_delay_seconds, intField(probe, "initialDelaySeconds", path, 0));
  KNAP_ASSIGN_OR_RETURN(spec.timeout_seconds, intField(probe, "timeoutSeconds", path, 1));
  KNAP_ASSIGN_OR_RETURN(spec.success_threshold, intField(probe, "successThreshold", path, 1));
  KNAP_ASSIGN_OR_RETURN(spec.failure_threshold, intField(probe, "failureThreshold", path, 3));
  if (spec.timeout_seconds == 0) spec.timeout_seconds = 1;
  if (spec.success_threshold == 0) spec.success_threshold = 1;
  if (spec.failure_threshold == 0) spec.failure_threshold = 3;
  if (kind == ProbeKind::kLiveness) spec.success_threshold = 1;  // as Kubernetes requires
  return spec;
}

}  // namespace

ProbeSpec defaultReadinessProbe() {
  return ProbeSpec{};
}

StatusOr<ProbeSpec> parseProbeSpec(const nlohmann::json& probe, ProbeKind kind) {
  try {
    return parse(probe, kind);
  } catch (const nlohmann::json::exception& e) {
    return invalidArgument(std::string("probe: ") + e.what());
  }
}

Duration attemptTimeout(const ProbeSpec& spec) {
  if (spec.period_seconds == 0 && spec.handler != ProbeHandler::kExec)
    return ProbeState::kAggressiveAttemptTimeout;
  return std::chrono::seconds(std::max(1, spec.timeout_seconds));
}

ProbeResult probeOnce(const ProbeSpec& spec, const std::string& ip, int default_port, Duration timeout,
                      const TimeSource& time, const ExecInContainer& exec) {
  const int port = spec.port != 0 ? spec.port : default_port;
  const MonoTime deadline = time.monotonic() + timeout;
  switch (spec.handler) {
    case ProbeHandler::kTcpSocket: {
      Socket s;
      std::string err = connectTo(s, ip, port, deadline, time);
      if (!err.empty()) return {false, "tcp " + hostPort(ip, port) + ": " + err};
      return {true, "tcp " + hostPort(ip, port) + ": connected"};
    }
    case ProbeHandler::kHttpGet:
      return httpProbe(spec, ip, port, deadline, time);
    case ProbeHandler::kExec: {
      const std::string what = "exec " + spec.command[0];
      if (!exec) return {false, what + ": no exec hook (the pod runner must provide one)"};
      StatusOr<ExecOutcome> r = exec(spec.command, timeout);
      if (!r.isOk()) {
        if (r.status().code() == Code::kDeadlineExceeded) {
          return {false,
                  what + ": timed out after " +
                      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
                      " ms"};
        }
        return {false, what + ": " + r.status().toString()};
      }
      if (r->exit_code != 0) {
        std::string out = r->output;
        while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
        if (out.size() > 256) out = out.substr(0, 256) + "...";
        return {false,
                what + ": exit code " + std::to_string(r->exit_code) + (out.empty() ? "" : ": " + out)};
      }
      if (spec.exec_needs_port) {
        Socket s;
        std::string err = connectTo(
            s, ip, port, std::max(deadline, time.monotonic() + ProbeState::kAggressiveAttemptTimeout), time);
        if (!err.empty()) return {false, what + ": exit code 0, but tcp " + hostPort(ip, port) + ": " + err};
      }
      return {true, what + ": exit code 0"};
    }
  }
  return {false, "unknown probe handler"};
}

// --- ProbeState ------------------------------------------------------------------

ProbeState::ProbeState(ProbeSpec spec, ProbeKind kind, MonoTime container_started)
    : spec_(std::move(spec)),
      kind_(kind),
      healthy_(kind == ProbeKind::kLiveness),
      next_(container_started + std::chrono::seconds(spec_.initial_delay_seconds)) {
  if (kind_ == ProbeKind::kLiveness && spec_.period_seconds == 0) spec_.period_seconds = 10;
}

void ProbeState::record(bool success, MonoTime started, MonoTime now) {
  if (success) {
    ++successes_;
    failures_ = 0;
  } else {
    ++failures_;
    successes_ = 0;
  }
  if (spec_.period_seconds > 0) {
    if (successes_ >= spec_.success_threshold) healthy_ = true;
    if (failures_ >= spec_.failure_threshold) healthy_ = false;
    next_ = std::max(started + std::chrono::seconds(spec_.period_seconds), now);
    return;
  }
  // Aggressive mode (see the table in probe.h).
  if (success) {
    failing_since_.reset();
    if (successes_ >= spec_.success_threshold) healthy_ = true;
    next_ = now + (healthy_                               ? kAggressiveRecheck
                   : spec_.handler == ProbeHandler::kExec ? kAggressiveExecInterval
                                                          : kAggressiveInterval);
    return;
  }
  if (healthy_) {
    if (!failing_since_) failing_since_ = started;
    if (now - *failing_since_ >= kAggressiveFailureWindow) {
      healthy_ = false;
      failing_since_.reset();
    }
  }
  next_ = now + (spec_.handler == ProbeHandler::kExec ? kAggressiveExecInterval : kAggressiveInterval);
}

// --- Prober ------------------------------------------------------------------------

Prober::Prober(const TimeSource& time, std::string ip, int port, ProbeSpec readiness,
               std::optional<ProbeSpec> liveness, ExecInContainer exec)
    : time_(time),
      ip_(std::move(ip)),
      port_(port),
      exec_(std::move(exec)),
      readiness_(std::move(readiness), ProbeKind::kReadiness, time.monotonic()) {
  if (liveness) liveness_.emplace(std::move(*liveness), ProbeKind::kLiveness, time.monotonic());
}

MonoTime Prober::nextDue() const {
  MonoTime t = readiness_.nextProbeAt();
  if (liveness_) t = std::min(t, liveness_->nextProbeAt());
  return t;
}

MonoTime Prober::runDue() {
  auto run = [&](ProbeState& state, ProbeResult& last) {
    const MonoTime started = time_.monotonic();
    if (state.nextProbeAt() > started) return;
    last = probeOnce(state.spec(), ip_, port_, state.attemptTimeout(), time_, exec_);
    state.record(last.success, started, time_.monotonic());
  };
  run(readiness_, last_readiness_);
  if (liveness_) run(*liveness_, last_liveness_);
  return nextDue();
}

Status Prober::waitUntilReady(MonoTime deadline, const std::function<void(Duration)>& wait) {
  while (true) {
    runDue();
    if (!live()) return unavailable("liveness probe failed: " + last_liveness_.message);
    if (ready()) return Status::ok();
    const MonoTime now = time_.monotonic();
    if (now >= deadline) {
      return Status(Code::kDeadlineExceeded, "not ready in time; last readiness probe: " +
                                                 (last_readiness_.message.empty() ? std::string("none ran")
                                                                                  : last_readiness_.message));
    }
    const MonoTime next = std::min(nextDue(), deadline);
    if (next > now) wait(next - now);
  }
}

}  // namespace knap::runtime
