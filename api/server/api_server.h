// ApiServer: knapd's Kubernetes-style REST endpoint (HTTP/1.1, Boost.Beast)
// on loopback TCP and/or a root-only unix socket, so that a stock kubectl can
// manage serving.knative.dev/v1 objects. Request semantics live in
// RestHandler; this class owns sockets, the io_context thread(s), request
// limits and watch streaming (KUBECTL-WIRE §7).
//
// Threading: start() binds synchronously and then serves on a pool of
// `threads` io_context threads; each connection runs on its own strand, so a
// slow request holds one thread for its own duration only, and a watch holds
// none between events. Store calls
// are made synchronously on those threads. Watch events arrive from the
// store's writer threads through one store listener, which only copies the
// event into each watcher's bounded queue and posts to the watcher's strand;
// a watcher whose queue overflows is closed (kubectl re-watches from its last
// resourceVersion). start()/stop() must not race each other.
//
// Connections: at most max_connections are open at once (watches included);
// beyond that the listeners stop accepting and the kernel's backlog holds new
// clients until one closes. An accept error such as EMFILE backs off
// (10 ms doubling to 1 s) instead of spinning.
//
// Security (issue 9): with `tls`, the TCP listener speaks only TLS 1.2+ and
// asks for (but does not require) a client certificate signed by the client
// CA; the verified certificate's CN/O and the Authorization header go to the
// RestHandler, which authenticates and authorizes (api/server/access.h). The
// unix socket is the local admin. start() refuses to listen beyond loopback
// without both TLS and access control. Store, Config and
// TimeSource are borrowed and must outlive the server.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/server/rest_handler.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "store/store.h"

namespace knap::api {

struct ApiServerOptions {
  // "host:port" for TCP ("127.0.0.1:0" picks a free port); empty = no TCP listener.
  std::string tcp_listen = "127.0.0.1:0";
  // An already-listening TCP socket (socket activation, common/listen_fds.h)
  // served instead of binding tcp_listen; owned by the server from start().
  int tcp_listen_fd = -1;
  // Path of a unix socket (created with mode 0600); empty = none.
  std::string unix_socket_path;
  size_t max_body_bytes = 3 * 1024 * 1024;  // larger bodies get 413
  size_t max_header_bytes = 64 * 1024;      // larger headers get 431
  std::chrono::seconds read_timeout{30};    // to read one request (and idle keep-alive)
  size_t watch_buffer_events = 1024;        // per watcher; overflow closes the watch
  int threads = 4;
  size_t max_connections = 1024;  // open connections (TCP and unix together)
  // TLS on the TCP listener (PEM texts); nullopt = plain HTTP.
  struct Tls {
    std::string cert_chain_pem;
    std::string key_pem;
    std::string client_ca_pem;  // client certificates must chain to this CA
  };
  std::optional<Tls> tls;
  // Host allow-list, watch timeout and bookmark interval, and access control
  // (policy.access: null = every caller is admin, allowed only on loopback).
  RequestPolicy policy;
};

class ApiServer {
 public:
  ApiServer(ApiServerOptions options, const Config& config, store::Store& store, TimeSource& clock);
  ~ApiServer();  // calls stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds the listeners and starts serving. kInvalidArgument for a bad listen
  // address, kUnavailable when a socket cannot be bound, kFailedPrecondition
  // when already started.
  Status start();
  // Closes listeners and every connection (watches included); joins threads. Idempotent.
  void stop();

  // The bound TCP port (after start(); 0 when there is no TCP listener).
  int tcpPort() const;
  // "https://127.0.0.1:PORT" ("http://" without TLS) for the TCP listener: the
  // bound address, or loopback when bound to the unspecified address.
  std::string url() const;
  // See RestHandler::setReady: /readyz follows the whole daemon. Any thread.
  void setReady(bool ready);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The credentials a kubeconfig carries (PEM texts; all empty = none).
struct KubeconfigCredentials {
  std::string ca_pem;           // certificate-authority-data
  std::string client_cert_pem;  // client-certificate-data
  std::string client_key_pem;   // client-key-data
};

// Writes a kubeconfig (cluster "knap" at `server_url`, context "knap",
// namespace "default", current-context knap, user "knap" with the
// given credentials) with mode 0600, so that `kubectl --kubeconfig PATH get
// ksvc` talks to knapd. kUnavailable when the file cannot be written.
Status writeKubeconfig(const std::string& path, const std::string& server_url,
                       const KubeconfigCredentials& credentials = {});

// Fills the security of `options` from knapd's configuration: with
// knap.api-insecure-loopback nothing (plain HTTP, everyone admin; start()
// then refuses any address but loopback); otherwise TLS with the PKI under
// <data_dir>/pki (api/server/pki.h; `extra_hosts` join the serving
// certificate's SANs), the token file and the role bindings. `credentials`
// gets what the admin kubeconfig carries. Errors name the config key or file.
Status configureApiSecurity(const Config& config, const std::string& data_dir,
                            const std::vector<std::string>& extra_hosts, ApiServerOptions* options,
                            KubeconfigCredentials* credentials);

}  // namespace knap::api
