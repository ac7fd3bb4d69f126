#include "api/server/access.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "common/string_util.h"

namespace knap::api {
namespace {

constexpr size_t kMaxTokenFileBytes = 16 * 1024 * 1024;
constexpr size_t kMaxTokenLines = 100000;
constexpr size_t kMaxLineBytes = 64 * 1024;
constexpr int kMaxErrorsReported = 20;

std::array<unsigned char, 32> sha256(const std::string& s) {
  std::array<unsigned char, 32> out{};
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), out.data());
  return out;
}

// One CSV record (RFC 4180 quoting, as Go's encoding/csv with
// TrimLeadingSpace, which kube-apiserver uses). Empty string on success.
std::string splitCsv(const std::string& line, std::vector<std::string>* fields) {
  fields->clear();
  size_t i = 0;
  for (;;) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::string field;
    if (i < line.size() && line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          closed = true;
          ++i;
          break;
        }
        field += line[i++];
      }
      if (!closed) return "a quoted field is not closed";
      if (i < line.size() && line[i] != ',') return "extraneous text after a closing quote";
    } else {
      while (i < line.size() && line[i] != ',') {
        if (line[i] == '"') return "a quote inside an unquoted field";
        field += line[i++];
      }
    }
    fields->push_back(std::move(field));
    if (i >= line.size()) return "";
    ++i;  // the comma
  }
}

bool printable(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u != 0x7f;
  });
}

bool tokenChars(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7f;  // visible ASCII: what an Authorization header can carry
  });
}

bool isRead(const std::string& verb) {
  return verb == "get" || verb == "list" || verb == "watch";
}

bool roleAllows(const std::string& role, const RequestAttributes& a) {
  if (role == "admin") return true;
  if (isRead(a.verb)) return role == "view" || role == "edit";
  if (role != "edit") return false;
  // Restarting a Revision's pods changes no object: an edit as well.
  if (a.api_group == "knap.dev" && a.resource == "revisions" && a.subresource == "restart")
    return a.verb == "create";
  return a.api_group == "serving.knative.dev" && a.subresource.empty();
}

bool subjectMatches(const ApiRoleBinding& b, const UserInfo& user) {
  if (!b.group) return b.subject == user.name;
  return std::find(user.groups.begin(), user.groups.end(), b.subject) != user.groups.end();
}

}  // namespace

UserInfo localAdmin() {
  return {"knap-admin", "", {kMastersGroup, kAuthenticatedGroup}};
}

StatusOr<TokenFile> TokenFile::parse(const std::string& text, const std::string& file_name) {
  if (text.size() > kMaxTokenFileBytes) {
    return invalidArgument("token file " + file_name + " is larger than " +
                           std::to_string(kMaxTokenFileBytes) + " bytes");
  }
  TokenFile out;
  std::vector<std::string> errors;
  int error_count = 0;
  auto fail = [&](size_t line_no, const std::string& why) {
    if (++error_count <= kMaxErrorsReported)
      errors.push_back(file_name + " line " + std::to_string(line_no) + ": " + why);
  };
  std::vector<std::array<unsigned char, 32>> seen;
  size_t line_no = 0;
  size_t start = 0;
  std::vector<std::string> f;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    start = nl == std::string::npos ? text.size() : nl + 1;
    ++line_no;
    if (line_no > kMaxTokenLines) {
      fail(line_no, "too many lines (the limit is " + std::to_string(kMaxTokenLines) + ")");
      break;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trimOws(line).empty() || trimOws(line)[0] == '#') continue;
    if (line.size() > kMaxLineBytes) {
      fail(line_no, "the line is longer than " + std::to_string(kMaxLineBytes) + " bytes");
      continue;
    }
    if (!printable(line)) {
      fail(line_no, "the line contains control characters or NUL bytes");
      continue;
    }
    if (std::string err = splitCsv(line, &f); !err.empty()) {
      fail(line_no, err);
      continue;
    }
    if (f.size() < 3) {
      fail(line_no,
           "must have at least 3 columns (token, user name, user uid), found " + std::to_string(f.size()));
      continue;
    }
    if (f.size() > 4) {
      fail(line_no, "has " + std::to_string(f.size()) +
                        " columns; the format is token,user,uid,\"group1,group2\" (quote the groups)");
      continue;
    }
    if (f[0].empty()) {
      fail(line_no, "the token is empty");
      continue;
    }
    if (!tokenChars(f[0])) {
      fail(line_no, "the token contains spaces or non-ASCII characters");
      continue;
    }
    if (trimOws(f[1]).empty()) {
      fail(line_no, "the user name is empty");
      continue;
    }
    Entry e;
    e.digest = sha256(f[0]);
    if (std::find(seen.begin(), seen.end(), e.digest) != seen.end()) {
      fail(line_no, "the same token appears on an earlier line");
      continue;
    }
    seen.push_back(e.digest);
    e.user.name = trimOws(f[1]);
    e.user.uid = trimOws(f[2]);
    if (f.size() == 4) {
      std::istringstream groups(f[3]);
      for (std::string g; std::getline(groups, g, ',');) {
        g = trimOws(g);
        if (!g.empty()) e.user.groups.push_back(g);
      }
    }
    out.entries_.push_back(std::move(e));
  }
  if (error_count > 0) {
    std::string msg;
    for (const auto& e : errors) msg += (msg.empty() ? "" : "; ") + e;
    if (error_count > kMaxErrorsReported)
      msg += "; and " + std::to_string(error_count - kMaxErrorsReported) + " more bad lines";
    return invalidArgument(msg);
  }
  return out;
}

