#include "runtime/pod/cni.h"

#include <dirent.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/log.h"
#include "common/string_util.h"
#include "runtime/pod/subprocess.h"

namespace knap::runtime {
namespace {

using nlohmann::json;

bool fileExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::vector<std::string> listDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool isIpv4(const std::string& s) {
  int dots = 0;
  for (char c : s) {
    if (c == '.')
      ++dots;
    else if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  }
  return dots == 3;
}

std::string ipPath() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "ip";
}

// The bridge plugin's per-container NAT chain (utils.FormatChainName):
// "CNI-" + the first 24 hex digits of sha512(network name + container id).
std::string masqChainName(const std::string& network, const std::string& pod_id) {
  const std::string in = network + pod_id;
  unsigned char md[SHA512_DIGEST_LENGTH];
  SHA512(reinterpret_cast<const unsigned char*>(in.data()), in.size(), md);
  static const char* kHex = "0123456789abcdef";
  std::string out = "CNI-";
  for (int i = 0; i < 12; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

}  // namespace

Status validatePodId(const std::string& pod_id) {
  if (pod_id.empty()) return invalidArgument("pod id: must not be empty");
  if (pod_id.size() > 200) return invalidArgument("pod id \"" + pod_id + "\": longer than 200 characters");
  if (!std::isalnum(static_cast<unsigned char>(pod_id[0]))) {
    return invalidArgument("pod id \"" + pod_id + "\": must start with a letter or digit");
  }
  for (char c : pod_id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return invalidArgument("pod id \"" + pod_id + "\": only letters, digits, '-', '_' and '.' are allowed");
    }
  }
  return Status::ok();
}

json makeBridgeConfig(const CniOptions& o) {
  return json{
      {"cniVersion", o.cni_version},
      {"name", o.network_name},
      {"type", "bridge"},
      {"bridge", o.bridge},
      {"isGateway", true},
      {"ipMasq", o.ip_masq},
      {"hairpinMode", true},
      {"ipam",
       {{"type", "host-local"},
        {"ranges", json::array({json::array({{{"subnet", o.subnet}}})})},
        {"routes", json::array({{{"dst", "0.0.0.0/0"}}})},
        {"dataDir", o.ipam_data_dir}}},
  };
}

StatusOr<PodNetwork> parseCniResult(const std::string& stdout_text, const std::string& ifname) {
  json r;
  try {
    r = json::parse(stdout_text);
  } catch (const json::exception& e) {
    return internalError(std::string("CNI result is not JSON: ") + e.what());
  }
  if (!r.is_object()) return internalError("CNI result is not an object");
  if (r.contains("code") && r.contains("msg")) {
    return internalError("CNI returned an error: " + r["msg"].dump());
  }
  const json ips = r.value("ips", json::array());
  const json ifaces = r.value("interfaces", json::array());
  if (!ips.is_array() || ips.empty()) return internalError("CNI result has no ips: " + stdout_text);
  const json* chosen = nullptr;
  for (int pass = 0; pass < 2 && chosen == nullptr; ++pass) {
    for (const auto& ip : ips) {
      if (!ip.is_object() || !ip.contains("address") || !ip["address"].is_string()) continue;
      const std::string addr = ip["address"].get<std::string>();
      if (!isIpv4(addr.substr(0, addr.find('/')))) continue;
      if (pass == 0) {
        if (!ip.contains("interface") || !ip["interface"].is_number_integer()) continue;
        const int64_t idx = ip["interface"].get<int64_t>();
        if (idx < 0 || idx >= static_cast<int64_t>(ifaces.size())) continue;
        const json& iface = ifaces[static_cast<size_t>(idx)];
        if (!iface.is_object() || iface.value("name", "") != ifname || iface.value("sandbox", "").empty()) {
          continue;
        }
      }
      chosen = &ip;
      break;
    }
  }
  if (chosen == nullptr) return internalError("CNI result has no IPv4 address: " + stdout_text);
  PodNetwork out;
  const std::string addr = (*chosen)["address"].get<std::string>();
  const size_t slash = addr.find('/');
  out.ip = addr.substr(0, slash);
  if (slash != std::string::npos) out.prefix_length = std::atoi(addr.c_str() + slash + 1);
  if (chosen->contains("gateway") && (*chosen)["gateway"].is_string()) {
    out.gateway = (*chosen)["gateway"].get<std::string>();
  }
  return out;
}

Status cniError(const std::string& what, int exit_code, const std::string& stdout_text,
                const std::string& stderr_text) {
  std::string msg;
  int code = 0;
  try {
    json e = json::parse(stdout_text);
    if (e.is_object() && e.contains("msg")) {
      msg = e["msg"].is_string() ? e["msg"].get<std::string>() : e["msg"].dump();
      if (e.contains("details") && e["details"].is_string() && !e["details"].get<std::string>().empty()) {
        msg += ": " + e["details"].get<std::string>();
      }
      if (e.contains("code") && e["code"].is_number_integer()) code = e["code"].get<int>();
    }
  } catch (const json::exception&) {
  }
  if (msg.empty()) msg = trimSpace(stderr_text);
  if (msg.empty()) msg = trimSpace(stdout_text);
  if (msg.empty()) msg = "exit status " + std::to_string(exit_code);
  const std::string text = what + ": " + msg;
  if (code == 11) return unavailable(text);
  if (msg.find("no IP addresses available") != std::string::npos) {
    return Status(Code::kResourceExhausted, text);
  }
  return internalError(text);
}

CniNetwork::CniNetwork(CniOptions options, const TimeSource& time)
    : options_(std::move(options)), time_(time) {}

std::string CniNetwork::netnsPath(const std::string& pod_id) const {
  return options_.netns_dir + "/" + netnsName(pod_id);
}

json CniNetwork::networkConfig() const {
  return makeBridgeConfig(options_);
}

std::string CniNetwork::leaseDir() const {
  return options_.ipam_data_dir + "/" + options_.network_name;
}

StatusOr<std::string> CniNetwork::runBridge(Command command, const std::string& pod_id,
                                            const std::string& netns_path) {
  const char* cmd = command == Command::kAdd ? "ADD" : "DEL";
  ProgramOptions po;
  const char* path = std::getenv("PATH");
  po.env = {
      std::string("CNI_COMMAND=") + cmd,
      "CNI_CONTAINERID=" + pod_id,
      "CNI_NETNS=" + netns_path,
      "CNI_IFNAME=" + options_.ifname,
      "CNI_PATH=" + options_.plugin_dir,
      std::string("PATH=") + (path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")};
  po.stdin_text = networkConfig().dump();
  po.timeout = options_.plugin_timeout;
  const std::string plugin = options_.plugin_dir + "/bridge";
  const std::string what = std::string("CNI bridge ") + cmd + " for pod " + pod_id;
  auto r = runProgram({plugin}, po, time_);
  if (!r.isOk()) return r.status().annotate(what);
  if (r->exit_code != 0) return cniError(what, r->exit_code, r->stdout_text, r->stderr_text);
  return std::move(r->stdout_text);
}

StatusOr<PodNetwork> CniNetwork::setUp(const std::string& pod_id) {
  KNAP_RETURN_IF_ERROR(validatePodId(pod_id));
  if (options_.netns_dir != "/var/run/netns" && options_.netns_dir != "/run/netns") {
    return failedPrecondition("netns dir " + options_.netns_dir + ": `ip netns` only manages /var/run/netns");
  }
  if (::access((options_.plugin_dir + "/bridge").c_str(), X_OK) != 0 ||
      ::access((options_.plugin_dir + "/host-local").c_str(), X_OK) != 0) {
    return notFound("CNI plugins bridge and host-local not found in " + options_.plugin_dir +
                    " (apt-get install containernetworking-plugins)");
  }
  const std::string name = netnsName(pod_id);
  const std::string path = netnsPath(pod_id);
  if (fileExists(path)) {
    LOG(WARNING) << "netns " << name << " exists already; tearing it down first";
    KNAP_RETURN_IF_ERROR(tearDown(pod_id));
  }
  {
    auto r = runChecked({ipPath(), "netns", "add", name}, {}, time_);
    if (!r.isOk()) return r.status().annotate("create netns for pod " + pod_id);
  }
  auto fail = [&](const Status& s) -> Status {
    Status cleanup = tearDown(pod_id);
    if (!cleanup.isOk()) LOG(WARNING) << "cleanup after failed network setup: " << cleanup.toString();
    return s;
  };
  {
    auto r = runChecked({ipPath(), "-n", name, "link", "set", "lo", "up"}, {}, time_);
    if (!r.isOk()) return fail(r.status().annotate("bring up lo for pod " + pod_id));
  }
  auto out = runBridge(Command::kAdd, pod_id, path);
  if (!out.isOk()) return fail(out.status());
  auto net = parseCniResult(*out, options_.ifname);
  if (!net.isOk()) return fail(net.status().annotate("pod " + pod_id));
  net->netns_path = path;
  return net;
}

Status CniNetwork::tearDown(const std::string& pod_id) {
  KNAP_RETURN_IF_ERROR(validatePodId(pod_id));
  const std::string path = netnsPath(pod_id);
  const bool has_netns = fileExists(path);
  std::vector<std::string> lease_ips;
  if (!has_netns) {
    for (const auto& [ip, id] : listLeases()) {
      if (id == pod_id) lease_ips.push_back(ip);
    }
  }
  // DEL with an empty CNI_NETNS still releases the IPAM lease (CNI spec).
  auto del = runBridge(Command::kDel, pod_id, has_netns ? path : "");
  Status first = del.isOk() ? Status::ok() : del.status();
  // Without the netns the plugin cannot learn the pod's address and leaves
  // its masquerade rules behind; remove them from the lease we knew.
  if (!has_netns && options_.ip_masq) {
    for (const auto& ip : lease_ips) removeMasqRules(pod_id, ip);
  }
  if (has_netns) {
    auto r = runChecked({ipPath(), "netns", "delete", netnsName(pod_id)}, {}, time_);
    if (!r.isOk() && fileExists(path) && first.isOk()) {
      first = r.status().annotate("delete netns of pod " + pod_id);
    }
  }
  return first;
}

void CniNetwork::removeMasqRules(const std::string& pod_id, const std::string& ip) {
  const std::string chain = masqChainName(options_.network_name, pod_id);
  const std::string comment = "name: \"" + options_.network_name + "\" id: \"" + pod_id + "\"";
  const std::string source = ip + (ip.find(':') == std::string::npos ? "/32" : "/128");
  const std::string iptables = ip.find(':') == std::string::npos ? "iptables" : "ip6tables";
  // Each step may find nothing to do (the plugin got there); errors only get logged.
  for (const auto& argv :
       std::vector<std::vector<std::string>>{{iptables, "-w", "-t", "nat", "-D", "POSTROUTING", "-s", source,
                                              "-m", "comment", "--comment", comment, "-j", chain},
                                             {iptables, "-w", "-t", "nat", "-F", chain},
                                             {iptables, "-w", "-t", "nat", "-X", chain}}) {
    auto r = runProgram(argv, {}, time_);
    if (r.isOk() && r->exit_code != 0 && r->stderr_text.find("No chain") == std::string::npos &&
        r->stderr_text.find("does a matching rule exist") == std::string::npos) {
      LOG(DEBUG) << "remove NAT rules of pod " << pod_id << ": " << r->stderr_text;
    }
  }
}

std::vector<std::string> CniNetwork::listPodNetworks() const {
  std::vector<std::string> out;
  for (const auto& name : listDir(options_.netns_dir)) {
    if (name.size() > options_.netns_prefix.size() &&
        name.compare(0, options_.netns_prefix.size(), options_.netns_prefix) == 0) {
      out.push_back(name.substr(options_.netns_prefix.size()));
    }
  }
  return out;
}

std::map<std::string, std::string> CniNetwork::listLeases() const {
  std::map<std::string, std::string> out;
  const std::string dir = leaseDir();
  for (const auto& name : listDir(dir)) {
    // Lease files are named by address; "lock" and "last_reserved_ip.N" are not leases.
    if (!isIpv4(name) && name.find(':') == std::string::npos) continue;
    std::ifstream f(dir + "/" + name);
    std::string id;
    std::getline(f, id);
    id = trimSpace(id);
    if (!id.empty()) out[name] = id;
  }
  return out;
}

Status CniNetwork::cleanupOrphans(const std::set<std::string>& live_pod_ids) {
  std::set<std::string> orphans;
  for (const auto& id : listPodNetworks()) {
    if (!live_pod_ids.count(id)) orphans.insert(id);
  }
  for (const auto& [ip, id] : listLeases()) {
    if (!live_pod_ids.count(id)) orphans.insert(id);
  }
  Status first;
  for (const auto& id : orphans) {
    if (!validatePodId(id).isOk()) continue;  // not a pod of ours
    LOG(INFO) << "releasing network of orphaned pod " << id;
    Status s = tearDown(id);
    if (!s.isOk()) {
      LOG(WARNING) << "orphan network cleanup: " << s.toString();
      if (first.isOk()) first = s;
    }
  }
  // Leases DEL could not release (for example a pod id with odd characters or
  // a plugin failure) are removed by hand so their addresses come back.
  for (const auto& [ip, id] : listLeases()) {
    if (live_pod_ids.count(id)) continue;
    const std::string file = leaseDir() + "/" + ip;
    if (::unlink(file.c_str()) != 0) {
      if (first.isOk()) first = internalError("remove lease " + file + ": " + std::strerror(errno));
    } else {
      LOG(WARNING) << "removed stale lease " << ip << " of pod " << id;
    }
  }
  return first;
}

}  // namespace knap::runtime
