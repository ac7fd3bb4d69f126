// ACME signing blocks (acme/jws.h), checked with OpenSSL as the verifier:
// ES256 signatures verify against the JWK's public key, the thumbprint is
// SHA-256 of the canonical JWK, requests carry jwk or kid as RFC 8555 wants,
// and the CSR holds every host and verifies with its key.
#include "acme/jws.h"

#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "common/base64.h"

namespace knap::acme {
namespace {

using nlohmann::json;

std::string decode(const std::string& s) {
  std::string out;
  EXPECT_TRUE(base64UrlDecode(s, &out)) << s;
  return out;
}

// The public key of a JWK, rebuilt independently of AccountKey.
EVP_PKEY* publicFromJwk(const json& jwk) {
  const std::string x = decode(jwk["x"]), y = decode(jwk["y"]);
  std::string point = std::string(1, '\x04') + x + y;
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0);
  OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size());
  OSSL_PARAM* params = OSSL_PARAM_BLD_to_param(bld);
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr);
  EVP_PKEY* pkey = nullptr;
  EVP_PKEY_fromdata_init(ctx);
  EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params);
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  return pkey;
}

// Verifies a raw r||s ES256 signature.
bool verifyEs256(EVP_PKEY* pub, const std::string& data, const std::string& raw) {
  if (raw.size() != 64) return false;
  ECDSA_SIG* sig = ECDSA_SIG_new();
  ECDSA_SIG_set0(sig, BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()), 32, nullptr),
                 BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data() + 32), 32, nullptr));
  unsigned char* der = nullptr;
  const int len = i2d_ECDSA_SIG(sig, &der);
  ECDSA_SIG_free(sig);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, pub);
  const int ok = EVP_DigestVerify(ctx, der, static_cast<size_t>(len),
                                  reinterpret_cast<const unsigned char*>(data.data()), data.size());
  EVP_MD_CTX_free(ctx);
  OPENSSL_free(der);
  return ok == 1;
}

TEST(AccountKey, PemRoundTripAndRefusals) {
  auto k = AccountKey::generate();
  ASSERT_TRUE(k.isOk());
  auto again = AccountKey::fromPem(k->pem());
  ASSERT_TRUE(again.isOk()) << again.status().message();
  EXPECT_EQ(again->jwk(), k->jwk());
  EXPECT_EQ(again->thumbprint(), k->thumbprint());
  auto garbage = AccountKey::fromPem("not a key");
  ASSERT_FALSE(garbage.isOk());
  EXPECT_NE(garbage.status().message().find("not an unencrypted PEM private key"), std::string::npos);
  EVP_PKEY* rsa = EVP_RSA_gen(2048);
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, rsa, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  auto wrong = AccountKey::fromPem(std::string(data, static_cast<size_t>(n)));
  BIO_free(b);
  EVP_PKEY_free(rsa);
  ASSERT_FALSE(wrong.isOk());
  EXPECT_NE(wrong.status().message().find("not an ECDSA P-256 key"), std::string::npos);
}

