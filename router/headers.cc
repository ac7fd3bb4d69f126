#include "router/headers.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include <boost/beast/core/string.hpp>
#include <boost/container/small_vector.hpp>

#include "common/string_util.h"

namespace knap::router {

namespace {

boost::beast::string_view bsv(std::string_view s) {
  return {s.data(), s.size()};
}

bool iequals(std::string_view a, std::string_view b) {
  return boost::beast::iequals(bsv(a), bsv(b));
}

// Case-insensitive (ASCII) order, consistent with iequals: a sorted list
// of names for a binary search.
bool iless(std::string_view a, std::string_view b) {
  auto lower = [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 'A' && u <= 'Z' ? static_cast<unsigned char>(u - 'A' + 'a') : u;
  };
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = lower(a[i]), y = lower(b[i]);
    if (x != y) return x < y;
  }
  return a.size() < b.size();
}

using Tokens = boost::container::small_vector<std::string_view, 4>;

// The non-empty comma-separated tokens of one header value (OWS trimmed).
Tokens splitTokens(std::string_view v) {
  Tokens out;
  forEachListElement(v, [&](std::string_view tok) { out.emplace_back(tok); });
  return out;
}

// Tokens of every instance of field `id`: views into the fields (valid
// until they are cleared), a few on the stack.
Tokens tokens(const Fields& fields, http::field id) {
  Tokens out;
  for (const Fields::Field& f : fields) {
    if (f.name() == id) forEachListElement(f.value(), [&](std::string_view t) { out.push_back(t); });
  }
  return out;
}

}  // namespace

bool isUpgradeRequest(const Fields& req) {
  if (req.find(http::field::upgrade) == req.end()) return false;
  for (std::string_view t : tokens(req, http::field::connection)) {
    if (iequals(t, "upgrade")) return true;
  }
  return false;
}

void removeHopByHop(Fields& fields, bool keep_upgrade, bool drop_length) {
  // Headers named by Connection are hop-by-hop too (RFC 7230 §6.1). Their
  // names, sorted (case-insensitively) for a binary search per field: one
  // pass over the fields however long the list (a hostile head holds
  // thousands of fields and tokens; an erase per token was tokens x fields).
  // (The views stay valid while fields are erased: the bytes stay until clear().)
  Tokens named;
  for (std::string_view t : tokens(fields, http::field::connection)) {
    if (keep_upgrade && iequals(t, "upgrade")) continue;
    if (iequals(t, "close") || iequals(t, "keep-alive") || iequals(t, "host")) continue;
    named.push_back(t);
  }
  std::sort(named.begin(), named.end(), iless);
  auto isNamed = [&named](std::string_view name) {
    return !named.empty() && std::binary_search(named.begin(), named.end(), name, iless);
  };
  // One pass over the fields (on the hot path: a lookup per name costs more;
  // and an erase per field moves every later one).
  fields.erase_if([&](const Fields::Field& f) {
    switch (f.name()) {
      case http::field::connection:
      case http::field::keep_alive:
      case http::field::te:
      case http::field::trailer:
      case http::field::transfer_encoding:
      case http::field::proxy_connection:
      case http::field::proxy_authenticate:
      case http::field::proxy_authorization:
        return true;
      case http::field::content_length:
        if (drop_length) return true;
        break;
      case http::field::upgrade:
        if (!keep_upgrade) return true;
        break;
      default:
        break;
    }
    return isNamed(f.name_string());
  });
  if (keep_upgrade) fields.set(http::field::connection, "Upgrade");
}

std::string synthesizeForwarded(std::string_view xff, std::string_view xfh, std::string_view xfp) {
  const Tokens nodes = splitTokens(xff);
  std::string out;
  out.reserve(xff.size() + 16 * nodes.size() + xfh.size() + xfp.size() + 16);  // (one allocation)
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i > 0) out += ", ";
    out += "for=";
    if (nodes[i].find(':') != std::string_view::npos) {
      out += "\"[";
      out += nodes[i];
      out += "]\"";
    } else {
      out += nodes[i];
    }
    if (i == 0) {
      if (!xfh.empty()) {
        out += ";host=";
        out += xfh;
      }
      if (!xfp.empty()) {
        out += ";proto=";
        out += xfp;
      }
    }
  }
  return out;
}

void rewriteRequestHeaders(Fields& req, std::string_view client_ip, std::string_view proto, bool is_upgrade) {
  removeHopByHop(req, is_upgrade, true);
  // One pass over the fields (on the hot path: each lookup or set() by name
  // walks the set with case-insensitive compares, and set() also hashes the
  // name): Expect (answered by the router itself, see proxy.cc), the
  // Knative headers a client must not forge, X-Forwarded-For and
  // X-Forwarded-Proto (rewritten below) go; Host, X-Forwarded-Host and
  // Forwarded are noted.
  std::string xff;  // the client's X-Forwarded-For list, one header
  std::string_view host, xfh;
  bool has_host = false, has_xfh = false, has_forwarded = false;
  // (erase_if: one pass, in order; an erase per field would move every
  // later one, quadratic for a head of thousands of such fields.)
  req.erase_if([&](const Fields::Field& field) {
    const http::field f = field.name();
    if (f == http::field::expect) return true;
    if (f == http::field::host) {
      if (!has_host) host = field.value();
      has_host = true;
    } else if (f == http::field::forwarded) {
      has_forwarded = true;
    } else if (f == http::field::unknown) {
      const std::string_view name = field.name_string();
      if (iequals(name, "X-Forwarded-For")) {
        for (std::string_view t : splitTokens(field.value())) {
          if (!xff.empty()) xff += ", ";
          xff += t;
        }
        return true;
      }
      if (iequals(name, "X-Forwarded-Host")) {
        if (!has_xfh) xfh = field.value();
        has_xfh = true;
      } else if (iequals(name, "X-Forwarded-Proto") || iequals(name, kRevisionHeader) ||
                 iequals(name, kNamespaceHeader) || iequals(name, kHashHeader)) {
        return true;
      }
    }
    return false;
  });

  // X-Forwarded-For: the client's list plus the peer we saw.
  if (!client_ip.empty()) {
    if (!xff.empty()) xff += ", ";
    xff += client_ip;
  }
  if (!xff.empty()) req.insert(http::field::unknown, "X-Forwarded-For", xff);
  req.insert(http::field::unknown, "X-Forwarded-Proto", proto);
  if (!has_xfh && !host.empty()) {
    req.insert(http::field::unknown, "X-Forwarded-Host", host);
    xfh = host;
  }
  if (!has_forwarded && !xff.empty()) {
    req.insert(http::field::forwarded, synthesizeForwarded(xff, xfh, proto));
  }
}

void rewriteResponseHeaders(Fields& resp, bool switching_protocols) {
  removeHopByHop(resp, switching_protocols, true);
}

}  // namespace knap::router
