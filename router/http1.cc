#include "router/http1.h"

#include <algorithm>
#include <array>
#include <charconv>

#include <boost/beast/core/string.hpp>
#include <boost/container/small_vector.hpp>

#include "common/string_util.h"

namespace knap::router::http1 {

namespace {

// Character classes, one table lookup per byte on the parsers' hot loops.
enum : uint8_t { kTokenChar = 1, kFieldValue = 2, kHostChar = 4 };

constexpr std::array<uint8_t, 256> makeCharClass() {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    // tchar (RFC 9110 §5.6.2)
    bool token = alnum;
    for (char x : std::string_view("!#$%&'*+-.^_`|~")) token = token || c == x;
    // field-value characters: HTAB, SP, VCHAR, obs-text
    const bool value = c == '\t' || (c >= 0x20 && c != 0x7f);
    // uri-host [ ":" port ] characters
    bool host = alnum;
    for (char x : std::string_view("-._~:[]%!$&'()*+;=")) host = host || c == x;
    t[c] =
        static_cast<uint8_t>((token ? kTokenChar : 0) | (value ? kFieldValue : 0) | (host ? kHostChar : 0));
  }
  return t;
}
constexpr std::array<uint8_t, 256> kCharClass = makeCharClass();

boost::beast::string_view bsv(std::string_view s) {
  return {s.data(), s.size()};
}

bool iequals(std::string_view a, std::string_view b) {
  return boost::beast::iequals(bsv(a), bsv(b));
}

bool isToken(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (!(kCharClass[c] & kTokenChar)) return false;
  }
  return true;
}

enum class Line { kIncomplete, kOk, kError };

// The line starting at `pos`: `line` without its ending, `next` after it.
// Strict: CRLF only; any other CR or LF is an error. Lenient: LF or CRLF.
Line nextLine(std::string_view data, size_t pos, bool lenient, std::string_view* line, size_t* next) {
  const size_t lf = data.find('\n', pos);
  if (lf == std::string_view::npos) {
    // A bare CR already seen is an error even before the LF arrives.
    const size_t cr = data.find('\r', pos);
    if (cr != std::string_view::npos && cr + 1 < data.size()) return Line::kError;
    return Line::kIncomplete;
  }
  size_t end = lf;
  if (end > pos && data[end - 1] == '\r') {
    --end;
  } else if (!lenient) {
    return Line::kError;  // bare LF
  }
  *line = data.substr(pos, end - pos);
  if (line->find('\r') != std::string_view::npos) return Line::kError;  // bare CR
  *next = lf + 1;
  return Line::kOk;
}

// Comma-separated list elements of every instance of `name`, OWS trimmed,
// empty elements dropped (RFC 9110 §5.6.1).
// (A few elements on the stack: no allocation per message.)
using Elements = boost::container::small_vector<std::string_view, 4>;

Elements listElements(const Fields& fields, http::field name) {
  Elements out;
  for (const Fields::Field& f : fields) {
    if (f.name() == name) forEachListElement(f.value(), [&](std::string_view e) { out.push_back(e); });
  }
  return out;
}

bool allDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Decimal Content-Length; false when not 1*DIGIT or too large.
bool parseLength(std::string_view s, uint64_t* out) {
  while (s.size() > 1 && s.front() == '0') s.remove_prefix(1);
  if (!allDigits(s) || s.size() > 18) return false;
  uint64_t v = 0;
  for (char c : s) v = v * 10 + static_cast<uint64_t>(c - '0');
  *out = v;
  return true;
}

Parse fail(RequestHead* out, int status, std::string why) {
  out->error_status = status;
  out->error = std::move(why);
  return Parse::kError;
}

Parse fail(ResponseHead* out, std::string why) {
  out->error = std::move(why);
  return Parse::kError;
}

int hexValue(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A field line of a trailer section or a strict head: name ":" OWS value OWS.
bool validFieldLine(std::string_view line, std::string_view* name, std::string_view* value) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return false;
  *name = line.substr(0, colon);
  *value = trimOws(line.substr(colon + 1));
  return isToken(*name) && isFieldValue(*value);
}

}  // namespace

