// PodDriver: the blocking, per-pod operations the PodRunner needs from a
// container runtime. ContainerdPodDriver implements it with containerd +
// runc + CNI; unit tests use a fake.
//
// Thread safety: implementations must accept concurrent calls for DIFFERENT
// pods from several threads; the runner never issues two calls for the same
// pod at once, except wait(), which runs on its own thread for the whole life
// of the task and may overlap with stop()/probe()/destroy() of that pod.
// Every call may block (network, gRPC, runc); none may be called with the
// runner's lock held.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "runtime/pod/probe.h"
#include "runtime/pod/volume_files.h"

namespace knap::runner {

// Labels knap puts on every pod container (CONTAINERD-CLIENT.md §6).
inline constexpr char kRevisionLabel[] = "knap.dev/revision";
inline constexpr char kNamespaceLabel[] = "knap.dev/namespace";
inline constexpr char kPodLabel[] = "knap.dev/pod";
inline constexpr char kIpLabel[] = "knap.dev/ip";

// What one pod reads from Secrets and ConfigMaps, resolved just before it is
// created (PodRunnerOptions::resolve_objects): envFrom variables in order,
// env[].valueFrom secretKeyRef/configMapKeyRef values by env name, and the
// files of secret/configMap/projected volumes by volume name.
// env_from/env_refs are the serving container's; sidecar_env has the other
// containers' by container name.
struct PodObjectValues {
  std::vector<std::pair<std::string, std::string>> env_from;
  std::map<std::string, std::string> env_refs;
  struct ContainerEnv {
    std::vector<std::pair<std::string, std::string>> env_from;
    std::map<std::string, std::string> env_refs;
  };
  std::map<std::string, ContainerEnv> sidecar_env;
  std::map<std::string, std::vector<runtime::VolumeFile>> volumes;
};

struct PodRequest {
  nlohmann::json revision;  // the full defaulted Revision object
  std::string ns;           // revision namespace
  std::string revision_name;
  std::string image;  // the serving container's image (runtime::servingContainerIndex)
  // spec.containers[i].image of every container, in order (pinned by the
  // ImageGate); empty: a single container running `image`.
  std::vector<std::string> images;
  std::string pod_id;                         // unique container id, e.g. "<ns>_<rev>-<random>"
  std::map<std::string, std::string> labels;  // added to the knap labels
  PodObjectValues objects;
};

struct PodHandle {
  std::string pod_id;
  std::string ns;
  std::string revision_name;
  std::string ip;            // on knap's bridge
  int port = 8080;           // the serving port (PORT)
  uint32_t pid = 0;          // after start()
  std::string image_digest;  // "<repo>@sha256:..." of the image used
  // Multi-container pods: every container's digest ref, in spec order.
  std::vector<std::string> image_digests;
};

struct PodExit {
  int exit_code = 0;  // 128+signal when killed by a signal
  bool oom_killed = false;
  std::string log_tail;   // the last lines of stdout/stderr, for status messages
  std::string container;  // a sidecar's name when a sidecar exited; "" for the serving container
};

// A pod found in the runtime (after a knapd restart).
struct AdoptedPod {
  PodHandle handle;
  bool running = false;  // task RUNNING (or PAUSED): can be adopted
  bool paused = false;   // frozen (cgroup freezer or task PAUSED): a warm pod (never adopted)
};

class PodDriver {
 public:
  virtual ~PodDriver() = default;

  // Network namespace, container and task created, process not started.
  // Errors: kNotFound when the image is not in the runtime (message says how
  // to import it); kInvalidArgument when the spec cannot be built; others as
  // the runtime reports them. On failure nothing is left behind (best effort).
  virtual StatusOr<PodHandle> create(const PodRequest& request) = 0;
  // Starts the created task; fills nothing in (pid is reported via handle
  // updates by the caller). Returns the pid.
  virtual StatusOr<uint32_t> start(const PodHandle& pod) = 0;
  // Blocks until the pod's process exits, or that of any of its sidecar
  // containers (PodExit::container names it) (call before start(), from a thread
  // of its own). kUnavailable if the wait was abandoned (cancelWait) or the
  // runtime went away; kNotFound if the task does not exist.
  virtual StatusOr<PodExit> wait(const PodHandle& pod) = 0;
  // Makes a blocked wait() for `pod` return (kUnavailable). Non-blocking.
  virtual void cancelWait(const PodHandle& pod) = 0;
  // SIGTERM, then SIGKILL after `grace` if still running. OK if already exited.
  virtual Status stop(const PodHandle& pod, Duration grace) = 0;
  // Task delete, rootfs snapshot, container record, network namespace and
  // per-pod files. Idempotent: parts already gone are fine.
  virtual Status destroy(const PodHandle& pod) = 0;
  // One readiness/liveness attempt.
  virtual runtime::ProbeResult probe(const PodHandle& pod, const runtime::ProbeSpec& spec) = 0;
  // Freezes every process of the pod (the cgroup freezer); used for frozen
  // warm pods. kNotFound if there is no task.
  virtual Status pause(const PodHandle& pod) = 0;
  // Thaws a paused pod; on the frozen-pool wake path, so it must be fast.
  // kNotFound if there is no task.
  virtual Status resume(const PodHandle& pod) = 0;
  // True when resume() is a quick local operation (a cgroup write, no RPC),
  // so it may run on a latency-sensitive caller's thread (PodRunner::wakeNow).
  virtual bool fastResume() const { return false; }
  // Memory charged to the pod's cgroup now (cgroup v1 memory.usage_in_bytes),
  // in bytes. kNotFound when the pod has no cgroup (no task).
  virtual StatusOr<int64_t> memoryBytes(const PodHandle& pod) = 0;
  // Brings the files of the pod's secret/configMap/projected volumes up to
  // date (an atomic swap per changed volume, as the kubelet does); volumes
  // whose files are unchanged are left alone. Drivers without such volumes
  // need not override it.
  virtual Status updateVolumes(const PodHandle& pod,
                               const std::map<std::string, std::vector<runtime::VolumeFile>>& volumes) {
    (void)pod;
    (void)volumes;
    return Status::ok();
  }
  // Every pod container knap created (by labels), with its task state.
  virtual StatusOr<std::vector<AdoptedPod>> listExisting() = 0;
  // Removes network namespaces, IP leases, snapshots and files of pods not
  // in `live_pod_ids`. Continues past failures; returns the first.
  virtual Status cleanupOrphans(const std::set<std::string>& live_pod_ids) = 0;
};

}  // namespace knap::runner
