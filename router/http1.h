// HTTP/1.1 message framing for the router (RFC 9112), decided once, here.
//
// The router parses every message head itself and re-derives the framing
// of everything it forwards: the Content-Length / Transfer-Encoding it
// writes come from the parse result, never from the received header lines.
//
// Two modes:
//  - strict (client requests — the smuggling surface): CRLF line endings
//    only, no obs-fold, exactly one Host, at most one Content-Length line
//    holding 1*DIGIT, Transfer-Encoding only "chunked" (once, last) and
//    never together with Content-Length, no whitespace before a colon,
//    no control bytes in names or values. Anything else is an error with
//    the status to answer (400, 501, 505) and the connection is closed.
//  - lenient (pod responses): what nginx accepts — bare LF line endings,
//    obs-fold replaced by a space; conflicting Content-Lengths or an
//    invalid one are still errors (502), Transfer-Encoding wins over
//    Content-Length and the pod connection is then not reused.
//
// Thread safety: pure functions and value types; a ChunkedDecoder is used
// by one connection at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "router/fields.h"

namespace knap::router::http1 {

// How a message body is delimited.
enum class Framing {
  kNone,        // no body
  kLength,      // Content-Length bytes
  kChunked,     // chunked transfer coding
  kUntilClose,  // response read until the pod closes
};

enum class Parse { kIncomplete, kDone, kError };

struct RequestHead {
  std::string method;
  std::string target;
  unsigned version = 11;  // 10 or 11
  Fields fields;          // as received, framing headers included
  std::string host;       // the one Host value ("" for HTTP/1.0 without Host)
  Framing framing = Framing::kNone;
  uint64_t content_length = 0;   // kLength only
  bool keep_alive = true;        // after this request (Connection / version)
  bool expect_continue = false;  // Expect: 100-continue
  size_t head_bytes = 0;         // bytes of the head, final empty line included
  // On kError: the status to answer and why.
  int error_status = 0;
  std::string error;
};

struct ResponseHead {
  int status = 0;
  unsigned version = 11;
  std::string reason;
  Fields fields;  // as received (obs-fold joined)
  Framing framing = Framing::kNone;
  uint64_t content_length = 0;  // kLength; for HEAD/304 the declared length, if any
  bool has_content_length = false;
  bool keep_alive = true;        // the pod keeps the connection open after this response
  bool reusable_framing = true;  // false when TE and CL were both present
  size_t head_bytes = 0;
  std::string error;  // on kError
};

// Parses a request head from the start of `data`. kIncomplete: valid so
// far, more bytes needed (the caller enforces its size limit). Empty lines
// before the request line are skipped (RFC 9112 §2.2).
Parse parseRequestHead(std::string_view data, RequestHead* out);

// Whether a request head arriving in `data` is worth parsing again: in the
// bytes after those an earlier call saw, it may end (CRLF CRLF), its first
// line ended, or a bare LF came (an error to report). Each byte is looked at
// once over all the calls for one head (`scan` starts as {} for a new
// head), so a head that trickles in a byte at a time costs linear time, not
// a parse of everything so far per byte.
struct HeadScan {
  size_t scanned = 0;       // bytes of data already looked at
  bool line_ended = false;  // a line of the head has ended
};
bool requestHeadWorthParsing(std::string_view data, HeadScan* scan);

// Parses a pod's response head from the start of `data` (lenient). The
// request's method decides the framing: HEAD → no body.
Parse parseResponseHead(std::string_view data, bool head_request, ResponseHead* out);

// Incremental decoder of a chunked body (chunk extensions skipped after
// validation, trailer section validated and dropped).
class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(bool lenient, size_t max_line_bytes = 4096, size_t max_trailer_bytes = 16384)
      : lenient_(lenient), max_line_(max_line_bytes), max_trailer_(max_trailer_bytes) {}
  // Consumes a prefix of `in` and appends the body bytes found there to
  // `data` (views into `in`). Stops right after the last chunk's trailer
  // section; bytes after it are not consumed. Returns bytes consumed;
  // on a framing error sets error() and returns what was consumed.
  size_t feed(std::string_view in, std::vector<std::string_view>* data);
  // The same into a vector that holds a few spans without allocating (the
  // proxy's relay, once per read).
  using Spans = boost::container::small_vector<std::string_view, 8>;
  size_t feed(std::string_view in, Spans* data);
  bool done() const { return state_ == State::kDone; }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  enum class State { kSize, kExt, kSizeLf, kData, kDataCr, kDataLf, kTrailer, kTrailerLf, kDone };
  bool fail(const char* why);
  template <class Out>
  size_t feedInto(std::string_view in, Out* data);
  bool lenient_;
  size_t max_line_, max_trailer_;
  State state_ = State::kSize;
  uint64_t size_ = 0;
  int digits_ = 0;
  size_t line_ = 0;     // bytes of the current size/trailer line
  size_t trailer_ = 0;  // bytes of the trailer section
  bool ext_quoted_ = false, ext_escape_ = false, ext_started_ = false;
  bool trailer_line_empty_ = true;
  std::string trailer_line_;  // strict mode: the current trailer line, for validation
  std::string error_;
};

// Hex size line of one chunk: "1a2b\r\n".
std::string chunkSizeLine(size_t n);
// Appends "Content-Length: <n>\r\n" (no temporary strings: a head is built
// on every proxied request).
void appendContentLength(uint64_t n, std::string* out);

// Appends "Name: value\r\n" for every field to `out`.
void appendFields(const Fields& fields, std::string* out);

// True for tchar (RFC 9110 §5.6.2).
bool isTokenChar(unsigned char c);

// True when `s` holds only field-value characters (HTAB, SP, VCHAR,
// obs-text): no other control bytes.
bool isFieldValue(std::string_view s);

// True when `h` is a plausible Host: uri-host [ ":" port ] characters only
// (no whitespace, commas, slashes, userinfo). The one check for HTTP/1.1's
// Host and HTTP/2's :authority.
bool validHost(std::string_view h);

}  // namespace knap::router::http1
