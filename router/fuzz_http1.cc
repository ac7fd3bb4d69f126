// libFuzzer target for the router's HTTP/1.1 framing (router/http1.h): the
// strict request-head parser, the lenient response-head parser and the
// chunked decoder in both modes, on arbitrary bytes split at a fuzzed point.
//
// Invariants checked (abort on violation): a parsed head never claims more
// bytes than it was given; a request that parses has exactly one framing and
// a Host when HTTP/1.1; the decoder never consumes more than it was fed,
// every data span lies inside its input, and feeding the same bytes in two
// pieces gives the same body and outcome as feeding them at once.
//
//   tools/fuzz.sh builds it (-Dfuzz=true, router/meson.build) and runs it over
//   the seeds in tests/fuzz/corpus/http1 (first byte: where to split the rest).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "router/http1.h"

namespace {

using knap::router::http1::ChunkedDecoder;
using knap::router::http1::Framing;
using knap::router::http1::Parse;

void check(bool ok) {
  if (!ok) std::abort();
}

struct Decoded {
  std::string body;
  size_t consumed = 0;
  bool done = false;
  bool failed = false;
};

Decoded decode(std::string_view in, bool lenient, size_t split) {
  ChunkedDecoder d(lenient, 256, 1024);
  Decoded out;
  std::vector<std::string_view> spans;
  for (std::string_view piece : {in.substr(0, split), in.substr(split)}) {
    if (out.done || out.failed) break;
    spans.clear();
    const size_t n = d.feed(piece, &spans);
    check(n <= piece.size());
    for (std::string_view s : spans) {
      check(s.data() >= piece.data() && s.data() + s.size() <= piece.data() + piece.size());
      out.body += s;
    }
    out.consumed += n;
    out.done = d.done();
    out.failed = d.failed();
    check(!(out.done && out.failed));
    if (!out.done && !out.failed) check(n == piece.size());  // all input is taken until the end
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t split = data[0] % (size);
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);

  knap::router::http1::RequestHead req;
  const Parse p = knap::router::http1::parseRequestHead(in, &req);
  if (p == Parse::kDone) {
    check(req.head_bytes > 0 && req.head_bytes <= in.size());
    check(req.version == 10 || req.version == 11);
    check(req.version == 10 || !req.host.empty());
    check(req.framing != Framing::kUntilClose);
    check(req.framing != Framing::kLength || req.content_length > 0);
    // Parsing only the head gives the same answer.
    knap::router::http1::RequestHead again;
    check(knap::router::http1::parseRequestHead(in.substr(0, req.head_bytes), &again) == Parse::kDone);
    check(again.head_bytes == req.head_bytes && again.framing == req.framing);
  } else if (p == Parse::kError) {
    check(req.error_status >= 400 && req.error_status <= 505 && !req.error.empty());
  }

  for (bool head_request : {false, true}) {
    knap::router::http1::ResponseHead resp;
    if (knap::router::http1::parseResponseHead(in, head_request, &resp) == Parse::kDone) {
      check(resp.head_bytes > 0 && resp.head_bytes <= in.size());
      check(resp.status >= 100 && resp.status <= 999);
      if (head_request) check(resp.framing == Framing::kNone);
    }
  }

  for (bool lenient : {false, true}) {
    const Decoded once = decode(in, lenient, in.size());
    const Decoded split_in_two = decode(in, lenient, split < in.size() ? split : in.size());
    check(once.consumed <= in.size());
    check(once.done == split_in_two.done && once.failed == split_in_two.failed);
    if (once.done) check(once.body == split_in_two.body && once.consumed == split_in_two.consumed);
  }
  return 0;
}
