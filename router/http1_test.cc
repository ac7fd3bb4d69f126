// http1: strict request heads, lenient response heads, chunked decoding.
#include "router/http1.h"

#include <gtest/gtest.h>

#include <string>

#include "router/headers.h"

namespace knap::router::http1 {
namespace {

RequestHead req(const std::string& s, Parse expect = Parse::kDone) {
  RequestHead h;
  EXPECT_EQ(parseRequestHead(s, &h), expect) << s << " -> " << h.error;
  return h;
}

void bad(const std::string& s, int status = 400) {
  RequestHead h;
  EXPECT_EQ(parseRequestHead(s, &h), Parse::kError) << s;
  EXPECT_EQ(h.error_status, status) << s << " -> " << h.error;
}

TEST(Http1Request, SimpleGet) {
  RequestHead h = req("GET /a?b=c HTTP/1.1\r\nHost: x.example\r\nX-A:  v \r\n\r\nNEXT");
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.target, "/a?b=c");
  EXPECT_EQ(h.version, 11u);
  EXPECT_EQ(h.host, "x.example");
  EXPECT_EQ(std::string(h.fields["X-A"]), "v");
  EXPECT_EQ(h.framing, Framing::kNone);
  EXPECT_TRUE(h.keep_alive);
  EXPECT_EQ(h.head_bytes, std::string("GET /a?b=c HTTP/1.1\r\nHost: x.example\r\nX-A:  v \r\n\r\n").size());
}

TEST(Http1Request, IncompleteUntilEmptyLine) {
  req("GET / HTTP/1.1\r\nHost: x\r\n", Parse::kIncomplete);
  req("GET / HTTP/1.1\r\nHost: x\r\n\r", Parse::kIncomplete);
  req("GET / HTT", Parse::kIncomplete);
  req("", Parse::kIncomplete);
}

TEST(Http1Request, LeadingEmptyLinesSkipped) {
  RequestHead h = req("\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(h.method, "GET");
}

TEST(Http1Request, LengthAndChunked) {
  RequestHead h = req("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0012\r\n\r\n");
  EXPECT_EQ(h.framing, Framing::kLength);
  EXPECT_EQ(h.content_length, 12u);
  h = req("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(h.framing, Framing::kNone);
  h = req("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n");
  EXPECT_EQ(h.framing, Framing::kChunked);
}

TEST(Http1Request, SmugglingShapesAreRejected) {
  // CL + TE, in either order.
  bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n");
  // TE + TE, chunked twice, chunked not last.
  bad("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked;a=b\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501);
  bad("POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  // Content-Length: duplicate (even equal), list, sign, hex, spaces inside, huge.
  bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5 5\r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n");
  bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n");
  // Host: two, none in 1.1, junk.
  bad("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
  bad("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n");
  bad("GET / HTTP/1.1\r\nX: y\r\n\r\n");
  bad("GET / HTTP/1.1\r\nHost: a b\r\n\r\n");
  bad("GET / HTTP/1.1\r\nHost: a,b\r\n\r\n");
  bad("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n");
  bad("GET / HTTP/1.1\r\nHost: \r\n\r\n");
  // obs-fold, whitespace before colon, bare LF / CR, NUL and CTLs.
  bad("GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n");
  bad("GET / HTTP/1.1\r\n Host: x\r\n\r\n");
  bad("GET / HTTP/1.1\r\nHost : x\r\n\r\n");
  bad("GET / HTTP/1.1\r\nContent-Length : 5\r\nHost: x\r\n\r\n");
  bad("GET / HTTP/1.1\nHost: x\n\n");
  bad("GET / HTTP/1.1\r\nHost: x\n\r\n");
  bad("GET / HTTP/1.1\r\nHost: x\rX: y\r\n\r\n");
  bad(std::string("GET / HTTP/1.1\r\nHost: x\r\nX: a\0b\r\n\r\n", 37));
  bad("GET / HTTP/1.1\r\nHost: x\r\nX: a\x01"
      "b\r\n\r\n");
  bad("GET / HTTP/1.1\r\nHost: x\r\n: novalue\r\n\r\n");
  bad("GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n");
  // Request line.
  bad("GET  / HTTP/1.1\r\nHost: x\r\n\r\n");
  bad("GET / HTTP/1.1 \r\nHost: x\r\n\r\n");
  bad("GET /\x7f HTTP/1.1\r\nHost: x\r\n\r\n");
  bad("G@T / HTTP/1.1\r\nHost: x\r\n\r\n");
  bad("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505);
  bad("GET / http/1.1\r\nHost: x\r\n\r\n");
  bad("CONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\n", 501);
}

TEST(Http1Request, BareCrIsRejectedBeforeTheLineEnds) {
  bad("GET / HTTP/1.1\rX");
}

TEST(Http1Request, ConnectionAndExpect) {
  EXPECT_FALSE(req("GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, Close\r\n\r\n").keep_alive);
  EXPECT_FALSE(req("GET / HTTP/1.0\r\n\r\n").keep_alive);
  EXPECT_TRUE(req("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
  EXPECT_TRUE(
      req("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n").expect_continue);
}

TEST(Http1Response, LenientLineEndingsAndFraming) {
  ResponseHead r;
  ASSERT_EQ(
      parseResponseHead("HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 3\n\nabc", false, &r),
      Parse::kDone)
      << r.error;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.framing, Framing::kLength);
  EXPECT_EQ(r.content_length, 3u);
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(r.head_bytes,
            std::string("HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 3\n\n").size());

  r = ResponseHead();
  ASSERT_EQ(parseResponseHead("HTTP/1.1 204\r\nX: a\r\n  b\r\n\r\n", false, &r), Parse::kDone) << r.error;
  EXPECT_EQ(std::string(r.fields["X"]), "a b");  // obs-fold joined
  EXPECT_EQ(r.framing, Framing::kNone);

  r = ResponseHead();
  ASSERT_EQ(parseResponseHead("HTTP/1.1 200 OK\r\n\r\n", false, &r), Parse::kDone);
  EXPECT_EQ(r.framing, Framing::kUntilClose);
  EXPECT_FALSE(r.keep_alive);

  r = ResponseHead();
  ASSERT_EQ(parseResponseHead("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, &r), Parse::kDone);
  EXPECT_EQ(r.framing, Framing::kNone);  // HEAD
  EXPECT_TRUE(r.has_content_length);

  r = ResponseHead();
  ASSERT_EQ(parseResponseHead("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                              false, &r),
            Parse::kDone);
  EXPECT_EQ(r.framing, Framing::kChunked);
  EXPECT_FALSE(r.reusable_framing);

  r = ResponseHead();
  ASSERT_EQ(parseResponseHead("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n", false, &r),
            Parse::kDone);
  EXPECT_FALSE(r.keep_alive);

  r = ResponseHead();
  EXPECT_EQ(parseResponseHead("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", false, &r),
            Parse::kError);
  r = ResponseHead();
  EXPECT_EQ(parseResponseHead("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false, &r), Parse::kError);
  r = ResponseHead();
  EXPECT_EQ(parseResponseHead("HTTP/1.1 2000 OK\r\n\r\n", false, &r), Parse::kError);
  r = ResponseHead();
  EXPECT_EQ(parseResponseHead("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", false, &r), Parse::kError);
}

std::string decodeAll(ChunkedDecoder& d, const std::string& in, size_t step, size_t* consumed) {
  std::string out;
  size_t pos = 0;
  while (pos < in.size() && !d.done() && !d.failed()) {
    const std::string piece = in.substr(pos, step);
    std::vector<std::string_view> spans;
    const size_t n = d.feed(piece, &spans);
    for (auto s : spans) out += s;
    pos += n;
    if (n < piece.size()) break;
  }
  *consumed = pos;
  return out;
}

TEST(Http1Chunked, DecodesAtAnySplit) {
  const std::string body =
      "5\r\nhello\r\n6;ext=1;q=\"a b\\\"c\"\r\n world\r\n0\r\nTrailer-A: x\r\n\r\nGET /next";
  for (size_t step : {1u, 2u, 3u, 7u, 1000u}) {
    ChunkedDecoder d(false);
    size_t consumed = 0;
    EXPECT_EQ(decodeAll(d, body, step, &consumed), "hello world") << step;
    EXPECT_TRUE(d.done()) << step << d.error();
    EXPECT_EQ(body.substr(consumed), "GET /next") << step;
  }
}

TEST(Http1Chunked, StrictRejects) {
  for (const std::string bad :
       {"x\r\n", "-1\r\n", "0x5\r\nhello\r\n", "5\nhello\r\n0\r\n\r\n", "5\r\nhelloXX0\r\n\r\n",
        "5 \r\nhello\r\n", " 5\r\nhello\r\n", "1000000000000000\r\n", "5;\x01\r\n", "5;a\nb\r\n",
        "0\r\nBad Trailer\r\n\r\n", "0\r\nX: y\r\n z\r\n\r\n", "0\r\nX: y\n\r\n", "5\r\nhello\r\r\n"}) {
    ChunkedDecoder d(false);
    size_t consumed = 0;
    decodeAll(d, bad, 1000, &consumed);
    EXPECT_TRUE(d.failed()) << bad;
    EXPECT_FALSE(d.done()) << bad;
  }
}

TEST(Http1Chunked, OversizedExtensionAndTrailerRejected) {
  ChunkedDecoder d(false, 64, 128);
  size_t consumed = 0;
  decodeAll(d, "5;" + std::string(100, 'a') + "\r\n", 1000, &consumed);
  EXPECT_TRUE(d.failed());
  ChunkedDecoder t(false, 64, 128);
  decodeAll(t, "0\r\nX: " + std::string(200, 'a') + "\r\n\r\n", 1000, &consumed);
  EXPECT_TRUE(t.failed());
}

TEST(Http1Chunked, LenientAcceptsBareLf) {
  ChunkedDecoder d(true);
  size_t consumed = 0;
  EXPECT_EQ(decodeAll(d, "3\nabc\n0\n\n", 1000, &consumed), "abc");
  EXPECT_TRUE(d.done());
}

TEST(Http1Chunked, SizeLine) {
  EXPECT_EQ(chunkSizeLine(0), "0\r\n");
  EXPECT_EQ(chunkSizeLine(255), "ff\r\n");
  EXPECT_EQ(chunkSizeLine(65536), "10000\r\n");
}

TEST(Http1Heads, ContentLengthLine) {
  std::string out = "x";
  appendContentLength(0, &out);
  appendContentLength(18446744073709551615ull, &out);
  EXPECT_EQ(out, "xContent-Length: 0\r\nContent-Length: 18446744073709551615\r\n");
}

// A hostile head at the default 32 KiB limit (RouterOptions::max_header_bytes)
// made of the tiniest fields the rewrite removes, and one whose Connection
// list names thousands of fields: parsed and rewritten for the pod (in one
// pass over the fields, see router/headers.cc).
TEST(Http1Request, HeadOfThousandsOfTinyFieldsRewritten) {
  constexpr size_t kLimit = 32 * 1024;
  std::string tiny = "GET / HTTP/1.1\r\nHost: h\r\n";
  while (tiny.size() + 7 < kLimit) tiny += "TE:\r\n";
  tiny += "\r\n";
  std::string named = "GET / HTTP/1.1\r\nHost: h\r\nConnection: ";
  while (named.size() < kLimit / 2) named += "a,";
  named += "a\r\n";
  while (named.size() + 6 < kLimit) named += "b:\r\n";
  named += "\r\n";
  for (const std::string* head : {&tiny, &named}) {
    RequestHead h = req(*head);
    rewriteRequestHeaders(h.fields, "10.0.0.1", "http", false);
    EXPECT_EQ(h.fields.find(http::field::te), h.fields.end());
    EXPECT_EQ(h.fields["Host"], "h");
  }
}

}  // namespace
}  // namespace knap::router::http1

namespace knap::router::http1 {
namespace {

// Feeds `head` in pieces of `step` bytes; returns how many times the scan
// asked for a parse, parsing each time as serveConnection does.
int parsesForTrickle(const std::string& head, size_t step, Parse* last) {
  HeadScan scan;
  int parses = 0;
  *last = Parse::kIncomplete;
  for (size_t end = step; *last == Parse::kIncomplete; end += step) {
    const std::string_view data(head.data(), std::min(end, head.size()));
    if (requestHeadWorthParsing(data, &scan)) {
      ++parses;
      RequestHead h;
      *last = parseRequestHead(data, &h);
    }
    if (end >= head.size()) break;
  }
  return parses;
}

TEST(RequestHeadScanTest, ATrickledHeadIsParsedOnlyWhenALineOrTheHeadEnds) {
  std::string head = "GET / HTTP/1.1\r\nHost: a.example\r\n";
  for (int i = 0; i < 1000; ++i) head += "X-Field-" + std::to_string(i) + ": some value\r\n";
  head += "\r\n";
  for (size_t step : {size_t{1}, size_t{2}, size_t{7}, size_t{100}, head.size()}) {
    SCOPED_TRACE("step " + std::to_string(step));
    Parse last;
    // The request line, then the end: two parses however the bytes come
    // (one when both arrive together), not one per read.
    EXPECT_LE(parsesForTrickle(head, step, &last), 2);
    EXPECT_EQ(last, Parse::kDone);
  }
}

TEST(RequestHeadScanTest, ErrorsAreStillFoundEarly) {
  Parse last;
  // A bad request line: found when the line ends, before the head does.
  EXPECT_EQ(parsesForTrickle("GET /\x01 HTTP/1.1\r\nHost: a\r\n", 1, &last), 1);
  EXPECT_EQ(last, Parse::kError);
  // A bare LF anywhere: found where it comes.
  EXPECT_EQ(parsesForTrickle("GET / HTTP/1.1\r\nHost: a\nX: y\r\n", 1, &last), 2);
  EXPECT_EQ(last, Parse::kError);
  // Empty lines before the request line are skipped (then only the end of
  // the head is looked for); CRLF CRLF split across reads is found.
  EXPECT_LE(parsesForTrickle("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 1, &last), 3);
  EXPECT_EQ(last, Parse::kDone);
  EXPECT_EQ(parsesForTrickle("GET / HTTP/1.1\r\nHost: a\r\n\r\n", 1, &last), 2);
  EXPECT_EQ(last, Parse::kDone);
}

}  // namespace
}  // namespace knap::router::http1
