#include "runtime/runner/image_gate.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "common/json_path.h"
#include "common/log.h"
#include "oci/reference.h"
#include "runtime/runner/pod_runner.h"

namespace knap::runner {

using nlohmann::json;

std::string formatRfc3339Nano(WallTime t) {
  auto since = t.time_since_epoch();
  auto secs = std::chrono::floor<std::chrono::seconds>(since);
  long long nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(since - secs).count();
  std::time_t tt = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out = buf;
  if (nanos > 0) {
    char frac[32];
    std::snprintf(frac, sizeof frac, ".%09lld", nanos);
    std::string f = frac;
    while (f.back() == '0') f.pop_back();
    out += f;
  }
  return out + "Z";
}

namespace {

std::string keyOf(const std::string& ns, const std::string& name) {
  return ns + "/" + name;
}

const json* firstContainer(const json& rev) {
  if (!rev.contains("spec") || !rev["spec"].is_object()) return nullptr;
  const json& spec = rev["spec"];
  if (!spec.contains("containers") || !spec["containers"].is_array() || spec["containers"].empty())
    return nullptr;
  return &spec["containers"][0];
}

// spec.containers[i].image of every container ("" where missing).
std::vector<std::string> containerImages(const json& rev) {
  std::vector<std::string> out;
  if (!rev.contains("spec") || !rev["spec"].is_object()) return out;
  const json& spec = rev["spec"];
  if (!spec.contains("containers") || !spec["containers"].is_array()) return out;
  for (const json& c : spec["containers"]) out.push_back(stringAt(c, {"image"}));
  return out;
}

// The ImageSource requester of container i: the Revision's key for the first
// container, "<key>#<i>" for the others.
std::string requesterOf(const std::string& key, size_t i) {
  return i == 0 ? key : key + "#" + std::to_string(i);
}

// status.containerStatuses[i].imageDigest, when it is a digest ref.
std::string pinnedFromStatus(const json& rev, size_t i) {
  if (!rev.contains("status") || !rev["status"].is_object()) return "";
  const json& st = rev["status"];
  if (!st.contains("containerStatuses") || !st["containerStatuses"].is_array() ||
      st["containerStatuses"].size() <= i) {
    return "";
  }
  std::string d = stringAt(st["containerStatuses"][i], {"imageDigest"});
  return oci::hasDigest(d) ? d : "";
}

bool wasReady(const json& rev) {
  if (!rev.contains("status") || !rev["status"].contains("conditions")) return false;
  for (const json& c : rev["status"]["conditions"]) {
    if (c.is_object() && c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

// The Revision as the pods should see it: the pinned images and when they became present.
json forInner(const json& object, const std::vector<std::string>& refs, WallTime ready_at,
              const json& previous) {
  json out = object;
  if (out.contains("spec") && out["spec"].contains("containers") && out["spec"]["containers"].is_array()) {
    json& containers = out["spec"]["containers"];
    for (size_t i = 0; i < refs.size() && i < containers.size(); ++i) {
      if (!refs[i].empty() && containers[i].is_object()) containers[i]["image"] = refs[i];
    }
  }
  std::string at;
  if (ready_at != WallTime{}) {
    at = formatRfc3339Nano(ready_at);
  } else if (!previous.is_null()) {
    at = stringAt(previous, {"metadata", "annotations", kImageReadyAtAnnotation});
  }
  if (!at.empty()) out["metadata"]["annotations"][kImageReadyAtAnnotation] = at;
  return out;
}

}  // namespace

ImageGate::ImageGate(controller::RevisionBackend& inner, images::ImageSource& images, EventRecorder& events)
    : inner_(inner), images_(images), events_(events) {
  inner_.setOnChange([this](const std::string& ns, const std::string& name) { notify(ns, name); });
  images_.setOnChange([this](const std::string& key) { onImageChange(key); });
}

void ImageGate::setOnChange(std::function<void(const std::string& ns, const std::string& name)> fn) {
  std::lock_guard<std::mutex> l(cb_mu_);
  on_change_ = std::move(fn);
}

void ImageGate::notify(const std::string& ns, const std::string& name) {
  std::function<void(const std::string&, const std::string&)> fn;
  {
    std::lock_guard<std::mutex> l(cb_mu_);
    fn = on_change_;
  }
  if (fn) fn(ns, name);
}

void ImageGate::setRequesterHook(std::function<void(const std::string& key, const json* revision)> fn) {
  requester_hook_ = std::move(fn);
}

void ImageGate::ensure(const json& revision) {
  const std::string ns = stringAt(revision, {"metadata", "namespace"});
  const std::string name = stringAt(revision, {"metadata", "name"});
  if (name.empty()) return;
  const std::string key = keyOf(ns, name);
  if (requester_hook_) requester_hook_(key, &revision);
  {
    std::lock_guard<std::mutex> l(mu_);
    Rev& r = revs_[key];
    r.ns = ns;
    r.name = name;
    r.object = revision;
    std::vector<std::string> images = containerImages(revision);
    if (images.empty()) images.push_back("");
    if (images != r.images) r.pinned.assign(images.size(), "");
    r.images = images;
    r.image = images[0];
    r.ungated = std::all_of(images.begin(), images.end(), [](const std::string& i) { return i.empty(); });
    bool all_pinned = true;
    for (size_t i = 0; i < images.size(); ++i) {
      if (std::string p = pinnedFromStatus(revision, i); !p.empty() && r.pinned[i].empty()) r.pinned[i] = p;
      if (r.pinned[i].empty() && !images[i].empty()) all_pinned = false;
    }
    if (!r.forwarded && all_pinned && wasReady(revision)) r.early = true;
  }
  sync(key);
}

void ImageGate::sync(const std::string& key) {
  std::lock_guard<std::mutex> f(forward_mu_);
  Rev r;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = revs_.find(key);
    if (it == revs_.end()) return;
    r = it->second;
  }
  json obj;
  std::vector<std::string> pinned = r.pinned;
  std::string phase;  // for Events: "Pending", "Ready" or "Failed"
  images::ImageStatus st;
  size_t which = 0;  // the container whose image st describes
  if (r.ungated) {
    obj = r.object;
  } else {
    std::vector<std::string> refs;
    st = statusOf(key, r, &which, &refs);
    phase = st.phase == images::ImagePhase::kReady    ? "Ready"
            : st.phase == images::ImagePhase::kFailed ? "Failed"
                                                      : "Pending";
    for (size_t i = 0; i < pinned.size() && i < refs.size(); ++i) {
      if (pinned[i].empty())
        pinned[i] = images_.status(requesterOf(key, i), r.images[i], r.pinned[i]).digest_ref;
    }
    if (st.phase == images::ImagePhase::kReady) {
      // A Revision adopted after a restart ran from an image that was already
      // there: no image-ready-at (its pods' cold starts are "cached"), and no
      // second ensure() of the inner backend just for it.
      obj = forInner(r.object, refs, r.early ? WallTime{} : st.ready_at, r.last_forwarded);
    } else if (r.forwarded || r.early) {
      // Keep the inner backend's copy current (labels, annotations) with the refs it runs.
      for (size_t i = 0; i < refs.size() && i < pinned.size(); ++i) {
        if (refs[i].empty()) refs[i] = pinned[i];
      }
      obj = forInner(r.object, refs, WallTime{}, r.last_forwarded);
    }
  }
  bool forward = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = revs_.find(key);
    if (it == revs_.end()) return;
    Rev& cur = it->second;
    for (size_t i = 0; i < cur.pinned.size() && i < pinned.size(); ++i) {
      if (cur.pinned[i].empty() && !pinned[i].empty()) cur.pinned[i] = pinned[i];
    }
    if (!phase.empty() && phase != cur.event_phase) {
      cur.event_phase = phase;
      ObjectRef ref = objectRefOf(cur.object);
      const std::string image =
          "image \"" + (which < cur.images.size() ? cur.images[which] : cur.image) + "\"";
      if (phase == "Pending") {
        cur.pulling_seen = true;
        events_.record(ref, EventType::kNormal, "Pulling", "Pulling " + image, "knap-images");
      } else if (phase == "Ready" && cur.pulling_seen) {
        events_.record(ref, EventType::kNormal, "Pulled",
                       "Successfully pulled " + image + (st.ref.empty() ? "" : " as " + st.ref),
                       "knap-images");
      } else if (phase == "Ready" && !r.early) {
        events_.record(ref, EventType::kNormal, "Pulled",
                       "Container " + image + " already present on machine", "knap-images");
      } else if (phase == "Failed") {
        events_.record(ref, EventType::kWarning, "Failed",
                       "Failed to pull " + image + ": " + st.reason + ": " + st.message, "knap-images");
      }
    }
    if (!obj.is_null() && obj != cur.last_forwarded) {
      cur.forwarded = true;
      cur.last_forwarded = obj;
      forward = true;
    }
  }
  if (forward) {
    if (!r.forwarded)
      LOG(INFO) << "image gate: " << key << " runs " << stringAt(*firstContainer(obj), {"image"});
    inner_.ensure(obj);
  }
}

images::ImageStatus ImageGate::statusOf(const std::string& key, const Rev& r, size_t* which,
                                        std::vector<std::string>* refs) {
  // Failed if any image failed, else Pending if any is pending, else Ready
  // (since the last one became present).
  images::ImageStatus out;
  out.phase = images::ImagePhase::kReady;
  *which = 0;
  bool have_pending = false, have_failed = false;
  refs->assign(r.images.size(), "");
  for (size_t i = 0; i < r.images.size(); ++i) {
    if (r.images[i].empty()) continue;
    images::ImageStatus st =
        images_.status(requesterOf(key, i), r.images[i], i < r.pinned.size() ? r.pinned[i] : "");
    (*refs)[i] = st.ref;
    if (i == 0) out.digest_ref = st.digest_ref;
    if (st.phase == images::ImagePhase::kFailed) {
      if (!have_failed) {
        images::ImageStatus keep = st;
        keep.digest_ref = out.digest_ref;
        out = keep;
        *which = i;
      }
      have_failed = true;
    } else if (st.phase == images::ImagePhase::kPending && !have_failed) {
      if (!have_pending) {
        images::ImageStatus keep = st;
        keep.digest_ref = out.digest_ref;
        out = keep;
        *which = i;
      }
      have_pending = true;
    } else if (st.phase == images::ImagePhase::kReady && !have_failed && !have_pending) {
      if (i == 0 || st.ready_at > out.ready_at) {
        out.ready_at = st.ready_at;
        if (i == 0) out.ref = st.ref;
      }
    }
  }
  if (r.images.size() > 1 && out.phase != images::ImagePhase::kReady && *which > 0) {
    out.message = "container " + std::to_string(*which) + ": " + out.message;
  }
  return out;
}

void ImageGate::onImageChange(const std::string& requester) {
  const std::string key = requester.substr(0, requester.find('#'));
  std::string ns, name;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = revs_.find(key);
    if (it == revs_.end()) return;
    ns = it->second.ns;
    name = it->second.name;
  }
  sync(key);
  notify(ns, name);
}

void ImageGate::remove(const std::string& ns, const std::string& name) {
  const std::string key = keyOf(ns, name);
  size_t containers = 1;
  {
    std::lock_guard<std::mutex> f(forward_mu_);
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = revs_.find(key);
      if (it != revs_.end()) containers = std::max<size_t>(1, it->second.images.size());
      revs_.erase(key);
    }
    inner_.remove(ns, name);
  }
  for (size_t i = 0; i < containers; ++i) images_.release(requesterOf(key, i));
  if (requester_hook_) requester_hook_(key, nullptr);
}

