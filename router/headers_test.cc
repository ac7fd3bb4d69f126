#include "router/headers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace knap::router {
namespace {

std::string get(const Fields& f, const char* name) {
  auto it = f.find(name);
  return it == f.end() ? "<absent>" : std::string(it->value());
}

TEST(SynthesizeForwardedTest, KnativeFormat) {
  EXPECT_EQ(synthesizeForwarded("1.2.3.4", "", ""), "for=1.2.3.4");
  EXPECT_EQ(synthesizeForwarded("1.2.3.4", "a.example.com", "http"),
            "for=1.2.3.4;host=a.example.com;proto=http");
  EXPECT_EQ(synthesizeForwarded("1.2.3.4, 5.6.7.8", "h", "https"),
            "for=1.2.3.4;host=h;proto=https, for=5.6.7.8");
  EXPECT_EQ(synthesizeForwarded("2001:db8::1,10.0.0.1", "", "http"),
            "for=\"[2001:db8::1]\";proto=http, for=10.0.0.1");
  EXPECT_EQ(synthesizeForwarded("", "h", "http"), "");
}

TEST(RewriteRequestHeadersTest, AppendsXffAndSynthesizesForwarded) {
  Fields req;
  req.insert(http::field::host, "hello.default.example.com");
  req.insert("X-Forwarded-For", "9.9.9.9");
  req.insert("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  req.insert(http::field::content_length, "12");
  rewriteRequestHeaders(req, "10.0.0.7", "http", false);
  EXPECT_EQ(get(req, "Content-Length"), "<absent>");  // the proxy writes its own framing
  EXPECT_EQ(get(req, "X-Forwarded-For"), "9.9.9.9, 10.0.0.7");
  EXPECT_EQ(get(req, "X-Forwarded-Proto"), "http");
  EXPECT_EQ(get(req, "X-Forwarded-Host"), "hello.default.example.com");
  EXPECT_EQ(get(req, "Forwarded"), "for=9.9.9.9;host=hello.default.example.com;proto=http, for=10.0.0.7");
  EXPECT_EQ(get(req, "Host"), "hello.default.example.com");
  EXPECT_EQ(get(req, "traceparent"), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
}

TEST(RewriteRequestHeadersTest, ExistingForwardedLeftUntouched) {
  Fields req;
  req.set(http::field::host, "h");
  req.set(http::field::forwarded, "for=1.1.1.1;proto=https");
  req.insert("X-Forwarded-Host", "original.example.com");
  rewriteRequestHeaders(req, "10.0.0.7", "http", false);
  EXPECT_EQ(get(req, "Forwarded"), "for=1.1.1.1;proto=https");
  EXPECT_EQ(get(req, "X-Forwarded-Host"), "original.example.com");
  EXPECT_EQ(get(req, "X-Forwarded-For"), "10.0.0.7");
}

TEST(RewriteRequestHeadersTest, MultipleXffHeadersJoined) {
  Fields req;
  req.set(http::field::host, "h");
  req.insert("X-Forwarded-For", "1.1.1.1");
  req.insert("X-Forwarded-For", "2.2.2.2, 3.3.3.3");
  rewriteRequestHeaders(req, "::1", "http", false);
  EXPECT_EQ(get(req, "X-Forwarded-For"), "1.1.1.1, 2.2.2.2, 3.3.3.3, ::1");
  EXPECT_EQ(std::count_if(req.begin(), req.end(),
                          [](const Fields::Field& f) { return f.name_string() == "X-Forwarded-For"; }),
            1);
  EXPECT_EQ(get(req, "Forwarded"), "for=1.1.1.1;host=h;proto=http, for=2.2.2.2, for=3.3.3.3, for=\"[::1]\"");
}

TEST(RewriteRequestHeadersTest, HopByHopAndInternalHeadersRemoved) {
  Fields req;
  req.set(http::field::host, "h");
  req.set(http::field::connection, "keep-alive, X-Secret-Hop");
  req.insert("X-Secret-Hop", "1");
  req.insert("Keep-Alive", "timeout=5");
  req.insert("Proxy-Connection", "keep-alive");
  req.set(http::field::proxy_authorization, "Basic xyz");
  req.set(http::field::te, "trailers");
  req.set(http::field::trailer, "X-Checksum");
  req.set(http::field::transfer_encoding, "chunked");
  req.set(http::field::upgrade, "h2c");
  req.insert("Knative-Serving-Revision", "hello-00001");
  req.insert("Knative-Serving-Namespace", "default");
  req.insert("K-Network-Hash", "deadbeef");
  req.set(http::field::expect, "100-continue");
  req.insert("X-Keep-Me", "yes");
  rewriteRequestHeaders(req, "10.0.0.1", "http", false);
  for (const char* gone :
       {"Connection", "X-Secret-Hop", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "TE",
        "Trailer", "Transfer-Encoding", "Upgrade", "Knative-Serving-Revision", "Knative-Serving-Namespace",
        "K-Network-Hash", "Expect"}) {
    EXPECT_EQ(get(req, gone), "<absent>") << gone;
  }
  EXPECT_EQ(get(req, "X-Keep-Me"), "yes");
  EXPECT_EQ(get(req, "Host"), "h");
}

TEST(RewriteRequestHeadersTest, UpgradeKeptForUpgrades) {
  Fields req;
  req.set(http::field::host, "h");
  req.set(http::field::connection, "Upgrade");
  req.set(http::field::upgrade, "websocket");
  req.insert("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==");
  ASSERT_TRUE(isUpgradeRequest(req));
  rewriteRequestHeaders(req, "10.0.0.1", "http", true);
  EXPECT_EQ(get(req, "Upgrade"), "websocket");
  EXPECT_EQ(get(req, "Connection"), "Upgrade");
  EXPECT_EQ(get(req, "Sec-WebSocket-Key"), "dGhlIHNhbXBsZSBub25jZQ==");
}

TEST(IsUpgradeRequestTest, NeedsBothHeaders) {
  Fields f;
  f.set(http::field::upgrade, "websocket");
  EXPECT_FALSE(isUpgradeRequest(f));
  f.set(http::field::connection, "keep-alive, Upgrade");
  EXPECT_TRUE(isUpgradeRequest(f));
  f.erase("Upgrade");
  EXPECT_FALSE(isUpgradeRequest(f));
}

TEST(RewriteResponseHeadersTest, HopByHopRemoved) {
  Fields resp;
  resp.insert(http::field::connection, "close");
  resp.insert(http::field::transfer_encoding, "chunked");
  resp.insert("Keep-Alive", "timeout=5");
  resp.insert(http::field::content_type, "text/plain");
  resp.insert(http::field::content_length, "5");
  rewriteResponseHeaders(resp, false);
  EXPECT_EQ(get(resp, "Content-Length"), "<absent>");  // the client side writes its own framing
  EXPECT_EQ(get(resp, "Connection"), "<absent>");
  EXPECT_EQ(get(resp, "Transfer-Encoding"), "<absent>");
  EXPECT_EQ(get(resp, "Keep-Alive"), "<absent>");
  EXPECT_EQ(get(resp, "Content-Type"), "text/plain");
}

// A hostile head of thousands of tiny hop-by-hop fields ("TE:\r\n" is 5
// bytes: ~6500 of them in the default 32 KiB head limit). Erasing them one
// by one from the flat vector moves every later field each time:
// quadratic (16384 fields: half a second; one pass, Fields::erase_if: a few
// ms; bench/router/bench_instructions.sh measures, this checks the result).
TEST(RewriteRequestHeadersTest, ThousandsOfHopByHopFieldsRemoved) {
  Fields req;
  req.insert(http::field::host, "Host", "h");
  constexpr int kFields = 16384;
  for (int i = 0; i < kFields; ++i) {
    req.insert(http::field::te, "TE", "");
    req.insert(http::field::expect, "Expect", "");
    req.insert(http::field::unknown, "X-Forwarded-For", "");
  }
  rewriteRequestHeaders(req, "10.0.0.1", "http", false);
  EXPECT_EQ(get(req, "TE"), "<absent>");
  EXPECT_EQ(get(req, "Expect"), "<absent>");
  EXPECT_EQ(get(req, "Host"), "h");
  EXPECT_EQ(get(req, "X-Forwarded-For"), "10.0.0.1");
}

// A long Connection list against many fields: erasing by name once per
// listed token is tokens x fields compares (beast's set made each one a
// tree lookup). ~8000 tokens and ~4000 fields fit a 32 KiB head.
TEST(RewriteRequestHeadersTest, LongConnectionListNamesRemoved) {
  Fields req;
  req.insert(http::field::host, "Host", "h");
  constexpr int kTokens = 16384, kFields = 16384;
  std::string list;
  for (int i = 0; i < kTokens; ++i) {
    if (i > 0) list += ',';
    list += "x-hop-" + std::to_string(100000 + i);
  }
  req.insert(http::field::connection, "Connection", list);
  for (int i = 0; i < kFields; ++i) req.insert("x-end-" + std::to_string(100000 + i), "v");
  req.insert("X-HOP-100007", "gone");
  rewriteRequestHeaders(req, "10.0.0.1", "http", false);
  EXPECT_EQ(get(req, "x-hop-100007"), "<absent>");
  EXPECT_EQ(get(req, "x-end-100007"), "v");
  EXPECT_EQ(get(req, "Connection"), "<absent>");
}

// Every field the Connection header names goes, whatever its case and
// however often it occurs; close / keep-alive / host never name a field to
// remove, and an upgrade keeps Upgrade; the order of the rest is kept.
TEST(RemoveHopByHopTest, NamedFieldsEveryInstanceAnyCase) {
  Fields f;
  f.insert(http::field::host, "Host", "h");
  f.insert(http::field::connection, "Connection", "X-One, upgrade, close");
  f.insert("x-one", "1");
  f.insert("A", "a");
  f.insert(http::field::connection, "Connection", "HOST,content-length, x-TWO");
  f.insert("X-ONE", "2");
  f.insert(http::field::content_length, "Content-Length", "3");
  f.insert("X-Two", "t");
  f.insert(http::field::upgrade, "Upgrade", "websocket");
  f.insert("B", "b");
  Fields g = f;
  removeHopByHop(f, /*keep_upgrade=*/true, /*drop_length=*/false);
  std::string order;
  for (const Fields::Field& x : f) order += std::string(x.name_string()) + "=" + std::string(x.value()) + ";";
  EXPECT_EQ(order, "Host=h;A=a;Upgrade=websocket;B=b;Connection=Upgrade;");
  removeHopByHop(g, /*keep_upgrade=*/false, /*drop_length=*/false);
  order.clear();
  for (const Fields::Field& x : g) order += std::string(x.name_string()) + "=" + std::string(x.value()) + ";";
  EXPECT_EQ(order, "Host=h;A=a;B=b;");
}

}  // namespace
}  // namespace knap::router
