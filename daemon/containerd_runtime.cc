#include "daemon/containerd_runtime.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>

#include "api/pod_objects.h"
#include "api/server/service_account_token.h"
#include "common/base64.h"
#include "common/log.h"

#ifdef KNAP_HAVE_RUNNER_CONTAINERD
#include "images/image_gc.h"
#include "images/pre_puller.h"
#include "images/registry_puller.h"
#include "runtime/containerd/containerd_client.h"
#include "runtime/containerd/containerd_image_store.h"
#include "runtime/containerd/image_import.h"
#include "runtime/pod/cni.h"
#include "runtime/pod/oci_spec.h"
#include "runtime/runner/containerd_pod_driver.h"
#include "runtime/runner/image_gate.h"
#include "runtime/runner/pod_runner.h"
#endif

namespace knap::daemon {

#ifdef KNAP_HAVE_RUNNER_CONTAINERD
namespace {

containerd::ContainerdClient::Options clientOptions(const Config& config) {
  containerd::ContainerdClient::Options o;
  o.address = "unix://" + config.knap.containerd_socket;
  o.ns = config.knap.containerd_namespace;
  return o;
}

// containerd's state lives here; image GC watches the disk that holds it.
constexpr char kContainerdRoot[] = "/var/lib/containerd";

// Image GC's view of containerd's image records (knap's namespace).
class ContainerdImageInventory final : public images::ImageInventory {
 public:
  explicit ContainerdImageInventory(containerd::ContainerdClient client) : client_(std::move(client)) {}
  StatusOr<std::vector<images::StoredImage>> list() override {
    KNAP_ASSIGN_OR_RETURN(std::vector<containerd::ImageRecord> records, client_.listImages());
    std::vector<images::StoredImage> out;
    for (const auto& r : records) out.push_back({r.name, r.target.digest, r.created_at, r.updated_at});
    return out;
  }
  // Synchronous: containerd's GC has freed the content and snapshots when it returns.
  Status remove(const std::string& name) override { return client_.deleteImage(name, /*sync=*/true); }

 private:
  containerd::ContainerdClient client_;
};

class ContainerdRuntime final : public Runtime {
 public:
  ContainerdRuntime(const Config& config, store::Store& store, TimeSource& clock, EventRecorder& events)
      : store_(store),
        events_(events),
        client_(clientOptions(config), clock),
        network_(cniOptions(config), clock),
        driver_(client_, network_, clock, driverOptions(config)),
        runner_(driver_, clock, runnerOptions(config, events, store)),
        inventory_(client_) {}
  ~ContainerdRuntime() override { stop(); }  // no thread may call into the gate once it is gone

  // Images (issue 5): the registry puller, the pre-puller, the image gate in
  // front of the pod runner and image GC. kInvalidArgument for a bad
  // platform or an unreadable registry auth/CA file.
  Status initImages(const Config& config, TimeSource& clock) {
    KNAP_ASSIGN_OR_RETURN(puller_, images::makeRegistryPuller(
                                       config, std::make_unique<containerd::ContainerdImageStore>(client_),
                                       clock, &pull_credentials_));
    pre_puller_ = std::make_unique<images::PrePuller>(
        *puller_, [this](const std::string& ref) { return imagePresent(ref); }, clock,
        images::prePullerOptionsFromConfig(config));
    gate_ = std::make_unique<runner::ImageGate>(runner_, *pre_puller_, events_);
    gate_->setRequesterHook([this](const std::string& key, const nlohmann::json* revision) {
      if (revision == nullptr)
        pull_credentials_.release(key);
      else
        pull_credentials_.set(key, pullSecretsOf(*revision));
    });
    std::string root = ::access(kContainerdRoot, F_OK) == 0 ? kContainerdRoot : config.knap.data_dir;
    gc_ = std::make_unique<images::ImageGc>(
        inventory_, [root] { return images::diskUsageOf(root); }, [this] { return imagesInUse(); }, clock,
        images::imageGcOptionsFromConfig(config));
    return Status::ok();
  }

