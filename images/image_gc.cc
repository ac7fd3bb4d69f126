#include "images/image_gc.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/guard.h"
#include "common/log.h"

namespace knap::images {

StatusOr<DiskUsage> diskUsageOf(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) {
    int err = errno;
    std::string m = "statvfs " + path + ": " + std::strerror(err);
    return err == ENOENT ? notFound(m) : internalError(m);
  }
  DiskUsage d;
  d.total_bytes = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  uint64_t avail = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  d.used_bytes = d.total_bytes > avail ? d.total_bytes - avail : 0;
  return d;
}

ImageGcOptions imageGcOptionsFromConfig(const Config& config) {
  ImageGcOptions o;
  o.interval = config.knap.image_gc_interval;
  o.min_age = config.knap.image_gc_min_age;
  o.high_percent = static_cast<double>(config.knap.image_gc_high_percent);
  o.low_percent = static_cast<double>(config.knap.image_gc_low_percent);
  o.keep = config.knap.pre_pull_images;
  return o;
}

std::string digestOf(const std::string& ref) {
  size_t at = ref.find('@');
  return at == std::string::npos ? "" : ref.substr(at + 1);
}

namespace {

// Names of the images in use (see the header for the three ways to be in use).
std::set<std::string> usedNames(const std::vector<StoredImage>& images, const std::set<std::string>& in_use) {
  std::set<std::string> digests;
  for (const std::string& r : in_use) {
    if (std::string d = digestOf(r); !d.empty()) digests.insert(d);
  }
  for (const StoredImage& i : images) {
    if (in_use.count(i.name)) digests.insert(i.target_digest);
  }
  std::set<std::string> out;
  for (const StoredImage& i : images) {
    std::string d = digestOf(i.name);
    if (in_use.count(i.name) || (!d.empty() && digests.count(d)) || digests.count(i.target_digest)) {
      out.insert(i.name);
    }
  }
  return out;
}

WallTime lastTouched(const StoredImage& i, const std::map<std::string, WallTime>& last_used) {
  WallTime t = std::max(i.created_at, i.updated_at);
  if (auto it = last_used.find(i.name); it != last_used.end()) t = std::max(t, it->second);
  return t;
}

}  // namespace

std::vector<StoredImage> gcCandidates(const std::vector<StoredImage>& images,
                                      const std::set<std::string>& in_use,
                                      const std::map<std::string, WallTime>& last_used, WallTime now,
                                      Duration min_age) {
  std::set<std::string> used = usedNames(images, in_use);
  std::vector<StoredImage> out;
  for (const StoredImage& i : images) {
    if (used.count(i.name)) continue;
    if (now - lastTouched(i, last_used) < min_age) continue;
    out.push_back(i);
  }
  std::sort(out.begin(), out.end(), [&](const StoredImage& a, const StoredImage& b) {
    WallTime ta = lastTouched(a, last_used), tb = lastTouched(b, last_used);
    if (ta != tb) return ta < tb;
    return a.name < b.name;
  });
  return out;
}

ImageGc::ImageGc(ImageInventory& inventory, DiskUsageFn disk, InUseFn in_use, const TimeSource& time,
                 ImageGcOptions options)
    : inventory_(inventory),
      disk_(std::move(disk)),
      in_use_(std::move(in_use)),
      time_(time),
      options_(std::move(options)),
      loop_(time_, "image GC loop") {}

ImageGc::~ImageGc() {
  stop();
}

StatusOr<GcPass> ImageGc::runOnce() {
  std::lock_guard<std::mutex> l(pass_mu_);
  ran_ = true;
  last_pass_ = time_.monotonic();
  KNAP_ASSIGN_OR_RETURN(std::vector<StoredImage> images, inventory_.list());
  std::set<std::string> in_use = in_use_ ? in_use_() : std::set<std::string>{};
  in_use.insert(options_.keep.begin(), options_.keep.end());
  const WallTime now = time_.now();

  // Remember when images were last seen in use (forgetting removed ones), so
  // an image that just stopped being used is not the first to go.
  std::map<std::string, WallTime> seen;
  std::set<std::string> used = usedNames(images, in_use);
  for (const StoredImage& i : images) {
    if (used.count(i.name)) {
      seen[i.name] = now;
    } else if (auto it = last_used_.find(i.name); it != last_used_.end()) {
      seen[i.name] = it->second;
    }
  }
  last_used_ = std::move(seen);

  KNAP_ASSIGN_OR_RETURN(DiskUsage disk, disk_());
  GcPass pass;
  pass.percent_before = pass.percent_after = disk.percent();
  if (disk.percent() < options_.high_percent) return pass;
  pass.collected = true;
  std::vector<StoredImage> candidates = gcCandidates(images, in_use, last_used_, now, options_.min_age);
  LOG(INFO) << "image gc: disk " << disk.percent() << "% used (high " << options_.high_percent << "%), "
            << candidates.size() << " unused image(s) old enough to delete";
  for (const StoredImage& c : candidates) {
    if (pass.percent_after < options_.low_percent) break;
    Status s = inventory_.remove(c.name);
    if (!s.isOk() && s.code() != Code::kNotFound) {
      LOG(WARNING) << "image gc: deleting " << c.name << ": " << s.toString();
      continue;
    }
    LOG(INFO) << "image gc: deleted " << c.name;
    pass.removed.push_back(c.name);
    last_used_.erase(c.name);
    auto after = disk_();
    if (!after.isOk()) return after.status();
    pass.percent_after = after->percent();
  }
  if (pass.percent_after >= options_.low_percent) {
    LOG(WARNING) << "image gc: disk still " << pass.percent_after << "% used (low " << options_.low_percent
                 << "%): no other unused image older than the minimum age";
  }
  return pass;
}

void ImageGc::tick() {
  {
    std::lock_guard<std::mutex> l(pass_mu_);
    if (ran_ && time_.monotonic() - last_pass_ < options_.interval) return;
  }
  auto pass = runOnce();
  if (!pass.isOk()) LOG(WARNING) << "image gc: " << pass.status().toString();
}

void ImageGc::start() {
  if (loop_.running()) return;
  {
    // The first pass waits one interval, so that every Revision is known by then.
    std::lock_guard<std::mutex> p(pass_mu_);
    ran_ = true;
    last_pass_ = time_.monotonic();
  }
  // An idle wake-up every loop_interval on time_; tick() decides whether a pass is due.
  loop_.start([this] {
    tick();
    return time_.monotonic() + options_.loop_interval;
  });
}

void ImageGc::stop() {
  loop_.stop();
}

}  // namespace knap::images
