#include "runtime/runner/containerd_pod_driver.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/duration.h"
#include "common/guard.h"
#include "common/log.h"
#include "oci/reference.h"
#include "runtime/containerd/image_import.h"
#include "runtime/pod/oci_spec.h"

namespace knap::runner {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::optional<std::string> readSmallFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Status writeFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) return internalError("write " + path + " failed");
  ::chmod(path.c_str(), 0644);
  return Status::ok();
}

std::string label(const json& obj, const char* key) {
  try {
    const json& l = obj.at("metadata").at("labels");
    auto it = l.find(key);
    if (it != l.end() && it->is_string()) return it->get<std::string>();
  } catch (...) {
  }
  return "";
}

// A container's /tmp on the host: a tmpfs knapd mounts (mode 1777 whatever
// the umask and the image's /tmp; nosuid, nodev; at most `bytes`), bound into
// the container. Its pages count against the memory of the container writing
// them (like an emptyDir with medium: Memory), and it cannot fill the data
// disk that holds knap.db.
Status mountTmp(const std::string& path, int64_t bytes) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return internalError("mkdir " + path + ": " + ec.message());
  const std::string options = "mode=1777,size=" + std::to_string(bytes);
  if (::mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    return internalError("mount a tmpfs for /tmp at " + path + ": " + std::strerror(errno));
  }
  return Status::ok();
}

// The size of container `index`'s /tmp: its memory limit, else `fallback`.
int64_t tmpBytes(const json& revision, int index, int64_t fallback) {
  try {
    const json& spec = revision.contains("spec") ? revision["spec"] : revision;
    const json& limits = spec.at("containers").at(index).at("resources").at("limits");
    if (limits.contains("memory")) {
      auto bytes = runtime::parseQuantityJson(limits["memory"]);
      if (bytes.isOk() && *bytes > 0) return *bytes;
    }
  } catch (...) {
  }
  return fallback;
}

void unmountIfMounted(const std::string& path) {
  if (::umount2(path.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
    LOG(WARNING) << "pod driver: umount " << path << ": " << std::strerror(errno);
  }
}

// Unmounts the tmpfs mounts of a pod directory: the shared emptyDirs and
// every container's /tmp (before it is removed: remove_all would empty a
// mounted tmpfs and then fail on it).
void unmountPodTmpfs(const std::string& pod_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(pod_dir + "/emptydir", ec)) unmountIfMounted(e.path().string());
  unmountIfMounted(pod_dir + "/tmp");
  for (const auto& e : fs::directory_iterator(pod_dir + "/containers", ec))
    unmountIfMounted(e.path().string() + "/tmp");
}

bool okOrNotFound(const Status& s) {
  return s.isOk() || s.code() == Code::kNotFound;
}

// The layer directories of a snapshot's mounts, topmost first: the
// upper/lower directories of an overlay mount or the source of a bind mount.
std::vector<std::string> layerDirs(const std::vector<containerd::Mount>& mounts) {
  std::vector<std::string> dirs;
  for (const auto& m : mounts) {
    if (m.type == "bind") dirs.push_back(m.source);
    for (const auto& o : m.options) {
      if (o.rfind("upperdir=", 0) == 0) dirs.insert(dirs.begin(), o.substr(9));
      if (o.rfind("lowerdir=", 0) == 0) {
        std::stringstream ss(o.substr(9));
        std::string d;
        while (std::getline(ss, d, ':')) dirs.push_back(d);
      }
    }
  }
  return dirs;
}

