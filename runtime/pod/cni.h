// CniNetwork: one network namespace per pod on a Linux bridge, made with the
// standard CNI plugins (bridge + host-local IPAM, Debian's
// containernetworking-plugins 1.1.1) and iproute2's `ip netns`.
//
// setUp(pod):    ip netns add <prefix><pod>; ip -n <ns> link set lo up;
//                bridge ADD (veth eth0 into the netns, address from host-local)
// tearDown(pod): bridge DEL (releases the lease; tolerates a missing netns);
//                ip netns delete <prefix><pod>
//
// The host-local leases live under options.ipam_data_dir/<network_name>/ (one
// file per address holding "<pod id>\r\n<ifname>"), so they belong to knap
// alone and cleanupOrphans() can find and release them after a crash.
//
// Policy: the bridge is the pods' gateway (isGateway), hairpin mode on, and
// ipMasq on by default so a pod can reach the outside world; knap's own
// traffic to pods goes host -> bridge -> pod and needs no NAT.
//
// Thread safety: all methods may be called concurrently for DIFFERENT pod ids
// (the plugins lock their own state); calls for the same pod id must be
// serialised by the caller. Calls block while the external programs run
// (tens of milliseconds; at most options.plugin_timeout each). Must run as
// root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"

namespace knap::runtime {

struct CniOptions {
  std::string network_name = "knap";  // CNI network name (and lease subdirectory)
  std::string bridge = "knap0";       // at most 15 characters
  std::string subnet = "10.88.0.0/16";
  std::string plugin_dir = "/usr/lib/cni";
  std::string ipam_data_dir = "/var/lib/knap/cni";  // host-local dataDir
  // Where iproute2 keeps named namespaces; `ip netns add` always uses
  // /var/run/netns, so only a different directory for listing in tests makes sense.
  std::string netns_dir = "/var/run/netns";
  std::string netns_prefix = "knap-";  // netns name = prefix + pod id
  std::string ifname = "eth0";
  bool ip_masq = true;
  std::string cni_version = "1.0.0";  // supported by plugins >= 1.0
  Duration plugin_timeout = std::chrono::seconds(30);
};

struct PodNetwork {
  std::string netns_path;  // /var/run/netns/knap-<pod id>
  std::string ip;          // the pod's IPv4 address, e.g. "10.88.0.7"
  int prefix_length = 0;   // e.g. 16
  std::string gateway;     // the bridge address, e.g. "10.88.0.1"
};

class CniNetwork {
 public:
  CniNetwork(CniOptions options, const TimeSource& time);

  // Creates the pod's netns and its interface. Returns the netns path and IP.
  // A netns left over by an earlier attempt for the same pod is torn down and
  // made again. On failure nothing is left behind (best effort) and the error
  // carries the plugin's message: kInvalidArgument for a pod id that is not a
  // valid CNI container id, kResourceExhausted when the subnet is full,
  // kNotFound when a plugin or `ip` is missing, kInternal otherwise.
  StatusOr<PodNetwork> setUp(const std::string& pod_id);

  // Releases the pod's address and deletes its netns. Idempotent: a pod that
  // has no netns or no lease is fine. The container's processes should have
  // exited first (an open netns keeps its veth alive). Returns the first error
  // of the plugin or of `ip netns delete`.
  Status tearDown(const std::string& pod_id);

  // Pod ids that have a netns (names with the prefix in netns_dir), sorted.
  std::vector<std::string> listPodNetworks() const;
  // host-local leases of this network: IP -> pod id (container id in the file).
  std::map<std::string, std::string> listLeases() const;

  // Tears down every pod that has a netns or a lease but is not in
  // live_pod_ids; lease files DEL could not release are removed directly.
  // Continues past failures and returns the first one.
  Status cleanupOrphans(const std::set<std::string>& live_pod_ids);

  std::string netnsName(const std::string& pod_id) const { return options_.netns_prefix + pod_id; }
  std::string netnsPath(const std::string& pod_id) const;
  // The network configuration fed to the bridge plugin on stdin.
  nlohmann::json networkConfig() const;
  const CniOptions& options() const { return options_; }

 private:
  enum class Command { kAdd, kDel };
  StatusOr<std::string> runBridge(Command command, const std::string& pod_id, const std::string& netns_path);
  std::string leaseDir() const;
  void removeMasqRules(const std::string& pod_id, const std::string& ip);

  CniOptions options_;
  const TimeSource& time_;
};

// --- Pure pieces, exposed for tests ------------------------------------------

// The bridge + host-local configuration for `options`.
nlohmann::json makeBridgeConfig(const CniOptions& options);

// Parses a CNI ADD result (versions 0.3.x, 0.4.0, 1.0.0): picks the first IPv4
// address on the interface named `ifname` inside the sandbox, else the first
// IPv4 address. kInternal when the output is not a result or has no address.
StatusOr<PodNetwork> parseCniResult(const std::string& stdout_text, const std::string& ifname);

// Turns a failed plugin run into a Status: uses the CNI error object
// ({"code","msg","details"}) on stdout when present, else stderr. Code 11
// (try again later) -> kUnavailable; an exhausted range -> kResourceExhausted.
Status cniError(const std::string& what, int exit_code, const std::string& stdout_text,
                const std::string& stderr_text);

// A CNI container id / netns name part: [A-Za-z0-9][A-Za-z0-9_.-]*, at most
// 200 characters (the netns name is a file name).
Status validatePodId(const std::string& pod_id);

}  // namespace knap::runtime