  const char* name() const override { return "containerd"; }
  controller::RevisionBackend& backend() override { return *gate_; }
  scaler::PodCounter& podCounter() override { return runner_; }
  scaler::ScaleTarget& scaleTarget() override { return runner_; }
  void setEndpointsListener(EndpointsListener fn) override {
    runner_.setOnEndpointsChanged([this, fn](const std::string& revision) {
      std::vector<router::Endpoint> eps;
      runner::WakeReport wake;
      uint64_t version = 0;
      for (const auto& e : runner_.readyEndpoints(revision, &wake, &version)) {
        eps.push_back(router::Endpoint{e.ip, static_cast<uint16_t>(e.port)});
      }
      fn(revision, eps, router::WakeInfo{wake.path, wake.image_ready_at}, version);
    });
  }
  // Warm pool (issue 5): the runner's pool status, as router metrics.
  void setWarmPoolListener(WarmPoolListener fn) override {
    runner_.setOnWarmPoolChanged([this, fn](const std::string& revision) {
      runner::WarmPoolStatus w = runner_.warmPool(revision);
      fn(revision, router::WarmPoolStats{w.mode, w.pods, w.memory_bytes});
    });
  }

  StatusOr<RestartedPods> restartPods(const std::string& ns, const std::string& name) override {
    runner::RestartResult r = runner_.restart(runner::PodRunner::key(ns, name));
    return RestartedPods{std::move(r.pods), r.warm_pods};
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
    pre_puller_->start();  // pulls knap.pre-pull-images now
    gc_->start();
    return Status::ok();
  }
  void stop() override {  // pods keep running; adopted on the next start; idempotent
    if (gc_) gc_->stop();
    if (pre_puller_) pre_puller_->stop();
    runner_.stop();
  }

 private:
  static runtime::CniOptions cniOptions(const Config& config) {
    runtime::CniOptions o;
    o.bridge = config.knap.bridge_name;
    o.subnet = config.knap.pod_subnet;
    o.ipam_data_dir = config.knap.data_dir + "/cni";
    // Another knapd on this machine (tests on their own bridge) tears down
    // every "knap-<pod id>" netns it does not know as an orphan. Off the
    // default bridge, names are "knap-<bridge>+<pod id>": '+' is no pod id
    // character, so no other instance takes them for its own.
    if (config.knap.bridge_name != "knap0") o.netns_prefix = "knap-" + config.knap.bridge_name + "+";
    return o;
  }
  static runner::PodRunnerOptions runnerOptions(const Config& config, EventRecorder& events,
                                                store::Store& store) {
    runner::PodRunnerOptions o = runner::optionsFromConfig(config);
    o.events = &events;
    o.resolve_objects = objectsResolver(store, config.knap.data_dir + "/service-account.key");
    return o;
  }
  // Secrets and ConfigMaps for a Revision's pods: api/pod_objects.h over the
  // store, for every container (the serving one's in env_from/env_refs, the
  // others' in sidecar_env).
  // Projected serviceAccountToken volumes get tokens signed with the key at
  // `token_key` (the one the API server accepts them with).
  static runner::PodObjectsResolver objectsResolver(store::Store& store, const std::string& token_key) {
    auto tokens = std::make_shared<std::optional<StatusOr<api::ServiceAccountTokens>>>();
    auto tokens_mu = std::make_shared<std::mutex>();
    api::TokenIssuer issue = [tokens, tokens_mu, token_key](const std::string& ns, const std::string& sa,
                                                            const std::string& audience,
                                                            int64_t seconds) -> StatusOr<std::string> {
      std::lock_guard<std::mutex> l(*tokens_mu);
      if (!tokens->has_value() || !(**tokens).isOk())
        *tokens = api::ServiceAccountTokens::loadOrCreate(token_key);
      if (!(**tokens).isOk()) return (**tokens).status();
      return (**tokens)->issue(ns, sa, audience, seconds, static_cast<int64_t>(::time(nullptr)));
    };
    return [&store, issue](const nlohmann::json& revision, const std::string& ns,
                           runner::PodObjectsFailure* failure) -> std::optional<runner::PodObjectValues> {
      const nlohmann::json& spec = revision.contains("spec") ? revision["spec"] : revision;
      if (!api::readsObjects(spec)) return runner::PodObjectValues{};
      api::ObjectLookup lookup = [&store, &ns](const std::string& kind,
                                               const std::string& name) -> std::optional<nlohmann::json> {
        auto got = store.get({kind, ns, name});
        if (!got.isOk()) return std::nullopt;
        return std::move(got->body);
      };
      api::PodObjectsError error;
      auto resolved = api::resolvePodObjects(spec, ns, lookup, &error, issue);
      if (!resolved) {
        failure->reason = error.reason;
        failure->message = error.message;
        return std::nullopt;
      }
      runner::PodObjectValues out;
      const nlohmann::json containers = spec.value("containers", nlohmann::json::array());
      const int serving = runtime::servingContainerIndex(containers);
      for (size_t i = 0; containers.is_array() && i < containers.size(); ++i) {
        if (!containers[i].is_object()) continue;
        const std::string container = containers[i].value("name", "");
        auto env = resolved->env.find(container);
        if (env == resolved->env.end()) continue;
        if (static_cast<int>(i) == serving) {
          out.env_from = env->second.from_env_from;
          out.env_refs = env->second.from_refs;
        } else {
          out.sidecar_env[container] = {env->second.from_env_from, env->second.from_refs};
        }
      }
      for (auto& [volume, files] : resolved->volumes) {
        auto& dst = out.volumes[volume];
        for (auto& f : files) dst.push_back({f.path, f.data, f.mode});
      }
      return out;
    };
  }
  // knap-logdrain: installed in <prefix>/libexec/knap next to <prefix>/bin/knapd,
  // or in the build tree (build/runtime/logdrain next to build/daemon).
  static std::string findLogDriver() {
    std::error_code ec;
    std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      const std::filesystem::path dir = exe.parent_path();
      for (const auto& c : {dir / "knap-logdrain", dir / "../libexec/knap/knap-logdrain",
                            dir / "../runtime/logdrain/knap-logdrain"}) {
        if (::access(c.c_str(), X_OK) == 0) return std::filesystem::weakly_canonical(c, ec).string();
      }
    }
    LOG(WARNING) << "knap-logdrain not found next to knapd: pod output goes straight into files, and a full "
                    "disk will block pods that log";
    return "";
  }
  static runner::ContainerdPodDriverOptions driverOptions(const Config& config) {
    runner::ContainerdPodDriverOptions o;
    o.data_dir = config.knap.data_dir;
    o.log_driver = findLogDriver();
    return o;
  }