// Finds `rel` in the snapshot's layers without mounting.
StatusOr<std::optional<std::string>> readFromMounts(const std::vector<containerd::Mount>& mounts,
                                                    const std::string& rel) {
  return readFromLayers(layerDirs(mounts), rel);
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

StatusOr<std::optional<std::string>> readLayerFile(const std::string& root, const std::string& rel,
                                                   int64_t max_bytes) {
  const std::string what = root + "/" + rel;
  std::vector<std::string> parts;
  {
    std::stringstream ss(rel);
    std::string p;
    while (std::getline(ss, p, '/')) {
      if (p.empty() || p == ".") continue;
      if (p == "..") return invalidArgument("path " + rel + " leaves the layer");
      parts.push_back(p);
    }
  }
  if (parts.empty()) return invalidArgument("empty path in layer " + root);
  Fd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::optional<std::string>();
    return internalError("open layer " + root + ": " + std::strerror(errno));
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    Fd next(::openat(dir.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (next.get() < 0) {
      if (errno == ENOENT) return std::optional<std::string>();
      // ENOTDIR: a file, or a symlink (O_NOFOLLOW|O_DIRECTORY gives ENOTDIR
      // or ELOOP for one): whatever it is, it shadows lower layers.
      if (errno == ENOTDIR || errno == ELOOP) {
        return failedPrecondition(what + ": " + parts[i] + " is not a directory (symlinks are not followed)");
      }
      return internalError("open " + what + ": " + std::strerror(errno));
    }
    dir = std::move(next);
  }
  const std::string& name = parts.back();
  // Look before opening: opening a device node can have side effects.
  struct stat st;
  if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return internalError("stat " + what + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return failedPrecondition(what + " is not a regular file (symlinks are not followed)");
  }
  // O_NONBLOCK: should it have been swapped for a FIFO since, the open does not hang.
  Fd f(::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (f.get() < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    if (errno == ELOOP)
      return failedPrecondition(what + " is not a regular file (symlinks are not followed)");
    return internalError("open " + what + ": " + std::strerror(errno));
  }
  if (::fstat(f.get(), &st) != 0) return internalError("stat " + what + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return failedPrecondition(what + " is not a regular file");
  auto too_big = [&] {
    return Status(Code::kResourceExhausted, what + " is larger than the limit of " +
                                                std::to_string(max_bytes) +
                                                " bytes for an image's user database file");
  };
  if (st.st_size > max_bytes) return too_big();
  std::string text;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(f.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return internalError("read " + what + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    if (static_cast<int64_t>(text.size()) + n > max_bytes) return too_big();  // grew since fstat
    text.append(buf, static_cast<size_t>(n));
  }
  return std::optional<std::string>(std::move(text));
}

StatusOr<std::optional<std::string>> readFromLayers(const std::vector<std::string>& layer_dirs,
                                                    const std::string& rel) {
  for (const auto& d : layer_dirs) {
    auto r = readLayerFile(d, rel);
    if (!r.isOk()) {
      if (r.status().code() == Code::kFailedPrecondition) {
        // A symlink or whiteout shadows the lower layers: the image has no
        // usable file (a symlinked /etc/passwd is not followed, by design).
        LOG(WARNING) << "pod driver: ignoring " << rel << ": " << r.status().message();
        return std::optional<std::string>();
      }
      return r.status();
    }
    if (r->has_value()) return r;
  }
  return std::optional<std::string>();
}

namespace {}  // namespace

std::string fileTail(const std::string& path, int lines) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  f.seekg(0, std::ios::end);
  std::streamoff size = f.tellg();
  std::streamoff start = std::max<std::streamoff>(0, size - 2048);
  f.seekg(start);
  std::string text((std::istreambuf_iterator<char>(f)), {});
  if (start > 0) {
    size_t nl = text.find('\n');
    if (nl != std::string::npos) text = text.substr(nl + 1);
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  size_t pos = text.size();
  for (int n = 0; n < lines; ++n) {
    size_t nl = text.rfind('\n', pos == 0 ? 0 : pos - 1);
    if (nl == std::string::npos || pos == 0) {
      pos = 0;
      break;
    }
    pos = nl;
  }
  return pos == 0 ? text : text.substr(pos + 1);
}

ContainerdPodDriver::ContainerdPodDriver(containerd::ContainerdClient client, runtime::CniNetwork& network,
                                         const TimeSource& time, ContainerdPodDriverOptions options)
    : client_(std::move(client)), network_(network), time_(time), options_(std::move(options)) {}

std::string ContainerdPodDriver::podDir(const std::string& pod_id) const {
  return options_.data_dir + "/pods/" + pod_id;
}

std::string ContainerdPodDriver::cgroupDir(const std::string& controller, const std::string& pod_id) const {
  return "/sys/fs/cgroup/" + controller + "/" + options_.cgroup_parent + "/" + pod_id;
}

StatusOr<PodHandle> ContainerdPodDriver::create(const PodRequest& req) {
  StatusOr<containerd::ImageInfo> image = containerd::getImage(client_, req.image);
  if (!image.isOk()) {
    if (image.status().code() == Code::kNotFound) {
      return notFound("image " + req.image + " not found: import it with `knap image import FILE`");
    }
    return Status(image.status().code(), "image " + req.image + ": " + image.status().message());
  }
  if (!image->unpacked) {
    return failedPrecondition("image " + req.image +
                              " is not unpacked: import it again with `knap image import FILE`");
  }
  PodHandle h;
  h.pod_id = req.pod_id;
  h.ns = req.ns;
  h.revision_name = req.revision_name;
  h.image_digest = oci::writtenRepository(req.image) + "@" + image->manifest_digest;

  // Sidecars: every container but the serving one, each from its own image
  // (looked up before anything is made, so a missing one fails cleanly).
  struct SidecarPlan {
    int index = 0;
    std::string id, name, image;
    containerd::ImageInfo info;
  };
  std::vector<SidecarPlan> plan;
  {
    const json& spec = req.revision.contains("spec") ? req.revision["spec"] : req.revision;
    const json containers = spec.is_object() ? spec.value("containers", json::array()) : json::array();
    const int serving = runtime::servingContainerIndex(containers);
    for (size_t i = 0; containers.is_array() && i < containers.size(); ++i) {
      if (static_cast<int>(i) == serving) continue;
      SidecarPlan sp;
      sp.index = static_cast<int>(i);
      sp.id = sidecarId(req.pod_id, sp.index);
      sp.name = containers[i].is_object() ? containers[i].value("name", "") : "";
      if (sp.name.empty()) sp.name = "container-" + std::to_string(i);
      sp.image = i < req.images.size() && !req.images[i].empty()
                     ? req.images[i]
                     : (containers[i].is_object() ? containers[i].value("image", "") : "");
      auto si = containerd::getImage(client_, sp.image);
      if (!si.isOk()) {
        if (si.status().code() == Code::kNotFound) {
          return notFound("image " + sp.image + " (container " + sp.name +
                          ") not found: import it with `knap image import FILE`");
        }
        return Status(si.status().code(), "image " + sp.image + ": " + si.status().message());
      }
      if (!si->unpacked) {
        return failedPrecondition("image " + sp.image +
                                  " is not unpacked: import it again with `knap image import FILE`");
      }
      sp.info = std::move(si).value();
      plan.push_back(std::move(sp));
    }
  }

  // Everything created from here is undone on failure.
  bool net_up = false, snap = false, container = false, task = false;
  std::vector<std::string> sidecars_made;  // sidecar ids with a snapshot (and maybe container and task)
  std::string lease;
  const std::string dir = podDir(req.pod_id);
  auto fail = [&](Status s) -> Status {
    for (const auto& id : sidecars_made) {
      (void)client_.killTask(id, SIGKILL, true);
      (void)client_.deleteTask(id);
      (void)client_.deleteContainer(id);
      (void)client_.removeSnapshot(id);
    }
    if (task) (void)client_.killTask(req.pod_id, SIGKILL, true), (void)client_.deleteTask(req.pod_id);
    if (container) (void)client_.deleteContainer(req.pod_id);
    if (snap) (void)client_.removeSnapshot(req.pod_id);
    if (net_up) (void)network_.tearDown(req.pod_id);
    if (!lease.empty()) (void)client_.deleteLease(lease);
    unmountPodTmpfs(dir);
    std::error_code ec;
    fs::remove_all(dir, ec);
    LOG(WARNING) << "pod driver: create " << req.pod_id << " failed: " << s.toString();
    return s;
  };

  auto lease_id = client_.createLease("", options_.lease_expiry, {{"knap.dev/pod", req.pod_id}});
  if (!lease_id.isOk()) return fail(lease_id.status());
  lease = *lease_id;
  containerd::ContainerdClient leased = client_.withLease(lease);

  auto net = network_.setUp(req.pod_id);
  if (!net.isOk()) return fail(net.status());
  net_up = true;
  h.ip = net->ip;

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(internalError("mkdir " + dir + ": " + ec.message()));
  auto host_resolv = readSmallFile(options_.host_resolv_conf).value_or("");
  runtime::PodHostFiles files = runtime::makePodHostFiles(req.pod_id, h.ip, host_resolv);
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"resolv.conf", files.resolv_conf},
                                   {"hosts", files.hosts},
                                   {"hostname", files.hostname}}) {
    if (Status s = writeFile(dir + "/" + name, text); !s.isOk()) return fail(s);
  }
  if (Status s = containerd::prepareLogFile(dir + "/stdout.log", true); !s.isOk()) return fail(s);
  if (Status s = containerd::prepareLogFile(dir + "/stderr.log", true); !s.isOk()) return fail(s);

  // Secret/ConfigMap volumes: <pod dir>/volumes/<name>, the kubelet's ..data layout.
  std::map<std::string, std::string> volume_dirs;
  for (const auto& [name, files] : req.objects.volumes) {
    if (name.empty() || name.find('/') != std::string::npos || name[0] == '.')
      return fail(invalidArgument("volume name \"" + name + "\" cannot name a directory"));
    std::string vdir = dir + "/volumes/" + name;
    if (Status s = runtime::writeVolumeAtomically(vdir, files); !s.isOk())
      return fail(s.annotate("volume " + name));
    volume_dirs[name] = vdir;
  }
  // With sidecars, emptyDir volumes are shared by the containers that mount
  // them, as in Kubernetes: one tmpfs per volume on the host
  // (<pod dir>/emptydir/<name>, size = sizeLimit), bound into each container.
  std::map<std::string, std::string> empty_dir_dirs;
  if (!plan.empty()) {
    const json& spec = req.revision.contains("spec") ? req.revision["spec"] : req.revision;
    const json volumes = spec.is_object() ? spec.value("volumes", json::array()) : json::array();
    for (const auto& v : volumes.is_array() ? volumes : json::array()) {
      if (!v.is_object() || !v.contains("emptyDir") || !v["emptyDir"].is_object()) continue;
      const std::string name = v.value("name", "");
      if (name.empty() || name.find('/') != std::string::npos || name[0] == '.')
        return fail(invalidArgument("volume name \"" + name + "\" cannot name a directory"));
      std::string options = "mode=1777";
      if (v["emptyDir"].contains("sizeLimit")) {
        auto bytes = runtime::parseQuantityJson(v["emptyDir"]["sizeLimit"]);
        if (!bytes.isOk()) return fail(bytes.status().annotate("volume " + name + " emptyDir.sizeLimit"));
        if (*bytes > 0) options += ",size=" + std::to_string(*bytes);
      }
      const std::string edir = dir + "/emptydir/" + name;
      fs::create_directories(edir, ec);
      if (ec) return fail(internalError("mkdir " + edir + ": " + ec.message()));
      if (::mount("tmpfs", edir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
        return fail(internalError("mount a tmpfs for emptyDir " + name + " at " + edir + ": " +
                                  std::strerror(errno)));
      }
      empty_dir_dirs[name] = edir;
    }
  }

  auto mounts = leased.prepareSnapshot(req.pod_id, image->chain_id, {{kPodLabel, req.pod_id}});
  if (!mounts.isOk()) return fail(mounts.status());
  snap = true;

  runtime::PodSpecInput in;
  in.revision = req.revision;
  in.image_config = json::parse(image->config.json, nullptr, false);
  if (in.image_config.is_discarded())
    return fail(internalError("image config of " + req.image + " is not JSON"));
  in.service_name = label(req.revision, "serving.knative.dev/service");
  in.configuration_name = label(req.revision, "serving.knative.dev/configuration");
  in.revision_name = req.revision_name;
  in.pod_id = req.pod_id;
  in.netns_path = net->netns_path;
  {
    auto passwd = readFromMounts(*mounts, "etc/passwd");
    if (!passwd.isOk()) return fail(passwd.status().annotate("image " + req.image));
    auto group = readFromMounts(*mounts, "etc/group");
    if (!group.isOk()) return fail(group.status().annotate("image " + req.image));
    in.etc_passwd = *passwd;
    in.etc_group = *group;
  }
  in.resolv_conf_path = dir + "/resolv.conf";
  in.hosts_path = dir + "/hosts";
  in.hostname_path = dir + "/hostname";
  in.cgroups_path = "/" + options_.cgroup_parent + "/" + req.pod_id;
  in.tmp_dir = dir + "/tmp";
  {
    const json& spec = req.revision.contains("spec") ? req.revision["spec"] : req.revision;
    const json containers = spec.is_object() ? spec.value("containers", json::array()) : json::array();
    const int serving = runtime::servingContainerIndex(containers);
    if (Status s = mountTmp(in.tmp_dir, tmpBytes(req.revision, serving, options_.tmp_bytes)); !s.isOk()) {
      return fail(s);
    }
  }
  in.pod_ip = h.ip;
  in.nofile_limit = runtime::maxNofileForPods();
  in.env_from = req.objects.env_from;
  in.env_refs = req.objects.env_refs;
  in.volume_dirs = volume_dirs;
  in.empty_dir_dirs = empty_dir_dirs;
  auto spec = runtime::buildOciSpec(in);
  if (!spec.isOk()) return fail(spec.status());
  try {
    const json& env = (*spec)["process"]["env"];
    for (const auto& e : env) {
      std::string s = e.get<std::string>();
      if (s.rfind("PORT=", 0) == 0) h.port = std::stoi(s.substr(5));
    }
  } catch (...) {
  }

  containerd::ContainerRecord rec;
  rec.id = req.pod_id;
  rec.labels = req.labels;
  rec.labels[kRevisionLabel] = req.revision_name;
  rec.labels[kNamespaceLabel] = req.ns;
  rec.labels[kPodLabel] = req.pod_id;
  rec.labels[kIpLabel] = h.ip;
  rec.labels[kPortLabel] = std::to_string(h.port);
  rec.labels[kImageDigestLabel] = h.image_digest;
  if (!plan.empty()) {
    std::string ids;
    for (const auto& sp : plan) ids += (ids.empty() ? "" : ",") + sp.id;
    rec.labels[kSidecarsLabel] = ids;
    // Every container's digest, in spec order (Revision containerStatuses).
    std::vector<std::string> digests(plan.size() + 1);
    size_t serving = 0;
    for (size_t i = 0, j = 0; i < digests.size(); ++i) {
      if (j < plan.size() && plan[j].index == static_cast<int>(i)) {
        digests[i] = oci::writtenRepository(plan[j].image) + "@" + plan[j].info.manifest_digest;
        ++j;
      } else {
        serving = i;
      }
    }
    digests[serving] = h.image_digest;
    std::string all;
    for (const auto& d : digests) all += (all.empty() ? "" : ",") + d;
    rec.labels[kImageDigestsLabel] = all;
    h.image_digests = digests;
  }
  rec.image = req.image;
  rec.spec_json = spec->dump();
  rec.snapshot_key = req.pod_id;
  if (Status s = leased.createContainer(rec); !s.isOk()) return fail(s);
  container = true;

  json meta = {{"pod", req.pod_id},
               {"namespace", req.ns},
               {"revision", req.revision_name},
               {"service", in.service_name},
               {"configuration", in.configuration_name},
               {"ip", h.ip},
               {"port", h.port},
               {"image", req.image},
               {"imageDigest", h.image_digest},
               {"created", formatRfc3339(time_.now())}};
  {
    // The serving container's name; sidecars log under containers/<name>/ (knap logs -c).
    const json& spec = req.revision.contains("spec") ? req.revision["spec"] : req.revision;
    const json containers = spec.is_object() ? spec.value("containers", json::array()) : json::array();
    const int serving = runtime::servingContainerIndex(containers);
    if (containers.is_array() && static_cast<size_t>(serving) < containers.size() &&
        containers[serving].is_object()) {
      meta["container"] = containers[serving].value("name", "");
    }
  }
  if (Status s = writeFile(dir + "/meta.json", meta.dump(2) + "\n"); !s.isOk()) return fail(s);

  containerd::TaskCreateRequest treq;
  treq.container_id = req.pod_id;
  treq.rootfs = *mounts;
  if (!options_.log_driver.empty()) {
    treq.stdout_path = logDriverUri(options_.log_driver, dir, options_.log_rotate_bytes);
    treq.stderr_path = treq.stdout_path;  // one logger gets both streams (fds 3 and 4)
  } else {
    treq.stdout_path = dir + "/stdout.log";
    treq.stderr_path = dir + "/stderr.log";
  }
  auto pid = client_.createTask(treq);
  if (!pid.isOk()) return fail(pid.status());
  task = true;
  h.pid = *pid;

  // The sidecars: same network namespace, hosts files, volumes and cgroup
  // parent; their own rootfs, spec (env, mounts, resources) and logs under
  // <pod dir>/containers/<name>/.
  std::vector<Sidecar> made;
  for (const auto& sp : plan) {
    const std::string cdir = dir + "/containers/" + sp.name;
    fs::create_directories(cdir, ec);
    if (ec) return fail(internalError("mkdir " + cdir + ": " + ec.message()));
    if (Status s = containerd::prepareLogFile(cdir + "/stdout.log", true); !s.isOk()) return fail(s);
    if (Status s = containerd::prepareLogFile(cdir + "/stderr.log", true); !s.isOk()) return fail(s);
    auto smounts = leased.prepareSnapshot(sp.id, sp.info.chain_id, {{kPodLabel, req.pod_id}});
    if (!smounts.isOk()) return fail(smounts.status().annotate("container " + sp.name));
    sidecars_made.push_back(sp.id);
    runtime::PodSpecInput sin = in;
    sin.container_index = sp.index;
    sin.image_config = json::parse(sp.info.config.json, nullptr, false);
    if (sin.image_config.is_discarded())
      return fail(internalError("image config of " + sp.image + " is not JSON"));
    {
      auto passwd = readFromMounts(*smounts, "etc/passwd");
      if (!passwd.isOk())
        return fail(passwd.status().annotate("image " + sp.image + " (container " + sp.name + ")"));
      auto group = readFromMounts(*smounts, "etc/group");
      if (!group.isOk())
        return fail(group.status().annotate("image " + sp.image + " (container " + sp.name + ")"));
      sin.etc_passwd = *passwd;
      sin.etc_group = *group;
    }
    sin.cgroups_path = "/" + options_.cgroup_parent + "/" + sp.id;
    sin.tmp_dir = cdir + "/tmp";
    if (Status s = mountTmp(sin.tmp_dir, tmpBytes(req.revision, sp.index, options_.tmp_bytes)); !s.isOk()) {
      return fail(s.annotate("container " + sp.name));
    }
    sin.env_from.clear();
    sin.env_refs.clear();
    if (auto e = req.objects.sidecar_env.find(sp.name); e != req.objects.sidecar_env.end()) {
      sin.env_from = e->second.env_from;
      sin.env_refs = e->second.env_refs;
    }
    auto sspec = runtime::buildOciSpec(sin);
    if (!sspec.isOk()) return fail(sspec.status().annotate("container " + sp.name));
    containerd::ContainerRecord srec;
    srec.id = sp.id;
    srec.labels = req.labels;
    srec.labels[kNamespaceLabel] = req.ns;
    srec.labels[kPodLabel] = req.pod_id;
    srec.labels[kContainerLabel] = sp.name;
    srec.labels[kImageDigestLabel] = oci::writtenRepository(sp.image) + "@" + sp.info.manifest_digest;
    srec.image = sp.image;
    srec.spec_json = sspec->dump();
    srec.snapshot_key = sp.id;
    if (Status s = leased.createContainer(srec); !s.isOk()) return fail(s.annotate("container " + sp.name));
    containerd::TaskCreateRequest sreq;
    sreq.container_id = sp.id;
    sreq.rootfs = *smounts;
    if (!options_.log_driver.empty()) {
      sreq.stdout_path = logDriverUri(options_.log_driver, cdir, options_.log_rotate_bytes);
      sreq.stderr_path = sreq.stdout_path;
    } else {
      sreq.stdout_path = cdir + "/stdout.log";
      sreq.stderr_path = cdir + "/stderr.log";
    }
    auto spid = client_.createTask(sreq);
    if (!spid.isOk()) return fail(spid.status().annotate("container " + sp.name));
    made.push_back({sp.id, sp.name});
  }
  (void)client_.deleteLease(lease);  // the container records now hold the snapshots
  {
    std::lock_guard<std::mutex> l(mu_);
    exited_.erase(req.pod_id);
    for (const auto& sc : made) exited_.erase(sc.id);
    sidecars_[req.pod_id] = made;
  }
  return h;
}

std::string ContainerdPodDriver::sidecarId(const std::string& pod_id, int index) {
  return pod_id + "." + std::to_string(index);
}

std::vector<ContainerdPodDriver::Sidecar> ContainerdPodDriver::sidecars(const std::string& pod_id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sidecars_.find(pod_id);
    if (it != sidecars_.end()) return it->second;
  }
  // Not created by this process (adopted after a restart): the containers
  // labelled with the pod, other than the pod's own.
  std::vector<Sidecar> out;
  auto cs = client_.listContainers();
  if (!cs.isOk()) return out;  // not cached: asked again next time
  for (const auto& c : *cs) {
    auto pod = c.labels.find(kPodLabel);
    if (c.id == pod_id || pod == c.labels.end() || pod->second != pod_id) continue;
    auto name = c.labels.find(kContainerLabel);
    out.push_back({c.id, name == c.labels.end() ? c.id : name->second});
  }
  std::lock_guard<std::mutex> l(mu_);
  sidecars_[pod_id] = out;
  return out;
}

Status ContainerdPodDriver::updateVolumes(
    const PodHandle& pod, const std::map<std::string, std::vector<runtime::VolumeFile>>& volumes) {
  for (const auto& [name, files] : volumes) {
    if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') continue;
    std::string vdir = podDir(pod.pod_id) + "/volumes/" + name;
    std::error_code ec;
    // Only volumes the pod was created with (a destroyed pod's directory is not recreated).
    if (!fs::is_symlink(vdir + "/..data", ec)) continue;
    if (runtime::volumeMatches(vdir, files)) continue;
    KNAP_RETURN_IF_ERROR(runtime::writeVolumeAtomically(vdir, files).annotate("volume " + name));
    LOG(INFO) << "pod driver: updated volume " << name << " of " << pod.pod_id;
  }
  return Status::ok();
}

StatusOr<uint32_t> ContainerdPodDriver::start(const PodHandle& pod) {
  // Sidecars first (Kubernetes starts a pod's containers in order; the
  // serving container is the one the runner probes), then the serving one.
  for (const auto& sc : sidecars(pod.pod_id)) {
    auto r = client_.startTask(sc.id);
    if (!r.isOk()) return r.status().annotate("container " + sc.name);
  }
  return client_.startTask(pod.pod_id);
}

StatusOr<PodExit> ContainerdPodDriver::wait(const PodHandle& pod) {
  std::vector<Sidecar> side = sidecars(pod.pod_id);
  if (side.empty()) return waitContainer(pod, pod.pod_id, "", "");
  // One Wait per container; the first exit (or error) ends the pod's wait and
  // abandons the others.
  struct First {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<StatusOr<PodExit>> result;
  };
  auto first = std::make_shared<First>();
  {
    std::lock_guard<std::mutex> l(mu_);
    pod_waits_[pod.pod_id] = false;
  }
  std::vector<std::thread> threads;
  auto run = [this, pod, first](std::string id, std::string name, std::string log_dir) {
    StatusOr<PodExit> r = internalError("wait for container " + id + " threw");
    runGuarded("wait for container " + id, [&] { r = waitContainer(pod, id, name, log_dir); });
    std::lock_guard<std::mutex> l(first->mu);
    if (!first->result) first->result = std::move(r);
    first->cv.notify_all();
  };
  // Ends the waits started so far (a wait registering later sees
  // pod_waits_ set and cancels itself) and joins their threads.
  auto end_waits = [&] {
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = cancellers_.find(pod.pod_id);
      if (it != cancellers_.end()) it->second->cancel();
      for (const auto& sc : side) {
        auto s = cancellers_.find(sc.id);
        if (s != cancellers_.end()) s->second->cancel();
      }
      pod_waits_[pod.pod_id] = true;
    }
    for (auto& t : threads) t.join();
  };
  // A thread that cannot be started (std::system_error: out of threads or
  // memory) must not unwind past the joinable ones (std::terminate).
  try {
    threads.reserve(side.size() + 1);
    threads.emplace_back(run, pod.pod_id, "", "");
    for (const auto& sc : side)
      threads.emplace_back(run, sc.id, sc.name, podDir(pod.pod_id) + "/containers/" + sc.name);
  } catch (const std::exception& e) {
    end_waits();
    {
      std::lock_guard<std::mutex> l(mu_);
      pod_waits_.erase(pod.pod_id);
    }
    return unavailable("wait for pod " + pod.pod_id + ": cannot start a thread per container (" +
                       std::to_string(side.size() + 1) + " containers): " + e.what());
  }
  StatusOr<PodExit> result = unavailable("no result");
  {
    std::unique_lock<std::mutex> l(first->mu);
    first->cv.wait(l, [&] { return first->result.has_value(); });
    result = *first->result;
  }
  end_waits();
  {
    std::lock_guard<std::mutex> l(mu_);
    pod_waits_.erase(pod.pod_id);
  }
  if (result.isOk() && !result->container.empty()) {
    LOG(WARNING) << "pod driver: container " << result->container << " of " << pod.pod_id << " exited with "
                 << result->exit_code;
  }
  return result;
}

StatusOr<PodExit> ContainerdPodDriver::waitContainer(const PodHandle& pod, const std::string& id,
                                                     const std::string& name, const std::string& log_dir) {
  auto canceller = std::make_shared<containerd::CallCanceller>();
  {
    std::lock_guard<std::mutex> l(mu_);
    // wait() already gave up on this pod (another container exited first).
    if (auto w = pod_waits_.find(pod.pod_id); w != pod_waits_.end() && w->second) canceller->cancel();
    cancellers_[id] = canceller;
  }
  // containerd restarting (or killed and started again) breaks the Wait
  // stream, but the pod lives on under its shim: wait for containerd to
  // answer again and re-issue the Wait, so the pod is adopted, not taken for
  // crashed. Only when the task is really gone does the wait end.
  StatusOr<containerd::ExitInfo> r = client_.waitTask(id, canceller.get());
  while (!r.isOk() && r.status().code() == Code::kUnavailable && !canceller->cancelled()) {
    LOG(WARNING) << "pod driver: waiting for " << id << ": " << r.status().toString()
                 << "; re-issuing the wait once containerd answers";
    while (!canceller->cancelled() && !client_.version(std::chrono::seconds(1)).isOk()) {
    }
    if (canceller->cancelled()) break;
    auto t = client_.getTask(id);
    if (!t.isOk() && t.status().code() == Code::kNotFound) break;  // gone with containerd: report r
    r = client_.waitTask(id, canceller.get());
  }
  bool cancelled = canceller->cancelled();
  {
    std::lock_guard<std::mutex> l(mu_);
    cancellers_.erase(id);
  }
  if (!r.isOk()) return r.status();
  if (cancelled) return unavailable("wait for " + id + " cancelled");
  PodExit e;
  e.container = name;
  e.exit_code = static_cast<int>(r->exit_status);
  // OOM: the kernel's per-cgroup kill counter (cgroup v1; the cgroup still
  // exists until Tasks.Delete), or a SIGKILL with the limit hit.
  const std::string mem = cgroupDir("memory", id);
  if (auto oc = readSmallFile(mem + "/memory.oom_control")) {
    size_t p = oc->find("oom_kill ");
    if (p != std::string::npos && std::atol(oc->c_str() + p + 9) > 0) e.oom_killed = true;
  }
  if (!e.oom_killed && e.exit_code == 137) {
    if (auto fc = readSmallFile(mem + "/memory.failcnt")) e.oom_killed = std::atol(fc->c_str()) > 0;
  }
  std::string dir = log_dir.empty() ? podDir(pod.pod_id) : log_dir;
  std::string err = fileTail(dir + "/stderr.log", options_.log_tail_lines);
  std::string out = fileTail(dir + "/stdout.log", options_.log_tail_lines);
  e.log_tail = !err.empty() ? err : out;
  {
    std::lock_guard<std::mutex> l(mu_);
    exited_.insert(id);
  }
  exit_cv_.notify_all();
  return e;
}

void ContainerdPodDriver::cancelWait(const PodHandle& pod) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = cancellers_.find(pod.pod_id);
  if (it != cancellers_.end()) it->second->cancel();
  // The sidecars' waits (their ids are "<pod id>.<index>").
  for (auto c = cancellers_.lower_bound(pod.pod_id + "."); c != cancellers_.end(); ++c) {
    if (c->first.rfind(pod.pod_id + ".", 0) != 0) break;
    c->second->cancel();
  }
  if (auto w = pod_waits_.find(pod.pod_id); w != pod_waits_.end()) w->second = true;
}

