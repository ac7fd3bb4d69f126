#include "images/pre_puller.h"

#include <algorithm>
#include <cstdio>

#include "common/duration.h"
#include "common/guard.h"
#include "common/log.h"

namespace knap::images {

const char* imagePhaseName(ImagePhase p) {
  switch (p) {
    case ImagePhase::kPending:
      return "Pending";
    case ImagePhase::kReady:
      return "Ready";
    case ImagePhase::kFailed:
      return "Failed";
  }
  return "Unknown";
}

PrePullerOptions prePullerOptionsFromConfig(const Config& config) {
  PrePullerOptions o;
  o.skip_registries = config.deployment.registries_skipping_tag_resolving;
  o.pre_pull_images = config.knap.pre_pull_images;
  o.retry_max = config.knap.pull_retry_max;
  if (o.retry_max < o.retry_initial) o.retry_initial = o.retry_max;
  return o;
}

std::string progressMessage(const std::string& image, const PullProgress& p) {
  std::string m = "pulling " + image;
  if (p.bytes_total > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ": %.1f of %.1f MB", static_cast<double>(p.bytes_done) / 1e6,
                  static_cast<double>(p.bytes_total) / 1e6);
    m += buf;
    if (p.phase == "unpacking") m += ", unpacking";
  } else if (!p.phase.empty() && p.phase != "fetching") {
    m += ": " + p.phase;
  }
  return m;
}

namespace {

bool skipped(const std::string& image, const std::vector<std::string>& skip) {
  return std::find(skip.begin(), skip.end(), registryOf(image)) != skip.end();
}

// For the log only: a condition message carries no retry counter, so a
// Revision whose image keeps failing is not rewritten on every retry.
std::string retryNote(int attempts, Duration delay) {
  return " (attempt " + std::to_string(attempts) + ", next retry in " +
         formatGoDuration(std::chrono::duration_cast<std::chrono::seconds>(delay)) + ")";
}

// A failure message that names the image (and so its registry) whatever the Puller said.
std::string failureMessage(const std::string& image, const Status& s) {
  const std::string registry = registryOf(image);
  if (s.message().find(registry) != std::string::npos) return s.message();
  return "pulling " + image + " from " + registry + ": " + s.message();
}

}  // namespace

PrePuller::PrePuller(Puller& puller, PresenceFn present, const TimeSource& time, PrePullerOptions options)
    : puller_(puller),
      present_(std::move(present)),
      time_(time),
      options_(std::move(options)),
      pool_(options_.executor, WorkerPool::OnStop::kDrop, "pre-puller worker"),
      loop_(time_, "pre-puller loop") {
  for (const std::string& image : options_.pre_pull_images) {
    Entry& e = entryLocked(image, !hasDigest(image) && skipped(image, options_.skip_registries));
    e.keep = true;
  }
}

PrePuller::~PrePuller() {
  stop();
}

void PrePuller::start() {
  pool_.start(options_.workers);
  // An idle wake-up every loop_interval on time_, cut short by wake(); what
  // is due is decided on time_.
  loop_.start([this] {
    runOnce();
    return time_.monotonic() + options_.loop_interval;
  });
}

void PrePuller::stop() {
  loop_.stop();
  pool_.stop();  // waits for in-flight pulls; queued ones are dropped
}

void PrePuller::post(std::function<void()> fn) {
  pool_.post(std::move(fn));
}

void PrePuller::wake() {
  loop_.wake();
}

void PrePuller::dispatch(std::vector<std::function<void()>> work) {
  for (auto& w : work) post(std::move(w));
}

void PrePuller::setOnChange(std::function<void(const std::string& requester)> fn) {
  std::lock_guard<std::mutex> l(mu_);
  on_change_ = std::move(fn);
}

void PrePuller::notify(const Notes& notes) {
  std::function<void(const std::string&)> fn;
  {
    std::lock_guard<std::mutex> l(mu_);
    fn = on_change_;
  }
  if (!fn) return;
  for (const std::string& r : notes) fn(r);
}

