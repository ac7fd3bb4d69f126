#include "images/registry_puller.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "common/guard.h"
#include "common/log.h"
#include "oci/digest.h"

namespace knap::images {

namespace fs = std::filesystem;

namespace {

constexpr char kLabelRefConfig[] = "containerd.io/gc.ref.content.config";
constexpr char kLabelRefLayerPrefix[] = "containerd.io/gc.ref.content.l.";

bool retryable(const Status& s) {
  return s.code() == Code::kUnavailable || s.code() == Code::kDeadlineExceeded;
}

std::string hexOf(const std::string& digest) {
  size_t colon = digest.find(':');
  return colon == std::string::npos ? digest : digest.substr(colon + 1);
}

// Removes <hex>.<pid>-<n>.partial files left by processes that are gone.
void removeStalePartials(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::directory_entry& entry = *it;
    const std::string name = entry.path().filename().string();
    if (name.size() < 9 || name.substr(name.size() - 8) != ".partial") continue;
    size_t dot = name.find('.'), dash = name.find('-', dot == std::string::npos ? 0 : dot);
    if (dot == std::string::npos || dash == std::string::npos) continue;
    const long pid = std::atol(name.substr(dot + 1, dash - dot - 1).c_str());
    if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
      std::error_code rm;
      fs::remove(entry.path(), rm);
    }
  }
}

}  // namespace

// One pull of one image, shared by concurrent callers.
struct RegistryPuller::PullFlight {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  StatusOr<PullResult> result = Status(Code::kInternal, "pull not finished");
  std::vector<ProgressFn> listeners;
  std::mutex report_mu;  // callbacks run one at a time, never under `mu`

  void report(const PullProgress& p) {
    std::lock_guard<std::mutex> serial(report_mu);
    std::vector<ProgressFn> ls;
    {
      std::lock_guard<std::mutex> lock(mu);
      ls = listeners;
    }
    for (const ProgressFn& fn : ls) fn(p);
  }
};

// One blob being fetched into the store, shared by concurrent pulls.
struct RegistryPuller::BlobFlight {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
};

// Progress bookkeeping of one running pull.
struct RegistryPuller::PullState {
  PullFlight& flight;
  std::mutex mu;
  PullProgress progress;
  int64_t fetched = 0;

  // Reports under `mu` so callers see bytes_done only grow.
  void add(int64_t bytes, int blobs, bool downloaded) {
    std::lock_guard<std::mutex> lock(mu);
    progress.bytes_done += bytes;
    progress.blobs_done += blobs;
    if (downloaded) fetched += bytes;
    flight.report(progress);
  }
  void phase(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu);
    progress.phase = name;
    flight.report(progress);
  }
};

RegistryPuller::RegistryPuller(RegistryClient& client, ImageStore& store, Options options)
    : client_(client), store_(store), options_(std::move(options)) {
  if (options_.parallelism < 1) options_.parallelism = 1;
  if (options_.attempts < 1) options_.attempts = 1;
  if (!options_.sleep) options_.sleep = [](Duration d) { std::this_thread::sleep_for(d); };
  removeStalePartials(options_.scratch_dir);
}

RegistryPuller::~RegistryPuller() = default;

StatusOr<std::string> RegistryPuller::resolve(const std::string& image) {
  KNAP_ASSIGN_OR_RETURN(Reference ref, parseReference(image));
  if (!ref.digest.empty()) return writtenRepository(image) + "@" + ref.digest;
  StatusOr<Descriptor> d = client_.resolve(ref);
  if (!d.isOk()) return d.status().annotate("resolve " + image);
  return writtenRepository(image) + "@" + d->digest;
}

StatusOr<PullResult> RegistryPuller::pull(const std::string& image, const ProgressFn& progress) {
  std::shared_ptr<PullFlight> flight;
  bool leader = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pulls_.find(image);
    if (it == pulls_.end()) {
      flight = std::make_shared<PullFlight>();
      pulls_[image] = flight;
      leader = true;
    } else {
      flight = it->second;
    }
  }
  if (progress) {
    std::lock_guard<std::mutex> lock(flight->mu);
    flight->listeners.push_back(progress);
  }
  if (!leader) {
    std::unique_lock<std::mutex> lock(flight->mu);
    flight->cv.wait(lock, [&] { return flight->done; });
    return flight->result;
  }
  StatusOr<PullResult> r = doPull(image, *flight);
  if (!r.isOk()) LOG(WARNING) << "pull " << image << ": " << r.status().toString();
  {
    std::lock_guard<std::mutex> lock(mu_);
    pulls_.erase(image);
  }
  {
    std::lock_guard<std::mutex> lock(flight->mu);
    flight->result = r;
    flight->done = true;
  }
  flight->cv.notify_all();
  return r;
}

