#include "runtime/runner/image_gate.h"

#include <cstdio>
#include <ctime>

#include "common/log.h"
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

std::string keyOf(const std::string& ns, const std::string& name) { return ns + "/" + name; }

std::string strAt(const json& j, std::initializer_list<const char*> path) {
  const json* cur = &j;
  for (const char* p : path) {
    if (!cur->is_object() || !cur->contains(p)) return "";
    cur = &(*cur)[p];
  }
  return cur->is_string() ? cur->get<std::string>() : "";
}

const json* firstContainer(const json& rev) {
  if (!rev.contains("spec") || !rev["spec"].is_object()) return nullptr;
  const json& spec = rev["spec"];
  if (!spec.contains("containers") || !spec["containers"].is_array() || spec["containers"].empty()) return nullptr;
  return &spec["containers"][0];
}

// status.containerStatuses[0].imageDigest, when it is a digest ref.
std::string pinnedFromStatus(const json& rev) {
  if (!rev.contains("status") || !rev["status"].is_object()) return "";
  const json& st = rev["status"];
  if (!st.contains("containerStatuses") || !st["containerStatuses"].is_array() || st["containerStatuses"].empty()) {
    return "";
  }
  std::string d = strAt(st["containerStatuses"][0], {"imageDigest"});
  return images::hasDigest(d) ? d : "";
}

bool wasReady(const json& rev) {
  if (!rev.contains("status") || !rev["status"].contains("conditions")) return false;
  for (const json& c : rev["status"]["conditions"]) {
    if (c.is_object() && c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

// The Revision as the pods should see it: the pinned image and when it became present.
json forInner(const json& object, const std::string& ref, WallTime ready_at, const json& previous) {
  json out = object;
  if (!ref.empty() && out.contains("spec") && out["spec"].contains("containers") &&
      out["spec"]["containers"].is_array() && !out["spec"]["containers"].empty()) {
    out["spec"]["containers"][0]["image"] = ref;
  }
  std::string at;
  if (ready_at != WallTime{}) {
    at = formatRfc3339Nano(ready_at);
  } else if (!previous.is_null()) {
    at = strAt(previous, {"metadata", "annotations", kImageReadyAtAnnotation});
  }
  if (!at.empty()) out["metadata"]["annotations"][kImageReadyAtAnnotation] = at;
  return out;
}

}  // namespace

ImageGate::ImageGate(controller::RevisionBackend& inner, images::PrePuller& pre_puller, EventRecorder& events)
    : inner_(inner), pre_puller_(pre_puller), events_(events) {
  inner_.setOnChange([this](const std::string& ns, const std::string& name) { notify(ns, name); });
  pre_puller_.setOnChange([this](const std::string& key) { onImageChange(key); });
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
  const std::string ns = strAt(revision, {"metadata", "namespace"});
  const std::string name = strAt(revision, {"metadata", "name"});
  if (name.empty()) return;
  const std::string key = keyOf(ns, name);
  if (requester_hook_) requester_hook_(key, &revision);
  {
    std::lock_guard<std::mutex> l(mu_);
    Rev& r = revs_[key];
    r.ns = ns;
    r.name = name;
    r.object = revision;
    const json* c = firstContainer(revision);
    std::string image = c ? strAt(*c, {"image"}) : "";
    if (image != r.image) r.pinned.clear();
    r.image = image;
    r.ungated = image.empty();
    if (std::string p = pinnedFromStatus(revision); !p.empty() && r.pinned.empty()) r.pinned = p;
    if (!r.forwarded && !r.pinned.empty() && wasReady(revision)) r.early = true;
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
  std::string pinned = r.pinned;
  std::string phase;  // for Events: "Pending", "Ready" or "Failed"
  images::ImageStatus st;
  if (r.ungated) {
    obj = r.object;
  } else {
    st = pre_puller_.status(key, r.image, r.pinned);
    phase = st.phase == images::ImagePhase::kReady    ? "Ready"
            : st.phase == images::ImagePhase::kFailed ? "Failed"
                                                      : "Pending";
    if (pinned.empty()) pinned = st.digest_ref;
    if (st.phase == images::ImagePhase::kReady) {
      // A Revision adopted after a restart ran from an image that was already
      // there: no image-ready-at (its pods' cold starts are "cached"), and no
      // second ensure() of the inner backend just for it.
      obj = forInner(r.object, st.ref, r.early ? WallTime{} : st.ready_at, r.last_forwarded);
    } else if (r.forwarded || r.early) {
      // Keep the inner backend's copy current (labels, annotations) with the ref it runs.
      obj = forInner(r.object, st.ref.empty() ? pinned : st.ref, WallTime{}, r.last_forwarded);
    }
  }
  bool forward = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = revs_.find(key);
    if (it == revs_.end()) return;
    Rev& cur = it->second;
    if (cur.pinned.empty() && !pinned.empty()) cur.pinned = pinned;
    if (!phase.empty() && phase != cur.event_phase) {
      cur.event_phase = phase;
      ObjectRef ref = objectRefOf(cur.object);
      const std::string image = "image \"" + cur.image + "\"";
      if (phase == "Pending") {
        cur.pulling_seen = true;
        events_.record(ref, EventType::kNormal, "Pulling", "Pulling " + image, "knap-images");
      } else if (phase == "Ready" && cur.pulling_seen) {
        events_.record(ref, EventType::kNormal, "Pulled",
                       "Successfully pulled " + image + (st.ref.empty() ? "" : " as " + st.ref), "knap-images");
      } else if (phase == "Ready" && !r.early) {
        events_.record(ref, EventType::kNormal, "Pulled", "Container " + image + " already present on machine",
                       "knap-images");
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
    if (!r.forwarded) LOG(INFO) << "image gate: " << key << " runs " << strAt(*firstContainer(obj), {"image"});
    inner_.ensure(obj);
  }
}

void ImageGate::onImageChange(const std::string& key) {
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
  {
    std::lock_guard<std::mutex> f(forward_mu_);
    {
      std::lock_guard<std::mutex> l(mu_);
      revs_.erase(key);
    }
    inner_.remove(ns, name);
  }
  pre_puller_.release(key);
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
  images::ImageStatus st = pre_puller_.status(key, r.image, r.pinned);
  // Pods already running (or, after a restart, being adopted while the image
  // is looked for) speak for themselves.
  const bool pods_fine = r.forwarded && (h.container_healthy.status == "True" ||
                                         (r.early && st.phase == images::ImagePhase::kPending));
  if (st.phase != images::ImagePhase::kReady && !pods_fine) {
    const std::string status = st.phase == images::ImagePhase::kFailed ? "False" : "Unknown";
    h.container_healthy = {status, st.reason, st.message};
    h.resources_available = {"Unknown", st.reason, st.message};
  }
  const std::string digest = !r.pinned.empty() ? r.pinned : st.digest_ref;
  if (!digest.empty()) h.image_digest = digest;
  return h;
}

std::set<std::string> ImageGate::imagesInUse() {
  std::set<std::string> out = pre_puller_.imagesInUse();
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [key, r] : revs_) {
    if (!r.image.empty()) out.insert(r.image);
    if (!r.pinned.empty()) out.insert(r.pinned);
    if (!r.last_forwarded.is_null()) {
      if (const json* c = firstContainer(r.last_forwarded)) {
        if (std::string i = strAt(*c, {"image"}); !i.empty()) out.insert(i);
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