Duration PrePuller::backoff(int failures, bool check_only) const {
  const Duration cap =
      check_only ? std::min(options_.retry_max, options_.check_retry_max) : options_.retry_max;
  Duration d = options_.retry_initial;
  for (int i = 1; i < failures && d < cap; ++i) d *= 2;
  return std::min(d, cap);
}

int PrePuller::pullsStarted() const {
  std::lock_guard<std::mutex> l(mu_);
  return pulls_started_;
}

// ----------------------------------------------------------------- callers

std::string PrePuller::refOfLocked(const Requester& r) const {
  return r.direct ? r.image : r.pinned;
}

PrePuller::Entry& PrePuller::entryLocked(const std::string& ref, bool check_only) {
  auto [it, inserted] = entries_.try_emplace(ref);
  if (inserted) it->second.check_only = check_only;
  return it->second;
}

ImageStatus PrePuller::status(const std::string& requester, const std::string& image,
                              const std::string& pinned) {
  ImageStatus st;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = requesters_.find(requester);
    if (it != requesters_.end() && it->second.image != image) {
      // A different image for the same requester: start over.
      auto res = resolves_.find(it->second.image);
      if (res != resolves_.end()) res->second.waiting.erase(requester);
      auto e = entries_.find(refOfLocked(it->second));
      if (e != entries_.end()) e->second.users.erase(requester);
      requesters_.erase(it);
      it = requesters_.end();
    }
    if (it == requesters_.end()) {
      Requester r;
      r.image = image;
      if (hasDigest(image)) {
        r.direct = true;
      } else if (skipped(image, options_.skip_registries)) {
        r.direct = true;
        r.check_only = true;
      }
      it = requesters_.emplace(requester, std::move(r)).first;
    }
    Requester& r = it->second;
    if (!r.direct && !pinned.empty() && r.pinned != pinned) {
      if (!r.pinned.empty()) {
        auto e = entries_.find(r.pinned);
        if (e != entries_.end()) e->second.users.erase(requester);
      }
      r.pinned = pinned;
      auto res = resolves_.find(image);
      if (res != resolves_.end()) res->second.waiting.erase(requester);
    }
    const std::string ref = refOfLocked(r);
    if (ref.empty()) {
      resolves_[image].waiting.insert(requester);
    } else {
      entryLocked(ref, r.check_only).users.insert(requester);
    }
    st = statusLocked(requester);
  }
  if (st.phase != ImagePhase::kReady) wake();
  return st;
}

ImageStatus PrePuller::statusLocked(const std::string& requester) {
  const Requester& r = requesters_.at(requester);
  ImageStatus st;
  const std::string ref = refOfLocked(r);
  if (ref.empty()) {
    const Resolve& res = resolves_[r.image];
    if (res.error) {
      st.phase = ImagePhase::kFailed;
      st.reason = pullFailureReason(*res.error);
      st.message = res.error_message;
    } else {
      st.phase = ImagePhase::kPending;
      st.reason = "ResolvingDigest";
      st.message = "resolving " + r.image + " to a digest";
    }
    return st;
  }
  const Entry& e = entries_.at(ref);
  st.ref = ref;
  if (!r.check_only) st.digest_ref = ref;
  if (e.ready) {
    st.phase = ImagePhase::kReady;
    st.ready_at = e.ready_at;
  } else if (e.error && !(e.in_flight && e.progress && e.progress->bytes_total > 0)) {
    // A retry keeps the last failure visible until it shows progress.
    st.phase = ImagePhase::kFailed;
    st.reason = e.error_reason;
    st.message = e.error_message;
  } else {
    st.phase = ImagePhase::kPending;
    st.reason = "PullingImage";
    if (e.check_only) {
      st.message = "looking for " + r.image + " in containerd";
    } else {
      st.message = e.progress ? progressMessage(r.image, *e.progress) : "pulling " + r.image;
    }
  }
  return st;
}