StatusOr<PullResult> RegistryPuller::doPull(const std::string& image, PullFlight& flight) {
  KNAP_ASSIGN_OR_RETURN(Reference ref, parseReference(image));
  const std::string op = "pull " + image;
  PullState st{flight};
  st.progress.image = image;
  st.phase("resolving");

  StatusOr<FetchedManifest> top = client_.getManifest(ref, ref.manifestReference());
  if (!top.isOk()) return top.status().annotate(op);
  FetchedManifest manifest = *top;
  std::vector<std::pair<Descriptor, std::string>> indexes;  // outermost first
  for (int depth = 0; isIndexMediaType(manifest.media_type); ++depth) {
    if (depth > 4) return failedPrecondition(op + ": indexes nested too deeply");
    StatusOr<std::vector<oci::IndexEntry>> entries = oci::parseIndex(manifest.body);
    if (!entries.isOk()) return entries.status().annotate(op);
    StatusOr<Descriptor> pick = choosePlatform(*entries, options_.platform, image);
    if (!pick.isOk()) return pick.status();
    Descriptor idx;
    idx.media_type = manifest.media_type;
    idx.digest = manifest.digest;
    idx.size = static_cast<int64_t>(manifest.body.size());
    indexes.emplace_back(idx, manifest.body);
    StatusOr<FetchedManifest> next = client_.getManifest(ref, pick->digest);
    if (!next.isOk()) return next.status().annotate(op);
    if (pick->size > 0 && static_cast<int64_t>(next->body.size()) != pick->size) {
      return dataLoss(op + ": manifest " + pick->digest + " is " + std::to_string(next->body.size()) +
                      " bytes but the index says " + std::to_string(pick->size));
    }
    manifest = *next;
  }
  StatusOr<oci::Manifest> parsed = oci::parseManifest(manifest.body);
  if (!parsed.isOk()) return parsed.status().annotate(op);
  Descriptor manifest_desc;
  manifest_desc.media_type = manifest.media_type;
  manifest_desc.digest = manifest.digest;
  manifest_desc.size = static_cast<int64_t>(manifest.body.size());

  // Config first, then layers; each digest once.
  std::vector<Descriptor> blobs{parsed->config};
  for (const Descriptor& l : parsed->layers) {
    bool dup = false;
    for (const Descriptor& b : blobs) dup = dup || b.digest == l.digest;
    if (!dup) blobs.push_back(l);
  }
  for (const Descriptor& b : blobs) {
    if (!oci::isSha256Digest(b.digest)) return failedPrecondition(op + ": unsupported digest " + b.digest);
    if (b.size < 0) return failedPrecondition(op + ": negative size for " + b.digest);
  }
  {
    std::lock_guard<std::mutex> lock(st.mu);
    for (const Descriptor& b : blobs) st.progress.bytes_total += b.size;
    st.progress.blobs_total = static_cast<int>(blobs.size());
  }
  StatusOr<std::unique_ptr<ImageStore::Session>> session_or = store_.begin(image);
  if (!session_or.isOk()) return session_or.status().annotate(op);
  ImageStore::Session& session = **session_or;
  st.phase("fetching");

  // Workers take blobs in order; the first error stops the rest from starting.
  std::atomic<size_t> next{0};
  std::mutex err_mu;
  Status first_error;
  auto worker = [&] {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!first_error.isOk()) return;
      }
      size_t i = next.fetch_add(1);
      if (i >= blobs.size()) return;
      Status s = statusOfThrowing("fetch blob " + blobs[i].digest,
                                  [&] { return ensureBlob(ref, blobs[i], session, st); });
      if (!s.isOk()) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (first_error.isOk()) first_error = s;
        return;
      }
    }
  };
  const size_t n_workers = std::min<size_t>(static_cast<size_t>(options_.parallelism), blobs.size());
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n_workers; ++i) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  if (!first_error.isOk()) return first_error.annotate(op);

  StatusOr<std::string> config_json = session.readBlob(parsed->config.digest);
  if (!config_json.isOk()) return config_json.status().annotate(op);
  StatusOr<oci::ImageConfig> config = oci::parseImageConfig(*config_json);
  if (!config.isOk()) return config.status().annotate(op + ": config " + parsed->config.digest);
  if (config->diff_ids.size() != parsed->layers.size()) {
    return failedPrecondition(op + ": the config lists " + std::to_string(config->diff_ids.size()) +
                              " diff_ids for " + std::to_string(parsed->layers.size()) + " layers");
  }

  // The manifest (and indexes) with GC references to their children.
  BlobLabels labels{{kLabelRefConfig, parsed->config.digest}};
  for (size_t i = 0; i < parsed->layers.size(); ++i) {
    labels[kLabelRefLayerPrefix + std::to_string(i)] = parsed->layers[i].digest;
  }
  Status s = session.putBlob(manifest_desc, manifest.body, labels);
  if (!s.isOk()) return s.annotate(op);
  for (size_t i = indexes.size(); i-- > 0;) {
    const std::string child = i + 1 < indexes.size() ? indexes[i + 1].first.digest : manifest_desc.digest;
    s = session.putBlob(indexes[i].first, indexes[i].second, {{"containerd.io/gc.ref.content.m.0", child}});
    if (!s.isOk()) return s.annotate(op);
  }

  st.phase("unpacking");
  s = session.unpack(parsed->layers, config->diff_ids, parsed->config.digest);
  if (!s.isOk()) return s.annotate(op);

  // Names: as requested, and the digest refs pods and pinned Revisions use.
  // Every record targets the platform manifest (getImage picks no platform).
  const std::string written = writtenRepository(image);
  std::vector<std::string> names{image, written + "@" + manifest_desc.digest};
  if (ref.name() != written) names.push_back(ref.canonicalDigestRef(manifest_desc.digest));
  if (!indexes.empty()) {
    names.push_back(written + "@" + indexes.front().first.digest);
    if (ref.name() != written) names.push_back(ref.canonicalDigestRef(indexes.front().first.digest));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    bool dup = false;
    for (size_t j = 0; j < i; ++j) dup = dup || names[j] == names[i];
    if (dup) continue;
    s = session.putImage(names[i], manifest_desc);
    if (!s.isOk()) return s.annotate(op);
  }

  PullResult result;
  result.image = image;
  result.digest_ref = written + "@" + manifest_desc.digest;
  result.manifest_digest = manifest_desc.digest;
  result.index_digest = indexes.empty() ? "" : indexes.front().first.digest;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    result.bytes_fetched = st.fetched;
    result.bytes_total = st.progress.bytes_total;
  }
  st.phase("done");
  LOG(INFO) << "pulled " << image << " -> " << result.digest_ref << " (" << result.bytes_fetched
            << " bytes fetched)";
  return result;
}

