// BodyCipher: encryption at rest of the stored bodies of some kinds (knapd:
// Secrets), so that their values are not readable in the database file.
//
// KeyringCipher is the implementation: AES-256-GCM (OpenSSL EVP) with keys
// kept in a directory under the data dir:
//   <dir>/<id>.key   32 random bytes, mode 0600, one file per key
//   <dir>/current    the id of the key new writes use ("1", "2", ...)
// A sealed body is the text
//   knap:enc:aes-256-gcm:<key id>:<base64(12-byte nonce || ciphertext || 16-byte tag)>
// with a fresh random nonce per write; the additional authenticated data is
// the key id and the object's kind/namespace/name, so a ciphertext cannot be
// moved to another object's row. Reading a body sealed with any key in the
// directory works, so rotation is: add a key, make it current, reseal every
// body with it, then delete the old key file. SqliteStore::setCipher seals
// Secret bodies with it and reseals old ones with the current key at start.
//
// Thread safety: seal()/open() may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "store/store.h"

namespace knap::store {

// Every sealed text starts with this (whatever the algorithm).
inline constexpr std::string_view kSealedPrefix = "knap:enc:";

class BodyCipher {
 public:
  virtual ~BodyCipher() = default;
  // Whether bodies of `kind` are sealed.
  virtual bool seals(const std::string& kind) const = 0;
  virtual StatusOr<std::string> seal(const Key& key, std::string_view plaintext) = 0;
  // A sealed text gives its plaintext; kInternal when it does not decrypt
  // (unknown key id, wrong key, tampered text).
  virtual StatusOr<std::string> open(const Key& key, std::string_view stored) = 0;
  // Whether `stored` is sealed at all, and with the current key.
  virtual bool isSealed(std::string_view stored) const = 0;
  virtual bool isCurrent(std::string_view stored) const = 0;
};

class KeyringCipher final : public BodyCipher {
 public:
  // Loads every <id>.key in `dir` (creating dir 0700 and key "1" when there
  // is none). kFailedPrecondition when a key file is not 32 bytes or is
  // readable by group/others, or `current` names a missing key.
  static StatusOr<std::unique_ptr<KeyringCipher>> openDir(const std::string& dir);
  // For tests: keys given directly (id -> 32 raw bytes).
  KeyringCipher(std::map<std::string, std::string> keys, std::string current);

  bool seals(const std::string& kind) const override { return kind == "Secret"; }
  StatusOr<std::string> seal(const Key& key, std::string_view plaintext) override;
  StatusOr<std::string> open(const Key& key, std::string_view stored) override;
  bool isSealed(std::string_view stored) const override;
  bool isCurrent(std::string_view stored) const override;
  const std::string& currentKeyId() const { return current_; }

 private:
  std::map<std::string, std::string> keys_;
  std::string current_;
};

}  // namespace knap::store