bool ContainerdPodDriver::taskStopped(const std::string& pod_id) {
  auto t = client_.getTask(pod_id);
  return !t.isOk() || t->status == containerd::TaskStatus::kStopped;
}

bool ContainerdPodDriver::waitExited(const std::string& pod_id, Duration timeout) {
  // Either our wait() saw the exit, or the task reports STOPPED. Polled at
  // 50 ms; real time, because the container's grace period is real time.
  MonoTime deadline = time_.monotonic() + timeout;
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    if (exited_.count(pod_id)) return true;
    l.unlock();
    bool stopped = taskStopped(pod_id);
    l.lock();
    if (stopped) return true;
    if (time_.monotonic() >= deadline) return false;
    exit_cv_.wait_for(l, std::chrono::milliseconds(50));
  }
}

Status ContainerdPodDriver::stop(const PodHandle& pod, Duration grace) {
  // Every container of the pod gets SIGTERM at once and shares the grace
  // period, as the kubelet stops a pod's containers in parallel.
  std::vector<std::string> ids = {pod.pod_id};
  for (const auto& sc : sidecars(pod.pod_id)) ids.push_back(sc.id);
  thawIfFrozen(ids);
  std::vector<std::string> running;
  for (const auto& id : ids) {
    if (taskStopped(id)) continue;
    Status s = client_.killTask(id, SIGTERM);
    if (!okOrNotFound(s)) return s;
    running.push_back(id);
  }
  const MonoTime deadline = time_.monotonic() + grace;
  for (const auto& id : running) {
    Duration left = std::max<Duration>(deadline - time_.monotonic(), Duration::zero());
    if (waitExited(id, left)) continue;
    LOG(INFO) << "pod driver: " << id << " ignored SIGTERM for " << formatGoDuration(grace) << "; SIGKILL";
    Status s = client_.killTask(id, SIGKILL, true);
    if (!okOrNotFound(s)) return s;
    if (!waitExited(id, std::chrono::seconds(10))) {
      return Status(Code::kDeadlineExceeded,
                    "pod " + pod.pod_id + " (" + id + ") did not exit after SIGKILL");
    }
  }
  return Status::ok();
}

