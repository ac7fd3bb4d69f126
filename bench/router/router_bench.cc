// router_bench: requests/s and latency through knap's router versus straight
// to the same loopback pod, plus the activator's release latency (endpoint
// appears -> queued request answered). Prints one line per figure.
//
//   router_bench [--seconds N] [--clients N] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "router/router.h"
#include "router/test_backend.h"

using namespace knap;
using namespace knap::router;
using namespace knap::router::testing;
using Clock = std::chrono::steady_clock;

namespace {

struct Result {
  double rps = 0;
  double p50_us = 0, p99_us = 0;
  int errors = 0;
};

Result load(int port, const std::string& host, int clients, double seconds) {
  std::vector<std::future<std::pair<std::vector<double>, int>>> futs;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  for (int i = 0; i < clients; ++i) {
    futs.push_back(std::async(std::launch::async, [&, port] {
      std::vector<double> lat;
      int errors = 0;
      TestClient c(port);
      while (Clock::now() < end) {
        StringRequest req{http::verb::get, "/", 11};
        req.set(http::field::host, host);
        const auto t0 = Clock::now();
        auto resp = c.send(std::move(req));
        if (resp.result_int() != 200) {
          ++errors;
          break;
        }
        lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      return std::make_pair(std::move(lat), errors);
    }));
  }
  std::vector<double> all;
  Result r;
  for (auto& f : futs) {
    auto [lat, errors] = f.get();
    all.insert(all.end(), lat.begin(), lat.end());
    r.errors += errors;
  }
  std::sort(all.begin(), all.end());
  r.rps = all.size() / seconds;
  if (!all.empty()) {
    r.p50_us = all[all.size() / 2];
    r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  int clients = 8, threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--clients")) clients = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
  }
  knap::log::setMinLevel(knap::log::Level::kWarning);
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "hello\n"; }));
  RouterOptions o;
  o.address = "127.0.0.1";
  o.port = 0;
  o.threads = threads;
  Router router(o, RealTimeSource::instance());
  if (Status s = router.start(); !s.isOk()) {
    std::fprintf(stderr, "router: %s\n", s.toString().c_str());
    return 1;
  }
  RouteSpec hot{
      "bench", "hot", Visibility::kExternal, {"hot.bench.example.com"}, {}, {{"bench/hot-1", 100, ""}}, {}};
  RouteSpec cold{
      "bench", "cold", Visibility::kExternal, {"cold.bench.example.com"}, {}, {{"bench/cold-1", 100, ""}},
      {}};
  auto table = RoutingTable::build({hot, cold});
  router.setRoutingTable(*table);
  router.setEndpoints("bench/hot-1", {pod.endpoint()});

  const Result direct = load(pod.port(), "hot.bench.example.com", clients, seconds);
  const Result via = load(router.port(), "hot.bench.example.com", clients, seconds);
  std::printf("clients=%d router_threads=%d seconds=%.1f (hardware threads: %u)\n", clients, threads, seconds,
              std::thread::hardware_concurrency());
  std::printf("direct_to_pod   rps=%.0f p50_us=%.0f p99_us=%.0f errors=%d\n", direct.rps, direct.p50_us,
              direct.p99_us, direct.errors);
  std::printf("through_router  rps=%.0f p50_us=%.0f p99_us=%.0f errors=%d\n", via.rps, via.p50_us, via.p99_us,
              via.errors);
  std::printf("router_added_p50_us=%.0f\n", via.p50_us - direct.p50_us);

  // Activator release: a request queued at zero pods, answered once an
  // endpoint appears. Repeated to get a median.
  std::vector<double> release_us;
  for (int i = 0; i < 20; ++i) {
    router.setEndpoints("bench/cold-1", {});
    auto f = std::async(std::launch::async, [&] { return get(router.port(), "cold.bench.example.com"); });
    while (router.queued("bench/cold-1") == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    const auto t0 = Clock::now();
    router.setEndpoints("bench/cold-1", {pod.endpoint()});
    const int code = f.get().result_int();
    if (code == 200)
      release_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(release_us.begin(), release_us.end());
  if (!release_us.empty()) {
    std::printf("queued_release_p50_us=%.0f (endpoint set -> response, n=%zu)\n",
                release_us[release_us.size() / 2], release_us.size());
  }
  router.stop();
  return 0;
}