controller::RevisionHealth ImageGate::health(const std::string& ns, const std::string& name) {
  const std::string key = keyOf(ns, name);
  Rev r;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = revs_.find(key);
    if (it == revs_.end()) return inner_.health(ns, name);
    r = it->second;
  }
  controller::RevisionHealth h = inner_.health(ns, name);
  if (r.ungated) return h;
  size_t which = 0;
  std::vector<std::string> refs;
  images::ImageStatus st = statusOf(key, r, &which, &refs);
  // Pods already running (or, after a restart, being adopted while the image
  // is looked for) speak for themselves.
  const bool pods_fine = r.forwarded && (h.container_healthy.status == "True" ||
                                         (r.early && st.phase == images::ImagePhase::kPending));
  if (st.phase != images::ImagePhase::kReady && !pods_fine) {
    const std::string status = st.phase == images::ImagePhase::kFailed ? "False" : "Unknown";
    h.container_healthy = {status, st.reason, st.message};
    h.resources_available = {"Unknown", st.reason, st.message};
  }
  const std::string digest = !r.pinned.empty() && !r.pinned[0].empty() ? r.pinned[0] : st.digest_ref;
  if (!digest.empty()) h.image_digest = digest;
  if (r.images.size() > 1) {
    // Every container's pinned digest, once all are known (containerStatuses).
    std::vector<std::string> digests;
    for (size_t i = 0; i < r.images.size(); ++i) {
      std::string d = i < r.pinned.size() ? r.pinned[i] : "";
      if (d.empty() && !r.images[i].empty())
        d = images_.status(requesterOf(key, i), r.images[i], "").digest_ref;
      digests.push_back(d);
    }
    if (std::none_of(digests.begin(), digests.end(), [](const std::string& d) { return d.empty(); })) {
      h.image_digests = digests;
    }
  }
  return h;
}

std::set<std::string> ImageGate::imagesInUse() {
  std::set<std::string> out = images_.imagesInUse();
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [key, r] : revs_) {
    for (const auto& i : r.images) {
      if (!i.empty()) out.insert(i);
    }
    for (const auto& p : r.pinned) {
      if (!p.empty()) out.insert(p);
    }
    if (!r.last_forwarded.is_null()) {
      for (const auto& i : containerImages(r.last_forwarded)) {
        if (!i.empty()) out.insert(i);
      }
    }
  }
  return out;
}

bool ImageGate::forwarded(const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = revs_.find(keyOf(ns, name));
  return it != revs_.end() && it->second.forwarded;
}

}  // namespace knap::runner