// field-value characters: HTAB, SP, VCHAR, obs-text.
bool isFieldValue(std::string_view s) {
  for (unsigned char c : s) {
    if (!(kCharClass[c] & kFieldValue)) return false;
  }
  return true;
}

// Host = uri-host [ ":" port ]: no whitespace, commas, slashes or userinfo.
bool validHost(std::string_view h) {
  for (unsigned char c : h) {
    if (!(kCharClass[c] & kHostChar)) return false;
  }
  return true;
}

bool isTokenChar(unsigned char c) {
  return kCharClass[c] & kTokenChar;
}

bool requestHeadWorthParsing(std::string_view data, HeadScan* scan) {
  const size_t from = std::min(scan->scanned, data.size());
  scan->scanned = data.size();
  bool worth = false;
  for (size_t i = from; i < data.size() && !worth; ++i) {
    if (data[i] != '\n') continue;
    if (i == 0 || data[i - 1] != '\r') {
      worth = true;  // a bare LF: the parser reports it
    } else if (!scan->line_ended) {
      worth = true;  // the request line (or an empty line before it) ended
    } else if (i >= 3 && data[i - 2] == '\n' && data[i - 3] == '\r') {
      worth = true;  // CRLF CRLF: the end of the head
    }
    scan->line_ended = true;
    if (worth) scan->scanned = i + 1;
  }
  return worth;
}

Parse parseRequestHead(std::string_view data, RequestHead* out) {
  size_t pos = 0;
  std::string_view line;
  size_t next = 0;
  // Empty lines before the request line are ignored (RFC 9112 §2.2).
  for (;;) {
    const Line l = nextLine(data, pos, false, &line, &next);
    if (l == Line::kIncomplete) return Parse::kIncomplete;
    if (l == Line::kError) return fail(out, 400, "request line does not end in CRLF");
    if (!line.empty()) break;
    pos = next;
  }
  // request-line = method SP request-target SP HTTP-version
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return fail(out, 400, "malformed request line");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!isToken(method)) return fail(out, 400, "malformed request method");
  if (target.empty()) return fail(out, 400, "empty request target");
  for (unsigned char c : target) {
    if (c <= 0x20 || c >= 0x7f) return fail(out, 400, "malformed request target");
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' || version[5] < '0' ||
      version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return fail(out, 400, "malformed HTTP version");
  }
  if (version[5] != '1') return fail(out, 505, "only HTTP/1.x is supported");
  out->version = version[7] == '0' ? 10 : 11;
  if (method == "CONNECT") return fail(out, 501, "CONNECT is not supported");
  out->method = std::string(method);
  out->target = std::string(target);
  pos = next;

  size_t hosts = 0, lengths = 0;
  std::string_view host, length;  // the first Host and Content-Length values
  bool has_te = false, has_connection = false, has_expect = false;

  for (;;) {
    const Line l = nextLine(data, pos, false, &line, &next);
    if (l == Line::kIncomplete) return Parse::kIncomplete;
    if (l == Line::kError) return fail(out, 400, "header line does not end in CRLF");
    pos = next;
    if (line.empty()) break;
    if (line.front() == ' ' || line.front() == '\t') {
      return fail(out, 400, "obsolete line folding (obs-fold) in a request header");
    }
    std::string_view name, value;
    if (!validFieldLine(line, &name, &value)) {
      return fail(out, 400, "malformed header line");
    }
    // The framing fields are tallied here, while the name is known (a
    // lookup in `fields` afterwards walks its set by name, each time).
    const http::field known = http::string_to_field(bsv(name));
    switch (known) {
      case http::field::host:
        if (hosts++ == 0) host = value;
        break;
      case http::field::content_length:
        if (lengths++ == 0) length = value;
        break;
      case http::field::transfer_encoding:
        has_te = true;
        break;
      case http::field::connection:
        has_connection = true;
        break;
      case http::field::expect:
        has_expect = true;
        break;
      default:
        break;
    }
    out->fields.insert(known, name, value);
  }
  out->head_bytes = pos;

  const Fields& f = out->fields;
  if (hosts > 1) return fail(out, 400, "more than one Host header");
  if (hosts == 1) {
    out->host = std::string(host);
    if (out->host.empty() || !validHost(out->host)) return fail(out, 400, "invalid Host header");
  } else if (out->version == 11) {
    return fail(out, 400, "missing Host header");
  }

  if (lengths > 1) return fail(out, 400, "more than one Content-Length header");
  if (has_te) {
    if (out->version == 10) return fail(out, 400, "Transfer-Encoding in an HTTP/1.0 request");
    if (lengths > 0) return fail(out, 400, "both Content-Length and Transfer-Encoding");
    const Elements codings = listElements(f, http::field::transfer_encoding);
    if (codings.empty() || !iequals(codings.back(), "chunked")) {
      return fail(out, 400, "Transfer-Encoding does not end in chunked");
    }
    for (size_t i = 0; i + 1 < codings.size(); ++i) {
      if (iequals(codings[i], "chunked")) return fail(out, 400, "chunked applied more than once");
      return fail(out, 501, "transfer coding \"" + std::string(codings[i]) + "\" is not supported");
    }
    out->framing = Framing::kChunked;
  } else if (lengths == 1) {
    if (!parseLength(length, &out->content_length)) {
      return fail(out, 400, "invalid Content-Length");
    }
    out->framing = out->content_length > 0 ? Framing::kLength : Framing::kNone;
  }

  out->keep_alive = out->version == 11;
  if (has_connection) {
    for (std::string_view t : listElements(f, http::field::connection)) {
      if (iequals(t, "close")) {
        out->keep_alive = false;
        break;
      }
      if (iequals(t, "keep-alive")) out->keep_alive = true;
    }
  }
  if (has_expect) {
    if (auto e = f.find(http::field::expect); e != f.end()) {
      out->expect_continue = iequals(trimOws(e->value()), "100-continue");
    }
  }
  return Parse::kDone;
}