  // Present = the image record exists and its layers are unpacked; since
  // when = the record's creation time.
  StatusOr<WallTime> imagePresent(const std::string& ref) {
    auto info = containerd::getImage(client_, ref);
    if (!info.isOk()) return info.status();
    if (!info->unpacked) return notFound("image " + ref + " is not unpacked");
    auto record = client_.getImage(ref);
    return record.isOk() ? record->created_at : WallTime{};
  }

  // What image GC keeps: every image the gate and pre-puller know of, and
  // every stored Revision's image and pinned digest (also those not ensured yet).
  std::set<std::string> imagesInUse() {
    std::set<std::string> out = gate_->imagesInUse();
    auto revisions = store_.list("Revision", "");
    if (!revisions.isOk()) {
      // Without the list nothing is known to be unused: keep everything.
      LOG(WARNING) << "image gc: listing Revisions: " << revisions.status().toString();
      auto all = inventory_.list();
      if (all.isOk()) {
        for (const auto& i : *all) out.insert(i.name);
      }
      return out;
    }
    for (const auto& r : *revisions) {
      const auto& spec = r.body.value("spec", nlohmann::json::object());
      const auto& containers = spec.value("containers", nlohmann::json::array());
      for (const auto& c : containers.is_array() ? containers : nlohmann::json::array()) {
        if (c.is_object() && c.contains("image") && c["image"].is_string())
          out.insert(c["image"].get<std::string>());
      }
      const auto& st = r.body.value("status", nlohmann::json::object());
      const auto& cs = st.value("containerStatuses", nlohmann::json::array());
      for (const auto& c : cs.is_array() ? cs : nlohmann::json::array()) {
        if (c.is_object() && c.contains("imageDigest") && c["imageDigest"].is_string()) {
          out.insert(c["imageDigest"].get<std::string>());
        }
      }
    }
    return out;
  }

