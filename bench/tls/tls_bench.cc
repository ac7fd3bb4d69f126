// TLS benchmark client (OpenSSL, blocking, one thread per connection).
//
//   tls_bench --port P --sni HOST [--seconds 5] [--conns 4] [--mode handshake|request] [--path /]
//     handshake: new TCP connection + full TLS handshake (no resumption) + close, counted per second;
//     request:   keep-alive HTTPS GETs over --conns connections, counted per second.
//   tls_bench --self-certs N [--seconds 5] [--conns 2] [--rounds 3]
//     starts knap's Router in this process (one worker thread, HTTPS on loopback) and measures
//     handshakes/s with 1 certificate and then with N certificates (each its own key and context;
//     the client asks for a different host each handshake), side by side.
//   tls_bench --serve-pod PORT [--seconds 60] [--sni HOST]
//     starts knap's Router in this process (one worker thread, HTTPS on loopback, a self-signed
//     certificate for HOST) routing HOST to the HTTP server on 127.0.0.1:PORT, prints
//     "serving https on port <p>" (and "serving http on port <q>": the same route over plain
//     HTTP) and serves for --seconds: a router to strace, callgrind or compare
//     with nginx in front of the same server, without containerd (docs/benchmarks.md).
//
// Prints one line per measurement: "<label> <count>/s (<n> in <secs> s, <errors> errors)".
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/tls.h"
#include "router/certs.h"
#include "router/router.h"
#include "router/test_backend.h"

namespace {

using Clock = std::chrono::steady_clock;

int connectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

SSL* handshake(SSL_CTX* ctx, int port, const std::string& sni, int* fd_out) {
  const int fd = connectLoopback(port);
  if (fd < 0) return nullptr;
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, sni.c_str());
  if (SSL_connect(ssl) != 1) {
    ERR_clear_error();
    SSL_free(ssl);
    ::close(fd);
    return nullptr;
  }
  *fd_out = fd;
  return ssl;
}

void closeTls(SSL* ssl, int fd) {
  SSL_shutdown(ssl);
  SSL_free(ssl);
  ::close(fd);
}

// One HTTP/1.1 response with Content-Length (what knap and nginx send for the test app); false on error.
bool readResponse(SSL* ssl, std::string& buf) {
  char data[16384];
  size_t head_end;
  while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
    const int n = SSL_read(ssl, data, sizeof data);
    if (n <= 0) return false;
    buf.append(data, static_cast<size_t>(n));
  }
  size_t length = 0;
  const size_t cl = buf.find("ontent-Length:");
  if (cl != std::string::npos && cl < head_end) length = std::strtoul(buf.c_str() + cl + 14, nullptr, 10);
  const size_t total = head_end + 4 + length;
  while (buf.size() < total) {
    const int n = SSL_read(ssl, data, sizeof data);
    if (n <= 0) return false;
    buf.append(data, static_cast<size_t>(n));
  }
  buf.erase(0, total);
  return true;
}

struct Result {
  long ok = 0, errors = 0;
  double secs = 0;
};

