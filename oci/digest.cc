#include "oci/digest.h"

#include <openssl/evp.h>

namespace knap::oci {

namespace {

std::string toHex(const unsigned char* p, unsigned n) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (unsigned i = 0; i < n; ++i) {
    out.push_back(kHex[p[i] >> 4]);
    out.push_back(kHex[p[i] & 15]);
  }
  return out;
}

}  // namespace

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr);
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(impl_->ctx);
}

void Sha256::update(std::string_view data) {
  EVP_DigestUpdate(impl_->ctx, data.data(), data.size());
}

std::string Sha256::finish() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(impl_->ctx, md, &n);
  return "sha256:" + toHex(md, n);
}

std::string sha256Digest(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.finish();
}

bool isSha256Digest(std::string_view digest) {
  constexpr std::string_view kPrefix = "sha256:";
  if (digest.size() != kPrefix.size() + 64 || digest.substr(0, kPrefix.size()) != kPrefix) return false;
  for (char c : digest.substr(kPrefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::vector<std::string> chainIds(const std::vector<std::string>& diff_ids) {
  std::vector<std::string> out;
  out.reserve(diff_ids.size());
  for (size_t i = 0; i < diff_ids.size(); ++i) {
    if (i == 0) {
      out.push_back(diff_ids[0]);
    } else {
      out.push_back(sha256Digest(out[i - 1] + " " + diff_ids[i]));
    }
  }
  return out;
}

}  // namespace knap::oci
