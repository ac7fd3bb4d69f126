#include "store/body_cipher.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/base64.h"

namespace knap::store {

namespace {

constexpr std::string_view kPrefix = "knap:enc:aes-256-gcm:";
constexpr size_t kKeyBytes = 32, kNonceBytes = 12, kTagBytes = 16;

std::string aad(const std::string& key_id, const Key& key) {
  return key_id + '\0' + key.kind + '\0' + key.ns + '\0' + key.name;
}

struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_CIPHER_CTX, CtxFree>;

bool validKeyId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

// "<id>:<base64>" after the prefix.
bool splitSealed(std::string_view stored, std::string_view* id, std::string_view* payload) {
  if (stored.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string_view rest = stored.substr(kPrefix.size());
  size_t colon = rest.find(':');
  if (colon == std::string_view::npos) return false;
  *id = rest.substr(0, colon);
  *payload = rest.substr(colon + 1);
  return true;
}

StatusOr<std::string> readKeyFile(const std::filesystem::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0)
    return failedPrecondition("secret key " + p.string() + ": " + std::strerror(errno));
  if ((st.st_mode & 077) != 0) {
    std::ostringstream mode;
    mode << std::oct << (st.st_mode & 0777);
    return failedPrecondition("secret key " + p.string() + " is accessible by group or others (mode " +
                              mode.str() + "); chmod 0600 it");
  }
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() != kKeyBytes) {
    return failedPrecondition("secret key " + p.string() + " has " + std::to_string(bytes.size()) +
                              " bytes; a key is 32 random bytes (head -c 32 /dev/urandom)");
  }
  return bytes;
}

Status writeNewKey(const std::filesystem::path& p) {
  unsigned char key[kKeyBytes];
  if (RAND_bytes(key, sizeof key) != 1) return internalError("RAND_bytes failed");
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return unavailable("creating " + p.string() + ": " + std::strerror(errno));
  bool ok = ::write(fd, key, sizeof key) == static_cast<ssize_t>(sizeof key) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return unavailable("writing " + p.string() + ": " + std::strerror(errno));
  return Status::ok();
}

}  // namespace

KeyringCipher::KeyringCipher(std::map<std::string, std::string> keys, std::string current)
    : keys_(std::move(keys)), current_(std::move(current)) {}

StatusOr<std::unique_ptr<KeyringCipher>> KeyringCipher::openDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return unavailable("creating " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  std::map<std::string, std::string> keys;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string file = entry.path().filename().string();
    if (file.size() <= 4 || file.substr(file.size() - 4) != ".key") continue;
    std::string id = file.substr(0, file.size() - 4);
    if (!validKeyId(id))
      return failedPrecondition("secret key file " + entry.path().string() + ": bad key id");
    KNAP_ASSIGN_OR_RETURN(keys[id], readKeyFile(entry.path()));
  }
  if (ec) return unavailable("reading " + dir + ": " + ec.message());
  fs::path current_file = fs::path(dir) / "current";
  std::string current;
  if (keys.empty()) {
    KNAP_RETURN_IF_ERROR(writeNewKey(fs::path(dir) / "1.key"));
    KNAP_ASSIGN_OR_RETURN(keys["1"], readKeyFile(fs::path(dir) / "1.key"));
    std::ofstream(current_file) << "1\n";
  }
  {
    std::ifstream in(current_file);
    std::getline(in, current);
    while (!current.empty() && std::isspace(static_cast<unsigned char>(current.back()))) current.pop_back();
  }
  if (current.empty()) {
    if (keys.size() != 1)
      return failedPrecondition(current_file.string() + " is missing; it must name the key new writes use");
    current = keys.begin()->first;
  }
  if (!keys.count(current))
    return failedPrecondition(current_file.string() + " names key \"" + current + "\" but " + dir + "/" +
                              current + ".key does not exist");
  return std::make_unique<KeyringCipher>(std::move(keys), current);
}

bool KeyringCipher::isSealed(std::string_view stored) const {
  return stored.substr(0, kPrefix.size()) == kPrefix;
}

bool KeyringCipher::isCurrent(std::string_view stored) const {
  std::string_view id, payload;
  return splitSealed(stored, &id, &payload) && id == current_;
}

StatusOr<std::string> KeyringCipher::seal(const Key& key, std::string_view plaintext) {
  const std::string& k = keys_.at(current_);
  unsigned char nonce[kNonceBytes];
  if (RAND_bytes(nonce, sizeof nonce) != 1) return internalError("RAND_bytes failed");
  Ctx ctx(EVP_CIPHER_CTX_new());
  std::string a = aad(current_, key);
  std::string out(kNonceBytes + plaintext.size() + kTagBytes, '\0');
  std::memcpy(out.data(), nonce, kNonceBytes);
  int len = 0, total = 0;
  auto* o = reinterpret_cast<unsigned char*>(out.data()) + kNonceBytes;
  bool ok = ctx && EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) == 1 &&
            EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, reinterpret_cast<const unsigned char*>(k.data()),
                               nonce) == 1 &&
            EVP_EncryptUpdate(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(a.data()),
                              static_cast<int>(a.size())) == 1 &&
            EVP_EncryptUpdate(ctx.get(), o, &len, reinterpret_cast<const unsigned char*>(plaintext.data()),
                              static_cast<int>(plaintext.size())) == 1;
  total = len;
  ok = ok && EVP_EncryptFinal_ex(ctx.get(), o + total, &len) == 1;
  total += len;
  ok = ok && EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, o + total) == 1;
  if (!ok || static_cast<size_t>(total) != plaintext.size())
    return internalError("AES-256-GCM encryption failed");
  return std::string(kPrefix) + current_ + ":" + base64Encode(out);
}

StatusOr<std::string> KeyringCipher::open(const Key& key, std::string_view stored) {
  std::string_view id, payload;
  if (!splitSealed(stored, &id, &payload))
    return internalError("stored body of " + key.toString() + " is not sealed");
  auto it = keys_.find(std::string(id));
  if (it == keys_.end()) {
    return internalError("stored body of " + key.toString() + " is sealed with secret key \"" +
                         std::string(id) + "\", which is not in the key directory");
  }
  std::string raw;
  if (!base64Decode(payload, &raw) || raw.size() < kNonceBytes + kTagBytes)
    return internalError("stored body of " + key.toString() + " is not a valid sealed text");
  size_t n = raw.size() - kNonceBytes - kTagBytes;
  auto* r = reinterpret_cast<unsigned char*>(raw.data());
  std::string a = aad(std::string(id), key);
  std::string out(n, '\0');
  int len = 0, total = 0;
  Ctx ctx(EVP_CIPHER_CTX_new());
  bool ok = ctx && EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) == 1 &&
            EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr,
                               reinterpret_cast<const unsigned char*>(it->second.data()), r) == 1 &&
            EVP_DecryptUpdate(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(a.data()),
                              static_cast<int>(a.size())) == 1 &&
            EVP_DecryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &len, r + kNonceBytes,
                              static_cast<int>(n)) == 1;
  total = len;
  ok = ok && EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, r + kNonceBytes + n) == 1;
  ok = ok && EVP_DecryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char*>(out.data()) + total, &len) == 1;
  if (!ok)
    return internalError("stored body of " + key.toString() + " does not decrypt (wrong key or tampered)");
  return out;
}

}  // namespace knap::store