Status ContainerdPodDriver::destroy(const PodHandle& pod) {
  const std::string& id = pod.pod_id;
  Status first = Status::ok();
  auto note = [&](const Status& s, const char* what) {
    if (!okOrNotFound(s)) {
      LOG(WARNING) << "pod driver: destroy " << id << ": " << what << ": " << s.toString();
      if (first.isOk()) first = s;
    }
  };
  {
    std::vector<std::string> ids = {id};
    for (const auto& sc : sidecars(id)) ids.push_back(sc.id);
    thawIfFrozen(ids);
  }
  // The sidecars first: task, snapshot, container each.
  for (const auto& sc : sidecars(id)) {
    Status before = first;
    auto t = client_.getTask(sc.id);
    if (t.isOk()) {
      if (t->status != containerd::TaskStatus::kStopped) {
        note(client_.killTask(sc.id, SIGKILL, true), "sidecar kill");
        (void)waitExited(sc.id, std::chrono::seconds(10));
      }
      note(client_.deleteTask(sc.id).status(), "sidecar task delete");
    } else {
      note(t.status(), "sidecar task get");
    }
    if (!first.isOk() && before.isOk()) continue;  // keep the container while its task exists (G6)
    note(client_.removeSnapshot(sc.id), "sidecar snapshot remove");
    note(client_.deleteContainer(sc.id), "sidecar container delete");
    std::lock_guard<std::mutex> l(mu_);
    exited_.erase(sc.id);
  }
  if (!first.isOk()) return first;
  auto task = client_.getTask(id);
  if (task.isOk()) {
    if (task->status != containerd::TaskStatus::kStopped) {
      note(client_.killTask(id, SIGKILL, true), "kill");
      (void)waitExited(id, std::chrono::seconds(10));
    }
    auto del = client_.deleteTask(id);
    note(del.status(), "task delete");
  } else {
    note(task.status(), "task get");
  }
  if (!first.isOk()) return first;  // never delete the container while its task exists (G6)
  note(client_.removeSnapshot(id), "snapshot remove");
  note(client_.deleteContainer(id), "container delete");
  note(network_.tearDown(id), "network teardown");
  unmountPodTmpfs(podDir(id));
  std::error_code ec;
  fs::remove_all(podDir(id), ec);
  {
    std::lock_guard<std::mutex> l(mu_);
    exited_.erase(id);
    log_checked_.erase(id);
    process_specs_.erase(id);
    sidecars_.erase(id);
  }
  return first;
}

