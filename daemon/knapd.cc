// knapd: the knap daemon. Loads the configuration, opens the store, and wires
// the concrete implementations together: the REST API server, the
// controllers and the revision backend (the containerd pod runner, or the
// control-plane-only backend with --runtime none).
//
//   knapd [--config FILE] [--data-dir DIR] [--runtime auto|containerd|none] [--log-level debug|info|warning]
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "acme/manager.h"
#include "api/server/api_server.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/duration.h"
#include "common/listen_fds.h"
#include "common/log.h"
#include "common/sd_notify.h"
#include "common/tls.h"
#include "controller/controller.h"
#include "controller/immediate_revision_backend.h"
#include "daemon/data_plane.h"
#include "daemon/runtime_wiring.h"
#include "events/store_event_recorder.h"
#include "store/sqlite_store.h"

namespace knap::daemon {
namespace {

const char* kUsage =
    "knapd — Knative Serving on one machine\n"
    "\n"
    "  knapd [--config FILE] [--data-dir DIR] [--runtime auto|containerd|none] [--log-level LEVEL]\n"
    "\n"
    "  --config FILE     YAML with Knative ConfigMap sections (autoscaler, defaults, network, domain,\n"
    "                    gc, deployment) and knap's own section; default: embedded defaults\n"
    "                    (or /etc/knap/config.yaml when it exists)\n"
    "  --data-dir DIR    overrides knap.data-dir (state, sockets, kubeconfig)\n"
    "  --runtime MODE    containerd: run pods; none: control plane only (revisions report Ready\n"
    "                    without pods); auto (default): containerd when available\n"
    "  --api-allowed-host NAME   a Host name the API answers besides loopback names and IP addresses\n"
    "                    (repeatable; any other Host is 403, a DNS-rebinding defence)\n"
    "  --min-request-timeout D   a watch without timeoutSeconds ends after D plus a random fraction\n"
    "                    of D, like kube-apiserver (default 1800s)\n"
    "  --watch-bookmark-interval D   BOOKMARK events for allowWatchBookmarks watches (default 60s)\n";

struct Flags {
  std::string config_path;
  std::string data_dir;
  std::string runtime = "auto";
  std::string log_level = "info";
  api::RequestPolicy policy;
};

int usageError(const std::string& message) {
  std::cerr << "knapd: " << message << "\n\n" << kUsage;
  return 2;
}

// Listening sockets handed over by a service manager (systemd .socket units
// with FileDescriptorName=router / router-tls / api) or by a parent that keeps
// them across restarts, so no connection is refused while knapd restarts.
Status inheritSockets(int* router_fd, int* router_tls_fd, int* api_fd) {
  auto fds = takeListenFds();
  if (!fds.isOk()) return fds.status();
  for (const ListenFd& f : *fds) {
    int* slot = f.name == "router"       ? router_fd
                : f.name == "router-tls" ? router_tls_fd
                : f.name == "api"        ? api_fd
                                         : nullptr;
    if (slot == nullptr || *slot >= 0) {
      LOG(WARNING) << "ignoring inherited socket fd " << f.fd << " named \"" << f.name
                   << "\" (knapd takes one \"router\", one \"router-tls\" and one \"api\")";
      ::close(f.fd);
      continue;
    }
    *slot = f.fd;
  }
  return Status::ok();
}

int run(int argc, char** argv) {
  // Two malloc arenas instead of glibc's 8 per core: knapd's threads (API
  // workers, router loops, controllers) otherwise each fragment an arena of
  // their own; with 1,000 Services RSS was 125 MiB with the default and 97 MiB
  // with two (bench/api/bench_api.py, docs/benchmarks.md).
  mallopt(M_ARENA_MAX, 2);
  // systemd (Type=notify): read and unset NOTIFY_SOCKET/WATCHDOG_* before any thread starts.
  const sd::Notifier systemd = sd::Notifier::fromEnvironment();
  auto notify = [&systemd](const Status& st) {
    if (!st.isOk()) LOG(WARNING) << "systemd notification: " << st.message();
  };
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--config")
      flags.config_path = value();
    else if (a == "--data-dir")
      flags.data_dir = value();
    else if (a == "--runtime")
      flags.runtime = value();
    else if (a == "--log-level")
      flags.log_level = value();
    else if (a == "--api-allowed-host")
      flags.policy.allowed_hosts.push_back(value());
    else if (a == "--min-request-timeout" || a == "--watch-bookmark-interval") {
      std::string v = value();
      auto d = parseGoDuration(v);
      if (!d.isOk() || *d <= std::chrono::nanoseconds(0))
        return usageError(a + " must be a positive duration such as 30s, got \"" + v + "\"");
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
      if (a == "--min-request-timeout")
        flags.policy.min_request_timeout = ms;
      else
        flags.policy.bookmark_interval = ms;
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else
      return usageError("unknown argument " + a);
  }
  if (flags.log_level == "debug")
    log::setMinLevel(log::Level::kDebug);
  else if (flags.log_level == "warning")
    log::setMinLevel(log::Level::kWarning);
  else if (flags.log_level != "info")
    return usageError("--log-level must be debug, info or warning");
  if (flags.runtime != "auto" && flags.runtime != "containerd" && flags.runtime != "none")
    return usageError("--runtime must be auto, containerd or none, got \"" + flags.runtime + "\"");

  int router_fd = -1, router_tls_fd = -1, api_fd = -1;
  if (Status st = inheritSockets(&router_fd, &router_tls_fd, &api_fd); !st.isOk()) {
    std::cerr << "knapd: refusing to start: inherited sockets: " << st.message() << "\n";
    return 1;
  }
  if (flags.config_path.empty() && std::filesystem::exists("/etc/knap/config.yaml"))
    flags.config_path = "/etc/knap/config.yaml";
  Config config = defaultConfig();
  if (!flags.config_path.empty()) {
    auto loaded = loadConfigFile(flags.config_path);
    if (!loaded.isOk()) {
      // The message names the file, the key and the reason.
      std::cerr << "knapd: refusing to start: " << loaded.status().message() << "\n";
      return 1;
    }
    config = std::move(loaded).value();
  }
  if (!flags.data_dir.empty()) config.knap.data_dir = flags.data_dir;
  const std::string& dir = config.knap.data_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::cerr << "knapd: cannot create data dir " << dir << ": " << ec.message() << "\n";
    return 1;
  }
  ::chmod(dir.c_str(), 0700);
  // A read-only data dir (a read-only mount, wrong owner) would otherwise fail
  // 5 s later inside SQLite as "unable to open database file".
  {
    std::string probe = dir + "/.knapd-write-test";
    int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      std::cerr << "knapd: refusing to start: the data dir " << dir << " is not writable ("
                << std::strerror(errno) << "); knapd keeps its database, certificates and kubeconfig there\n";
      return 1;
    }
    ::close(fd);
    ::unlink(probe.c_str());
  }
  if (config.knap.api_socket.empty()) config.knap.api_socket = dir + "/knapd.sock";
  if (config.knap.kubeconfig_path.empty()) config.knap.kubeconfig_path = dir + "/kubeconfig";