StatusOr<TokenFile> TokenFile::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalidArgument("cannot read the token file " + path);
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxTokenFileBytes) break;
  }
  return parse(text, path);
}

std::optional<UserInfo> TokenFile::lookup(const std::string& token) const {
  if (token.empty()) return std::nullopt;
  auto digest = sha256(token);
  const Entry* found = nullptr;
  // Every entry is compared, in constant time, whatever matches.
  for (const Entry& e : entries_) {
    bool same = CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0;
    if (same && !found) found = &e;
  }
  if (!found) return std::nullopt;
  UserInfo u = found->user;
  u.groups.push_back(kAuthenticatedGroup);
  return u;
}

bool authorize(const UserInfo& user, const RequestAttributes& attrs,
               const std::vector<ApiRoleBinding>& bindings, std::string* reason) {
  auto because = [&](const std::string& why) {
    if (reason) *reason = why;
    return true;
  };
  if (std::find(user.groups.begin(), user.groups.end(), kMastersGroup) != user.groups.end())
    return because("the group system:masters is admin");
  if (!attrs.resource_request) {
    if (attrs.verb == "get")
      return because("discovery, OpenAPI and /version are open to authenticated users");
    return false;
  }
  if (attrs.verb == "create" &&
      ((attrs.api_group == "authorization.k8s.io" && attrs.resource == "selfsubjectaccessreviews") ||
       (attrs.api_group == "authentication.k8s.io" && attrs.resource == "selfsubjectreviews")))
    return because("every authenticated user may ask about themselves");
  for (const ApiRoleBinding& b : bindings) {
    if (!subjectMatches(b, user)) continue;
    if (!b.ns.empty() && b.ns != attrs.ns) continue;
    if (roleAllows(b.role, attrs)) {
      return because("role " + b.role + " of " + (b.group ? "group " : "user ") + b.subject +
                     (b.ns.empty() ? " in every namespace" : " in the namespace " + b.ns));
    }
  }
  return false;
}

std::string forbiddenMessage(const UserInfo& user, const RequestAttributes& a) {
  if (!a.resource_request)
    return "forbidden: User \"" + user.name + "\" cannot " + a.verb + " path \"" + a.path + "\"";
  std::string qualified = a.resource + (a.api_group.empty() ? "" : "." + a.api_group);
  std::string resource = a.resource + (a.subresource.empty() ? "" : "/" + a.subresource);
  std::string head =
      a.name.empty() ? qualified + " is forbidden: " : qualified + " \"" + a.name + "\" is forbidden: ";
  std::string why = "User \"" + user.name + "\" cannot " + a.verb + " resource \"" + resource +
                    "\" in API group \"" + a.api_group + "\"";
  why += a.ns.empty() ? " at the cluster scope" : " in the namespace \"" + a.ns + "\"";
  return head + why;
}

RequestAttributes requestAttributes(const std::string& method, const std::string& path,
                                    const std::vector<std::string>& segs, bool watch) {
  RequestAttributes a;
  std::string m;
  for (char c : method) m += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (m == "head") m = "get";
  size_t i = 0;
  if (segs.size() >= 3 && segs[0] == "api") {
    a.api_group = "";
    i = 2;
  } else if (segs.size() >= 4 && segs[0] == "apis") {
    a.api_group = segs[1];
    i = 3;
  } else {
    a.resource_request = false;
    a.verb = m;
    a.path = path;
    return a;
  }
  std::vector<std::string> rest(segs.begin() + static_cast<long>(i), segs.end());
  if (rest.size() >= 2 && rest[0] == "namespaces" && rest.size() != 2) {
    a.ns = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  } else if (rest.size() == 2 && rest[0] == "namespaces") {
    // A Namespace object itself: /api/v1/namespaces/NS.
    a.resource = "namespaces";
    a.name = rest[1];
    rest.clear();
  }
  if (!rest.empty()) a.resource = rest[0];
  if (rest.size() >= 2) a.name = rest[1];
  if (rest.size() >= 3) a.subresource = rest[2];
  bool collection = a.name.empty();
  if (m == "get")
    a.verb = collection ? (watch ? "watch" : "list") : "get";
  else if (m == "post")
    a.verb = "create";
  else if (m == "put")
    a.verb = "update";
  else if (m == "patch")
    a.verb = "patch";
  else if (m == "delete")
    a.verb = collection ? "deletecollection" : "delete";
  else
    a.verb = m;
  return a;
}

UserInfo userFromCertificate(const std::string& common_name, const std::vector<std::string>& organizations) {
  UserInfo u;
  u.name = common_name;
  u.groups = organizations;
  u.groups.push_back(kAuthenticatedGroup);
  return u;
}

}  // namespace knap::api
