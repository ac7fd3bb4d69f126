#include "runtime/pod/volume_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

namespace knap::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDataLink = "..data";

Status checkPath(const std::string& p) {
  if (p.empty() || p[0] == '/') return invalidArgument("volume file path \"" + p + "\" must be relative");
  size_t start = 0;
  while (start <= p.size()) {
    size_t slash = p.find('/', start);
    std::string part = p.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part.empty() || part == "." || part == ".." || part.rfind("..", 0) == 0)
      return invalidArgument("volume file path \"" + p + "\" has an empty, '.' or '..' component");
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return Status::ok();
}

Status sysError(const std::string& what) {
  return internalError(what + ": " + std::strerror(errno));
}

Status writeFile(const std::string& path, const std::string& data, int mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return sysError("open " + path);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = sysError("write " + path);
      ::close(fd);
      return s;
    }
    off += static_cast<size_t>(n);
  }
  if (::fchmod(fd, static_cast<mode_t>(mode & 07777)) != 0) {
    Status s = sysError("chmod " + path);
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return sysError("close " + path);
  return Status::ok();
}

std::string versionName() {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "..%Y_%m_%d_%H_%M_%S.", &tm);
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::string(buf) + std::to_string(rng() % 1000000000);
}

std::string topLevel(const std::string& p) {
  return p.substr(0, p.find('/'));
}

}  // namespace

Status writeVolumeAtomically(const std::string& dir, const std::vector<VolumeFile>& files) {
  std::set<std::string> paths;
  for (const VolumeFile& f : files) {
    if (Status s = checkPath(f.path); !s.isOk()) return s;
    if (!paths.insert(f.path).second)
      return invalidArgument("volume file path \"" + f.path + "\" given twice");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return internalError("mkdir " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0755);
  std::string version = versionName();
  fs::path vdir = fs::path(dir) / version;
  fs::create_directory(vdir, ec);
  if (ec) return internalError("mkdir " + vdir.string() + ": " + ec.message());
  ::chmod(vdir.c_str(), 0755);
  for (const VolumeFile& f : files) {
    fs::path target = vdir / f.path;
    fs::create_directories(target.parent_path(), ec);
    if (ec) return internalError("mkdir " + target.parent_path().string() + ": " + ec.message());
    if (Status s = writeFile(target.string(), f.data, f.mode); !s.isOk()) return s;
  }
  // ..data_tmp -> version, renamed over ..data: the one atomic step.
  fs::path tmp_link = fs::path(dir) / "..data_tmp";
  fs::remove(tmp_link, ec);
  if (::symlink(version.c_str(), tmp_link.c_str()) != 0) return sysError("symlink " + tmp_link.string());
  if (::rename(tmp_link.c_str(), (fs::path(dir) / kDataLink).c_str()) != 0) return sysError("rename ..data");
  // Top-level names point through ..data; stale ones and the previous version go.
  std::set<std::string> tops;
  for (const VolumeFile& f : files) tops.insert(topLevel(f.path));
  for (const std::string& t : tops) {
    fs::path link = fs::path(dir) / t;
    std::string want = std::string(kDataLink) + "/" + t;
    auto have = fs::read_symlink(link, ec);
    if (!ec && have.string() == want) continue;
    ec.clear();
    fs::remove(link, ec);
    if (::symlink(want.c_str(), link.c_str()) != 0) return sysError("symlink " + link.string());
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("..", 0) == 0) {
      if (name != kDataLink && name != version) fs::remove_all(entry.path(), ec);
      continue;
    }
    if (!tops.count(name)) fs::remove_all(entry.path(), ec);
  }
  return Status::ok();
}

bool volumeMatches(const std::string& dir, const std::vector<VolumeFile>& files) {
  std::error_code ec;
  fs::path data = fs::path(dir) / kDataLink;
  if (!fs::is_directory(data, ec)) return false;
  size_t regular = 0;
  for (auto it = fs::recursive_directory_iterator(data, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) ++regular;
  }
  if (ec || regular != files.size()) return false;
  for (const VolumeFile& f : files) {
    fs::path p = data / f.path;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    if (static_cast<int>(st.st_mode & 07777) != (f.mode & 07777)) return false;
    std::ifstream in(p, std::ios::binary);
    std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (got != f.data) return false;
  }
  return true;
}

}  // namespace knap::runtime
