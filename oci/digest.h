// SHA-256 content digests and OCI ChainIDs.
//
// Thread safety: free functions are pure; a Sha256 object is used by one
// thread at a time. Digests are always written "sha256:<64 lowercase hex>".
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace knap::oci {

// "sha256:<hex>" of `data`.
std::string sha256Digest(std::string_view data);

// Incremental SHA-256 for data that arrives in chunks.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::string_view data);
  // "sha256:<hex>"; the object must not be updated afterwards.
  std::string finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True for "sha256:" followed by exactly 64 lowercase hex digits.
bool isSha256Digest(std::string_view digest);

// ChainIDs of a layer stack (OCI image-spec config.md): chain[0] = diffIds[0],
// chain[i] = sha256(chain[i-1] + " " + diffIds[i]). These are the names of the
// committed snapshots of an unpacked image.
std::vector<std::string> chainIds(const std::vector<std::string>& diff_ids);

}  // namespace knap::oci
