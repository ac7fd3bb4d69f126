// ContainerdPodDriver: PodDriver on containerd 1.6 + runc + CNI
// (CONTAINERD-CLIENT.md §3, §6, §7).
//
// create(): image record from containerd by name (kNotFound: "image X not
// found: import it with `knap image import FILE`"), then under a lease:
// netns + address (CniNetwork), per-pod files under
// <data_dir>/pods/<pod id>/ (hostname, hosts, resolv.conf, stdout.log,
// stderr.log, meta.json, tmp/ — the container's /tmp, 1777), rootfs snapshot, spec (buildOciSpec), container
// record with the knap.dev/* labels, task (created, not started). Everything
// made so far is removed again on failure.
// Sidecars (every container but the serving one, pod_driver.h): created after
// the serving container's task, in the same network namespace with the same
// hosts files and volumes, each with its own image, rootfs snapshot, OCI spec
// (buildOciSpec with its container_index), cgroup /<parent>/<sidecar id> and
// logs in <pod dir>/containers/<name>/. start() starts them first; wait()
// ends at the first exit of any container (PodExit::container names a
// sidecar); stop(), destroy(), pause() and resume() act on all of them;
// probes and exec run in the serving container. cleanupOrphans() removes
// sidecar containers whose pod is gone.
// wait(): Tasks.Wait; on exit, OOM is read from the pod's memory cgroup
// (cgroup v1 memory.oom_control oom_kill / memory.failcnt with exit 137) and
// the last log lines are attached.
// stop(): SIGTERM, SIGKILL (all processes) after the grace period.
// destroy(): kill if needed, Tasks.Delete, Snapshots.Remove, Containers.Delete,
// netns teardown, pod directory removal; NOT_FOUND at each step is fine.
// pause()/resume(): the cgroup freezer of every container of the pod, written
// by knapd itself (cgroup v1 freezer.state, v2 cgroup.freeze; what `runc
// pause` does) rather than through Tasks.Pause/Resume: a thaw is then one
// write(2), not containerd -> shim -> a `runc resume` process (5-30 ms here),
// and it is on the frozen-pool wake path. containerd is not told, so the task
// stays RUNNING in containerd while frozen; listExisting() reads the freezer
// to report it paused, and stop()/destroy() thaw a frozen cgroup first. With
// no freezer hierarchy at /sys/fs/cgroup (e.g. a systemd cgroup driver) it
// falls back to Tasks.Pause/Resume.
// probe(): TCP/HTTP from the host into the pod's netns; exec probes run the
// command in the container with Tasks.Exec (the container's process spec with
// the probe's args; output to <pod dir>/exec.log), killed after the timeout.
// memoryBytes(): <cgroup memory>/<parent>/<pod id>/memory.usage_in_bytes.
// Logs are rotated (copy to .1, truncate in place: the shim keeps its
// O_APPEND fd) when checked at probe time and larger than log_rotate_bytes.
//
// Thread safety: all methods may be called concurrently for different pods
// (see pod_driver.h). stop() waits for the exit in real time (it must, to
// give the container its grace period); that is the only waiting it does.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/containerd/containerd_client.h"
#include "runtime/pod/cni.h"
#include "runtime/runner/pod_driver.h"

namespace knap::runner {

inline constexpr char kImageDigestLabel[] = "knap.dev/image-digest";
inline constexpr char kPortLabel[] = "knap.dev/port";
// Multi-container pods: the serving container keeps the pod id; every other
// container ("sidecar") is a container of its own, id "<pod id>.<index in
// spec.containers>", labelled knap.dev/pod and knap.dev/container (its name)
// but not knap.dev/revision (listExisting() lists pods, not containers); the
// pod's container lists them in knap.dev/sidecars.
inline constexpr char kContainerLabel[] = "knap.dev/container";
inline constexpr char kSidecarsLabel[] = "knap.dev/sidecars";
inline constexpr char kImageDigestsLabel[] = "knap.dev/image-digests";  // every container's, comma-separated

struct ContainerdPodDriverOptions {
  std::string data_dir = "/var/lib/knap";  // pod files under <data_dir>/pods/<pod id>/
  std::string host_resolv_conf = "/etc/resolv.conf";
  std::string cgroup_parent = "knap";  // cgroupsPath /<parent>/<pod id>
  // Absolute path of knap-logdrain (runtime/logdrain): the shim runs it for
  // each pod (stdio "binary://..."), so output is drained even when the disk
  // is full or knapd is down, and it rotates at log_rotate_bytes. Empty: the
  // shim writes straight into stdout.log/stderr.log (a full disk then blocks
  // the pod) and the driver copy-truncates them at probe time.
  std::string log_driver;
  int64_t log_rotate_bytes = 10 << 20;
  Duration log_check_interval = std::chrono::seconds(10);
  Duration lease_expiry = std::chrono::hours(1);
  int log_tail_lines = 20;
  // Each container's /tmp is a tmpfs of its memory limit (resources.limits
  // .memory), or of this size when it has none.
  int64_t tmp_bytes = 64 << 20;
};

// The last `lines` lines (at most 2 KiB) of a file; "" if unreadable.
std::string fileTail(const std::string& path, int lines);

// Reads `rel` (e.g. "etc/passwd") inside an image layer directory `root`
// without trusting the layer: every component is opened relative to `root`
// with O_NOFOLLOW, so no symlink is followed (neither to a host file nor
// within the layer), and only a regular file of at most `max_bytes` is read
// (never a FIFO or device, which could hang or never end). nullopt: the layer
// has no such path (ENOENT/ENOTDIR on a component). A symlink, whiteout or
// other non-regular file at `rel`, or a symlinked directory on the way, is
// kFailedPrecondition; a larger file is kResourceExhausted naming the limit.
inline constexpr int64_t kMaxImageUserFileBytes = 1 << 20;
StatusOr<std::optional<std::string>> readLayerFile(const std::string& root, const std::string& rel,
                                                   int64_t max_bytes = kMaxImageUserFileBytes);

// `rel` as a container on these layers (topmost first) sees it: the first
// layer that has the path decides. Present and readable: its text. Absent in
// every layer, or shadowed by something that is not a regular file (a
// symlink, a whiteout): nullopt (logged), as if the image had no such file.
// Too large: the error.
StatusOr<std::optional<std::string>> readFromLayers(const std::vector<std::string>& layer_dirs,
                                                    const std::string& rel);

class ContainerdPodDriver final : public PodDriver {
 public:
  // `client` carries knap's namespace; `network` must outlive the driver.
  ContainerdPodDriver(containerd::ContainerdClient client, runtime::CniNetwork& network,
                      const TimeSource& time, ContainerdPodDriverOptions options = {});

