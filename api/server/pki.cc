#include "api/server/pki.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "common/log.h"

namespace knap::api {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_NAME* p) const { X509_NAME_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Free>;
using Cert = std::unique_ptr<X509, Free>;
using Bio = std::unique_ptr<BIO, Free>;

constexpr long kCaDays = 3650;
constexpr long kLeafDays = 365;
constexpr long kRenewBeforeDays = 30;

std::string sslError() {
  unsigned long e = ERR_get_error();
  if (!e) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

Status writeFileAtomic(const std::string& path, const std::string& data, mode_t mode) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return unavailable("cannot write " + tmp + ": " + std::strerror(errno));
  ::fchmod(fd, mode);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return unavailable("cannot write " + tmp + ": " + std::strerror(err));
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    return unavailable("cannot write " + tmp + ": " + std::strerror(errno));
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return unavailable("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  return Status::ok();
}

bool fileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

StatusOr<std::string> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return unavailable("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > 1024 * 1024)
    return invalidArgument(path + " is larger than 1 MiB: not a PEM certificate or key");
  return s;
}

StatusOr<Cert> parseCert(const std::string& pem, const std::string& what) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Cert c(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!c) return invalidArgument(what + " is not a PEM certificate: " + sslError());
  return c;
}

StatusOr<Key> parseKey(const std::string& pem, const std::string& what) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Key k(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!k) return invalidArgument(what + " is not a PEM private key: " + sslError());
  return k;
}

std::string bioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string certPem(X509* c) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), c);
  return bioText(bio.get());
}

std::string keyPem(EVP_PKEY* k) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), k, nullptr, nullptr, 0, nullptr, nullptr);
  return bioText(bio.get());
}

StatusOr<Key> newKey() {
  Key k(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!k) return internalError("cannot generate an EC P-256 key: " + sslError());
  return k;
}

Status addExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, Free> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    return internalError("cannot add certificate extension " + std::string(OBJ_nid2sn(nid)) + "=" + value +
                         ": " + sslError());
  return Status::ok();
}

struct CertSpec {
  std::string common_name;
  std::vector<std::string> organizations;
  bool ca = false;
  std::string eku;   // "serverAuth" / "clientAuth"
  std::string sans;  // "DNS:localhost,IP:127.0.0.1"
  long days = kLeafDays;
};

