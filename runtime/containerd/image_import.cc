#include "runtime/containerd/image_import.h"

#include <random>

#include "common/log.h"
#include "oci/digest.h"
#include "oci/tar.h"

namespace knap::containerd {

namespace {

constexpr char kLabelUncompressed[] = "containerd.io/uncompressed";
constexpr char kLabelRefConfig[] = "containerd.io/gc.ref.content.config";
constexpr char kLabelRefLayerPrefix[] = "containerd.io/gc.ref.content.l.";
constexpr char kLabelRefSnapshotPrefix[] = "containerd.io/gc.ref.snapshot.";

std::string uniqueSuffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::to_string(rng() % 1000000000);
}

// Deletes the lease when the import returns, whatever the outcome.
class LeaseGuard {
 public:
  LeaseGuard(const ContainerdClient& client, std::string id) : client_(client), id_(std::move(id)) {}
  ~LeaseGuard() {
    Status s = client_.deleteLease(id_);
    if (!s.isOk()) LOG(WARNING) << "image import: " << s.toString();
  }

 private:
  const ContainerdClient& client_;
  std::string id_;
};

Status putImageRecord(const ContainerdClient& client, const ImageRecord& record) {
  // ctr's order: Update first, Create when missing (§2.3).
  Status s = client.updateImage(record);
  if (s.code() != Code::kNotFound) return s;
  s = client.createImage(record);
  if (s.code() == Code::kAlreadyExists) return client.updateImage(record);  // lost a race
  return s;
}

}  // namespace

StatusOr<std::vector<std::string>> unpackLayers(const ContainerdClient& client,
                                                const std::vector<oci::Descriptor>& layers,
                                                const std::vector<std::string>& diff_ids,
                                                const std::string& config_digest) {
  if (layers.size() != diff_ids.size()) return invalidArgument("unpack: layer and diff_id counts differ");
  std::vector<std::string> chain = oci::chainIds(diff_ids);
  for (size_t i = 0; i < layers.size(); ++i) {
    StatusOr<SnapshotInfo> st = client.statSnapshot(chain[i]);
    if (st.isOk()) continue;  // already unpacked
    if (st.status().code() != Code::kNotFound) return st.status();
    const std::string key = "extract-" + uniqueSuffix() + " " + chain[i];
    const std::string parent = i == 0 ? "" : chain[i - 1];
    KNAP_ASSIGN_OR_RETURN(std::vector<Mount> mounts, client.prepareSnapshot(key, parent));
    auto fail = [&](Status s) {
      Status r = client.removeSnapshot(key);
      if (!r.isOk()) LOG(WARNING) << "unpack: cleanup: " << r.toString();
      return s;
    };
    StatusOr<oci::Descriptor> applied = client.applyDiff(layers[i], mounts);
    if (!applied.isOk()) return fail(applied.status());
    if (applied->digest != diff_ids[i]) {
      return fail(failedPrecondition("unpack: layer " + layers[i].digest + " unpacks to " + applied->digest +
                                     " but the config's diff_id is " + diff_ids[i]));
    }
    Status c = client.commitSnapshot(chain[i], key);
    if (c.code() == Code::kAlreadyExists) {
      (void)fail(Status::ok());  // someone else finished this layer first
    } else if (!c.isOk()) {
      return fail(c);
    }
    KNAP_RETURN_IF_ERROR(client.updateContentLabels(layers[i].digest, {{kLabelUncompressed, diff_ids[i]}}));
  }
  if (!chain.empty() && !config_digest.empty()) {
    KNAP_RETURN_IF_ERROR(client.updateContentLabels(
        config_digest, {{kLabelRefSnapshotPrefix + client.snapshotter(), chain.back()}}));
  }
  return chain;
}