std::string ContainerdPodDriver::logDriverUri(const std::string& driver, const std::string& dir,
                                              int64_t max_bytes) {
  // Query values are percent-decoded by the shim (Go url.ParseQuery, where '+' is a space).
  auto escape = [](const std::string& v) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : v) {
      if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
        out += static_cast<char>(c);
      } else {
        out += '%';
        out += hex[c >> 4];
        out += hex[c & 15];
      }
    }
    return out;
  };
  return "binary://" + escape(driver) + "?dir=" + escape(dir) + "&max=" + std::to_string(max_bytes);
}

void ContainerdPodDriver::rotateLogs(const std::string& pod_id) {
  if (!options_.log_driver.empty()) return;  // knap-logdrain rotates
  // The serving container's logs and every sidecar's (containers/<name>/).
  std::vector<std::string> paths;
  const std::string dir = podDir(pod_id);
  for (const char* name : {"stdout.log", "stderr.log"}) paths.push_back(dir + "/" + name);
  std::error_code dec;
  for (const auto& e : fs::directory_iterator(dir + "/containers", dec)) {
    if (e.is_symlink(dec) || !e.is_directory(dec)) continue;
    for (const char* name : {"stdout.log", "stderr.log"}) paths.push_back(e.path().string() + "/" + name);
  }
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_symlink(path, ec) || !fs::is_regular_file(path, ec)) continue;
    auto size = fs::file_size(path, ec);
    if (ec || static_cast<int64_t>(size) <= options_.log_rotate_bytes) continue;
    // copytruncate: the shim holds an O_APPEND fd, so truncating in place is
    // safe; the next write lands at offset 0.
    fs::copy_file(path, path + ".1", fs::copy_options::overwrite_existing, ec);
    if (ec) {
      LOG(WARNING) << "pod driver: rotate " << path << ": " << ec.message();
      continue;
    }
    fs::resize_file(path, 0, ec);
  }
}