  // Block the signals we handle before any thread starts, so that every
  // thread inherits the mask and sigwait() below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  TimeSource& clock = RealTimeSource::instance();
  notify(systemd.status("opening the store"));
  auto store = store::SqliteStore::open(dir + "/knap.db", clock, config.knap.watch_history_events);
  if (!store.isOk()) {
    std::cerr << "knapd: cannot open the store: " << store.status().message() << "\n";
    return 1;
  }
  // Secrets are encrypted at rest (AES-256-GCM) with the keys in <data-dir>/keys
  // (created 0600 at first start; docs/user-guide.md describes rotation).
  {
    auto cipher = store::KeyringCipher::openDir(dir + "/keys");
    if (!cipher.isOk()) {
      std::cerr << "knapd: cannot load the encryption keys: " << cipher.status().message() << "\n";
      return 1;
    }
    if (Status st = (*store)->setCipher(std::shared_ptr<store::BodyCipher>(std::move(*cipher))); !st.isOk()) {
      std::cerr << "knapd: cannot encrypt stored Secrets: " << st.message() << "\n";
      return 1;
    }
  }

  // Events (core/v1, served at /api/v1/.../events): the runtime, image gate
  // and autoscaler report through this recorder; retention bounds them.
  events::StoreEventRecorder event_recorder(**store, clock);
  event_recorder.start();
  notify(systemd.status("starting the API server, router and runtime (adopting running pods)"));
  auto runtime = makeRuntime(flags.runtime, config, **store, clock, event_recorder);
  if (!runtime.isOk()) {
    std::cerr << "knapd: " << runtime.status().message() << "\n";
    return 1;
  }
  controller::Controller controller(**store, (*runtime)->backend(), clock, config);
  DataPlane data_plane(config, **store, clock, (*runtime)->podCounter(), (*runtime)->scaleTarget(),
                       event_recorder, router_fd, router_tls_fd);
  // Built-in ACME (issue 14): certificates for the routed external hosts
  // and the DomainMappings' hosts, served from <data-dir>/acme/certs like
  // the certificates directory, and CertificateProvisioned on their Routes
  // and DomainMappings.
  std::unique_ptr<acme::CertificateManager> acme_manager;
  struct AcmeStatus : controller::CertificateStatus {
    acme::CertificateManager* manager = nullptr;
    std::optional<controller::CertificateCondition> certificateFor(const std::string& host) const override {
      auto s = manager->state(host);
      if (!s) return std::nullopt;
      controller::CertificateCondition c;
      c.state = s->kind == acme::HostState::Kind::kIssued ? controller::CertificateCondition::State::kIssued
                : s->kind == acme::HostState::Kind::kFailed
                    ? controller::CertificateCondition::State::kFailed
                    : controller::CertificateCondition::State::kPending;
      c.message = s->message;
      return c;
    }
  } acme_status;
  if (!config.knap.acme_directory.empty()) {
    if (config.knap.router_tls_listen.empty() && router_tls_fd < 0) {
      LOG(WARNING)
          << "knap.acme-directory is set but the router has no HTTPS listener (knap.router-tls-listen): "
             "no ACME certificates";
    } else if (!config.network.externalDomainTls()) {
      LOG(WARNING) << "knap.acme-directory is set but network.external-domain-tls is not Enabled: "
                      "no ACME certificates";
    } else {
      acme::ManagerOptions ao;
      ao.directory_url = config.knap.acme_directory;
      ao.email = config.knap.acme_email;
      ao.ca_file = config.knap.acme_ca_file;
      ao.data_dir = dir;
      ao.renew_before = config.knap.acme_renew_before;
      ao.set_challenges = [&data_plane](std::shared_ptr<const acme::Challenges> c) {
        data_plane.router().setAcmeChallenges(std::move(c));
      };
      ao.on_change = [&data_plane, &controller](const std::string& host) {
        if (auto owner = data_plane.ownerOfHost(host)) controller.enqueue(*owner);
      };
      acme_manager = std::make_unique<acme::CertificateManager>(std::move(ao), clock);
      if (Status st = acme_manager->start(); !st.isOk()) {
        std::cerr << "knapd: " << st.message() << "\n";
        return 1;
      }
      acme_status.manager = acme_manager.get();
      data_plane.setAcme(acme_manager.get());
      controller.setCertificateStatus(&acme_status);
      LOG(INFO) << "ACME: certificates for external hosts from " << config.knap.acme_directory;
    }
  }
  // IngressReady (and so Ready) only once the router serves a Route's or a
  // DomainMapping's traffic.
  struct DataPlaneIngress : controller::IngressStatus {
    DataPlane* data_plane = nullptr;
    bool programmed(const std::string& kind, const std::string& ns, const std::string& name,
                    const std::string& fingerprint) const override {
      return data_plane->programmed(store::Key{kind, ns, name}, fingerprint);
    }
  } ingress_status;
  ingress_status.data_plane = &data_plane;
  controller.setIngressStatus(&ingress_status);
  data_plane.setOnProgrammed([&controller](const store::Key& key) { controller.enqueue(key); });
  (*runtime)->setEndpointsListener(
      [&data_plane](const std::string& revision, const std::vector<router::Endpoint>& endpoints,
                    const router::WakeInfo& wake,
                    uint64_t version) { data_plane.setEndpoints(revision, endpoints, wake, version); });
  (*runtime)->setWarmPoolListener(
      [&data_plane](const std::string& revision, const router::WarmPoolStats& pool) {
        data_plane.setWarmPool(revision, pool);
      });