StatusOr<ImageInfo> importImageArchive(const ContainerdClient& client, const std::string& tar_path,
                                       const ImportOptions& options) {
  const std::string op = "import " + tar_path;
  StatusOr<oci::TarReader> archive_or = oci::TarReader::open(tar_path);
  if (!archive_or.isOk()) return archive_or.status().annotate(op);
  const oci::TarReader& archive = *archive_or;
  StatusOr<oci::ResolvedImage> resolved_or = oci::resolveLayout(archive, options.platform);
  if (!resolved_or.isOk()) return resolved_or.status().annotate(op);
  const oci::ResolvedImage& img = *resolved_or;
  const std::string name = options.name.empty() ? img.name : options.name;
  if (name.empty()) return invalidArgument(op + ": the archive names no image; pass a name");

  StatusOr<std::string> lease_or =
      client.createLease("", options.lease_expiry, {{"knap.dev/purpose", "import"}});
  if (!lease_or.isOk()) return lease_or.status().annotate(op);
  LeaseGuard guard(client, *lease_or);
  const ContainerdClient leased = client.withLease(*lease_or);

  auto fromArchive = [&](const oci::Descriptor& d) -> ContainerdClient::BlobSource {
    const oci::TarEntry* e = archive.find(oci::blobPath(d.digest));
    return [&archive, e](uint64_t off, size_t n) { return archive.readRange(*e, off, n); };
  };
  // Children before the manifest that references them.
  for (const oci::Descriptor& layer : img.layers) {
    Status s = leased.writeContent(layer, fromArchive(layer));
    if (!s.isOk()) return s.annotate(op);
  }
  Status s = leased.writeContent(img.config, fromArchive(img.config));
  if (!s.isOk()) return s.annotate(op);
  Labels manifest_labels{{kLabelRefConfig, img.config.digest}};
  for (size_t i = 0; i < img.layers.size(); ++i) {
    manifest_labels[kLabelRefLayerPrefix + std::to_string(i)] = img.layers[i].digest;
  }
  s = leased.writeContent(img.manifest, img.manifest_json, manifest_labels);
  if (!s.isOk()) return s.annotate(op);

  oci::Descriptor target = img.manifest;
  target.annotations.clear();
  s = putImageRecord(leased, ImageRecord{name, target, {}});
  if (!s.isOk()) return s.annotate(op);

  StatusOr<std::vector<std::string>> chain =
      unpackLayers(leased, img.layers, img.image_config.diff_ids, img.config.digest);
  if (!chain.isOk()) return chain.status().annotate(op);

  ImageInfo info;
  info.name = name;
  info.manifest_digest = img.manifest.digest;
  info.config_digest = img.config.digest;
  info.chain_ids = *chain;
  info.chain_id = chain->empty() ? "" : chain->back();
  info.unpacked = true;
  info.config = img.image_config;
  LOG(INFO) << "imported image " << name << " manifest " << info.manifest_digest << " top " << info.chain_id;
  return info;
}

StatusOr<ImageInfo> getImage(const ContainerdClient& client, const std::string& name,
                             const oci::Platform& platform) {
  KNAP_ASSIGN_OR_RETURN(ImageRecord record, client.getImage(name));
  oci::Descriptor manifest = record.target;
  // Follow indexes down to the platform's manifest.
  for (int depth = 0; manifest.media_type == oci::kMediaTypeOciIndex ||
                      manifest.media_type == oci::kMediaTypeDockerManifestList;
       ++depth) {
    if (depth > 4) return invalidArgument("image " + name + ": indexes nested too deeply");
    KNAP_ASSIGN_OR_RETURN(std::string index_json, client.readContent(manifest.digest));
    KNAP_ASSIGN_OR_RETURN(std::vector<oci::IndexEntry> entries, oci::parseIndex(index_json));
    const oci::IndexEntry* pick = nullptr;
    for (const oci::IndexEntry& e : entries) {
      if (e.has_platform && e.platform.os == platform.os &&
          e.platform.architecture == platform.architecture &&
          (platform.variant.empty() || e.platform.variant.empty() ||
           e.platform.variant == platform.variant)) {
        pick = &e;
        break;
      }
    }
    if (pick == nullptr) return notFound("image " + name + " has no manifest for " + platform.toString());
    manifest = pick->descriptor;
  }
  KNAP_ASSIGN_OR_RETURN(std::string manifest_json, client.readContent(manifest.digest));
  if (oci::sha256Digest(manifest_json) != manifest.digest)
    return internalError("image " + name + ": manifest digest mismatch");
  KNAP_ASSIGN_OR_RETURN(oci::Manifest m, oci::parseManifest(manifest_json));
  KNAP_ASSIGN_OR_RETURN(std::string config_json, client.readContent(m.config.digest));
  KNAP_ASSIGN_OR_RETURN(oci::ImageConfig config, oci::parseImageConfig(config_json));
  ImageInfo info;
  info.name = record.name;
  info.manifest_digest = manifest.digest;
  info.config_digest = m.config.digest;
  info.chain_ids = oci::chainIds(config.diff_ids);
  info.chain_id = info.chain_ids.empty() ? "" : info.chain_ids.back();
  info.config = std::move(config);
  if (!info.chain_id.empty()) {
    StatusOr<SnapshotInfo> st = client.statSnapshot(info.chain_id);
    if (!st.isOk() && st.status().code() != Code::kNotFound) return st.status();
    info.unpacked = st.isOk();
  }
  return info;
}

}  // namespace knap::containerd