void PrePuller::release(const std::string& requester) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = requesters_.find(requester);
  if (it == requesters_.end()) return;
  auto res = resolves_.find(it->second.image);
  if (res != resolves_.end()) res->second.waiting.erase(requester);
  auto e = entries_.find(refOfLocked(it->second));
  if (e != entries_.end()) e->second.users.erase(requester);
  requesters_.erase(it);
}

std::set<std::string> PrePuller::imagesInUse() {
  std::lock_guard<std::mutex> l(mu_);
  std::set<std::string> out(options_.pre_pull_images.begin(), options_.pre_pull_images.end());
  for (const auto& [id, r] : requesters_) {
    out.insert(r.image);
    if (!r.pinned.empty()) out.insert(r.pinned);
  }
  for (const auto& [ref, e] : entries_) {
    if (!e.keep && e.users.empty()) continue;
    out.insert(ref);
    out.insert(e.aliases.begin(), e.aliases.end());
  }
  return out;
}

// -------------------------------------------------------------------- loop

void PrePuller::runOnce() {
  std::vector<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> l(mu_);
    startDueLocked(time_.monotonic(), &work);
  }
  dispatch(std::move(work));
}

std::optional<MonoTime> PrePuller::nextDue() {
  std::lock_guard<std::mutex> l(mu_);
  std::optional<MonoTime> due;
  auto consider = [&](MonoTime t) {
    if (!due || t < *due) due = t;
  };
  for (const auto& [image, res] : resolves_) {
    if (!res.waiting.empty() && !res.in_flight) consider(res.next_try);
  }
  for (const auto& [ref, e] : entries_) {
    if ((e.keep || !e.users.empty()) && !e.in_flight) consider(e.ready ? e.next_recheck : e.next_try);
  }
  return due;
}

void PrePuller::startDueLocked(MonoTime now, std::vector<std::function<void()>>* work) {
  for (auto it = resolves_.begin(); it != resolves_.end();) {
    Resolve& res = it->second;
    if (res.waiting.empty() && !res.in_flight) {
      it = resolves_.erase(it);
      continue;
    }
    if (!res.waiting.empty() && !res.in_flight && now >= res.next_try) {
      res.in_flight = true;
      std::string image = it->first;
      work->push_back([this, image] { resolveJob(image); });
    }
    ++it;
  }
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (!e.keep && e.users.empty()) {
      if (!e.in_flight) {
        it = entries_.erase(it);
      } else {
        ++it;
      }
      continue;
    }
    if (!e.in_flight && ((!e.ready && now >= e.next_try) || (e.ready && now >= e.next_recheck))) {
      e.in_flight = true;
      std::string ref = it->first;
      bool recheck = e.ready;
      work->push_back([this, ref, recheck] { refJob(ref, recheck); });
    }
    ++it;
  }
}

void PrePuller::resolveJob(const std::string& image) {
  StatusOr<std::string> r = puller_.resolve(image);
  Notes notes;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = resolves_.find(image);
    if (it == resolves_.end()) return;
    Resolve& res = it->second;
    res.in_flight = false;
    if (r.isOk()) {
      LOG(INFO) << "images: resolved " << image << " to " << *r;
      for (const std::string& w : res.waiting) {
        auto req = requesters_.find(w);
        if (req == requesters_.end() || req->second.image != image || !req->second.pinned.empty()) continue;
        req->second.pinned = *r;
        entryLocked(*r, false).users.insert(w);
        notes.push_back(w);
      }
      res.waiting.clear();
      res.failures = 0;
      res.error.reset();
      res.error_message.clear();
    } else {
      ++res.failures;
      Duration delay = backoff(res.failures);
      res.next_try = time_.monotonic() + delay;
      res.error = r.status();
      res.error_message = failureMessage(image, r.status());
      LOG(WARNING) << "images: resolving " << image << ": " << r.status().toString()
                   << retryNote(res.failures, delay);
      notes.assign(res.waiting.begin(), res.waiting.end());
    }
  }
  notify(notes);
  wake();  // start the pulls of the pinned refs
}