// hosts: SNI names used round robin (handshake mode).
Result run(int port, const std::vector<std::string>& hosts, const std::string& mode, const std::string& path,
           int conns, double seconds) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  std::atomic<long> ok{0}, errors{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int t = 0; t < conns; ++t) {
    threads.emplace_back([&, t] {
      size_t i = static_cast<size_t>(t);
      if (mode == "handshake") {
        while (!stop.load(std::memory_order_relaxed)) {
          int fd = -1;
          SSL* ssl = handshake(ctx, port, hosts[i++ % hosts.size()], &fd);
          if (ssl == nullptr) {
            errors.fetch_add(1);
            continue;
          }
          closeTls(ssl, fd);
          ok.fetch_add(1, std::memory_order_relaxed);
        }
        return;
      }
      const std::string& host = hosts[i % hosts.size()];
      const std::string req = "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n";
      while (!stop.load()) {
        int fd = -1;
        SSL* ssl = handshake(ctx, port, host, &fd);
        if (ssl == nullptr) {
          errors.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
        std::string buf;
        while (!stop.load(std::memory_order_relaxed)) {
          if (SSL_write(ssl, req.data(), static_cast<int>(req.size())) <= 0 || !readResponse(ssl, buf)) {
            errors.fetch_add(1);
            break;
          }
          ok.fetch_add(1, std::memory_order_relaxed);
        }
        closeTls(ssl, fd);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : threads) th.join();
  Result r;
  r.ok = ok.load();
  r.errors = errors.load();
  r.secs = std::chrono::duration<double>(Clock::now() - start).count();
  SSL_CTX_free(ctx);
  return r;
}

void print(const std::string& label, const Result& r) {
  std::printf("%-40s %9.0f/s (%ld in %.1f s, %ld errors)\n", label.c_str(), r.ok / r.secs, r.ok, r.secs,
              r.errors);
  std::fflush(stdout);
}

// An in-process router with its HTTPS listener (loopback, an ephemeral
// port), with `plain` its HTTP listener too, and one worker thread; null
// (reported) if it cannot start.
std::unique_ptr<knap::router::Router> startTlsRouter(bool plain = false) {
  using namespace knap;
  router::RouterOptions o;
  o.address = "127.0.0.1";
  o.port = plain ? 0 : -1;
  o.tls_address = "127.0.0.1";
  o.tls_port = 0;
  o.threads = 1;
  auto r = std::make_unique<router::Router>(o, RealTimeSource::instance());
  if (Status st = r->start(); !st.isOk()) {
    std::fprintf(stderr, "router: %s\n", st.message().c_str());
    return nullptr;
  }
  return r;
}

int selfCerts(int n, int conns, double seconds, int rounds) {
  using namespace knap;
  std::unique_ptr<router::Router> router = startTlsRouter();
  if (!router) return 1;
  router::Router& r = *router;
  auto table = [](int count, std::vector<std::string>* hosts) {
    std::vector<router::CertEntry> entries;
    for (int i = 0; i < count; ++i) {
      const std::string host = "h" + std::to_string(i) + ".bench.example.com";
      auto pem = router::testing::selfSignedCert({host});
      auto c = tls::loadServerCertificate(pem.cert, pem.key, host);
      if (!c.isOk()) continue;
      entries.push_back({host, c->ctx, host});
      hosts->push_back(host);
    }
    return router::CertTable::build(std::move(entries));
  };
  std::printf("TLS handshakes/s, knap router in-process (1 worker thread), %d client threads, %.0f s each\n",
              conns, seconds);
  std::vector<std::string> one_host, many_hosts;
  auto one = table(1, &one_host);
  auto many = table(n, &many_hosts);
  // Alternating rounds, so machine noise hits both alike; the medians at the end.
  std::vector<double> rate_one, rate_many;
  const std::string many_label = std::to_string(many->size()) + " certificates (host varies)";
  for (int round = 0; round < rounds; ++round) {
    r.setCertificates(one);
    Result a = run(r.tlsPort(), one_host, "handshake", "/", conns, seconds);
    print("1 certificate", a);
    r.setCertificates(many);
    Result b = run(r.tlsPort(), many_hosts, "handshake", "/", conns, seconds);
    print(many_label, b);
    rate_one.push_back(a.ok / a.secs);
    rate_many.push_back(b.ok / b.secs);
  }
  std::sort(rate_one.begin(), rate_one.end());
  std::sort(rate_many.begin(), rate_many.end());
  const double m1 = rate_one[rate_one.size() / 2], mn = rate_many[rate_many.size() / 2];
  std::printf("median of %d rounds: 1 certificate %.0f/s, %s %.0f/s (ratio %.2f)\n", rounds, m1,
              many_label.c_str(), mn, mn / m1);
  r.stop();
  return 0;
}

int servePod(int pod_port, const std::string& sni, double seconds) {
  using namespace knap;
  std::unique_ptr<router::Router> router = startTlsRouter(/*plain=*/true);
  if (!router) return 1;
  router::Router& r = *router;
  router::RouteSpec route;
  route.namespace_name = "default";
  route.name = "bench";
  route.hosts = {sni};
  route.traffic = {{"bench-00001", 100, ""}};
  auto table = router::RoutingTable::build({route}, "bench");
  if (!table.isOk()) {
    std::fprintf(stderr, "routing table: %s\n", table.status().message().c_str());
    return 1;
  }
  r.setRoutingTable(*table);
  r.setEndpoints("bench-00001", {router::Endpoint{"127.0.0.1", static_cast<uint16_t>(pod_port)}});
  auto pem = router::testing::selfSignedCert({sni});
  auto c = tls::loadServerCertificate(pem.cert, pem.key, sni);
  if (!c.isOk()) {
    std::fprintf(stderr, "certificate: %s\n", c.status().message().c_str());
    return 1;
  }
  r.setCertificates(router::CertTable::build({{sni, c->ctx, sni}}));
  std::printf("serving https on port %d\n", r.tlsPort());
  std::printf("serving http on port %d\n", r.port());
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  r.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  knap::tls::installOpenSslAllocator();  // as knapd does (common/tls.h)
  std::signal(SIGPIPE, SIG_IGN);         // a server that closed first is an error count, not the end
  int port = 0, conns = 4, self = 0, rounds = 3, serve_pod = 0;
  double seconds = 5;
  std::string sni, mode = "handshake", path = "/";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--port")
      port = std::stoi(v);
    else if (k == "--sni")
      sni = v;
    else if (k == "--seconds")
      seconds = std::stod(v);
    else if (k == "--conns")
      conns = std::stoi(v);
    else if (k == "--mode")
      mode = v;
    else if (k == "--path")
      path = v;
    else if (k == "--self-certs")
      self = std::stoi(v);
    else if (k == "--serve-pod")
      serve_pod = std::stoi(v);
    else if (k == "--rounds")
      rounds = std::max(1, std::stoi(v));
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (self > 0) return selfCerts(self, conns, seconds, rounds);
  if (serve_pod > 0) return servePod(serve_pod, sni.empty() ? "bench.example.com" : sni, seconds);
  if (port <= 0 || sni.empty() || (mode != "handshake" && mode != "request")) {
    std::fprintf(stderr,
                 "usage: tls_bench --port P --sni HOST [--mode handshake|request] [--seconds S] "
                 "[--conns C] [--path /] | --self-certs N\n");
    return 2;
  }
  print(mode == "handshake" ? "handshakes" : "requests", run(port, {sni}, mode, path, conns, seconds));
  return 0;
}