  api::ApiServerOptions options;
  options.tcp_listen = config.knap.api_listen;
  options.tcp_listen_fd = api_fd;
  options.unix_socket_path = config.knap.api_socket;
  options.max_body_bytes = config.knap.max_request_body_bytes;
  options.policy = flags.policy;
  // The web console reads the router's metrics through the API (with the API's auth).
  options.policy.metrics_text = [&data_plane] { return data_plane.router().renderMetrics(); };
  options.policy.pod_data_dir = dir;  // the pod logs, <dir>/pods (common/pod_logs.h)
  options.policy.restart_pods = [&runtime](const std::string& ns,
                                           const std::string& name) -> StatusOr<api::PodRestart> {
    auto r = (*runtime)->restartPods(ns, name);
    if (!r.isOk()) return r.status();
    return api::PodRestart{std::move(r->pods), r->warm_pods};
  };
  options.threads = static_cast<int>(config.knap.api_threads);
  options.max_connections = static_cast<size_t>(config.knap.api_max_connections);
  api::KubeconfigCredentials credentials;
  if (Status st = api::configureApiSecurity(config, dir, flags.policy.allowed_hosts, &options, &credentials);
      !st.isOk()) {
    std::cerr << "knapd: refusing to start: " << st.message() << "\n";
    return 1;
  }
  api::ApiServer server(options, config, **store, clock);
  server.setReady(false);  // /readyz: 503 until everything below has started
  if (Status st = server.start(); !st.isOk()) {
    std::cerr << "knapd: cannot start the API server: " << st.message() << "\n";
    return 1;
  }
  if (Status st = api::writeKubeconfig(config.knap.kubeconfig_path, server.url(), credentials); !st.isOk()) {
    LOG(WARNING) << "cannot write kubeconfig: " << st.message();
  }
  if (Status st = data_plane.start(); !st.isOk()) {
    std::cerr << "knapd: cannot start the router: " << st.message() << "\n";
    return 1;
  }
  if (Status st = (*runtime)->start(); !st.isOk()) {
    std::cerr << "knapd: cannot start the runtime: " << st.message() << "\n";
    return 1;
  }
  controller.start();
  controller.enqueueAll();
  LOG(INFO) << "knapd ready: api " << server.url() << " and unix://" << config.knap.api_socket
            << ", kubeconfig " << config.knap.kubeconfig_path << ", runtime " << (*runtime)->name();
  // READY only now: the API and router serve, and the runtime has adopted the pods a
  // previous knapd left running, so systemd orders dependants after a usable knapd.
  server.setReady(true);
  notify(systemd.ready("serving: api " + server.url() + ", router " + config.knap.router_listen +
                       ", runtime " + (*runtime)->name()));

