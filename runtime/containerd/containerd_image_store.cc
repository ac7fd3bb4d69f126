#include "runtime/containerd/containerd_image_store.h"

#include <fstream>

#include "common/log.h"
#include "runtime/containerd/image_import.h"

namespace knap::containerd {

namespace {

using images::BlobLabels;
using images::ImageStore;
using oci::Descriptor;

// containerd being down or losing an object is not the registry's fault: such
// errors must not become RegistryUnreachable / ManifestUnknown (puller.h), so
// they are reported as kFailedPrecondition ("ImagePullFailed") naming containerd.
Status storeError(const Status& s) {
  if (s.isOk()) return s;
  switch (s.code()) {
    case Code::kUnavailable:
    case Code::kDeadlineExceeded:
    case Code::kNotFound:
      return failedPrecondition("containerd: " + s.message());
    default:
      return s;
  }
}

class ContainerdSession : public ImageStore::Session {
 public:
  ContainerdSession(ContainerdClient client, std::string lease)
      : client_(std::move(client)), leased_(client_.withLease(lease)), lease_(std::move(lease)) {}
  ~ContainerdSession() override {
    Status s = client_.deleteLease(lease_);
    if (!s.isOk()) LOG(WARNING) << "image pull: delete lease " << lease_ << ": " << s.toString();
  }

  StatusOr<bool> hasBlob(const Descriptor& desc) override {
    StatusOr<ContentInfo> info = client_.contentInfo(desc.digest);
    if (!info.isOk()) {
      if (info.status().code() == Code::kNotFound) return false;
      return storeError(info.status());
    }
    if (info->size != desc.size) return false;
    // Opening a writer for existing content adds it to our lease (containerd
    // metadata/content.go); the source is never read for an existing blob.
    Status s = leased_.writeContent(desc, [](uint64_t, size_t) -> StatusOr<std::string> {
      return Status(Code::kNotFound, "blob vanished");
    });
    if (s.code() == Code::kNotFound) return false;
    if (!s.isOk()) return storeError(s);
    return true;
  }

  Status putBlobFile(const Descriptor& desc, const std::string& path) override {
    auto file = std::make_shared<std::ifstream>(path, std::ios::binary);
    if (!*file) return internalError("cannot read " + path);
    return storeError(
        leased_.writeContent(desc,
                             [file, path](uint64_t off, size_t n) -> StatusOr<std::string> {
                               file->clear();
                               file->seekg(static_cast<std::streamoff>(off));
                               std::string buf(n, '\0');
                               file->read(buf.data(), static_cast<std::streamsize>(n));
                               buf.resize(static_cast<size_t>(file->gcount()));
                               if (buf.empty() && n > 0) return internalError("short read of " + path);
                               return buf;
                             },
                             // A unique ingest ref (the default): a concurrent writer of the same
                             // blob in another process then finds it committed instead of locked.
                             {}));
  }

  Status putBlob(const Descriptor& desc, const std::string& data, const BlobLabels& labels) override {
    return storeError(leased_.writeContent(desc, data, labels));
  }

  StatusOr<std::string> readBlob(const std::string& digest) override {
    StatusOr<std::string> data = leased_.readContent(digest);
    if (!data.isOk()) return storeError(data.status());
    return data;
  }

  Status unpack(const std::vector<Descriptor>& layers, const std::vector<std::string>& diff_ids,
                const std::string& config_digest) override {
    StatusOr<std::vector<std::string>> chain = unpackLayers(leased_, layers, diff_ids, config_digest);
    if (!chain.isOk()) {
      // A layer that does not unpack to its diff_id is corrupt content.
      if (chain.status().code() == Code::kFailedPrecondition) return dataLoss(chain.status().message());
      return storeError(chain.status());
    }
    return Status::ok();
  }

  Status putImage(const std::string& name, const Descriptor& target) override {
    Descriptor t = target;
    t.annotations.clear();
    ImageRecord record{name, t, {}};
    // ctr's order: Update first, Create when missing.
    Status s = leased_.updateImage(record);
    if (s.code() != Code::kNotFound) return storeError(s);
    s = leased_.createImage(record);
    if (s.code() == Code::kAlreadyExists) return storeError(leased_.updateImage(record));
    return storeError(s);
  }

 private:
  ContainerdClient client_;
  ContainerdClient leased_;
  std::string lease_;
};

}  // namespace

ContainerdImageStore::ContainerdImageStore(ContainerdClient client, Duration lease_expiry)
    : client_(std::move(client)), lease_expiry_(lease_expiry) {}

StatusOr<std::unique_ptr<images::ImageStore::Session>> ContainerdImageStore::begin(const std::string& image) {
  StatusOr<std::string> lease = client_.createLease("", lease_expiry_, {{"knap.dev/purpose", "pull"}});
  if (!lease.isOk()) return storeError(lease.status()).annotate("create lease");
  (void)image;
  return std::unique_ptr<Session>(std::make_unique<ContainerdSession>(client_, *lease));
}

}  // namespace knap::containerd
