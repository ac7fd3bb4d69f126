// buildOciSpec: the OCI runtime spec (config.json) of one revision pod.
//
// A pure function of its input: no I/O, no clock, safe from any thread. The
// pod runner reads the image config and the rootfs /etc/passwd and /etc/group,
// writes the per-pod resolv.conf/hosts/hostname files, creates the netns, and
// then calls buildOciSpec; the result goes unchanged into Containers.Create.
//
// Policy (Knative runtime contract, KNATIVE-CONTRACT.md §1; containerd's
// default spec, CONTAINERD-CLIENT.md §5), decided here once:
// - args: like Kubernetes: `command` replaces the image Entrypoint (and drops
//   its Cmd); `args` replaces the Cmd; $(VAR) references to container env vars
//   are expanded, $$ is a literal $.
// - env: image Env, then the container's envFrom variables (resolved by the
//   caller: env_from), then its env (same names replace in place; a
//   secretKeyRef/configMapKeyRef value comes from env_refs, and an optional
//   reference that resolved to nothing defines nothing), then PORT,
//   K_SERVICE, K_CONFIGURATION, K_REVISION (PORT only in the serving container,
//   as Knative's makeServingContainer; K_* in every container). PATH is added
//   when the image has none.
// - multi-container pods: one spec per container (PodSpecInput::container_index),
//   all joining the pod's network namespace; the serving container is the one
//   with `ports` (servingContainerIndex).
// - user: securityContext runAsUser/runAsGroup (container over pod) > image
//   USER resolved via the rootfs passwd/group > root. additionalGids = the
//   primary gid, the groups listing the user in /etc/group, then the pod's
//   supplementalGroups. runAsNonRoot with uid 0 is an error.
// - resources (Kubernetes' kubelet behaviour, cgroup v1): limits.memory ->
//   memory.limit; limits.cpu -> cpu.quota = millicores*100 (min 1000), period
//   100000; cpu.shares = max(2, requests.cpu millicores * 1024 / 1000), where
//   requests default to limits and no cpu request at all gives 2 shares, as a
//   BestEffort Kubernetes pod gets.
// - RLIMIT_NOFILE soft = hard = PodSpecInput::nofile_limit (default 1024, as
//   containerd's default spec; the runner may pass maxNofileForPods()).
// - volumeMounts of emptyDir volumes become tmpfs mounts (mode 1777, size =
//   sizeLimit; medium "" and Memory alike), or bind mounts of the shared
//   host tmpfs in empty_dir_dirs (multi-container pods); secret, configMap and projected
//   volumes are read-only bind mounts of the host directories in volume_dirs
//   (runtime/pod/volume_files.h), or of the file or directory subPath names
//   inside it (relative, no ".."; not on emptyDir volumes); other volume sources are kInvalidArgument
//   "not supported".
// - No seccomp profile (Kubernetes' default is Unconfined); no /dev/console.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace knap::runtime {

struct PodSpecInput {
  // The defaulted Revision object ({metadata, spec}). A bare RevisionSpec
  // ({containers: [...]}) is accepted too.
  nlohmann::json revision;
  // Which of spec.containers this spec is for; -1: the serving container
  // (servingContainerIndex).
  int container_index = -1;
  // The image config: either the whole OCI image config blob ({"config": {...}})
  // or its "config" object ({Entrypoint, Cmd, Env, User, WorkingDir}).
  nlohmann::json image_config;
  std::string service_name;        // K_SERVICE ("" when the Revision has no Service)
  std::string configuration_name;  // K_CONFIGURATION
  std::string revision_name;       // K_REVISION
  std::string pod_id;              // container id; hostname (first 63 characters)
  // Path of the pod's network namespace (/var/run/netns/knap-<id>). Empty: a
  // new, empty network namespace (loopback only).
  std::string netns_path;
  // Contents of the rootfs /etc/passwd and /etc/group, when the image has them.
  std::optional<std::string> etc_passwd;
  std::optional<std::string> etc_group;
  // Host files bind-mounted read-only over /etc/resolv.conf, /etc/hosts and
  // /etc/hostname; an empty path leaves the image's own file.
  std::string resolv_conf_path;
  std::string hosts_path;
  std::string hostname_path;
  // Host directory (mode 1777) bind-mounted at /tmp. Empty: a tmpfs — but
  // runc gives a tmpfs the mode of the directory it covers, so an image whose
  // /tmp is 0755 would get a 0755 /tmp; the runner passes a directory so that
  // /tmp is 1777 whatever the image has (Knative runtime contract).
  std::string tmp_dir;
  std::string cgroups_path;  // default "/knap/<pod_id>"
  std::string pod_ip;        // for env valueFrom.fieldRef status.podIP (optional)
  // RLIMIT_NOFILE of the container process. runc fails to start the container
  // ("error setting rlimit type 7: operation not permitted") when this exceeds
  // the shim's hard limit and CAP_SYS_RESOURCE is missing, as in some sandboxes.
  uint64_t nofile_limit = 1024;
  // What this container reads from Secrets and ConfigMaps, resolved by
  // the caller (api/pod_objects.h through the pod runner's resolver):
  // envFrom variables in order, and env[].valueFrom secretKeyRef /
  // configMapKeyRef values by env name (absent: an optional reference to
  // something missing). A reference without a value here and not optional in
  // the spec is kInvalidArgument.
  std::vector<std::pair<std::string, std::string>> env_from;
  std::map<std::string, std::string> env_refs;
  // Host directories with the files of secret/configMap/projected volumes, by volume name.
  std::map<std::string, std::string> volume_dirs;
  // emptyDir volumes shared by a pod's containers: host directories (tmpfs
  // mounts the runner made) bound in instead of a tmpfs per container.
  std::map<std::string, std::string> empty_dir_dirs;
};