Status RegistryPuller::ensureBlob(const Reference& ref, const Descriptor& desc, ImageStore::Session& session,
                                  PullState& st) {
  StatusOr<bool> has = session.hasBlob(desc);
  if (!has.isOk()) return has.status();
  if (*has) {
    st.add(desc.size, 1, false);
    return Status::ok();
  }
  std::shared_ptr<BlobFlight> flight;
  bool leader = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blobs_.find(desc.digest);
    if (it == blobs_.end()) {
      flight = std::make_shared<BlobFlight>();
      blobs_[desc.digest] = flight;
      leader = true;
    } else {
      flight = it->second;
    }
  }
  if (!leader) {
    Status result;
    {
      std::unique_lock<std::mutex> lock(flight->mu);
      flight->cv.wait(lock, [&] { return flight->done; });
      result = flight->status;
    }
    if (!result.isOk()) return result;
    // Fetched by another pull: make it ours too (protects it under our session).
    StatusOr<bool> now = session.hasBlob(desc);
    if (!now.isOk()) return now.status();
    if (!*now) return unavailable("blob " + desc.digest + " vanished after another pull fetched it");
    st.add(desc.size, 1, false);
    return Status::ok();
  }
  Status s = downloadBlob(ref, desc, session, st);
  {
    std::lock_guard<std::mutex> lock(mu_);
    blobs_.erase(desc.digest);
  }
  {
    std::lock_guard<std::mutex> lock(flight->mu);
    flight->status = s;
    flight->done = true;
  }
  flight->cv.notify_all();
  if (s.isOk()) st.add(0, 1, false);
  return s;
}