runtime::ProbeResult ContainerdPodDriver::probe(const PodHandle& pod, const runtime::ProbeSpec& spec) {
  bool check = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    MonoTime now = time_.monotonic();
    auto it = log_checked_.find(pod.pod_id);
    if (it == log_checked_.end() || now - it->second >= options_.log_check_interval) {
      log_checked_[pod.pod_id] = now;
      check = true;
    }
  }
  if (check) rotateLogs(pod.pod_id);
  auto exec = [this, &pod](const std::vector<std::string>& command, Duration timeout) {
    return execInPod(pod, command, timeout);
  };
  return runtime::probeOnce(spec, pod.ip, pod.port, runtime::attemptTimeout(spec), time_, exec);
}

StatusOr<nlohmann::json> ContainerdPodDriver::processSpec(const std::string& pod_id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = process_specs_.find(pod_id);
    if (it != process_specs_.end()) return it->second;
  }
  KNAP_ASSIGN_OR_RETURN(containerd::ContainerRecord rec, client_.getContainer(pod_id));
  json spec = json::parse(rec.spec_json, nullptr, false);
  if (spec.is_discarded() || !spec.contains("process") || !spec["process"].is_object()) {
    return internalError("container " + pod_id + ": its OCI spec has no process object");
  }
  std::lock_guard<std::mutex> l(mu_);
  process_specs_[pod_id] = spec["process"];
  return spec["process"];
}