// Issues a certificate for `key` signed by (issuer, issuer_key); self-signed when issuer is null.
StatusOr<Cert> issue(const CertSpec& spec, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key) {
  Cert c(X509_new());
  X509_set_version(c.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1)
    return internalError("no randomness for a serial number: " + sslError());
  serial[0] &= 0x7f;
  std::unique_ptr<BIGNUM, Free> bn(BN_bin2bn(serial, sizeof serial, nullptr));
  BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(c.get()));
  X509_gmtime_adj(X509_getm_notBefore(c.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c.get()), spec.days * 24 * 3600);
  X509_NAME* name = X509_get_subject_name(c.get());
  for (const auto& o : spec.organizations)
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(o.c_str()),
                               -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(spec.common_name.c_str()), -1, -1, 0);
  X509* signer = issuer ? issuer : c.get();
  X509_set_issuer_name(c.get(), X509_get_subject_name(signer));
  X509_set_pubkey(c.get(), key);
  if (spec.ca) {
    KNAP_RETURN_IF_ERROR(addExt(c.get(), signer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
    KNAP_RETURN_IF_ERROR(
        addExt(c.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature"));
    KNAP_RETURN_IF_ERROR(addExt(c.get(), signer, NID_subject_key_identifier, "hash"));
  } else {
    KNAP_RETURN_IF_ERROR(addExt(c.get(), signer, NID_basic_constraints, "critical,CA:FALSE"));
    KNAP_RETURN_IF_ERROR(addExt(c.get(), signer, NID_key_usage, "critical,digitalSignature,keyEncipherment"));
    KNAP_RETURN_IF_ERROR(addExt(c.get(), signer, NID_ext_key_usage, spec.eku));
    KNAP_RETURN_IF_ERROR(addExt(c.get(), signer, NID_subject_key_identifier, "hash"));
    KNAP_RETURN_IF_ERROR(addExt(c.get(), signer, NID_authority_key_identifier, "keyid"));
    if (!spec.sans.empty()) KNAP_RETURN_IF_ERROR(addExt(c.get(), signer, NID_subject_alt_name, spec.sans));
  }
  if (X509_sign(c.get(), issuer_key ? issuer_key : key, EVP_sha256()) <= 0)
    return internalError("cannot sign the certificate for " + spec.common_name + ": " + sslError());
  return c;
}

// "IP:127.0.0.1" / "DNS:localhost" for each SAN of `cert`.
std::set<std::string> sansOf(X509* cert) {
  std::set<std::string> out;
  std::unique_ptr<GENERAL_NAMES, Free> names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  if (!names) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), i);
    if (n->type == GEN_DNS) {
      const ASN1_IA5STRING* s = n->d.dNSName;
      out.insert("DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                      static_cast<size_t>(ASN1_STRING_length(s))));
    } else if (n->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = n->d.iPAddress;
      char buf[INET6_ADDRSTRLEN] = {0};
      int len = ASN1_STRING_length(s);
      if (len == 4)
        inet_ntop(AF_INET, ASN1_STRING_get0_data(s), buf, sizeof buf);
      else if (len == 16)
        inet_ntop(AF_INET6, ASN1_STRING_get0_data(s), buf, sizeof buf);
      out.insert("IP:" + std::string(buf));
    }
  }
  return out;
}

std::set<std::string> wantedSans(const std::vector<std::string>& extra_hosts) {
  std::set<std::string> out = {"DNS:localhost", "IP:127.0.0.1", "IP:::1"};
  for (std::string h : extra_hosts) {
    if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    if (h.empty()) continue;
    unsigned char buf[16];
    char text[INET6_ADDRSTRLEN];
    if (inet_pton(AF_INET, h.c_str(), buf) == 1) {
      inet_ntop(AF_INET, buf, text, sizeof text);
      out.insert("IP:" + std::string(text));
    } else if (inet_pton(AF_INET6, h.c_str(), buf) == 1) {
      inet_ntop(AF_INET6, buf, text, sizeof text);
      out.insert("IP:" + std::string(text));
    } else {
      for (char& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.insert("DNS:" + h);
    }
  }
  return out;
}

bool expiresSoon(X509* cert) {
  time_t limit = std::time(nullptr) + kRenewBeforeDays * 24 * 3600;
  return X509_cmp_time(X509_get0_notAfter(cert), &limit) < 0;
}

// Why `cert`/`key` cannot be kept (empty: keep them).
std::string leafProblem(X509* cert, EVP_PKEY* key, EVP_PKEY* ca_key) {
  if (X509_check_private_key(cert, key) != 1) {
    ERR_clear_error();
    return "its key does not match";
  }
  if (X509_verify(cert, ca_key) != 1) {
    ERR_clear_error();
    return "it was not signed by the current CA";
  }
  if (expiresSoon(cert)) return "it expires within " + std::to_string(kRenewBeforeDays) + " days";
  return "";
}

}  // namespace

StatusOr<PkiFiles> ensurePki(const std::string& dir, const std::vector<std::string>& extra_hosts) {
  PkiFiles f;
  f.dir = dir;
  f.ca_cert = dir + "/ca.crt";
  f.ca_key = dir + "/ca.key";
  f.server_cert = dir + "/server.crt";
  f.server_key = dir + "/server.key";
  f.admin_cert = dir + "/admin.crt";
  f.admin_key = dir + "/admin.key";
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return unavailable("cannot create " + dir + ": " + std::strerror(errno));
  ::chmod(dir.c_str(), 0700);

  // The CA.
  Key ca_key;
  Cert ca;
  bool have_cert = fileExists(f.ca_cert), have_key = fileExists(f.ca_key);
  if (have_cert != have_key) {
    return failedPrecondition("found " + (have_cert ? f.ca_cert : f.ca_key) + " without " +
                              (have_cert ? f.ca_key : f.ca_cert) + "; restore it, or remove " + dir +
                              " to create a new CA (certificates issued by the old one stop working)");
  }
  if (have_cert) {
    KNAP_ASSIGN_OR_RETURN(std::string cert_text, readFile(f.ca_cert));
    KNAP_ASSIGN_OR_RETURN(std::string key_text, readFile(f.ca_key));
    KNAP_ASSIGN_OR_RETURN(ca, parseCert(cert_text, f.ca_cert));
    KNAP_ASSIGN_OR_RETURN(ca_key, parseKey(key_text, f.ca_key));
    if (X509_check_private_key(ca.get(), ca_key.get()) != 1) {
      ERR_clear_error();
      return failedPrecondition(f.ca_key + " does not match " + f.ca_cert + "; remove " + dir +
                                " to create a new CA");
    }
    if (expiresSoon(ca.get())) {
      LOG(WARNING) << "pki: the CA " << f.ca_cert << " expires within " << kRenewBeforeDays
                   << " days; remove " << dir << " and restart knapd to create a new one";
    }
  } else {
    KNAP_ASSIGN_OR_RETURN(ca_key, newKey());
    CertSpec spec{"knap-ca", {"knap"}, true, "", "", kCaDays};
    KNAP_ASSIGN_OR_RETURN(ca, issue(spec, ca_key.get(), nullptr, nullptr));
    KNAP_RETURN_IF_ERROR(writeFileAtomic(f.ca_key, keyPem(ca_key.get()), 0600));
    KNAP_RETURN_IF_ERROR(writeFileAtomic(f.ca_cert, certPem(ca.get()), 0644));
    LOG(INFO) << "pki: created the API CA " << f.ca_cert;
  }

  // A leaf: kept when it still fits, else issued anew.
  auto leaf = [&](const std::string& cert_path, const std::string& key_path, const CertSpec& spec,
                  const std::set<std::string>* wanted_sans, std::string* cert_pem,
                  std::string* key_pem) -> Status {
    std::string why = "it does not exist";
    if (fileExists(cert_path) && fileExists(key_path)) {
      auto cert_text = readFile(cert_path);
      auto key_text = readFile(key_path);
      if (cert_text.isOk() && key_text.isOk()) {
        auto cert = parseCert(*cert_text, cert_path);
        auto key = parseKey(*key_text, key_path);
        if (cert.isOk() && key.isOk()) {
          why = leafProblem(cert->get(), key->get(), ca_key.get());
          if (why.empty() && wanted_sans && sansOf(cert->get()) != *wanted_sans)
            why = "its host names changed";
          if (why.empty()) {
            *cert_pem = *cert_text;
            *key_pem = *key_text;
            return Status::ok();
          }
        } else {
          why = "it cannot be read";
        }
      } else {
        why = "it cannot be read";
      }
    }
    KNAP_ASSIGN_OR_RETURN(Key key, newKey());
    KNAP_ASSIGN_OR_RETURN(Cert cert, issue(spec, key.get(), ca.get(), ca_key.get()));
    *key_pem = keyPem(key.get());
    *cert_pem = certPem(cert.get());
    KNAP_RETURN_IF_ERROR(writeFileAtomic(key_path, *key_pem, 0600));
    KNAP_RETURN_IF_ERROR(writeFileAtomic(cert_path, *cert_pem, 0644));
    LOG(INFO) << "pki: issued " << cert_path << " (" << why << ")";
    return Status::ok();
  };

  std::set<std::string> sans = wantedSans(extra_hosts);
  std::string san_text;
  for (const auto& s : sans) san_text += (san_text.empty() ? "" : ",") + s;
  CertSpec server{"knapd", {}, false, "serverAuth", san_text, kLeafDays};
  KNAP_RETURN_IF_ERROR(
      leaf(f.server_cert, f.server_key, server, &sans, &f.server_cert_pem, &f.server_key_pem));
  CertSpec admin{"knap-admin", {"system:masters"}, false, "clientAuth", "", kLeafDays};
  KNAP_RETURN_IF_ERROR(leaf(f.admin_cert, f.admin_key, admin, nullptr, &f.admin_cert_pem, &f.admin_key_pem));
  f.ca_cert_pem = certPem(ca.get());
  return f;
}

namespace {

void subjectNames(X509* c, std::string* common_name, std::vector<std::string>* organizations) {
  X509_NAME* name = X509_get_subject_name(c);
  common_name->clear();
  organizations->clear();
  for (int i = 0; i < X509_NAME_entry_count(name); ++i) {
    X509_NAME_ENTRY* e = X509_NAME_get_entry(name, i);
    int nid = OBJ_obj2nid(X509_NAME_ENTRY_get_object(e));
    const ASN1_STRING* v = X509_NAME_ENTRY_get_data(e);
    std::string text(reinterpret_cast<const char*>(ASN1_STRING_get0_data(v)),
                     static_cast<size_t>(ASN1_STRING_length(v)));
    if (nid == NID_commonName)
      *common_name = text;
    else if (nid == NID_organizationName)
      organizations->push_back(text);
  }
}

}  // namespace

bool verifiedPeerNames(ssl_st* ssl, std::string* common_name, std::vector<std::string>* organizations) {
  Cert peer(SSL_get1_peer_certificate(ssl));
  if (!peer || SSL_get_verify_result(ssl) != X509_V_OK) return false;
  subjectNames(peer.get(), common_name, organizations);
  return !common_name->empty();
}

Status certificateNames(const std::string& pem, std::string* common_name,
                        std::vector<std::string>* organizations) {
  KNAP_ASSIGN_OR_RETURN(Cert c, parseCert(pem, "the certificate"));
  subjectNames(c.get(), common_name, organizations);
  return Status::ok();
}

}  // namespace knap::api
