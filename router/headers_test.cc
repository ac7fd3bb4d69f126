#include "router/headers.h"

#include <gtest/gtest.h>

#include <algorithm>


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
  EXPECT_EQ(get(req, "Forwarded"),
            "for=9.9.9.9;host=hello.default.example.com;proto=http, for=10.0.0.7");
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
  EXPECT_EQ(get(req, "Forwarded"),
            "for=1.1.1.1;host=h;proto=http, for=2.2.2.2, for=3.3.3.3, for=\"[::1]\"");
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

}  // namespace
}  // namespace knap::router