StatusOr<runtime::ExecOutcome> ContainerdPodDriver::execInPod(const PodHandle& pod,
                                                              const std::vector<std::string>& command,
                                                              Duration timeout) {
  // The container's own process (env, cwd, user, capabilities, rlimits) with
  // the probe's argv, as the kubelet's exec probe does through CRI.
  KNAP_ASSIGN_OR_RETURN(json process, processSpec(pod.pod_id));
  process["args"] = command;
  process["terminal"] = false;
  process.erase("consoleSize");
  std::string exec_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    exec_id = "probe-" + std::to_string(++exec_counter_);
  }
  const std::string out_path = podDir(pod.pod_id) + "/exec.log";
  KNAP_RETURN_IF_ERROR(containerd::prepareLogFile(out_path, true));
  containerd::ExecProcessRequest req;
  req.container_id = pod.pod_id;
  req.exec_id = exec_id;
  req.process_json = process.dump();
  req.stdout_path = out_path;
  req.stderr_path = out_path;
  KNAP_RETURN_IF_ERROR(client_.execProcess(req));
  const MonoTime deadline = time_.monotonic() + timeout;
  auto started = client_.startProcess(pod.pod_id, exec_id);
  if (!started.isOk()) {
    (void)client_.deleteProcess(pod.pod_id, exec_id);
    return started.status();
  }
  Duration left = std::max<Duration>(deadline - time_.monotonic(), std::chrono::milliseconds(1));
  StatusOr<containerd::ExitInfo> exit = client_.waitProcess(pod.pod_id, exec_id, left);
  if (!exit.isOk()) {
    // Timed out (or the wait failed): kill it, collect the exit, remove it.
    (void)client_.killProcess(pod.pod_id, exec_id, SIGKILL);
    (void)client_.waitProcess(pod.pod_id, exec_id, std::chrono::seconds(2));
    (void)client_.deleteProcess(pod.pod_id, exec_id);
    return exit.status();
  }
  auto deleted = client_.deleteProcess(pod.pod_id, exec_id);
  if (!deleted.isOk()) LOG(WARNING) << "pod driver: " << deleted.status().toString();
  runtime::ExecOutcome outcome;
  outcome.exit_code = static_cast<int>(exit->exit_status);
  outcome.output = readSmallFile(out_path).value_or("").substr(0, 1024);
  return outcome;
}

// ------------------------------------------------------------------ freezer

namespace {

// One write(2) of `text` to a cgroup control file (the kernel takes the
// value whole or refuses it).
Status writeControl(const std::string& path, std::string_view text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return notFound("no cgroup file " + path);
    return internalError("open " + path + ": " + std::strerror(err));
  }
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    if (err == ENOENT || err == ENODEV) return notFound("cgroup of " + path + " is gone");
    return internalError("write " + std::string(text) + " to " + path + ": " + std::strerror(err));
  }
  return Status::ok();
}

// The first line of a small cgroup control file, without the newline.
std::optional<std::string> readControl(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[256];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n < 0) return std::nullopt;
  std::string_view v(buf, static_cast<size_t>(n));
  if (size_t nl = v.find('\n'); nl != std::string_view::npos) v = v.substr(0, nl);
  return std::string(v);
}

}  // namespace

ContainerdPodDriver::Freezer ContainerdPodDriver::freezer() const {
  static const Freezer kind = [] {
    struct stat st {};
    if (::stat("/sys/fs/cgroup/freezer", &st) == 0 && S_ISDIR(st.st_mode)) return Freezer::kV1;
    if (::stat("/sys/fs/cgroup/cgroup.controllers", &st) == 0) return Freezer::kV2;
    return Freezer::kContainerd;
  }();
  return kind;
}

std::string ContainerdPodDriver::freezerFile(const std::string& id) const {
  if (freezer() == Freezer::kV1) return cgroupDir("freezer", id) + "/freezer.state";
  return "/sys/fs/cgroup/" + options_.cgroup_parent + "/" + id + "/cgroup.freeze";
}

