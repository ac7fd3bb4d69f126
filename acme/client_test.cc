// AcmeClient against a fake ACME server (a Transport answering like RFC
// 8555 describes): the whole order flow, badNonce retry, an invalid
// authorization's problem in the error, and hostile answers.
#include "acme/client.h"

#include <gtest/gtest.h>

#include <set>

#include "common/base64.h"

namespace knap::acme {
namespace {

using nlohmann::json;

class FakeAcme : public Transport {
 public:
  // Knobs.
  int bad_nonces = 0;           // the next N POSTs answer badNonce
  bool authz_invalid = false;   // validation fails
  int authz_pending_polls = 1;  // authorization polls answering "processing" first
  std::string directory_body;   // overrides the directory
  std::string token = "tok_1-A";

  // Observations.
  std::vector<std::string> posted_urls;
  std::string csr;
  int nonces_issued = 0;

  StatusOr<HttpResponse> request(const std::string& method, const std::string& url,
                                 const std::string& body) override {
    HttpResponse r;
    if (method == "GET" && url == "https://ca/dir") {
      r.status = 200;
      r.body = directory_body.empty() ? json{{"newNonce", "https://ca/nonce"},
                                             {"newAccount", "https://ca/acct"},
                                             {"newOrder", "https://ca/order"}}
                                            .dump()
                                      : directory_body;
      return r;
    }
    if (method == "HEAD" && url == "https://ca/nonce") {
      r.status = 200;
      r.headers["replay-nonce"] = fresh();
      return r;
    }
    if (method != "POST") return unavailable("fake: unexpected " + method + " " + url);
    json jws = json::parse(body);
    std::string prot, payload;
    EXPECT_TRUE(base64UrlDecode(jws["protected"].get<std::string>(), &prot));
    EXPECT_TRUE(base64UrlDecode(jws["payload"].get<std::string>(), &payload));
    json p = json::parse(prot);
    EXPECT_EQ(p["url"], url);
    posted_urls.push_back(url);
    r.headers["replay-nonce"] = fresh();
    if (!live_.erase(p["nonce"].get<std::string>()) || bad_nonces > 0) {
      if (bad_nonces > 0) --bad_nonces;
      r.status = 400;
      r.body = json{{"type", "urn:ietf:params:acme:error:badNonce"}, {"detail", "stale nonce"}}.dump();
      return r;
    }
    if (url == "https://ca/acct") {
      EXPECT_TRUE(p.contains("jwk"));
      r.status = 201;
      r.headers["location"] = "https://ca/acct/1";
      r.body = json{{"status", "valid"}}.dump();
      return r;
    }
    EXPECT_EQ(p.value("kid", ""), "https://ca/acct/1");
    if (url == "https://ca/order") {
      r.status = 201;
      r.headers["location"] = "https://ca/order/1";
      r.body = orderBody().dump();
      return r;
    }
    if (url == "https://ca/authz/1") {
      r.status = 200;
      std::string status = "pending";
      json chall = {{"type", "http-01"}, {"url", "https://ca/chall/1"}, {"token", token}};
      if (responded_) {
        if (authz_pending_polls > 0) {
          --authz_pending_polls;
          status = "processing";
        } else if (authz_invalid) {
          status = "invalid";
          chall["error"] = {{"type", "urn:ietf:params:acme:error:connection"},
                            {"detail", "connection refused"}};
        } else {
          status = "valid";
        }
      }
      r.body =
          json{{"status", status}, {"challenges", json::array({json{{"type", "dns-01"}}, chall})}}.dump();
      return r;
    }
    if (url == "https://ca/chall/1") {
      EXPECT_EQ(payload, "{}");
      responded_ = true;
      r.status = 200;
      r.body = "{}";
      return r;
    }
    if (url == "https://ca/finalize/1") {
      csr = json::parse(payload).value("csr", "");
      finalized_ = true;
      r.status = 200;
      r.body = orderBody().dump();
      return r;
    }
    if (url == "https://ca/order/1") {
      r.status = 200;
      r.body = orderBody().dump();
      return r;
    }
    if (url == "https://ca/cert/1") {
      EXPECT_EQ(payload, "");  // POST-as-GET
      r.status = 200;
      r.body = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
      return r;
    }
    r.status = 404;
    r.body = json{{"type", "urn:ietf:params:acme:error:malformed"}, {"detail", "no such URL"}}.dump();
    return r;
  }