Parse parseResponseHead(std::string_view data, bool head_request, ResponseHead* out) {
  std::string_view line;
  size_t next = 0;
  const Line l = nextLine(data, 0, true, &line, &next);
  if (l == Line::kIncomplete) return Parse::kIncomplete;
  if (l == Line::kError) return fail(out, "bad line ending in the status line");
  // status-line = HTTP-version SP status-code [ SP [ reason-phrase ] ]
  if (line.size() < 12 || line.substr(0, 5) != "HTTP/" || line[5] != '1' || line[6] != '.' || line[7] < '0' ||
      line[7] > '9' || line[8] != ' ') {
    return fail(out, "malformed status line");
  }
  out->version = line[7] == '0' ? 10 : 11;
  const std::string_view code = line.substr(9, 3);
  if (!allDigits(code) || code[0] == '0') return fail(out, "malformed status code");
  out->status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
  if (line.size() > 12) {
    if (line[12] != ' ') return fail(out, "malformed status line");
    out->reason = std::string(line.substr(13));
  }
  size_t pos = next;
  // Views into `data`; a value is copied only when an obs-fold continues it.
  struct FieldLine {
    std::string_view name, value;
    std::string folded;
    bool is_folded = false;
  };
  boost::container::small_vector<FieldLine, 16> lines;
  for (;;) {
    const Line hl = nextLine(data, pos, true, &line, &next);
    if (hl == Line::kIncomplete) return Parse::kIncomplete;
    if (hl == Line::kError) return fail(out, "bad line ending in a response header");
    pos = next;
    if (line.empty()) break;
    if (line.front() == ' ' || line.front() == '\t') {
      // obs-fold: replaced by a space (RFC 9112 §5.2).
      if (lines.empty()) return fail(out, "response header starts with whitespace");
      const std::string_view more = trimOws(line);
      if (!isFieldValue(more)) return fail(out, "bad response header value");
      if (!more.empty()) {
        FieldLine& last = lines.back();
        if (!last.is_folded) {
          last.folded = std::string(last.value);
          last.is_folded = true;
        }
        if (!last.folded.empty()) last.folded += ' ';
        last.folded += more;
      }
      continue;
    }
    std::string_view name, value;
    if (!validFieldLine(line, &name, &value)) return fail(out, "malformed response header line");
    lines.push_back(FieldLine{name, value, {}, false});
  }
  out->head_bytes = pos;
  // (The framing fields tallied while the names are known, as for requests.)
  bool has_cl = false, has_connection = false, has_te = false;
  for (const FieldLine& fl : lines) {
    const http::field known = http::string_to_field(bsv(fl.name));
    has_cl = has_cl || known == http::field::content_length;
    has_connection = has_connection || known == http::field::connection;
    has_te = has_te || known == http::field::transfer_encoding;
    out->fields.insert(known, fl.name, fl.is_folded ? std::string_view(fl.folded) : fl.value);
  }
  const Fields& f = out->fields;

  // Content-Length: every value (lines and list elements) must agree.
  bool any_length = false;
  if (has_cl) {
    for (std::string_view v : listElements(f, http::field::content_length)) {
      uint64_t n = 0;
      if (!parseLength(v, &n)) return fail(out, "invalid Content-Length from the pod");
      if (any_length && n != out->content_length) return fail(out, "conflicting Content-Length from the pod");
      out->content_length = n;
      any_length = true;
    }
    if (!any_length) return fail(out, "invalid Content-Length from the pod");
  }
  out->has_content_length = any_length;

  out->keep_alive = out->version == 11;
  if (has_connection) {
    for (std::string_view t : listElements(f, http::field::connection)) {
      if (iequals(t, "close")) out->keep_alive = false;
    }
  }

  const int s = out->status;
  if (head_request || (s >= 100 && s < 200) || s == 204 || s == 304) {
    out->framing = Framing::kNone;
  } else if (has_te) {
    const Elements codings = listElements(f, http::field::transfer_encoding);
    out->framing =
        !codings.empty() && iequals(codings.back(), "chunked") ? Framing::kChunked : Framing::kUntilClose;
    if (any_length) out->reusable_framing = false;  // TE wins; never reuse this connection
    out->has_content_length = false;
  } else if (any_length) {
    out->framing = out->content_length > 0 ? Framing::kLength : Framing::kNone;
  } else {
    out->framing = Framing::kUntilClose;
  }
  if (out->framing == Framing::kUntilClose) out->keep_alive = false;
  return Parse::kDone;
}