  // The registry credentials of a Revision's spec.imagePullSecrets: each
  // named kubernetes.io/dockerconfigjson (or dockercfg) Secret of its
  // namespace, merged (the first Secret naming a host wins). A missing or
  // unusable Secret is logged and skipped, as the kubelet does: the pull then
  // runs without it and its failure names the registry's refusal.
  images::AuthConfig pullSecretsOf(const nlohmann::json& revision) {
    images::AuthConfig out;
    const std::string ns = revision.value("metadata", nlohmann::json::object()).value("namespace", "");
    const nlohmann::json spec = revision.value("spec", nlohmann::json::object());
    const nlohmann::json secrets = spec.value("imagePullSecrets", nlohmann::json::array());
    if (!secrets.is_array()) return out;
    for (const nlohmann::json& ref : secrets) {
      std::string name = ref.is_object() ? ref.value("name", "") : "";
      if (name.empty()) continue;
      auto secret = store_.get({"Secret", ns, name});
      if (!secret.isOk()) {
        LOG(WARNING) << "revision " << ns << "/" << revision["metadata"].value("name", "")
                     << ": imagePullSecrets: secret \"" << name << "\" not found; pulling without it";
        continue;
      }
      const nlohmann::json& body = secret->body;
      std::string type = body.value("type", "");
      const char* data_key = type == "kubernetes.io/dockerconfigjson" ? ".dockerconfigjson"
                             : type == "kubernetes.io/dockercfg"      ? ".dockercfg"
                                                                      : nullptr;
      std::string encoded, decoded;
      if (data_key != nullptr && body.contains("data") && body["data"].is_object())
        encoded = body["data"].value(data_key, "");
      if (data_key == nullptr || !base64Decode(encoded, &decoded)) {
        LOG(WARNING) << "imagePullSecrets: secret " << ns << "/" << name << " is of type \"" << type
                     << "\", not kubernetes.io/dockerconfigjson with a .dockerconfigjson key; skipped";
        continue;
      }
      // .dockercfg is the bare {"host": {...}} map; .dockerconfigjson wraps it in "auths".
      if (type == "kubernetes.io/dockercfg") decoded = "{\"auths\":" + decoded + "}";
      auto parsed = images::parseAuthConfig(decoded);
      if (!parsed.isOk()) {
        LOG(WARNING) << "imagePullSecrets: secret " << ns << "/" << name << ": " << parsed.status().message();
        continue;
      }
      for (auto& [host, cred] : *parsed) out.emplace(host, cred);
    }
    return out;
  }

  store::Store& store_;
  EventRecorder& events_;
  containerd::ContainerdClient client_;
  runtime::CniNetwork network_;
  runner::ContainerdPodDriver driver_;
  runner::PodRunner runner_;
  ContainerdImageInventory inventory_;
  // Destroyed bottom-up: GC and pre-puller threads stop before the gate they call.
  images::PullCredentials pull_credentials_;  // before puller_, which reads it
  std::unique_ptr<images::Puller> puller_;
  std::unique_ptr<runner::ImageGate> gate_;
  std::unique_ptr<images::PrePuller> pre_puller_;
  std::unique_ptr<images::ImageGc> gc_;
};

}  // namespace

bool containerdRuntimeBuilt() {
  return true;
}

bool containerdAvailable(const Config& config, const TimeSource& clock, std::string* why) {
  if (::geteuid() != 0) {
    *why = "knapd is not running as root (pod networking needs it)";
    return false;
  }
  containerd::ContainerdClient client(clientOptions(config), clock);
  auto v = client.version(std::chrono::seconds(2));
  if (!v.isOk()) {
    *why = "containerd does not answer on " + config.knap.containerd_socket + ": " + v.status().message();
    return false;
  }
  return true;
}

StatusOr<std::unique_ptr<Runtime>> makeContainerdRuntime(const Config& config, store::Store& store,
                                                         TimeSource& clock, EventRecorder& events) {
  auto runtime = std::make_unique<ContainerdRuntime>(config, store, clock, events);
  KNAP_RETURN_IF_ERROR(runtime->initImages(config, clock));
  return std::unique_ptr<Runtime>(std::move(runtime));
}

#else

bool containerdRuntimeBuilt() {
  return false;
}

bool containerdAvailable(const Config&, const TimeSource&, std::string* why) {
  *why =
      "knapd was built without the containerd client (grpc++/protobuf or the containerd protos were missing)";
  return false;
}

StatusOr<std::unique_ptr<Runtime>> makeContainerdRuntime(const Config&, store::Store&, TimeSource&,
                                                         EventRecorder&) {
  return Status(Code::kUnsupported, "--runtime containerd: knapd was built without the containerd client");
}

#endif

}  // namespace knap::daemon