// Which of a RevisionSpec's containers serves: with several, the first one
// that has a non-empty `ports` list (Knative's validation allows exactly one);
// else 0. `containers` may be anything (then 0).
int servingContainerIndex(const nlohmann::json& containers);

// Contents of the per-pod files the runner writes (mode 0644) and passes as
// resolv_conf_path / hosts_path / hostname_path:
// - hostname: the pod id's first 63 characters and a newline;
// - hosts: localhost entries plus "<pod ip>\t<hostname>";
// - resolv.conf: the host's resolv.conf without loopback nameservers (127.x,
//   ::1: unreachable from a pod's netns, e.g. systemd-resolved's 127.0.0.53);
//   when none is left, a comment says so (pods then have no DNS).
struct PodHostFiles {
  std::string resolv_conf;
  std::string hosts;
  std::string hostname;
};
PodHostFiles makePodHostFiles(const std::string& pod_id, const std::string& pod_ip,
                              const std::string& host_resolv_conf);

// min(1048576, this process's RLIMIT_NOFILE hard limit): the largest limit a
// pod can be given when containerd runs with the same limits as knapd.
uint64_t maxNofileForPods();

// Returns the spec, or kInvalidArgument naming the offending field (e.g.
// "env[2].valueFrom.secretKeyRef: secrets are not supported by knap yet",
// "no command: the image has no Entrypoint or Cmd and the container sets no
// command", "image USER \"app\": no such user in /etc/passwd").
StatusOr<nlohmann::json> buildOciSpec(const PodSpecInput& in);

// --- Pieces of the policy, exposed for tests and for other callers ----------

// A Kubernetes quantity ("128Mi", "1G", "500M", "1e9", "0.5Gi", "100m") as a
// whole number of units, rounded up (so "100m" bytes is 1). kInvalidArgument
// on syntax errors, negative values and overflow.
StatusOr<int64_t> parseQuantity(const std::string& quantity);
// A CPU quantity ("1", "500m", "0.5", "2.25") in millicores, rounded up.
StatusOr<int64_t> parseMilliCpu(const std::string& quantity);
// A quantity given as a JSON string or number.
StatusOr<int64_t> parseQuantityJson(const nlohmann::json& value);
StatusOr<int64_t> parseMilliCpuJson(const nlohmann::json& value);

struct ResolvedUser {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> additional_gids;
};

// Resolves an image USER string ("", "name", "uid", "uid:gid", "name:group",
// ...) against the passwd/group texts, like containerd's WithUser +
// WithAdditionalGIDs. kInvalidArgument for unknown names.
StatusOr<ResolvedUser> resolveImageUser(const std::string& user, const std::optional<std::string>& etc_passwd,
                                        const std::optional<std::string>& etc_group);

// Kubernetes $(VAR) expansion: $(NAME) becomes the value when NAME is in
// `vars`, stays as written otherwise; $$ becomes $.
std::string expandVars(const std::string& s, const std::vector<std::pair<std::string, std::string>>& vars);

}  // namespace knap::runtime