Status ContainerdPodDriver::freezeCgroup(const std::string& id) {
  const std::string file = freezerFile(id);
  if (freezer() == Freezer::kV2) {
    KNAP_RETURN_IF_ERROR(writeControl(file, "1"));
    // cgroup.events says "frozen 1" once every task has stopped.
    const std::string events = "/sys/fs/cgroup/" + options_.cgroup_parent + "/" + id + "/cgroup.events";
    const MonoTime deadline = time_.monotonic() + std::chrono::seconds(5);
    for (;;) {
      std::optional<std::string> text = readSmallFile(events);
      if (!text) return notFound("no cgroup for " + id + " (" + events + ")");
      if (text->find("frozen 1") != std::string::npos) return Status::ok();
      if (time_.monotonic() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    (void)writeControl(file, "0");
    return Status(Code::kDeadlineExceeded, "cgroup of " + id + " did not freeze within 5s");
  }
  // cgroup v1: FREEZING until every task is frozen; a cgroup that keeps
  // forking may need the write repeated (runc's `pause` loop: retry, and thaw
  // and wait a little now and then).
  for (int i = 0; i < 1000; ++i) {
    if (i % 50 == 49) {
      (void)writeControl(file, "THAWED");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    KNAP_RETURN_IF_ERROR(writeControl(file, "FROZEN"));
    std::optional<std::string> state = readControl(file);
    if (!state) return notFound("no cgroup for " + id + " (" + file + ")");
    if (*state == "FROZEN") return Status::ok();
    if (*state != "FREEZING")
      return internalError(file + ": unexpected state \"" + *state + "\" while freezing");
  }
  (void)writeControl(file, "THAWED");
  return internalError("cgroup of " + id + " stuck in FREEZING; thawed again");
}

Status ContainerdPodDriver::thawCgroup(const std::string& id) {
  const std::string file = freezerFile(id);
  // Thawing is synchronous in both versions: the tasks run again on return.
  return writeControl(file, freezer() == Freezer::kV2 ? "0" : "THAWED");
}

void ContainerdPodDriver::thawIfFrozen(const std::vector<std::string>& ids) {
  for (const auto& id : ids) {
    if (!cgroupFrozen(id)) continue;
    Status s = thawCgroup(id);
    if (!s.isOk()) LOG(WARNING) << "pod driver: thaw " << id << ": " << s.toString();
  }
}

bool ContainerdPodDriver::cgroupFrozen(const std::string& id) const {
  if (freezer() == Freezer::kContainerd) return false;
  std::optional<std::string> state = readControl(freezerFile(id));
  if (!state) return false;
  return freezer() == Freezer::kV2 ? *state == "1" : (*state == "FROZEN" || *state == "FREEZING");
}

Status ContainerdPodDriver::pause(const PodHandle& pod) {
  std::vector<std::string> ids;
  for (const auto& sc : sidecars(pod.pod_id)) ids.push_back(sc.id);
  ids.push_back(pod.pod_id);
  if (freezer() == Freezer::kContainerd) {
    for (const auto& id : ids) KNAP_RETURN_IF_ERROR(client_.pauseTask(id));
    return Status::ok();
  }
  if (taskStopped(pod.pod_id)) return notFound("pod " + pod.pod_id + " has no running task");
  for (size_t i = 0; i < ids.size(); ++i) {
    Status s = freezeCgroup(ids[i]);
    if (!s.isOk()) {
      for (size_t j = 0; j < i; ++j) (void)thawCgroup(ids[j]);
      return s;
    }
  }
  return Status::ok();
}

Status ContainerdPodDriver::resume(const PodHandle& pod) {
  std::vector<std::string> ids;
  for (const auto& sc : sidecars(pod.pod_id)) ids.push_back(sc.id);
  ids.push_back(pod.pod_id);
  if (freezer() == Freezer::kContainerd) {
    for (const auto& id : ids) KNAP_RETURN_IF_ERROR(client_.resumeTask(id));
    return Status::ok();
  }
  Status first = Status::ok();
  for (const auto& id : ids) {
    Status s = thawCgroup(id);
    if (!s.isOk() && first.isOk()) first = s;
  }
  return first;
}

StatusOr<int64_t> ContainerdPodDriver::memoryBytes(const PodHandle& pod) {
  const std::string path = cgroupDir("memory", pod.pod_id) + "/memory.usage_in_bytes";
  auto text = readSmallFile(path);
  if (!text) return notFound("no memory cgroup for pod " + pod.pod_id + " (" + path + ")");
  int64_t total = 0;
  try {
    total = static_cast<int64_t>(std::stoll(*text));
  } catch (...) {
    return internalError(path + ": not a number: \"" + *text + "\"");
  }
  for (const auto& sc : sidecars(pod.pod_id)) {  // each container has a cgroup of its own
    auto t = readSmallFile(cgroupDir("memory", sc.id) + "/memory.usage_in_bytes");
    if (t) total += std::atoll(t->c_str());
  }
  return total;
}

StatusOr<std::vector<AdoptedPod>> ContainerdPodDriver::listExisting() {
  KNAP_ASSIGN_OR_RETURN(auto containers, client_.listContainers());
  KNAP_ASSIGN_OR_RETURN(auto tasks, client_.listTasks());
  std::map<std::string, containerd::TaskInfo> by_id;
  for (const auto& t : tasks) by_id[t.container_id] = t;
  std::vector<AdoptedPod> out;
  for (const auto& c : containers) {
    auto rev = c.labels.find(kRevisionLabel);
    if (rev == c.labels.end()) continue;
    AdoptedPod a;
    a.handle.pod_id = c.id;
    a.handle.revision_name = rev->second;
    auto get = [&](const char* k) {
      auto it = c.labels.find(k);
      return it == c.labels.end() ? std::string() : it->second;
    };
    a.handle.ns = get(kNamespaceLabel);
    a.handle.ip = get(kIpLabel);
    a.handle.image_digest = get(kImageDigestLabel);
    if (std::string all = get(kImageDigestsLabel); !all.empty()) {
      std::stringstream ss(all);
      std::string d;
      while (std::getline(ss, d, ',')) a.handle.image_digests.push_back(d);
    }
    std::string port = get(kPortLabel);
    a.handle.port = port.empty() ? 8080 : std::atoi(port.c_str());
    auto t = by_id.find(c.id);
    if (t != by_id.end()) {
      a.handle.pid = t->second.pid;
      a.running = t->second.status == containerd::TaskStatus::kRunning ||
                  t->second.status == containerd::TaskStatus::kPaused;
      a.paused = t->second.status == containerd::TaskStatus::kPaused ||
                 t->second.status == containerd::TaskStatus::kPausing ||
                 (t->second.status == containerd::TaskStatus::kRunning && cgroupFrozen(c.id));
    }
    out.push_back(a);
  }
  return out;
}

Status ContainerdPodDriver::cleanupOrphans(const std::set<std::string>& live_pod_ids) {
  Status first = network_.cleanupOrphans(live_pod_ids);
  std::set<std::string> containers;
  if (auto cs = client_.listContainers(); cs.isOk()) {
    for (const auto& c : *cs) containers.insert(c.id);
  } else if (first.isOk()) {
    first = cs.status();
  }
  // Sidecar containers of pods that are gone (knapd died while creating or
  // destroying one): task, container and snapshot.
  if (auto cs = client_.listContainers(); cs.isOk()) {
    for (const auto& c : *cs) {
      auto pod = c.labels.find(kPodLabel);
      if (pod == c.labels.end() || pod->second == c.id || !c.labels.count(kContainerLabel)) continue;
      if (live_pod_ids.count(pod->second) || containers.count(pod->second)) continue;
      LOG(INFO) << "pod driver: removing orphaned sidecar container " << c.id;
      (void)client_.killTask(c.id, SIGKILL, true);
      (void)waitExited(c.id, std::chrono::seconds(5));
      Status st = client_.deleteTask(c.id).status();
      if (okOrNotFound(st)) st = client_.deleteContainer(c.id);
      if (okOrNotFound(st)) {
        containers.erase(c.id);
        st = client_.removeSnapshot(c.id);
      }
      if (!okOrNotFound(st) && first.isOk()) first = st;
    }
  }
  // Rootfs snapshots knap prepared (labelled) whose container is gone.
  if (auto snaps = client_.listSnapshots(); snaps.isOk()) {
    for (const auto& s : *snaps) {
      if (s.kind != containerd::SnapshotKind::kActive || !s.labels.count(kPodLabel)) continue;
      if (live_pod_ids.count(s.name) || containers.count(s.name)) continue;
      LOG(INFO) << "pod driver: removing orphaned snapshot " << s.name;
      Status st = client_.removeSnapshot(s.name);
      if (!okOrNotFound(st) && first.isOk()) first = st;
    }
  }
  // Leases of pod creations that never finished (knapd killed between
  // creating the lease and the task): they would hold snapshots and content
  // until they expire. A finished creation deletes its lease.
  if (auto leases = client_.listLeases(std::string("labels.\"") + kPodLabel + "\""); leases.isOk()) {
    for (const auto& [id, labels] : *leases) {
      auto pod = labels.find(kPodLabel);
      if (pod == labels.end() || live_pod_ids.count(pod->second)) continue;
      LOG(INFO) << "pod driver: removing orphaned lease " << id << " of pod " << pod->second;
      Status st = client_.deleteLease(id);
      if (!okOrNotFound(st) && first.isOk()) first = st;
    }
  } else if (first.isOk()) {
    first = leases.status();
  }
  // Pod directories without a live pod or container.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.data_dir + "/pods", ec)) {
    std::string id = e.path().filename().string();
    if (live_pod_ids.count(id) || containers.count(id)) continue;
    unmountPodTmpfs(e.path().string());
    fs::remove_all(e.path(), ec);
  }
  return first;
}

}  // namespace knap::runner
