#include "daemon/containerd_runtime.h"

#include <unistd.h>

#include "common/log.h"

#ifdef KNAP_HAVE_RUNNER_CONTAINERD
#include "runtime/containerd/containerd_client.h"
#include "runtime/pod/cni.h"
#include "runtime/runner/containerd_pod_driver.h"
#include "runtime/runner/pod_runner.h"
#endif

namespace knap::daemon {

#ifdef KNAP_HAVE_RUNNER_CONTAINERD
namespace {

containerd::ContainerdClient::Options clientOptions(const Config& config, TimeSource* clock) {
  containerd::ContainerdClient::Options o;
  o.address = "unix://" + config.knap.containerd_socket;
  o.ns = config.knap.containerd_namespace;
  o.time = clock;
  return o;
}

class ContainerdRuntime final : public Runtime {
 public:
  ContainerdRuntime(const Config& config, store::Store& store, TimeSource& clock)
      : store_(store),
        client_(clientOptions(config, &clock)),
        network_(cniOptions(config), clock),
        driver_(client_, network_, clock, driverOptions(config)),
        runner_(driver_, clock, runner::optionsFromConfig(config)) {}

  const char* name() const override { return "containerd"; }
  controller::RevisionBackend& backend() override { return runner_; }
  scaler::PodCounter& podCounter() override { return runner_; }
  scaler::ScaleTarget& scaleTarget() override { return runner_; }
  void setEndpointsListener(EndpointsListener fn) override {
    runner_.setOnEndpointsChanged([this, fn](const std::string& revision) {
      std::vector<router::Endpoint> eps;
      runner::WakeReport wake;
      for (const auto& e : runner_.readyEndpoints(revision, &wake)) {
        eps.push_back(router::Endpoint{e.ip, static_cast<uint16_t>(e.port)});
      }
      fn(revision, eps, router::WakeInfo{wake.path, wake.image_ready_at});
    });
  }
  // Warm pool (issue 5): the runner's pool status, as router metrics.
  void setWarmPoolListener(WarmPoolListener fn) override {
    runner_.setOnWarmPoolChanged([this, fn](const std::string& revision) {
      runner::WarmPoolStatus w = runner_.warmPool(revision);
      fn(revision, router::WarmPoolStats{w.mode, w.pods, w.memory_bytes});
    });
  }

  Status start() override {
    auto version = client_.version();
    if (!version.isOk()) return version.status();
    LOG(INFO) << "containerd " << version->version << " at " << client_.ns() << " namespace";
    // Adopt the pods of revisions that still exist; the rest are cleaned up.
    std::set<std::string> live;
    auto revisions = store_.list("Revision", "");
    if (!revisions.isOk()) return revisions.status();
    for (const auto& r : *revisions) live.insert(runner::PodRunner::key(r.key.ns, r.key.name));
    if (Status s = runner_.adoptExisting(live); !s.isOk()) {
      LOG(WARNING) << "pod runner: adoption/cleanup incomplete: " << s.toString();
    }
    runner_.start();
    return Status::ok();
  }
  void stop() override { runner_.stop(); }  // pods keep running; adopted on the next start

 private:
  static runtime::CniOptions cniOptions(const Config& config) {
    runtime::CniOptions o;
    o.bridge = config.knap.bridge_name;
    o.subnet = config.knap.pod_subnet;
    o.ipam_data_dir = config.knap.data_dir + "/cni";
    return o;
  }
  static runner::ContainerdPodDriverOptions driverOptions(const Config& config) {
    runner::ContainerdPodDriverOptions o;
    o.data_dir = config.knap.data_dir;
    return o;
  }

  store::Store& store_;
  containerd::ContainerdClient client_;
  runtime::CniNetwork network_;
  runner::ContainerdPodDriver driver_;
  runner::PodRunner runner_;
};

}  // namespace

bool containerdRuntimeBuilt() { return true; }

bool containerdAvailable(const Config& config, std::string* why) {
  if (::geteuid() != 0) {
    *why = "knapd is not running as root (pod networking needs it)";
    return false;
  }
  containerd::ContainerdClient client(clientOptions(config, nullptr));
  auto v = client.version(std::chrono::seconds(2));
  if (!v.isOk()) {
    *why = "containerd does not answer on " + config.knap.containerd_socket + ": " + v.status().message();
    return false;
  }
  return true;
}

StatusOr<std::unique_ptr<Runtime>> makeContainerdRuntime(const Config& config, store::Store& store,
                                                         TimeSource& clock) {
  return std::unique_ptr<Runtime>(new ContainerdRuntime(config, store, clock));
}

#else

bool containerdRuntimeBuilt() { return false; }

bool containerdAvailable(const Config&, std::string* why) {
  *why = "knapd was built without the containerd client (grpc++/protobuf or the containerd protos were missing)";
  return false;
}

StatusOr<std::unique_ptr<Runtime>> makeContainerdRuntime(const Config&, store::Store&, TimeSource&) {
  return Status(Code::kUnsupported, "--runtime containerd: knapd was built without the containerd client");
}

#endif

}  // namespace knap::daemon