  // Wait for SIGTERM/SIGINT; once an hour, resync every object so that
  // time-based decisions (revision GC by age) are re-evaluated without events.
  // Under a systemd watchdog, wake at its interval to send WATCHDOG=1.
  // The hour is a deadline on the monotonic clock: an interrupted wait
  // (SIGSTOP/SIGCONT, a debugger) just waits for the rest of it, it is not
  // taken for the timer.
  // Once a minute, free heap pages go back to the system (malloc_trim walks
  // every arena): after a burst (a large list, a mass delete) knapd's RSS
  // returns to what it holds.
  constexpr Duration kResyncEvery = std::chrono::hours(1);
  constexpr Duration kTrimEvery = std::chrono::minutes(1);
  MonoTime next_resync = clock.monotonic() + kResyncEvery;
  MonoTime next_trim = clock.monotonic() + kTrimEvery;
  int sig = -1;
  while (sig < 0) {
    if (clock.monotonic() >= next_trim) {
      malloc_trim(0);
      next_trim = clock.monotonic() + kTrimEvery;
      // What the heap holds (live vs. free in the allocator) and SQLite's share:
      // tells a leak (heap_in_use rising) from fragmentation or a filling cache.
      struct mallinfo2 mi = mallinfo2();
      store::SqliteStore::MemoryUse sq = (*store)->memoryUse();
      router::Router& r = data_plane.router();
      r.setProcessMemory("heap_in_use", static_cast<double>(mi.uordblks + mi.hblkhd));
      r.setProcessMemory("heap_free", static_cast<double>(mi.fordblks));
      r.setProcessMemory("sqlite", static_cast<double>(sq.sqlite_bytes));
      r.setProcessMemory("sqlite_page_cache", static_cast<double>(sq.page_cache_bytes));
    }
    Duration left = next_resync - clock.monotonic();
    if (left <= Duration::zero()) {
      controller.enqueueAll();
      next_resync = clock.monotonic() + kResyncEvery;
      continue;
    }
    left = std::min<Duration>(left, next_trim - clock.monotonic());
    if (auto wd = systemd.watchdogInterval()) {
      notify(systemd.watchdog());
      left = std::min<Duration>(left, *wd);
    }
    auto secs = std::chrono::duration_cast<std::chrono::seconds>(left);
    timespec wait{static_cast<time_t>(secs.count()), static_cast<long>((left - secs).count())};
    sig = sigtimedwait(&signals, nullptr, &wait);
  }
  LOG(INFO) << "received " << strsignal(sig) << ", shutting down";
  server.setReady(false);
  notify(systemd.stopping(std::string("received ") + strsignal(sig) + ", shutting down (pods keep running)"));
  data_plane.drain();  // in-flight requests finish first (the runtime still serves them)
  server.stop();
  if (acme_manager) acme_manager->stop();
  data_plane.stop();
  controller.stop();
  (*runtime)->stop();
  return 0;
}

}  // namespace
}  // namespace knap::daemon

int main(int argc, char** argv) {
  // Before anything touches OpenSSL (common/tls.h says why).
  knap::tls::installOpenSslAllocator();
  return knap::daemon::run(argc, argv);
}