TEST(AccountKey, JwkThumbprintAndSignature) {
  auto k = AccountKey::generate();
  ASSERT_TRUE(k.isOk());
  const json jwk = k->jwk();
  EXPECT_EQ(jwk["kty"], "EC");
  EXPECT_EQ(jwk["crv"], "P-256");
  EXPECT_EQ(decode(jwk["x"]).size(), 32u);
  EXPECT_EQ(decode(jwk["y"]).size(), 32u);
  // RFC 7638: SHA-256 over {"crv","kty","x","y"} in that order, no spaces.
  const std::string canonical = std::string("{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"") +
                                jwk["x"].get<std::string>() + "\",\"y\":\"" + jwk["y"].get<std::string>() +
                                "\"}";
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(canonical.data(), canonical.size(), md, &len, EVP_sha256(), nullptr);
  EXPECT_EQ(k->thumbprint(), base64UrlEncode(std::string(reinterpret_cast<char*>(md), len)));
  EXPECT_EQ(keyAuthorization("tok-123", *k), "tok-123." + k->thumbprint());

  auto sig = k->sign("hello");
  ASSERT_TRUE(sig.isOk());
  EVP_PKEY* pub = publicFromJwk(jwk);
  ASSERT_NE(pub, nullptr);
  EXPECT_TRUE(verifyEs256(pub, "hello", *sig));
  EXPECT_FALSE(verifyEs256(pub, "hellO", *sig));
  EVP_PKEY_free(pub);
}

TEST(SignRequest, JwkForNewAccountKidAfterwardsAndPostAsGet) {
  auto k = AccountKey::generate();
  ASSERT_TRUE(k.isOk());
  const json payload = {{"termsOfServiceAgreed", true}};
  auto jws = signRequest(*k, "https://acme.test/new-acct", "nonce-1", "", payload);
  ASSERT_TRUE(jws.isOk()) << jws.status().message();
  const json header = json::parse(decode((*jws)["protected"]));
  EXPECT_EQ(header["alg"], "ES256");
  EXPECT_EQ(header["nonce"], "nonce-1");
  EXPECT_EQ(header["url"], "https://acme.test/new-acct");
  EXPECT_EQ(header["jwk"], k->jwk());
  EXPECT_FALSE(header.contains("kid"));
  EXPECT_EQ(json::parse(decode((*jws)["payload"])), payload);
  EVP_PKEY* pub = publicFromJwk(k->jwk());
  const std::string signing_input =
      (*jws)["protected"].get<std::string>() + "." + (*jws)["payload"].get<std::string>();
  EXPECT_TRUE(verifyEs256(pub, signing_input, decode((*jws)["signature"])));

  auto get =
      signRequest(*k, "https://acme.test/order/1", "nonce-2", "https://acme.test/acct/7", std::nullopt);
  ASSERT_TRUE(get.isOk());
  const json h2 = json::parse(decode((*get)["protected"]));
  EXPECT_EQ(h2["kid"], "https://acme.test/acct/7");
  EXPECT_FALSE(h2.contains("jwk"));
  EXPECT_EQ((*get)["payload"], "");  // POST-as-GET
  EXPECT_TRUE(verifyEs256(pub, (*get)["protected"].get<std::string>() + ".", decode((*get)["signature"])));
  EVP_PKEY_free(pub);

  EXPECT_FALSE(signRequest(*k, "https://acme.test/x", "", "", std::nullopt).isOk());
  EXPECT_FALSE(signRequest(*k, "", "n", "", std::nullopt).isOk());
}

TEST(Csr, HoldsEveryHostAndVerifies) {
  auto k = AccountKey::generate();
  ASSERT_TRUE(k.isOk());
  auto csr = makeCsr(*k, {"web.default.example.com", "web.example.org"});
  ASSERT_TRUE(csr.isOk()) << csr.status().message();
  const std::string der = decode(*csr);
  const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
  X509_REQ* req = d2i_X509_REQ(nullptr, &p, static_cast<long>(der.size()));
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(X509_REQ_verify(req, k->native()), 1);
  STACK_OF(X509_EXTENSION)* exts = X509_REQ_get_extensions(req);
  std::vector<std::string> names;
  for (int i = 0; i < sk_X509_EXTENSION_num(exts); ++i) {
    X509_EXTENSION* e = sk_X509_EXTENSION_value(exts, i);
    if (OBJ_obj2nid(X509_EXTENSION_get_object(e)) != NID_subject_alt_name) continue;
    auto* gens = static_cast<GENERAL_NAMES*>(X509V3_EXT_d2i(e));
    for (int j = 0; j < sk_GENERAL_NAME_num(gens); ++j) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(gens, j);
      if (g->type == GEN_DNS) {
        names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(g->d.dNSName)),
                           static_cast<size_t>(ASN1_STRING_length(g->d.dNSName)));
      }
    }
    GENERAL_NAMES_free(gens);
  }
  sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
  X509_REQ_free(req);
  EXPECT_EQ(names, (std::vector<std::string>{"web.default.example.com", "web.example.org"}));

  EXPECT_FALSE(makeCsr(*k, {}).isOk());
  auto bad = makeCsr(*k, {"a.example.com,DNS:evil.example.com"});
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("is not a DNS name"), std::string::npos);
}

}  // namespace
}  // namespace knap::acme