 private:
  std::string fresh() {
    std::string n = "n" + std::to_string(++nonces_issued);
    live_.insert(n);
    return n;
  }
  json orderBody() const {
    return {{"status", finalized_ ? "valid" : (responded_ ? "ready" : "pending")},
            {"authorizations", json::array({"https://ca/authz/1"})},
            {"finalize", "https://ca/finalize/1"},
            {"certificate", "https://ca/cert/1"}};
  }
  std::set<std::string> live_;
  bool responded_ = false;
  bool finalized_ = false;
};

ClientOptions options() {
  ClientOptions o;
  o.directory_url = "https://ca/dir";
  o.email = "ops@example.com";
  o.poll_deadline = std::chrono::milliseconds(20000);
  o.sleep = [](std::chrono::milliseconds) { return true; };
  return o;
}

struct Published {
  std::vector<std::pair<std::string, std::string>> calls;
  ChallengePublisher fn() {
    return [this](const std::string& t, const std::string& ka) { calls.emplace_back(t, ka); };
  }
};

TEST(AcmeClientTest, IssuesThroughTheWholeFlow) {
  auto key = AccountKey::generate();
  ASSERT_TRUE(key.isOk());
  FakeAcme ca;
  AcmeClient client(ca, *key, options());
  Published pub;
  auto issued = client.issue("hello.example.com", pub.fn());
  ASSERT_TRUE(issued.isOk()) << issued.status().message();
  EXPECT_NE(issued->chain_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_NE(issued->key_pem.find("BEGIN PRIVATE KEY"), std::string::npos);
  EXPECT_FALSE(ca.csr.empty());
  EXPECT_EQ(client.accountUrl(), "https://ca/acct/1");
  // The token was published with its key authorization, then withdrawn.
  ASSERT_EQ(pub.calls.size(), 2u);
  EXPECT_EQ(pub.calls[0].first, "tok_1-A");
  EXPECT_EQ(pub.calls[0].second, keyAuthorization("tok_1-A", *key));
  EXPECT_EQ(pub.calls[1].second, "");
  // A second order reuses the account (no second newAccount).
  auto again = client.issue("hello.example.com", pub.fn());
  EXPECT_EQ(std::count(ca.posted_urls.begin(), ca.posted_urls.end(), "https://ca/acct"), 1);
}

TEST(AcmeClientTest, RetriesBadNonce) {
  auto key = AccountKey::generate();
  FakeAcme ca;
  ca.bad_nonces = 2;
  AcmeClient client(ca, *key, options());
  Published pub;
  auto issued = client.issue("a.example.com", pub.fn());
  ASSERT_TRUE(issued.isOk()) << issued.status().message();

  FakeAcme ca2;
  ca2.bad_nonces = 10;
  AcmeClient client2(ca2, *key, options());
  auto failed = client2.issue("a.example.com", pub.fn());
  ASSERT_FALSE(failed.isOk());
  EXPECT_NE(failed.status().message().find("badNonce"), std::string::npos) << failed.status().message();
}

TEST(AcmeClientTest, InvalidAuthorizationNamesTheProblem) {
  auto key = AccountKey::generate();
  FakeAcme ca;
  ca.authz_invalid = true;
  AcmeClient client(ca, *key, options());
  Published pub;
  auto issued = client.issue("bad.example.com", pub.fn());
  ASSERT_FALSE(issued.isOk());
  const std::string m = issued.status().message();
  EXPECT_NE(m.find("bad.example.com"), std::string::npos) << m;
  EXPECT_NE(m.find("urn:ietf:params:acme:error:connection: connection refused"), std::string::npos) << m;
  ASSERT_EQ(pub.calls.size(), 2u);
  EXPECT_EQ(pub.calls[1].second, "");  // withdrawn after the failure too
}

TEST(AcmeClientTest, PollingGivesUpAtTheDeadline) {
  auto key = AccountKey::generate();
  FakeAcme ca;
  ca.authz_pending_polls = 1000000;
  ClientOptions o = options();
  o.poll_deadline = std::chrono::milliseconds(3000);
  AcmeClient client(ca, *key, o);
  Published pub;
  auto issued = client.issue("slow.example.com", pub.fn());
  ASSERT_FALSE(issued.isOk());
  EXPECT_NE(issued.status().message().find("still \"processing\""), std::string::npos)
      << issued.status().message();
}

TEST(AcmeClientTest, HostileAnswersAreClearErrors) {
  auto key = AccountKey::generate();
  Published pub;
  for (const std::string& dir :
       {std::string("not json"), std::string("[1,2]"), json{{"newNonce", 5}}.dump(),
        json{{"newNonce", "ftp://x"}, {"newAccount", "https://a"}, {"newOrder", "https://b"}}.dump()}) {
    FakeAcme ca;
    ca.directory_body = dir;
    AcmeClient client(ca, *key, options());
    auto issued = client.issue("h.example.com", pub.fn());
    ASSERT_FALSE(issued.isOk()) << dir;
    EXPECT_NE(issued.status().message().find("ACME directory"), std::string::npos)
        << issued.status().message();
  }
  FakeAcme ca;
  ca.token = "../../etc/passwd";
  AcmeClient client(ca, *key, options());
  auto issued = client.issue("h.example.com", pub.fn());
  ASSERT_FALSE(issued.isOk());
  EXPECT_NE(issued.status().message().find("not base64url"), std::string::npos) << issued.status().message();
}

TEST(AcmeClientTest, ProblemText) {
  EXPECT_EQ(problemText(json{{"type", "urn:x"}, {"detail", "d"}}), "urn:x: d");
  EXPECT_EQ(problemText(json{{"type", 5}}), "");
  EXPECT_EQ(problemText(json::array()), "");
}

}  // namespace
}  // namespace knap::acme