bool ChunkedDecoder::fail(const char* why) {
  if (error_.empty()) error_ = why;
  return false;
}

size_t ChunkedDecoder::feed(std::string_view in, std::vector<std::string_view>* data) {
  return feedInto(in, data);
}
size_t ChunkedDecoder::feed(std::string_view in, Spans* data) {
  return feedInto(in, data);
}

template <class Out>
size_t ChunkedDecoder::feedInto(std::string_view in, Out* data) {
  size_t i = 0;
  auto endSizeLine = [&] {
    state_ = size_ == 0 ? State::kTrailer : State::kData;
    digits_ = 0;
    line_ = 0;
    ext_quoted_ = ext_escape_ = ext_started_ = false;
    trailer_line_empty_ = true;
  };
  auto finishTrailerLine = [&] {
    if (trailer_line_empty_) {
      state_ = State::kDone;
      return true;
    }
    if (!lenient_) {
      std::string_view name, value;
      if (trailer_line_.front() == ' ' || trailer_line_.front() == '\t') {
        return fail("obs-fold in the trailer section");
      }
      if (!validFieldLine(trailer_line_, &name, &value)) return fail("malformed trailer field");
      trailer_line_.clear();
    }
    trailer_line_empty_ = true;
    state_ = State::kTrailer;
    return true;
  };
  while (i < in.size() && state_ != State::kDone && error_.empty()) {
    const unsigned char c = static_cast<unsigned char>(in[i]);
    switch (state_) {
      case State::kSize: {
        const int v = hexValue(c);
        if (v >= 0) {
          if (digits_ >= 15) return (fail("chunk size too large"), i);
          size_ = size_ * 16 + static_cast<uint64_t>(v);
          ++digits_;
          ++i;
        } else if (digits_ == 0) {
          return (fail("bad chunk size"), i);
        } else if (c == ';' || c == ' ' || c == '\t') {
          state_ = State::kExt;
        } else if (c == '\r') {
          state_ = State::kSizeLf;
          ++i;
        } else if (c == '\n' && lenient_) {
          endSizeLine();
          ++i;
        } else {
          return (fail("bad chunk size"), i);
        }
        break;
      }
      case State::kExt: {
        if (++line_ > max_line_) return (fail("chunk extension too long"), i);
        if (ext_quoted_) {
          if (ext_escape_) {
            ext_escape_ = false;
            if ((c < 0x20 && c != '\t') || c == 0x7f) return (fail("bad chunk extension"), i);
          } else if (c == '\\') {
            ext_escape_ = true;
          } else if (c == '"') {
            ext_quoted_ = false;
          } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
            return (fail("bad chunk extension"), i);
          }
        } else if (c == '\r' || c == '\n') {
          // "5 \r\n": whitespace after the size is only allowed before ';'.
          if (!ext_started_ && !lenient_) return (fail("bad chunk size line"), i);
          if (c == '\n' && !lenient_) return (fail("chunk size line does not end in CRLF"), i);
          if (c == '\r') {
            state_ = State::kSizeLf;
          } else {
            endSizeLine();
          }
        } else if (c == ';') {
          ext_started_ = true;
        } else if (c == ' ' || c == '\t') {
        } else if (!ext_started_) {
          return (fail("bad chunk size"), i);
        } else if (c == '"') {
          ext_quoted_ = true;
        } else if (c != '=' && !isTokenChar(c)) {
          return (fail("bad chunk extension"), i);
        }
        ++i;
        break;
      }
      case State::kSizeLf:
        if (c != '\n') return (fail("chunk size line does not end in CRLF"), i);
        endSizeLine();
        ++i;
        break;
      case State::kData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(size_, in.size() - i));
        data->push_back(in.substr(i, n));
        i += n;
        size_ -= n;
        if (size_ == 0) state_ = State::kDataCr;
        break;
      }
      case State::kDataCr:
        if (c == '\r') {
          state_ = State::kDataLf;
        } else if (c == '\n' && lenient_) {
          state_ = State::kSize;
        } else {
          return (fail("chunk data not followed by CRLF"), i);
        }
        ++i;
        break;
      case State::kDataLf:
        if (c != '\n') return (fail("chunk data not followed by CRLF"), i);
        state_ = State::kSize;
        ++i;
        break;
      case State::kTrailer:
        if (++trailer_ > max_trailer_) return (fail("trailer section too large"), i);
        if (c == '\r') {
          state_ = State::kTrailerLf;
        } else if (c == '\n') {
          if (!lenient_) return (fail("trailer line does not end in CRLF"), i);
          if (!finishTrailerLine()) return i;
        } else {
          if (!lenient_) trailer_line_.push_back(static_cast<char>(c));
          trailer_line_empty_ = false;
        }
        ++i;
        break;
      case State::kTrailerLf:
        if (c != '\n') return (fail("trailer line does not end in CRLF"), i);
        ++i;
        if (!finishTrailerLine()) return i;
        break;
      case State::kDone:
        break;
    }
  }
  return i;
}

void appendContentLength(uint64_t n, std::string* out) {
  char digits[24];
  const auto r = std::to_chars(digits, digits + sizeof digits, n);
  out->append("Content-Length: ", 16);
  out->append(digits, static_cast<size_t>(r.ptr - digits));
  out->append("\r\n", 2);
}

std::string chunkSizeLine(size_t n) {
  char buf[24];
  static const char kHex[] = "0123456789abcdef";
  int p = sizeof buf;
  buf[--p] = '\n';
  buf[--p] = '\r';
  do {
    buf[--p] = kHex[n & 15];
    n >>= 4;
  } while (n != 0);
  return std::string(buf + p, sizeof buf - static_cast<size_t>(p));
}

void appendFields(const Fields& fields, std::string* out) {
  for (const Fields::Field& f : fields) {
    out->append(f.name_string());
    out->append(": ");
    out->append(f.value());
    out->append("\r\n");
  }
}

}  // namespace knap::router::http1
