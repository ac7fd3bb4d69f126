#include "router/headers.h"

#include <gtest/gtest.h>

#include <boost/beast/http/empty_body.hpp>

namespace knap::router {
namespace {

std::string get(const http::fields& f, const char* name) {
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
  http::request<http::empty_body> req{http::verb::get, "/", 11};
  req.set(http::field::host, "hello.default.example.com");
  req.set("X-Forwarded-For", "9.9.9.9");
  req.set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  req.set(http::field::content_length, "12");
  rewriteRequestHeaders(req.base(), "10.0.0.7", "http", false);
  EXPECT_EQ(get(req.base(), "Content-Length"), "<absent>");  // the proxy writes its own framing
  EXPECT_EQ(get(req.base(), "X-Forwarded-For"), "9.9.9.9, 10.0.0.7");
  EXPECT_EQ(get(req.base(), "X-Forwarded-Proto"), "http");
  EXPECT_EQ(get(req.base(), "X-Forwarded-Host"), "hello.default.example.com");
  EXPECT_EQ(get(req.base(), "Forwarded"),
            "for=9.9.9.9;host=hello.default.example.com;proto=http, for=10.0.0.7");
  EXPECT_EQ(get(req.base(), "Host"), "hello.default.example.com");
  EXPECT_EQ(get(req.base(), "traceparent"), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
}

TEST(RewriteRequestHeadersTest, ExistingForwardedLeftUntouched) {
  http::request<http::empty_body> req{http::verb::get, "/", 11};
  req.set(http::field::host, "h");
  req.set(http::field::forwarded, "for=1.1.1.1;proto=https");
  req.set("X-Forwarded-Host", "original.example.com");
  rewriteRequestHeaders(req.base(), "10.0.0.7", "http", false);
  EXPECT_EQ(get(req.base(), "Forwarded"), "for=1.1.1.1;proto=https");
  EXPECT_EQ(get(req.base(), "X-Forwarded-Host"), "original.example.com");
  EXPECT_EQ(get(req.base(), "X-Forwarded-For"), "10.0.0.7");
}

TEST(RewriteRequestHeadersTest, MultipleXffHeadersJoined) {
  http::request<http::empty_body> req{http::verb::get, "/", 11};
  req.set(http::field::host, "h");
  req.insert("X-Forwarded-For", "1.1.1.1");
  req.insert("X-Forwarded-For", "2.2.2.2, 3.3.3.3");
  rewriteRequestHeaders(req.base(), "::1", "http", false);
  EXPECT_EQ(get(req.base(), "X-Forwarded-For"), "1.1.1.1, 2.2.2.2, 3.3.3.3, ::1");
  EXPECT_EQ(std::distance(req.base().equal_range("X-Forwarded-For").first,
                          req.base().equal_range("X-Forwarded-For").second),
            1);
  EXPECT_EQ(get(req.base(), "Forwarded"),
            "for=1.1.1.1;host=h;proto=http, for=2.2.2.2, for=3.3.3.3, for=\"[::1]\"");
}

TEST(RewriteRequestHeadersTest, HopByHopAndInternalHeadersRemoved) {
  http::request<http::empty_body> req{http::verb::post, "/", 11};
  req.set(http::field::host, "h");
  req.set(http::field::connection, "keep-alive, X-Secret-Hop");
  req.set("X-Secret-Hop", "1");
  req.set("Keep-Alive", "timeout=5");
  req.set("Proxy-Connection", "keep-alive");
  req.set(http::field::proxy_authorization, "Basic xyz");
  req.set(http::field::te, "trailers");
  req.set(http::field::trailer, "X-Checksum");
  req.set(http::field::transfer_encoding, "chunked");
  req.set(http::field::upgrade, "h2c");
  req.set("Knative-Serving-Revision", "hello-00001");
  req.set("Knative-Serving-Namespace", "default");
  req.set("K-Network-Hash", "deadbeef");
  req.set(http::field::expect, "100-continue");
  req.set("X-Keep-Me", "yes");
  rewriteRequestHeaders(req.base(), "10.0.0.1", "http", false);
  for (const char* gone :
       {"Connection", "X-Secret-Hop", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "TE",
        "Trailer", "Transfer-Encoding", "Upgrade", "Knative-Serving-Revision", "Knative-Serving-Namespace",
        "K-Network-Hash", "Expect"}) {
    EXPECT_EQ(get(req.base(), gone), "<absent>") << gone;
  }
  EXPECT_EQ(get(req.base(), "X-Keep-Me"), "yes");
  EXPECT_EQ(get(req.base(), "Host"), "h");
}

TEST(RewriteRequestHeadersTest, UpgradeKeptForUpgrades) {
  http::request<http::empty_body> req{http::verb::get, "/ws", 11};
  req.set(http::field::host, "h");
  req.set(http::field::connection, "Upgrade");
  req.set(http::field::upgrade, "websocket");
  req.set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==");
  ASSERT_TRUE(isUpgradeRequest(req.base()));
  rewriteRequestHeaders(req.base(), "10.0.0.1", "http", true);
  EXPECT_EQ(get(req.base(), "Upgrade"), "websocket");
  EXPECT_EQ(get(req.base(), "Connection"), "Upgrade");
  EXPECT_EQ(get(req.base(), "Sec-WebSocket-Key"), "dGhlIHNhbXBsZSBub25jZQ==");
}

TEST(IsUpgradeRequestTest, NeedsBothHeaders) {
  http::fields f;
  f.set(http::field::upgrade, "websocket");
  EXPECT_FALSE(isUpgradeRequest(f));
  f.set(http::field::connection, "keep-alive, Upgrade");
  EXPECT_TRUE(isUpgradeRequest(f));
  f.erase(http::field::upgrade);
  EXPECT_FALSE(isUpgradeRequest(f));
}

TEST(RewriteResponseHeadersTest, HopByHopRemoved) {
  http::response<http::empty_body> resp{http::status::ok, 11};
  resp.set(http::field::connection, "close");
  resp.set(http::field::transfer_encoding, "chunked");
  resp.set("Keep-Alive", "timeout=5");
  resp.set(http::field::content_type, "text/plain");
  resp.set(http::field::content_length, "5");
  rewriteResponseHeaders(resp.base(), false);
  EXPECT_EQ(get(resp.base(), "Content-Length"), "<absent>");  // the client side writes its own framing
  EXPECT_EQ(get(resp.base(), "Connection"), "<absent>");
  EXPECT_EQ(get(resp.base(), "Transfer-Encoding"), "<absent>");
  EXPECT_EQ(get(resp.base(), "Keep-Alive"), "<absent>");
  EXPECT_EQ(get(resp.base(), "Content-Type"), "text/plain");
}

}  // namespace
}  // namespace knap::router