  StatusOr<PodHandle> create(const PodRequest& request) override;
  StatusOr<uint32_t> start(const PodHandle& pod) override;
  Status updateVolumes(const PodHandle& pod,
                       const std::map<std::string, std::vector<runtime::VolumeFile>>& volumes) override;
  StatusOr<PodExit> wait(const PodHandle& pod) override;
  void cancelWait(const PodHandle& pod) override;
  Status stop(const PodHandle& pod, Duration grace) override;
  Status destroy(const PodHandle& pod) override;
  runtime::ProbeResult probe(const PodHandle& pod, const runtime::ProbeSpec& spec) override;
  Status pause(const PodHandle& pod) override;
  Status resume(const PodHandle& pod) override;
  bool fastResume() const override { return freezer() != Freezer::kContainerd; }
  StatusOr<int64_t> memoryBytes(const PodHandle& pod) override;
  StatusOr<std::vector<AdoptedPod>> listExisting() override;
  Status cleanupOrphans(const std::set<std::string>& live_pod_ids) override;

  std::string podDir(const std::string& pod_id) const;
  // Copy-truncate rotation of the pod's logs if larger than the limit
  // (only without a log_driver, which rotates by itself).
  void rotateLogs(const std::string& pod_id);
  // Runs `command` in the pod's container (exec probes); kDeadlineExceeded
  // when it ran longer than `timeout` (it is killed).
  StatusOr<runtime::ExecOutcome> execInPod(const PodHandle& pod, const std::vector<std::string>& command,
                                           Duration timeout);
  // The Tasks.Create stdio URI for knap-logdrain writing into `dir`.
  static std::string logDriverUri(const std::string& driver, const std::string& dir, int64_t max_bytes);

 private:
  struct Sidecar {
    std::string id;    // containerd container id
    std::string name;  // spec.containers[].name
  };
  static std::string sidecarId(const std::string& pod_id, int index);
  // The pod's sidecar containers (cached; after a restart, from containerd's labels).
  std::vector<Sidecar> sidecars(const std::string& pod_id);
  // wait() for one container of the pod (`name` "" and `log_dir` "" for the serving one).
  StatusOr<PodExit> waitContainer(const PodHandle& pod, const std::string& id, const std::string& name,
                                  const std::string& log_dir);
  bool waitExited(const std::string& pod_id, Duration timeout);
  bool taskStopped(const std::string& pod_id);
  std::string cgroupDir(const std::string& controller, const std::string& pod_id) const;
  // The cgroup freezer (see pause()/resume() above).
  enum class Freezer { kV1, kV2, kContainerd };
  Freezer freezer() const;
  std::string freezerFile(const std::string& container_id) const;
  Status freezeCgroup(const std::string& container_id);
  Status thawCgroup(const std::string& container_id);
  bool cgroupFrozen(const std::string& container_id) const;
  // Thaws whichever of the containers' cgroups is frozen (before a signal:
  // a frozen cgroup v1 task does not act on SIGTERM or SIGKILL until thawed).
  void thawIfFrozen(const std::vector<std::string>& container_ids);
  // The "process" object of the pod's OCI spec (cached per pod).
  StatusOr<nlohmann::json> processSpec(const std::string& pod_id);

  containerd::ContainerdClient client_;
  runtime::CniNetwork& network_;
  const TimeSource& time_;
  ContainerdPodDriverOptions options_;

  std::mutex mu_;
  std::condition_variable exit_cv_;
  std::map<std::string, std::shared_ptr<containerd::CallCanceller>> cancellers_;
  std::set<std::string> exited_;                          // wait() returned for these pods
  std::map<std::string, MonoTime> log_checked_;           // last rotation check
  std::map<std::string, nlohmann::json> process_specs_;   // processSpec() cache
  uint64_t exec_counter_ = 0;                             // exec ids
  std::map<std::string, std::vector<Sidecar>> sidecars_;  // by pod id
  std::map<std::string, bool> pod_waits_;                 // multi-container wait() running: abandoned?
};

}  // namespace knap::runner
