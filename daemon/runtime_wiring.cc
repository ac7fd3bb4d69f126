#include "daemon/runtime_wiring.h"

#include "common/log.h"
#include "controller/immediate_revision_backend.h"
#include "daemon/containerd_runtime.h"

namespace knap::daemon {
namespace {

// --runtime none: revisions report Ready without pods (API and controller work
// only); the autoscaler sees no pods and its decisions go nowhere.
class ControlPlaneOnly final : public Runtime, scaler::PodCounter, scaler::ScaleTarget {
 public:
  const char* name() const override { return "none (control plane only)"; }
  controller::RevisionBackend& backend() override { return backend_; }
  scaler::PodCounter& podCounter() override { return *this; }
  scaler::ScaleTarget& scaleTarget() override { return *this; }
  void setEndpointsListener(EndpointsListener) override {}
  Status start() override { return Status::ok(); }
  void stop() override {}

  int readyPods(const std::string&) override { return 0; }
  void setDesiredScale(const std::string&, int) override {}
  void scaleStatusChanged(const std::string&, const scaler::ScaleOutcome&) override {}

 private:
  controller::ImmediateRevisionBackend backend_;
};

}  // namespace

StatusOr<std::unique_ptr<Runtime>> makeRuntime(const std::string& mode, const Config& config,
                                               store::Store& store, TimeSource& clock,
                                               EventRecorder& events) {
  if (mode == "none") return std::unique_ptr<Runtime>(new ControlPlaneOnly());
  if (mode == "containerd") return makeContainerdRuntime(config, store, clock, events);
  std::string why;
  if (containerdAvailable(config, clock, &why)) return makeContainerdRuntime(config, store, clock, events);
  LOG(WARNING) << "runtime auto: " << why
               << "; running the control plane only (revisions report Ready without pods)";
  return std::unique_ptr<Runtime>(new ControlPlaneOnly());
}

}  // namespace knap::daemon