Status RegistryPuller::downloadBlob(const Reference& ref, const Descriptor& desc,
                                    ImageStore::Session& session, PullState& st) {
  std::error_code ec;
  fs::create_directories(options_.scratch_dir, ec);
  if (ec) return internalError("create " + options_.scratch_dir + ": " + ec.message());
  // Unique per process and download: another knap process may fetch the same
  // blob into the same scratch dir at the same time.
  static std::atomic<uint64_t> seq{0};
  const std::string path =
      (fs::path(options_.scratch_dir) / (hexOf(desc.digest) + "." + std::to_string(::getpid()) + "-" +
                                         std::to_string(seq.fetch_add(1)) + ".partial"))
          .string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return internalError("cannot write " + path);
  auto hash = std::make_unique<oci::Sha256>();
  int64_t have = 0;
  int64_t counted = 0;  // bytes reported as progress (not more than size)
  Status last;
  Duration backoff = options_.backoff;
  for (int attempt = 1; attempt <= options_.attempts; ++attempt) {
    if (attempt > 1) {
      LOG(INFO) << "pull " << ref.original << ": blob " << desc.digest << " attempt " << attempt
                << " from byte " << have << " after: " << last.message();
      options_.sleep(backoff);
      backoff *= 2;
    }
    if (have == desc.size && desc.size > 0) break;  // everything arrived; the stream broke at the very end
    last = client_.fetchBlob(ref, desc.digest, have, [&](std::string_view chunk, int64_t at) -> Status {
      if (at != have) {
        if (at != 0) return dataLoss("blob " + desc.digest + ": server resumed at " + std::to_string(at));
        // The server ignored the Range request: start over.
        out.close();
        out.open(path, std::ios::binary | std::ios::trunc);
        hash = std::make_unique<oci::Sha256>();
        have = 0;
      }
      if (have + static_cast<int64_t>(chunk.size()) > desc.size) {
        return dataLoss("blob " + desc.digest + ": the registry sent more than the " +
                        std::to_string(desc.size) + " bytes the manifest says");
      }
      out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      if (!out) return internalError("write " + path + " failed");
      hash->update(chunk);
      have += static_cast<int64_t>(chunk.size());
      const int64_t delta = std::max<int64_t>(0, have - counted);
      counted += delta;
      st.add(delta, 0, true);
      return Status::ok();
    });
    if (last.isOk() || !retryable(last)) break;
  }
  out.close();
  auto cleanup = [&] { fs::remove(path, ec); };
  if (!last.isOk() && !(have == desc.size && retryable(last))) {
    cleanup();
    if (retryable(last)) {
      return Status(last.code(), "blob " + desc.digest + ": transfer failed after " +
                                     std::to_string(options_.attempts) + " attempts (" +
                                     std::to_string(have) + " of " + std::to_string(desc.size) +
                                     " bytes): " + last.message());
    }
    return last;
  }
  if (have != desc.size) {
    cleanup();
    return dataLoss("blob " + desc.digest + ": expected " + std::to_string(desc.size) +
                    " bytes but received " + std::to_string(have));
  }
  const std::string actual = hash->finish();
  if (actual != desc.digest) {
    cleanup();
    return dataLoss("blob of " + ref.name() + ": expected digest " + desc.digest + " but the content is " +
                    actual);
  }
  Status s = session.putBlobFile(desc, path);
  cleanup();
  return s;
}

namespace {

// Owns what the puller refers to.
class OwningPuller : public Puller {
 public:
  OwningPuller(std::unique_ptr<RegistryClient> client, std::unique_ptr<ImageStore> store,
               RegistryPuller::Options options)
      : client_(std::move(client)),
        store_(std::move(store)),
        puller_(*client_, *store_, std::move(options)) {}
  StatusOr<std::string> resolve(const std::string& image) override { return puller_.resolve(image); }
  StatusOr<PullResult> pull(const std::string& image, const ProgressFn& progress) override {
    return puller_.pull(image, progress);
  }

 private:
  std::unique_ptr<RegistryClient> client_;
  std::unique_ptr<ImageStore> store_;
  RegistryPuller puller_;
};

}  // namespace

StatusOr<std::unique_ptr<Puller>> makeRegistryPuller(const Config& config, std::unique_ptr<ImageStore> store,
                                                     TimeSource& time,
                                                     const PullCredentials* pull_credentials) {
  const KnapConfig& k = config.knap;
  StatusOr<Platform> platform = platformFromConfig(k.platform);
  if (!platform.isOk()) return platform.status().annotate("knap.platform");
  RegistryOptions ro;
  ro.auth_file = k.registry_auth_file;
  ro.ca_file = k.registry_ca_file;
  ro.insecure_registries = k.insecure_registries;
  if (pull_credentials != nullptr)
    ro.extra_credentials = [pull_credentials](const std::string& host) {
      return pull_credentials->lookup(host);
    };
  KNAP_ASSIGN_OR_RETURN(std::unique_ptr<RegistryClient> rc, RegistryClient::create(ro, time));
  RegistryPuller::Options po;
  po.platform = *platform;
  po.parallelism = static_cast<int>(std::max<int64_t>(1, k.pull_parallelism));
  po.scratch_dir = k.data_dir + "/pulls";
  return std::unique_ptr<Puller>(std::make_unique<OwningPuller>(std::move(rc), std::move(store), po));
}

}  // namespace knap::images
