#include "runtime/pod/oci_spec.h"

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <set>
#include <sstream>

namespace knap::runtime {
namespace {

using nlohmann::json;

constexpr int64_t kCpuPeriodUs = 100000;  // cgroup v1 cfs period, as kubelet uses
constexpr int64_t kMinCpuQuotaUs = 1000;  // kubelet's minQuotaPeriod
constexpr int64_t kMinCpuShares = 2;      // kubelet's MinShares (BestEffort)
constexpr int kDefaultPort = 8080;
constexpr const char* kDefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// containerd's default capability set (oci/spec.go defaultUnixCaps).
const std::vector<std::string> kDefaultCaps = {
    "CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FSETID",           "CAP_FOWNER",
    "CAP_MKNOD",   "CAP_NET_RAW",      "CAP_SETGID",           "CAP_SETUID",
    "CAP_SETFCAP", "CAP_SETPCAP",      "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
    "CAP_KILL",    "CAP_AUDIT_WRITE"};

// Every capability runc knows (Linux 5.x), to reject typos before runc does.
const std::set<std::string> kKnownCaps = {"CAP_AUDIT_CONTROL",   "CAP_AUDIT_READ",   "CAP_AUDIT_WRITE",
                                          "CAP_BLOCK_SUSPEND",   "CAP_BPF",          "CAP_CHECKPOINT_RESTORE",
                                          "CAP_CHOWN",           "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH",
                                          "CAP_FOWNER",          "CAP_FSETID",       "CAP_IPC_LOCK",
                                          "CAP_IPC_OWNER",       "CAP_KILL",         "CAP_LEASE",
                                          "CAP_LINUX_IMMUTABLE", "CAP_MAC_ADMIN",    "CAP_MAC_OVERRIDE",
                                          "CAP_MKNOD",           "CAP_NET_ADMIN",    "CAP_NET_BIND_SERVICE",
                                          "CAP_NET_BROADCAST",   "CAP_NET_RAW",      "CAP_PERFMON",
                                          "CAP_SETFCAP",         "CAP_SETGID",       "CAP_SETPCAP",
                                          "CAP_SETUID",          "CAP_SYSLOG",       "CAP_SYS_ADMIN",
                                          "CAP_SYS_BOOT",        "CAP_SYS_CHROOT",   "CAP_SYS_MODULE",
                                          "CAP_SYS_NICE",        "CAP_SYS_PACCT",    "CAP_SYS_PTRACE",
                                          "CAP_SYS_RAWIO",       "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
                                          "CAP_SYS_TTY_CONFIG",  "CAP_WAKE_ALARM"};

// --- JSON access with field paths in errors --------------------------------

const json* member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

StatusOr<std::vector<std::string>> stringList(const json* v, const std::string& path) {
  std::vector<std::string> out;
  if (v == nullptr) return out;
  if (!v->is_array()) return invalidArgument(path + ": must be a list of strings");
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      return invalidArgument(path + "[" + std::to_string(i) + "]: must be a string");
    }
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

StatusOr<std::optional<int64_t>> optionalInt(const json& obj, const char* key, const std::string& path) {
  const json* v = member(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  if (!v->is_number_integer()) return invalidArgument(path + "." + key + ": must be an integer");
  return std::optional<int64_t>(v->get<int64_t>());
}

StatusOr<std::optional<bool>> optionalBool(const json& obj, const char* key, const std::string& path) {
  const json* v = member(obj, key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return invalidArgument(path + "." + key + ": must be a boolean");
  return std::optional<bool>(v->get<bool>());
}

// --- quantities ---------------------------------------------------------------

// Parses a Kubernetes quantity and returns ceil(value * 10^scale10).
StatusOr<int64_t> parseScaled(const std::string& q, int scale10) {
  auto bad = [&](const std::string& why) { return invalidArgument("quantity \"" + q + "\": " + why); };
  size_t i = 0;
  if (i < q.size() && (q[i] == '+' || q[i] == '-')) {
    if (q[i] == '-') return bad("must not be negative");
    ++i;
  }
  __int128 mantissa = 0;
  int frac_digits = 0, digits = 0;
  bool dot = false, saw_digit = false;
  for (; i < q.size(); ++i) {
    char c = q[i];
    if (c == '.') {
      if (dot) return bad("more than one '.'");
      dot = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    saw_digit = true;
    if (mantissa == 0 && c == '0') {
      if (dot) ++frac_digits;
      continue;  // leading zeros do not count against the digit budget
    }
    if (++digits > 30) return bad("too many digits");
    mantissa = mantissa * 10 + (c - '0');
    if (dot) ++frac_digits;
  }
  if (!saw_digit) {
    return bad("expected a number like 128Mi, 0.5, 500m or 1e9");
  }
  const std::string suffix = q.substr(i);
  int pow10 = 0, pow2 = 0;
  if (suffix.empty()) {
  } else if (suffix == "Ki")
    pow2 = 10;
  else if (suffix == "Mi")
    pow2 = 20;
  else if (suffix == "Gi")
    pow2 = 30;
  else if (suffix == "Ti")
    pow2 = 40;
  else if (suffix == "Pi")
    pow2 = 50;
  else if (suffix == "Ei")
    pow2 = 60;
  else if (suffix == "n")
    pow10 = -9;
  else if (suffix == "u")
    pow10 = -6;
  else if (suffix == "m")
    pow10 = -3;
  else if (suffix == "k")
    pow10 = 3;
  else if (suffix == "M")
    pow10 = 6;
  else if (suffix == "G")
    pow10 = 9;
  else if (suffix == "T")
    pow10 = 12;
  else if (suffix == "P")
    pow10 = 15;
  else if (suffix == "E")
    pow10 = 18;
  else if ((suffix[0] == 'e' || suffix[0] == 'E') && suffix.size() > 1) {
    size_t j = 1;
    bool neg = false;
    if (suffix[j] == '+' || suffix[j] == '-') neg = suffix[j++] == '-';
    if (j >= suffix.size() || suffix.size() - j > 3) return bad("bad exponent");
    int e = 0;
    for (; j < suffix.size(); ++j) {
      if (!std::isdigit(static_cast<unsigned char>(suffix[j]))) return bad("bad exponent");
      e = e * 10 + (suffix[j] - '0');
    }
    pow10 = neg ? -e : e;
  } else {
    return bad("unknown suffix \"" + suffix +
               "\" (use Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent)");
  }
  // value = mantissa * 2^pow2 * 10^(pow10 + scale10 - frac_digits), rounded up.
  int exp10 = pow10 + scale10 - frac_digits;
  __int128 num = mantissa;
  __int128 den = 1;
  const __int128 kMax = static_cast<__int128>(INT64_MAX);
  auto overflow = [&] { return bad("too large"); };
  for (int k = 0; k < pow2; ++k) {
    num *= 2;
    if (num > kMax * 1000000000000LL) return overflow();
  }
  for (; exp10 > 0; --exp10) {
    num *= 10;
    if (num > kMax * 1000000000000LL) return overflow();
  }
  for (; exp10 < 0; ++exp10) {
    if (den > kMax * 1000000LL) {  // the value is below 1e-25: rounds up to 1 or 0
      return static_cast<int64_t>(num == 0 ? 0 : 1);
    }
    den *= 10;
  }
  __int128 value = (num + den - 1) / den;
  if (value > kMax) return overflow();
  return static_cast<int64_t>(value);
}

StatusOr<int64_t> quantityFromJson(const json& v, int scale10) {
  if (v.is_string()) return parseScaled(v.get<std::string>(), scale10);
  if (v.is_number_integer()) return parseScaled(std::to_string(v.get<int64_t>()), scale10);
  if (v.is_number_float()) {
    std::ostringstream os;
    os.precision(17);
    os << std::fixed << v.get<double>();
    return parseScaled(os.str(), scale10);
  }
  return invalidArgument("quantity must be a string or a number");
}

// --- passwd / group -----------------------------------------------------------

struct PasswdEntry {
  std::string name;
  uint32_t uid = 0;
  uint32_t gid = 0;
};
struct GroupEntry {
  std::string name;
  uint32_t gid = 0;
  std::vector<std::string> members;
};

std::vector<std::string> splitOn(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::optional<uint32_t> parseId(const std::string& s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > 0x7fffffffULL) return std::nullopt;
  return static_cast<uint32_t>(v);
}

std::vector<PasswdEntry> parsePasswd(const std::optional<std::string>& text) {
  std::vector<PasswdEntry> out;
  if (!text) return out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto f = splitOn(line, ':');
    if (f.size() < 4) continue;
    auto uid = parseId(f[2]);
    auto gid = parseId(f[3]);
    if (!uid || !gid) continue;
    out.push_back({f[0], *uid, *gid});
  }
  return out;
}

std::vector<GroupEntry> parseGroup(const std::optional<std::string>& text) {
  std::vector<GroupEntry> out;
  if (!text) return out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto f = splitOn(line, ':');
    if (f.size() < 3) continue;
    auto gid = parseId(f[2]);
    if (!gid) continue;
    GroupEntry g{f[0], *gid, {}};
    if (f.size() >= 4 && !f[3].empty()) {
      for (auto& m : splitOn(f[3], ',')) {
        if (!m.empty()) g.members.push_back(m);
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

void addGid(std::vector<uint32_t>& gids, uint32_t gid) {
  if (std::find(gids.begin(), gids.end(), gid) == gids.end()) gids.push_back(gid);
}

// Primary gid first, then every group that lists the user by name.
std::vector<uint32_t> additionalGids(const PasswdEntry* user, uint32_t gid,
                                     const std::vector<GroupEntry>& groups) {
  std::vector<uint32_t> out{gid};
  if (user == nullptr) return out;
  for (const auto& g : groups) {
    if (std::find(g.members.begin(), g.members.end(), user->name) != g.members.end()) {
      addGid(out, g.gid);
    }
  }
  return out;
}

// --- small helpers --------------------------------------------------------------

std::string envName(const std::string& kv) {
  return kv.substr(0, kv.find('='));
}

void setEnv(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  for (auto& e : env) {
    if (envName(e) == name) {
      e = name + "=" + value;
      return;
    }
  }
  env.push_back(name + "=" + value);
}

std::string normaliseCap(std::string cap) {
  for (auto& c : cap) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (cap.rfind("CAP_", 0) != 0) cap = "CAP_" + cap;
  return cap;
}

json mount(const std::string& dest, const std::string& type, const std::string& source,
           std::vector<std::string> options) {
  return json{{"destination", dest}, {"type", type}, {"source", source}, {"options", options}};
}

json deviceRule(bool allow, const char* type, std::optional<int64_t> major, std::optional<int64_t> minor,
                const char* access) {
  json r{{"allow", allow}, {"access", access}};
  if (type != nullptr) r["type"] = type;
  if (major) r["major"] = *major;
  if (minor) r["minor"] = *minor;
  return r;
}

struct EnvVar {
  std::string name;
  std::string value;
};

StatusOr<std::vector<EnvVar>> containerEnv(const json& container, const PodSpecInput& in,
                                           const std::string& namespace_name) {
  std::vector<EnvVar> out;
  std::vector<std::pair<std::string, std::string>> defined;
  if (const json* ef = member(container, "envFrom")) {
    if (!ef->is_array()) return invalidArgument("envFrom: must be a list");
    for (size_t i = 0; i < ef->size(); ++i) {
      const std::string path = "envFrom[" + std::to_string(i) + "]";
      if (!member((*ef)[i], "secretRef") && !member((*ef)[i], "configMapRef"))
        return invalidArgument(path + ": needs secretRef or configMapRef");
    }
    // Resolved by the caller, in order, prefixes applied.
    for (const auto& [k, v] : in.env_from) {
      defined.emplace_back(k, v);
      out.push_back({k, v});
    }
  }
  const json* env = member(container, "env");
  if (env == nullptr) return out;
  if (!env->is_array()) return invalidArgument("env: must be a list");
  for (size_t i = 0; i < env->size(); ++i) {
    const json& e = (*env)[i];
    const std::string path = "env[" + std::to_string(i) + "]";
    if (!e.is_object()) return invalidArgument(path + ": must be an object");
    const json* name = member(e, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      return invalidArgument(path + ".name: required");
    }
    if (name->get<std::string>().find('=') != std::string::npos) {
      return invalidArgument(path + ".name: must not contain '='");
    }
    std::string value;
    if (const json* v = member(e, "value")) {
      if (!v->is_string()) return invalidArgument(path + ".value: must be a string");
      value = expandVars(v->get<std::string>(), defined);
    } else if (const json* vf = member(e, "valueFrom")) {
      const char* ref_kind = member(*vf, "secretKeyRef")      ? "secretKeyRef"
                             : member(*vf, "configMapKeyRef") ? "configMapKeyRef"
                                                              : nullptr;
      if (ref_kind) {
        auto it = in.env_refs.find(name->get<std::string>());
        if (it == in.env_refs.end()) {
          const json* opt = member(*member(*vf, ref_kind), "optional");
          if (opt && opt->is_boolean() && opt->get<bool>()) continue;  // optional and missing: not defined
          return invalidArgument(path + ".valueFrom." + ref_kind + ": the value was not resolved");
        }
        value = it->second;
      } else if (const json* fr = member(*vf, "fieldRef")) {
        const json* fp = member(*fr, "fieldPath");
        const std::string field = fp && fp->is_string() ? fp->get<std::string>() : "";
        if (field == "metadata.name")
          value = in.pod_id;
        else if (field == "metadata.namespace")
          value = namespace_name;
        else if (field == "status.podIP" && !in.pod_ip.empty())
          value = in.pod_ip;
        else {
          return invalidArgument(path + ".valueFrom.fieldRef.fieldPath: \"" + field +
                                 "\" is not supported by knap (metadata.name, metadata.namespace, "
                                 "status.podIP are)");
        }
      } else {
        return invalidArgument(path + ".valueFrom: only fieldRef is supported by knap");
      }
    }
    defined.emplace_back(name->get<std::string>(), value);
    out.push_back({name->get<std::string>(), value});
  }
  return out;
}

// volumeMounts -> mounts. emptyDir volumes become tmpfs (memory-backed, so
// they count against the memory limit, like medium: Memory in Kubernetes);
// other volume sources need Secrets/ConfigMaps/PVCs, which knap does not have.
StatusOr<json> volumeMounts(const json& spec, const json& container, const PodSpecInput& in) {
  json out = json::array();
  const json* mounts = member(container, "volumeMounts");
  if (mounts == nullptr) return out;
  if (!mounts->is_array()) return invalidArgument("volumeMounts: must be a list");
  const json* volumes = member(spec, "volumes");
  if (volumes != nullptr && !volumes->is_array()) return invalidArgument("spec.volumes: must be a list");
  std::set<std::string> used;
  for (size_t i = 0; i < mounts->size(); ++i) {
    const json& m = (*mounts)[i];
    const std::string path = "volumeMounts[" + std::to_string(i) + "]";
    const json* name = member(m, "name");
    const json* dest = member(m, "mountPath");
    if (name == nullptr || !name->is_string()) return invalidArgument(path + ".name: required");
    if (dest == nullptr || !dest->is_string() || dest->get<std::string>().empty() ||
        dest->get<std::string>()[0] != '/') {
      return invalidArgument(path + ".mountPath: must be an absolute path");
    }
    std::string sub_path;
    if (const json* sp = member(m, "subPath"); sp && sp->is_string() && !sp->get<std::string>().empty()) {
      sub_path = sp->get<std::string>();
      // Kubernetes' rule: a relative path that does not climb out ("..").
      bool climbs = sub_path[0] == '/';
      for (size_t start = 0; !climbs && start <= sub_path.size();) {
        size_t slash = sub_path.find('/', start);
        if (sub_path.substr(start, slash == std::string::npos ? std::string::npos : slash - start) == "..")
          climbs = true;
        if (slash == std::string::npos) break;
        start = slash + 1;
      }
      if (climbs) return invalidArgument(path + ".subPath: must be a relative path without \"..\"");
    }
    const json* volume = nullptr;
    size_t vi = 0;
    for (size_t j = 0; volumes != nullptr && j < volumes->size(); ++j) {
      const json* vn = member((*volumes)[j], "name");
      if (vn && *vn == *name) {
        volume = &(*volumes)[j];
        vi = j;
        break;
      }
    }
    if (volume == nullptr) {
      return invalidArgument(path + ".name: no volume named \"" + name->get<std::string>() + "\"");
    }
    const std::string vpath = "spec.volumes[" + std::to_string(vi) + "]";
    if (member(*volume, "secret") || member(*volume, "configMap") || member(*volume, "projected")) {
      auto dir = in.volume_dirs.find(name->get<std::string>());
      if (dir == in.volume_dirs.end())
        return invalidArgument(vpath + ": the files of volume \"" + name->get<std::string>() +
                               "\" were not resolved");
      // subPath: that file or directory of the volume (as the kubelet does,
      // it is bound once and does not follow later updates of the volume).
      out.push_back(mount(dest->get<std::string>(), "bind",
                          sub_path.empty() ? dir->second : dir->second + "/" + sub_path,
                          {"rbind", "ro", "nosuid", "nodev"}));
      continue;
    }
    for (const char* kind : {"persistentVolumeClaim", "hostPath", "csi", "ephemeral", "image"}) {
      if (member(*volume, kind)) {
        return invalidArgument(vpath + "." + kind + ": " + kind + " volumes are not supported by knap yet");
      }
    }
    const json* empty_dir = member(*volume, "emptyDir");
    if (empty_dir == nullptr) return invalidArgument(vpath + ": only emptyDir volumes are supported by knap");
    if (!sub_path.empty())
      return invalidArgument(path + ".subPath: not supported by knap for emptyDir volumes");
    if (auto shared = in.empty_dir_dirs.find(name->get<std::string>()); shared != in.empty_dir_dirs.end()) {
      std::vector<std::string> options = {"rbind", "rprivate", "nosuid", "nodev"};
      if (const json* ro = member(m, "readOnly"); ro && ro->is_boolean() && ro->get<bool>())
        options.push_back("ro");
      out.push_back(mount(dest->get<std::string>(), "bind", shared->second, options));
      continue;
    }
    if (!used.insert(name->get<std::string>()).second) {
      return invalidArgument(path + ": emptyDir \"" + name->get<std::string>() +
                             "\" is mounted twice; knap mounts each emptyDir once");
    }
    std::vector<std::string> options = {"nosuid", "nodev", "mode=1777"};
    if (const json* limit = member(*empty_dir, "sizeLimit")) {
      auto bytes = parseQuantityJson(*limit);
      if (!bytes.isOk()) return bytes.status().annotate(vpath + ".emptyDir.sizeLimit");
      if (*bytes > 0) options.push_back("size=" + std::to_string(*bytes));
    }
    if (const json* ro = member(m, "readOnly"); ro && ro->is_boolean() && ro->get<bool>()) {
      options.push_back("ro");
    }
    out.push_back(mount(dest->get<std::string>(), "tmpfs", "tmpfs", options));
  }
  return out;
}

}  // namespace

int servingContainerIndex(const nlohmann::json& containers) {
  if (!containers.is_array() || containers.size() < 2) return 0;
  for (size_t i = 0; i < containers.size(); ++i) {
    const json* ports = member(containers[i], "ports");
    if (ports && ports->is_array() && !ports->empty()) return static_cast<int>(i);
  }
  return 0;
}

PodHostFiles makePodHostFiles(const std::string& pod_id, const std::string& pod_ip,
                              const std::string& host_resolv_conf) {
  PodHostFiles f;
  const std::string host = pod_id.substr(0, 63);
  f.hostname = host + "\n";
  f.hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
  if (!pod_ip.empty()) f.hosts += pod_ip + "\t" + host + "\n";
  std::istringstream in(host_resolv_conf);
  std::string line;
  int nameservers = 0;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key, value;
    words >> key >> value;
    if (key == "nameserver") {
      if (value.rfind("127.", 0) == 0 || value == "::1") continue;
      ++nameservers;
    }
    f.resolv_conf += line + "\n";
  }
  if (nameservers == 0) {
    f.resolv_conf += "# knap: the host has no nameserver reachable from a pod (loopback only)\n";
  }
  return f;
}

uint64_t maxNofileForPods() {
  constexpr uint64_t kCap = 1048576;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_max == RLIM_INFINITY) return kCap;
  return std::min<uint64_t>(kCap, rl.rlim_max);
}

StatusOr<int64_t> parseQuantity(const std::string& quantity) {
  return parseScaled(quantity, 0);
}
StatusOr<int64_t> parseMilliCpu(const std::string& quantity) {
  return parseScaled(quantity, 3);
}
StatusOr<int64_t> parseQuantityJson(const nlohmann::json& value) {
  return quantityFromJson(value, 0);
}
StatusOr<int64_t> parseMilliCpuJson(const nlohmann::json& value) {
  return quantityFromJson(value, 3);
}

std::string expandVars(const std::string& s, const std::vector<std::pair<std::string, std::string>>& vars) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '$' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    if (s[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    if (s[i + 1] == '(') {
      size_t close = s.find(')', i + 2);
      if (close != std::string::npos) {
        const std::string name = s.substr(i + 2, close - i - 2);
        const std::string* found = nullptr;
        for (const auto& [k, v] : vars) {  // the last definition wins
          if (k == name) found = &v;
        }
        if (found != nullptr) {
          out += *found;
        } else {
          out += s.substr(i, close - i + 1);
        }
        i = close;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

StatusOr<ResolvedUser> resolveImageUser(const std::string& user, const std::optional<std::string>& etc_passwd,
                                        const std::optional<std::string>& etc_group) {
  const auto users = parsePasswd(etc_passwd);
  const auto groups = parseGroup(etc_group);
  ResolvedUser out;
  if (user.empty()) {
    const PasswdEntry* root = nullptr;
    for (const auto& u : users)
      if (u.uid == 0 && !root) root = &u;
    out.additional_gids = additionalGids(root, 0, groups);
    return out;
  }
  const size_t colon = user.find(':');
  const std::string u = user.substr(0, colon);
  const std::optional<std::string> g =
      colon == std::string::npos ? std::nullopt : std::optional<std::string>(user.substr(colon + 1));
  const PasswdEntry* entry = nullptr;
  if (auto id = parseId(u)) {
    out.uid = *id;
    for (const auto& p : users) {
      if (p.uid == *id) {
        entry = &p;
        break;
      }
    }
    if (entry) out.gid = entry->gid;
  } else {
    for (const auto& p : users) {
      if (p.name == u) {
        entry = &p;
        break;
      }
    }
    if (entry == nullptr) {
      return invalidArgument("image USER \"" + user + "\": no user \"" + u + "\" in " +
                             (etc_passwd ? "the image's /etc/passwd" : "the image (it has no /etc/passwd)"));
    }
    out.uid = entry->uid;
    out.gid = entry->gid;
  }
  if (g) {
    if (auto id = parseId(*g)) {
      out.gid = *id;
    } else {
      const GroupEntry* ge = nullptr;
      for (const auto& gr : groups) {
        if (gr.name == *g) {
          ge = &gr;
          break;
        }
      }
      if (ge == nullptr) {
        return invalidArgument("image USER \"" + user + "\": no group \"" + *g + "\" in " +
                               (etc_group ? "the image's /etc/group" : "the image (it has no /etc/group)"));
      }
      out.gid = ge->gid;
    }
  }
  out.additional_gids = additionalGids(entry, out.gid, groups);
  return out;
}

namespace {

// The container a spec is built for, located in the revision.
struct Target {
  const json* spec = nullptr;       // the revision's spec (or the bare spec)
  const json* container = nullptr;  // spec.containers[index], an object
  bool serving = false;             // the serving container (PORT is its alone)
  std::string namespace_name = "default";
};

StatusOr<Target> locateContainer(const PodSpecInput& in) {
  // The revision: full object or bare spec.
  Target t;
  t.spec = member(in.revision, "spec");
  if (t.spec == nullptr || !member(*t.spec, "containers")) t.spec = &in.revision;
  const json* containers = member(*t.spec, "containers");
  if (containers == nullptr || !containers->is_array() || containers->empty()) {
    return invalidArgument("spec.containers: the revision has no container");
  }
  const int index = in.container_index < 0 ? servingContainerIndex(*containers) : in.container_index;
  if (static_cast<size_t>(index) >= containers->size()) {
    return invalidArgument("spec.containers[" + std::to_string(index) + "]: no such container");
  }
  t.serving = index == servingContainerIndex(*containers);
  t.container = &(*containers)[index];
  if (!t.container->is_object()) {
    return invalidArgument("spec.containers[" + std::to_string(index) + "]: must be an object");
  }
  if (const json* md = member(in.revision, "metadata")) {
    if (const json* ns = member(*md, "namespace"); ns && ns->is_string()) {
      t.namespace_name = ns->get<std::string>();
    }
  }
  return t;
}

// What the image's config contributes.
struct ImageDefaults {
  std::vector<std::string> entrypoint, cmd, env;
  std::string user, workdir;
};

StatusOr<ImageDefaults> imageDefaults(const json& image_config) {
  const json* image = member(image_config, "config");
  if (image == nullptr || !image->is_object()) image = &image_config;
  ImageDefaults d;
  KNAP_ASSIGN_OR_RETURN(d.entrypoint, stringList(member(*image, "Entrypoint"), "image Entrypoint"));
  KNAP_ASSIGN_OR_RETURN(d.cmd, stringList(member(*image, "Cmd"), "image Cmd"));
  KNAP_ASSIGN_OR_RETURN(d.env, stringList(member(*image, "Env"), "image Env"));
  if (const json* v = member(*image, "User"); v && v->is_string()) d.user = v->get<std::string>();
  if (const json* v = member(*image, "WorkingDir"); v && v->is_string()) d.workdir = v->get<std::string>();
  return d;
}

// The serving port: ports[0].containerPort, else 8080.
StatusOr<int> containerPort(const json& c) {
  int port = kDefaultPort;
  if (const json* ports = member(c, "ports"); ports && ports->is_array() && !ports->empty()) {
    KNAP_ASSIGN_OR_RETURN(auto cp, optionalInt((*ports)[0], "containerPort", "ports[0]"));
    if (cp && *cp != 0) {
      if (*cp < 1 || *cp > 65535) return invalidArgument("ports[0].containerPort: must be in [1, 65535]");
      port = static_cast<int>(*cp);
    }
  }
  return port;
}

using VarMapping = std::vector<std::pair<std::string, std::string>>;

// The process environment, and the $(VAR) mapping for command and args: the
// container's own variables with the platform's, as in Kubernetes.
StatusOr<std::vector<std::string>> processEnv(const Target& t, const PodSpecInput& in, int port,
                                              const ImageDefaults& image, VarMapping* mapping) {
  KNAP_ASSIGN_OR_RETURN(auto cenv, containerEnv(*t.container, in, t.namespace_name));
  for (const auto& e : cenv) mapping->emplace_back(e.name, e.value);
  const std::pair<std::string, std::string> reserved[] = {{"PORT", std::to_string(port)},
                                                          {"K_SERVICE", in.service_name},
                                                          {"K_CONFIGURATION", in.configuration_name},
                                                          {"K_REVISION", in.revision_name}};
  for (const auto& r : reserved) {
    if (t.serving || r.first != "PORT") mapping->push_back(r);  // PORT: the serving container's only
  }
  std::vector<std::string> env;
  for (const auto& e : image.env) {
    if (e.empty() || e[0] == '=') continue;
    setEnv(env, envName(e), e.find('=') == std::string::npos ? "" : e.substr(e.find('=') + 1));
  }
  if (std::none_of(env.begin(), env.end(), [](const std::string& e) { return envName(e) == "PATH"; })) {
    env.insert(env.begin(), kDefaultPath);
  }
  for (const auto& [k, v] : *mapping) setEnv(env, k, v);
  return env;
}

// command + args over the image's Entrypoint + Cmd.
StatusOr<std::vector<std::string>> commandLine(const json& c, const ImageDefaults& image,
                                               const VarMapping& mapping) {
  KNAP_ASSIGN_OR_RETURN(auto command, stringList(member(c, "command"), "command"));
  KNAP_ASSIGN_OR_RETURN(auto args_in, stringList(member(c, "args"), "args"));
  const bool has_command = member(c, "command") != nullptr;
  const bool has_args = member(c, "args") != nullptr;
  std::vector<std::string> args;
  if (has_command) {
    for (const auto& a : command) args.push_back(expandVars(a, mapping));
    for (const auto& a : args_in) args.push_back(expandVars(a, mapping));
  } else {
    args = image.entrypoint;
    if (has_args) {
      for (const auto& a : args_in) args.push_back(expandVars(a, mapping));
    } else {
      args.insert(args.end(), image.cmd.begin(), image.cmd.end());
    }
  }
  if (args.empty()) {
    return invalidArgument(
        "no command: the image has no Entrypoint or Cmd and the container sets no command");
  }
  return args;
}

StatusOr<std::string> workingDir(const json& c, const ImageDefaults& image) {
  std::string cwd = "/";
  if (const json* wd = member(c, "workingDir"); wd && wd->is_string() && !wd->get<std::string>().empty()) {
    cwd = wd->get<std::string>();
  } else if (!image.workdir.empty()) {
    cwd = image.workdir;
  }
  if (cwd[0] != '/') return invalidArgument("workingDir \"" + cwd + "\": must be an absolute path");
  return cwd;
}

// The security context, container over pod.
struct Security {
  ResolvedUser user;
  std::vector<std::string> caps;
  bool readonly_root = false;
  bool no_new_privileges = true;
};

// securityContext's fields, pod-level (p) and container-level (c).
struct SecurityFields {
  std::optional<int64_t> prun_user, prun_group, crun_user, crun_group;
  std::optional<bool> pnon_root, cnon_root, ro_root, priv_esc, privileged;
};

StatusOr<SecurityFields> securityFields(const json& psc, const json& csc) {
  SecurityFields f;
  KNAP_ASSIGN_OR_RETURN(f.prun_user, optionalInt(psc, "runAsUser", "spec.securityContext"));
  KNAP_ASSIGN_OR_RETURN(f.prun_group, optionalInt(psc, "runAsGroup", "spec.securityContext"));
  KNAP_ASSIGN_OR_RETURN(f.pnon_root, optionalBool(psc, "runAsNonRoot", "spec.securityContext"));
  KNAP_ASSIGN_OR_RETURN(f.crun_user, optionalInt(csc, "runAsUser", "securityContext"));
  KNAP_ASSIGN_OR_RETURN(f.crun_group, optionalInt(csc, "runAsGroup", "securityContext"));
  KNAP_ASSIGN_OR_RETURN(f.cnon_root, optionalBool(csc, "runAsNonRoot", "securityContext"));
  KNAP_ASSIGN_OR_RETURN(f.ro_root, optionalBool(csc, "readOnlyRootFilesystem", "securityContext"));
  KNAP_ASSIGN_OR_RETURN(f.priv_esc, optionalBool(csc, "allowPrivilegeEscalation", "securityContext"));
  KNAP_ASSIGN_OR_RETURN(f.privileged, optionalBool(csc, "privileged", "securityContext"));
  if (f.privileged.value_or(false)) {
    return invalidArgument("securityContext.privileged: privileged containers are not allowed");
  }
  return f;
}

// The process identity: runAsUser/runAsGroup (container over pod) over the
// image's USER, plus supplementalGroups; refuses root under runAsNonRoot.
StatusOr<ResolvedUser> processUser(const SecurityFields& f, const json& psc, const PodSpecInput& in,
                                   const std::string& image_user) {
  const auto run_user = f.crun_user ? f.crun_user : f.prun_user;
  const auto run_group = f.crun_group ? f.crun_group : f.prun_group;
  const bool non_root = f.cnon_root ? *f.cnon_root : f.pnon_root.value_or(false);
  for (const auto& id : {run_user, run_group}) {
    if (id && (*id < 0 || *id > 0x7fffffff)) {
      return invalidArgument("securityContext: runAsUser/runAsGroup must be in [0, 2147483647]");
    }
  }

  ResolvedUser user;
  if (run_user) {
    // A numeric identity from the API; the group comes from runAsGroup, else
    // from the image's passwd entry for that uid, else 0 (containerd CRI).
    KNAP_ASSIGN_OR_RETURN(user, resolveImageUser(std::to_string(*run_user), in.etc_passwd, in.etc_group));
  } else {
    auto r = resolveImageUser(image_user, in.etc_passwd, in.etc_group);
    if (!r.isOk()) return r.status();
    user = std::move(r).value();
  }
  if (run_group) {
    user.gid = static_cast<uint32_t>(*run_group);
    if (!user.additional_gids.empty()) user.additional_gids[0] = user.gid;
    std::vector<uint32_t> dedup;
    for (auto g : user.additional_gids) addGid(dedup, g);
    user.additional_gids = dedup;
  }
  if (const json* sg = member(psc, "supplementalGroups")) {
    if (!sg->is_array()) return invalidArgument("spec.securityContext.supplementalGroups: must be a list");
    for (const auto& g : *sg) {
      if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() > 0x7fffffff) {
        return invalidArgument("spec.securityContext.supplementalGroups: must be ids in [0, 2147483647]");
      }
      addGid(user.additional_gids, static_cast<uint32_t>(g.get<int64_t>()));
    }
  }
  if (non_root && user.uid == 0) {
    return invalidArgument(
        "securityContext.runAsNonRoot: the container would run as root (uid 0); "
        "set runAsUser or a non-root USER in the image");
  }
  return user;
}

// containerd's default set with securityContext.capabilities applied.
StatusOr<std::vector<std::string>> capabilities(const json& csc) {
  std::vector<std::string> caps = kDefaultCaps;
  const json* capj = member(csc, "capabilities");
  if (capj == nullptr) return caps;
  KNAP_ASSIGN_OR_RETURN(auto add, stringList(member(*capj, "add"), "securityContext.capabilities.add"));
  KNAP_ASSIGN_OR_RETURN(auto drop, stringList(member(*capj, "drop"), "securityContext.capabilities.drop"));
  for (const auto& d : drop) {
    if (normaliseCap(d) == "CAP_ALL") caps.clear();
  }
  for (const auto& a : add) {
    const std::string cap = normaliseCap(a);
    if (!kKnownCaps.count(cap)) {
      return invalidArgument("securityContext.capabilities.add: unknown capability \"" + a + "\"");
    }
    if (std::find(caps.begin(), caps.end(), cap) == caps.end()) caps.push_back(cap);
  }
  for (const auto& d : drop) {
    const std::string cap = normaliseCap(d);
    if (cap == "CAP_ALL") continue;
    if (!kKnownCaps.count(cap)) {
      return invalidArgument("securityContext.capabilities.drop: unknown capability \"" + d + "\"");
    }
    caps.erase(std::remove(caps.begin(), caps.end(), cap), caps.end());
  }
  return caps;
}

StatusOr<Security> securityContext(const Target& t, const PodSpecInput& in, const ImageDefaults& image) {
  static const json kEmpty = json::object();
  const json* psc = member(*t.spec, "securityContext");
  const json* csc = member(*t.container, "securityContext");
  if (psc == nullptr) psc = &kEmpty;
  if (csc == nullptr) csc = &kEmpty;
  KNAP_ASSIGN_OR_RETURN(const SecurityFields f, securityFields(*psc, *csc));
  Security s;
  KNAP_ASSIGN_OR_RETURN(s.user, processUser(f, *psc, in, image.user));
  KNAP_ASSIGN_OR_RETURN(s.caps, capabilities(*csc));
  s.readonly_root = f.ro_root.value_or(false);
  s.no_new_privileges = !f.priv_esc.value_or(false);
  return s;
}

// linux.resources: the device allow-list and the cgroup cpu/memory limits.
StatusOr<json> linuxResources(const json& c) {
  json resources = json::object();
  resources["devices"] = json::array({
      deviceRule(false, nullptr, std::nullopt, std::nullopt, "rwm"),
      deviceRule(true, "c", 1, 3, "rwm"),               // /dev/null
      deviceRule(true, "c", 1, 8, "rwm"),               // /dev/random
      deviceRule(true, "c", 1, 7, "rwm"),               // /dev/full
      deviceRule(true, "c", 5, 0, "rwm"),               // /dev/tty
      deviceRule(true, "c", 1, 5, "rwm"),               // /dev/zero
      deviceRule(true, "c", 1, 9, "rwm"),               // /dev/urandom
      deviceRule(true, "c", 136, std::nullopt, "rwm"),  // /dev/pts/*
      deviceRule(true, "c", 5, 2, "rwm"),               // /dev/ptmx
      // No 5:1: Knative says /dev/console SHOULD NOT exist (contract item 53).
  });
  const json* res = member(c, "resources");
  const json* limits = res ? member(*res, "limits") : nullptr;
  const json* requests = res ? member(*res, "requests") : nullptr;
  std::optional<int64_t> limit_mcpu, request_mcpu;
  if (limits) {
    if (const json* mem = member(*limits, "memory")) {
      auto bytes = parseQuantityJson(*mem);
      if (!bytes.isOk()) return bytes.status().annotate("resources.limits.memory");
      if (*bytes <= 0) return invalidArgument("resources.limits.memory: must be positive");
      resources["memory"] = {{"limit", *bytes}};
    }
    if (const json* cpu = member(*limits, "cpu")) {
      auto m = parseMilliCpuJson(*cpu);
      if (!m.isOk()) return m.status().annotate("resources.limits.cpu");
      limit_mcpu = *m;
    }
  }
  if (requests) {
    if (const json* cpu = member(*requests, "cpu")) {
      auto m = parseMilliCpuJson(*cpu);
      if (!m.isOk()) return m.status().annotate("resources.requests.cpu");
      request_mcpu = *m;
    }
  }
  if (!request_mcpu) request_mcpu = limit_mcpu;  // Kubernetes defaults requests to limits
  json cpu = json::object();
  cpu["shares"] = std::max<int64_t>(kMinCpuShares, request_mcpu.value_or(0) * 1024 / 1000);
  if (limit_mcpu && *limit_mcpu > 0) {
    cpu["quota"] = std::max<int64_t>(kMinCpuQuotaUs, *limit_mcpu * kCpuPeriodUs / 1000);
    cpu["period"] = kCpuPeriodUs;
  }
  resources["cpu"] = cpu;
  return resources;
}

// The standard mounts, /tmp, the pod's /etc files and the volume mounts.
StatusOr<json> podMounts(const Target& t, const PodSpecInput& in) {
  json mounts = json::array({
      mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
      mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
      mount("/dev/pts", "devpts", "devpts",
            {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}),
      mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}),
      mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}),
      mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
      mount("/sys/fs/cgroup", "cgroup", "cgroup", {"ro", "nosuid", "noexec", "nodev"}),
      mount("/run", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
  });
  if (in.tmp_dir.empty()) {
    mounts.push_back(mount("/tmp", "tmpfs", "tmpfs", {"nosuid", "nodev", "mode=1777"}));
  } else {
    if (in.tmp_dir[0] != '/') return invalidArgument("/tmp source must be an absolute path");
    mounts.push_back(mount("/tmp", "bind", in.tmp_dir, {"rbind", "rprivate", "nosuid", "nodev"}));
  }
  const std::pair<const char*, const std::string*> binds[] = {{"/etc/resolv.conf", &in.resolv_conf_path},
                                                              {"/etc/hosts", &in.hosts_path},
                                                              {"/etc/hostname", &in.hostname_path}};
  for (const auto& [dest, src] : binds) {
    if (src->empty()) continue;
    if ((*src)[0] != '/') return invalidArgument(std::string(dest) + " source must be an absolute path");
    mounts.push_back(mount(dest, "bind", *src, {"rbind", "rprivate", "ro"}));
  }
  KNAP_ASSIGN_OR_RETURN(json volume_mounts, volumeMounts(*t.spec, *t.container, in));
  for (auto& m : volume_mounts) mounts.push_back(std::move(m));
  return mounts;
}

json linuxNamespaces(const PodSpecInput& in) {
  json namespaces =
      json::array({{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}});
  json net = {{"type", "network"}};
  if (!in.netns_path.empty()) net["path"] = in.netns_path;
  namespaces.push_back(net);
  return namespaces;
}

StatusOr<json> buildSpec(const PodSpecInput& in) {
  KNAP_ASSIGN_OR_RETURN(const Target t, locateContainer(in));
  if (in.pod_id.empty()) return invalidArgument("pod id: required");
  if (in.nofile_limit == 0) return invalidArgument("nofile limit: must be positive");
  KNAP_ASSIGN_OR_RETURN(const ImageDefaults image, imageDefaults(in.image_config));
  KNAP_ASSIGN_OR_RETURN(const int port, containerPort(*t.container));
  VarMapping mapping;
  KNAP_ASSIGN_OR_RETURN(auto env, processEnv(t, in, port, image, &mapping));
  KNAP_ASSIGN_OR_RETURN(auto args, commandLine(*t.container, image, mapping));
  KNAP_ASSIGN_OR_RETURN(auto cwd, workingDir(*t.container, image));
  KNAP_ASSIGN_OR_RETURN(const Security sec, securityContext(t, in, image));
  KNAP_ASSIGN_OR_RETURN(json resources, linuxResources(*t.container));
  KNAP_ASSIGN_OR_RETURN(json mounts, podMounts(t, in));

  const ResolvedUser& user = sec.user;
  json process = {
      {"terminal", false},
      {"user", {{"uid", user.uid}, {"gid", user.gid}, {"additionalGids", user.additional_gids}}},
      {"args", args},
      {"env", env},
      {"cwd", cwd},
      {"capabilities", {{"bounding", sec.caps}, {"effective", sec.caps}, {"permitted", sec.caps}}},
      {"rlimits",
       json::array({{{"type", "RLIMIT_NOFILE"}, {"hard", in.nofile_limit}, {"soft", in.nofile_limit}}})},
      {"noNewPrivileges", sec.no_new_privileges},
  };

  json out = {
      {"ociVersion", "1.0.2-dev"},
      {"process", process},
      {"root", {{"path", "rootfs"}, {"readonly", sec.readonly_root}}},
      {"hostname", in.pod_id.substr(0, 63)},
      {"mounts", mounts},
      {"linux",
       {{"resources", resources},
        {"cgroupsPath", in.cgroups_path.empty() ? "/knap/" + in.pod_id : in.cgroups_path},
        {"namespaces", linuxNamespaces(in)},
        {"maskedPaths",
         {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
          "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"}},
        {"readonlyPaths", {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}}}},
  };
  return out;
}

}  // namespace

StatusOr<nlohmann::json> buildOciSpec(const PodSpecInput& in) {
  try {
    return buildSpec(in);
  } catch (const nlohmann::json::exception& e) {
    return invalidArgument(std::string("revision or image config: ") + e.what());
  }
}

}  // namespace knap::runtime
