// knap-bench-pod-start: pod start latency (Revision ensure() -> first ready
// endpoint) over N starts with PodRunner + ContainerdPodDriver, side by side
// with `ctr run --rm` of the same image in the same run (create + start +
// exit + delete of a process that exits at once: no network, no probe).
//
//   knap-bench-pod-start --testapp PATH --mkimage PATH [--runs 20]
// Root only; uses containerd namespace knap-bench, bridge knapbn0,
// subnet 10.218.0.0/24, and removes them afterwards.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "runtime/containerd/image_import.h"
#include "runtime/pod/subprocess.h"
#include "runtime/runner/containerd_pod_driver.h"
#include "runtime/runner/pod_runner.h"

namespace kr = knap::runner;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kImage[] = "dev.local/knap-bench:v1";

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  std::string testapp, mkimage;
  int runs = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--testapp")
      testapp = argv[i + 1];
    else if (a == "--mkimage")
      mkimage = argv[i + 1];
    else if (a == "--runs")
      runs = std::atoi(argv[i + 1]);
  }
  if (testapp.empty() || mkimage.empty() || ::geteuid() != 0) {
    std::cerr << "usage (root): knap-bench-pod-start --testapp PATH --mkimage PATH [--runs 20]\n";
    return 2;
  }
  char tmpl[] = "/tmp/knap-bench-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  std::string tar = dir + "/app.tar";
  std::string cmd =
      mkimage + " --out " + tar + " --name " + kImage + " --file " + testapp +
      ":/app/knap-testapp --entrypoint /app/knap-testapp --user app --workdir /app --expose 8080 >/dev/null";
  if (std::system(cmd.c_str()) != 0) return 1;
  knap::containerd::ContainerdClient::Options co;
  co.ns = "knap-bench";
  knap::containerd::ContainerdClient client(co, knap::RealTimeSource::instance());
  if (auto r = knap::containerd::importImageArchive(client, tar); !r.isOk()) {
    std::cerr << "import: " << r.status().toString() << "\n";
    return 1;
  }
  knap::runtime::CniOptions cni;
  cni.bridge = "knapbn0";
  cni.subnet = "10.218.0.0/24";
  cni.network_name = "knapbench";
  cni.netns_prefix = "knapbench-";
  cni.ipam_data_dir = dir + "/ipam";
  knap::runtime::CniNetwork net(cni, knap::RealTimeSource::instance());
  kr::ContainerdPodDriverOptions dopt;
  dopt.data_dir = dir + "/data";
  kr::ContainerdPodDriver driver(client, net, knap::RealTimeSource::instance(), dopt);
  kr::PodRunner runner(driver, knap::RealTimeSource::instance());
  runner.start();

  std::vector<double> knap_ms, ctr_ms;
  for (int i = 0; i < runs; ++i) {
    std::string name = "bench-" + std::to_string(i);
    json rev = {{"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec", {{"containers", json::array({{{"image", kImage}}})}}}};
    auto t0 = Clock::now();
    runner.ensure(rev);
    while (runner.readyEndpoints("default/" + name).empty()) {
      if (Clock::now() - t0 > std::chrono::seconds(30)) {
        std::cerr << name << " not ready after 30 s\n";
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    knap_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    runner.remove("default", name);
    while (!runner.pods("default/" + name).empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    std::string c = "ctr -n knap-bench run --rm " + std::string(kImage) + " knap-bench-ctr-" +
                    std::to_string(i) + " /app/knap-testapp --fail-start >/dev/null 2>&1";
    (void)std::system(c.c_str());
    ctr_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  runner.shutdownAndDestroyAll();
  (void)client.deleteImage(kImage, true);
  (void)knap::runtime::runProgram({"ip", "link", "del", cni.bridge}, {}, knap::RealTimeSource::instance());
  std::filesystem::remove_all(dir);

  std::printf("pod start over %d runs (ms)            p50      p99\n", runs);
  std::printf("knap ensure -> ready endpoint     %8.1f %8.1f\n", pct(knap_ms, 0.5), pct(knap_ms, 0.99));
  std::printf("ctr run --rm (start..exit..rm)    %8.1f %8.1f\n", pct(ctr_ms, 0.5), pct(ctr_ms, 0.99));
  return 0;
}
