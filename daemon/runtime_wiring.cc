#include "daemon/runtime_wiring.h"

#include "common/log.h"
#include "controller/immediate_revision_backend.h"

namespace knap::daemon {
namespace {

// --runtime none: revisions report Ready without pods (API and controller work only).
class ControlPlaneOnly final : public Runtime {
 public:
  const char* name() const override { return "none (control plane only)"; }
  controller::RevisionBackend& backend() override { return backend_; }
  Status start() override { return Status::ok(); }
  void stop() override {}

 private:
  controller::ImmediateRevisionBackend backend_;
};

}  // namespace

StatusOr<std::unique_ptr<Runtime>> makeRuntime(const std::string& mode, const Config& config, store::Store& store,
                                               TimeSource& clock) {
  if (mode == "none") return std::unique_ptr<Runtime>(new ControlPlaneOnly());
  if (mode == "containerd") {
    return Status(Code::kUnsupported, "--runtime containerd: the pod runner is not built yet; use --runtime none");
  }
  LOG(INFO) << "runtime auto: the containerd pod runner is not built yet; running the control plane only";
  return std::unique_ptr<Runtime>(new ControlPlaneOnly());
}

}  // namespace knap::daemon
