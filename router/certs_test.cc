// CertTable (SNI choice: exact host, then *.parent) and common/tls.h
// (loading a certificate and key, the names it covers), over certificates
// made here with OpenSSL.
#include "router/certs.h"

#include <gtest/gtest.h>

#include <chrono>

#include "router/test_backend.h"

namespace knap::router {
namespace {

using Pem = testing::TestCert;
Pem makeCert(const std::vector<std::string>& sans, const std::string& cn = "test") {
  return testing::selfSignedCert(sans, cn);
}

std::vector<CertEntry> entriesOf(const Pem& p, const std::string& origin) {
  auto c = tls::loadServerCertificate(p.cert, p.key, origin);
  EXPECT_TRUE(c.isOk()) << c.status().message();
  std::vector<CertEntry> out;
  if (!c.isOk()) return out;
  for (const std::string& n : c->names) out.push_back({n, c->ctx, origin});
  return out;
}

TEST(TlsTest, LoadsNamesAndExpiry) {
  Pem p =
      makeCert({"Web.Example.com", "*.apps.example.com", "bad..name", "*.*.x.com"});  // the last two ignored
  auto c = tls::loadServerCertificate(p.cert, p.key, "test");
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->names, (std::vector<std::string>{"*.apps.example.com", "web.example.com"}));
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  EXPECT_GT(c->not_after, now + 3000);
  EXPECT_LT(c->not_after, now + 4000);
}

TEST(TlsTest, CommonNameOnlyWithoutSans) {
  Pem p = makeCert({}, "legacy.example.com");
  auto c = tls::loadServerCertificate(p.cert, p.key, "test");
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->names, (std::vector<std::string>{"legacy.example.com"}));
  Pem q = makeCert({}, "not a host name");
  auto d = tls::loadServerCertificate(q.cert, q.key, "cert q");
  ASSERT_FALSE(d.isOk());
  EXPECT_NE(d.status().message().find("cert q: the certificate names no DNS host"), std::string::npos);
}

TEST(TlsTest, BadInputNamesTheProblem) {
  Pem a = makeCert({"a.example.com"});
  Pem b = makeCert({"b.example.com"});
  auto mismatch = tls::loadServerCertificate(a.cert, b.key, "Secret ns/a");
  ASSERT_FALSE(mismatch.isOk());
  EXPECT_NE(mismatch.status().message().find("Secret ns/a: the private key does not match"),
            std::string::npos);
  auto garbage = tls::loadServerCertificate("not pem", a.key, "file x.crt");
  ASSERT_FALSE(garbage.isOk());
  EXPECT_NE(garbage.status().message().find("file x.crt: no PEM certificate"), std::string::npos);
  auto badkey = tls::loadServerCertificate(a.cert, "-----BEGIN PRIVATE KEY-----\nAAAA\n", "k");
  ASSERT_FALSE(badkey.isOk());
  EXPECT_NE(badkey.status().message().find("not an unencrypted PEM key"), std::string::npos);
  EXPECT_FALSE(tls::loadServerCertificate("", a.key, "e").isOk());
  EXPECT_FALSE(tls::loadServerCertificate(a.cert, "", "e").isOk());
}

TEST(TlsTest, NameCovers) {
  EXPECT_TRUE(tls::nameCovers("a.example.com", "a.example.com"));
  EXPECT_FALSE(tls::nameCovers("a.example.com", "b.example.com"));
  EXPECT_TRUE(tls::nameCovers("*.example.com", "a.example.com"));
  EXPECT_FALSE(tls::nameCovers("*.example.com", "a.b.example.com"));
  EXPECT_FALSE(tls::nameCovers("*.example.com", "example.com"));
  EXPECT_FALSE(tls::nameCovers("*.example.com", ".example.com"));
}

TEST(CertTableTest, ExactThenWildcard) {
  Pem exact = makeCert({"web.apps.example.com"});
  Pem wild = makeCert({"*.apps.example.com"});
  std::vector<CertEntry> entries = entriesOf(exact, "exact");
  for (CertEntry& e : entriesOf(wild, "wild")) entries.push_back(e);
  auto t = CertTable::build(entries);
  EXPECT_EQ(t->size(), 2u);
  ASSERT_NE(t->lookup("web.apps.example.com"), nullptr);
  EXPECT_EQ(t->lookup("web.apps.example.com")->origin, "exact");
  EXPECT_EQ(t->lookup("WEB.apps.example.com.")->origin, "exact");  // case, trailing dot
  ASSERT_NE(t->lookup("shop.apps.example.com"), nullptr);
  EXPECT_EQ(t->lookup("shop.apps.example.com")->origin, "wild");
  EXPECT_EQ(t->lookup("a.b.apps.example.com"), nullptr);  // one label only
  EXPECT_EQ(t->lookup("apps.example.com"), nullptr);
  EXPECT_EQ(t->lookup("example.com"), nullptr);
  EXPECT_EQ(t->lookup(""), nullptr);
  EXPECT_EQ(t->lookup("."), nullptr);
  EXPECT_TRUE(t->covers("shop.apps.example.com:8443"));
  EXPECT_FALSE(t->covers("other.example.com:8443"));
  EXPECT_FALSE(t->covers("[::1]:8443"));
  EXPECT_EQ(CertTable::empty()->lookup("web.apps.example.com"), nullptr);
}

TEST(CertTableTest, FirstEntryWinsAndShadowedAreReported) {
  Pem a = makeCert({"web.example.com"});
  Pem b = makeCert({"web.example.com", "*.example.com"});
  std::vector<CertEntry> entries = entriesOf(a, "file a.crt");
  for (CertEntry& e : entriesOf(b, "Secret ns/b")) entries.push_back(e);
  std::vector<std::string> shadowed;
  auto t = CertTable::build(entries, &shadowed);
  EXPECT_EQ(t->lookup("web.example.com")->origin, "file a.crt");
  EXPECT_EQ(t->lookup("x.example.com")->origin, "Secret ns/b");
  ASSERT_EQ(shadowed.size(), 1u);
  EXPECT_EQ(shadowed[0], "web.example.com: Secret ns/b is shadowed by file a.crt");
}

TEST(CertTableTest, ThousandsOfNamesShareOneContextAndLookUpDirectly) {
  // One context under 5,000 names: lookup finds every one, and a miss
  // costs two probes, whatever the table size.
  Pem p = makeCert({"seed.example.com"});
  auto c = tls::loadServerCertificate(p.cert, p.key, "seed");
  ASSERT_TRUE(c.isOk());
  std::vector<CertEntry> entries;
  for (int i = 0; i < 5000; ++i) {
    entries.push_back({"h" + std::to_string(i) + ".example.com", c->ctx, "n" + std::to_string(i)});
  }
  entries.push_back({"*.wild.example.com", c->ctx, "wild"});
  auto t = CertTable::build(entries);
  EXPECT_EQ(t->size(), 5001u);
  for (int i = 0; i < 5000; i += 97) {
    const CertEntry* e = t->lookup("h" + std::to_string(i) + ".example.com");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->origin, "n" + std::to_string(i));
  }
  EXPECT_EQ(t->lookup("q.wild.example.com")->origin, "wild");
  EXPECT_EQ(t->lookup("h5000.example.com"), nullptr);
}

}  // namespace
}  // namespace knap::router