void PrePuller::refJob(const std::string& ref, bool recheck) {
  bool check_only = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(ref);
    if (it == entries_.end()) return;
    check_only = it->second.check_only;
  }
  StatusOr<WallTime> present = present_(ref);
  if (present.isOk() || present.status().code() != Code::kNotFound || check_only) {
    finishRef(ref, recheck, std::move(present), std::nullopt);
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    ++pulls_started_;
    auto it = entries_.find(ref);
    if (it != entries_.end()) it->second.progress.reset();
  }
  LOG(INFO) << "images: pulling " << ref;
  StatusOr<PullResult> pulled = puller_.pull(ref, [this, ref](const PullProgress& p) { onProgress(ref, p); });
  finishRef(ref, recheck, std::move(present), std::move(pulled));
}

void PrePuller::onProgress(const std::string& ref, const PullProgress& p) {
  Notes notes;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(ref);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    e.progress = p;
    MonoTime now = time_.monotonic();
    if (e.last_progress_note == MonoTime{} || now - e.last_progress_note >= options_.progress_interval) {
      e.last_progress_note = now;
      notesForRefLocked(ref, &notes);
    }
  }
  notify(notes);
}

void PrePuller::notesForRefLocked(const std::string& ref, Notes* notes) {
  auto it = entries_.find(ref);
  if (it == entries_.end()) return;
  notes->insert(notes->end(), it->second.users.begin(), it->second.users.end());
}

void PrePuller::finishRef(const std::string& ref, bool recheck, StatusOr<WallTime> present,
                          std::optional<StatusOr<PullResult>> pulled) {
  Notes notes;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(ref);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    e.in_flight = false;
    e.progress.reset();
    e.last_progress_note = MonoTime{};
    MonoTime now = time_.monotonic();
    std::optional<Status> failure;
    WallTime ready_at{};
    if (pulled) {
      if (pulled->isOk()) {
        ready_at = time_.now();
        if (!(*pulled)->digest_ref.empty() && (*pulled)->digest_ref != ref)
          e.aliases.insert((*pulled)->digest_ref);
        LOG(INFO) << "images: pulled " << ref << " (" << (*pulled)->bytes_fetched << " bytes fetched)";
      } else {
        failure = pulled->status();
      }
    } else if (present.isOk()) {
      ready_at = *present == WallTime{} ? time_.now() : *present;
    } else {
      failure = present.status();
    }

    if (!failure) {
      bool changed = !e.ready || e.error.has_value();
      if (!e.ready || !recheck) e.ready_at = ready_at;
      e.ready = true;
      e.failures = 0;
      e.error.reset();
      e.error_reason.clear();
      e.error_message.clear();
      e.next_recheck = now + options_.recheck_interval;
      if (changed) notesForRefLocked(ref, &notes);
    } else {
      ++e.failures;
      Duration delay = backoff(e.failures, e.check_only);
      const bool missing = e.check_only && failure->code() == Code::kNotFound;
      LOG(WARNING) << "images: " << (recheck ? "re-checking " : "making present ") << ref << ": "
                   << failure->toString() << retryNote(e.failures, delay);
      if (recheck && e.ready && !missing) {
        // Running pods do not need the image any more; keep serving and try again later.
        e.next_recheck = now + delay;
      } else {
        e.ready = false;
        e.next_try = now + delay;
        e.error = *failure;
        if (missing) {
          e.error_reason = "ContainerMissing";
          e.error_message = "image " + ref + " is not in containerd, and images of " + registryOf(ref) +
                            " are not pulled (deployment registries-skipping-tag-resolving): import it with "
                            "`knap image import FILE`";
        } else {
          e.error_reason = pullFailureReason(*failure);
          e.error_message = failureMessage(ref, *failure);
        }
        notesForRefLocked(ref, &notes);
      }
    }
  }
  notify(notes);
}

}  // namespace knap::images
