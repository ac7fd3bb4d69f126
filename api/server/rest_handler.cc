#include "api/server/rest_handler.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <set>

#include "api/admission.h"
#include "api/codec.h"
#include "api/core_objects.h"
#include "api/effective_config.h"
#include "api/naming.h"
#include "api/server/console_handler.h"
#include "api/server/discovery.h"
#include "api/server/event_handler.h"
#include "api/server/k8s_status.h"
#include "api/server/managed_fields.h"
#include "api/server/patch.h"
#include "api/server/placeholder_kinds.h"
#include "api/server/request_guard.h"
#include "common/base64.h"
#include "common/json_path.h"
#include "common/log.h"
#include "common/pod_logs.h"
#include "common/string_util.h"
#include "events/events.h"

namespace knap::api {

using nlohmann::json;

namespace {

// How often a patch or update without a resourceVersion is re-applied after
// losing a race. kube-apiserver's GuaranteedUpdate retries until it wins; a
// bound this high only stops a pathological loop, it is not reached by a
// controller writing status as fast as it can (64 was: 9 of 120 patches lost
// against such a writer on a loaded machine).
constexpr int kMaxPatchAttempts = 10000;

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      int h = i + 1 < s.size() ? hexValue(s[i + 1]) : -1;
      int l = i + 2 < s.size() ? hexValue(s[i + 2]) : -1;
      if (h >= 0 && l >= 0) {
        out += static_cast<char>(h * 16 + l);
        i += 2;
        continue;
      }
    }
    out += (plus_is_space && c == '+') ? ' ' : c;
  }
  return out;
}

// Go's strconv.ParseBool, which Kubernetes uses for boolean query parameters
// (the Python client sends watch=True).
std::optional<bool> parseBool(const std::string& s) {
  if (s == "1" || s == "t" || s == "T" || s == "TRUE" || s == "true" || s == "True") return true;
  if (s == "0" || s == "f" || s == "F" || s == "FALSE" || s == "false" || s == "False") return false;
  return std::nullopt;
}

// Media type without parameters, lower-case: "application/json".
std::string mediaType(const std::string& content_type) {
  std::string t = content_type.substr(0, content_type.find(';'));
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  size_t b = 0;
  while (b < t.size() && std::isspace(static_cast<unsigned char>(t[b]))) ++b;
  return asciiLower(t.substr(b));
}

HttpResponse jsonResponse(int code, const json& body) {
  HttpResponse r;
  r.code = code;
  r.body = toJsonText(body);
  return r;
}

HttpResponse errorResponse(const ApiError& e) {
  return jsonResponse(e.code, e.body);
}

HttpResponse notFoundPath() {
  return errorResponse(
      makeApiError(404, "NotFound", "the server could not find the requested resource", json::object()));
}

HttpResponse methodNotAllowed(const std::string& method) {
  return errorResponse(makeApiError(
      405, "MethodNotAllowed",
      "the server does not allow this method on the requested resource (" + method + ")", json::object()));
}

// Parses a request body as JSON, or as YAML when `yaml` (one document), within
// the codec's DecodeLimits.
StatusOr<json> parseBody(const std::string& body, bool yaml) {
  return parseDocument(body, yaml);
}

json withTypeMeta(json obj, const ResourceInfo& info) {
  if (obj.is_object()) {
    obj["kind"] = info.kind;
    obj["apiVersion"] = info.apiVersion();
    if (!info.namespaced && obj.contains("metadata") && obj["metadata"].is_object())
      obj["metadata"].erase("namespace");
  }
  return obj;
}

std::string metaString(const json& obj, const char* field) {
  return stringAt(obj, {"metadata", field});
}

json* labelsOf(json& obj) {
  if (!obj.contains("metadata") || !obj["metadata"].is_object()) return nullptr;
  auto it = obj["metadata"].find("labels");
  return it == obj["metadata"].end() ? nullptr : &*it;
}

std::string warningValue(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return "299 - \"" + escaped + "\"";
}

bool hasOwnerUid(const json& obj, const std::set<std::string>& uids) {
  if (!obj.contains("metadata") || !obj["metadata"].is_object()) return false;
  auto it = obj["metadata"].find("ownerReferences");
  if (it == obj["metadata"].end() || !it->is_array()) return false;
  for (const json& ref : *it) {
    if (ref.is_object() && ref.contains("uid") && ref["uid"].is_string() &&
        uids.count(ref["uid"].get<std::string>()))
      return true;
  }
  return false;
}

// Removes `obj` and, transitively, every object in the namespace whose
// ownerReferences name a removed uid. With `orphan`, direct dependents instead
// lose the ownerReference and stay. Dependents come from the store's owner
// index (Txn::dependentsOf), so the cost follows the number of dependents,
// not the number of objects.
Status cascadeDelete(store::Txn& txn, const store::Key& key, bool orphan,
                     std::vector<store::Object>* removed) {
  KNAP_ASSIGN_OR_RETURN(store::Object root, txn.remove(key));
  std::set<std::string> kinds;
  for (const ResourceInfo* r : namespacedResources()) kinds.insert(r->kind);
  std::deque<std::string> pending = {metaString(root.body, "uid")};
  removed->push_back(std::move(root));
  while (!pending.empty()) {
    const std::set<std::string> uid = {pending.front()};
    pending.pop_front();
    if (uid.begin()->empty()) continue;
    KNAP_ASSIGN_OR_RETURN(std::vector<store::Key> keys, txn.dependentsOf(key.ns, *uid.begin()));
    for (const store::Key& k : keys) {
      if (!kinds.count(k.kind)) continue;
      auto got = txn.get(k);
      if (!got.isOk() && got.status().code() == Code::kNotFound) continue;  // removed earlier in this cascade
      KNAP_RETURN_IF_ERROR(got.status());
      store::Object& o = *got;
      if (!hasOwnerUid(o.body, uid)) continue;  // the index is a superset
      if (orphan) {
        json body = o.body;
        json kept = json::array();
        for (const json& ref : body["metadata"]["ownerReferences"]) {
          if (!(ref.is_object() && ref.contains("uid") && ref["uid"].is_string() &&
                uid.count(ref["uid"].get<std::string>())))
            kept.push_back(ref);
        }
        if (kept.empty())
          body["metadata"].erase("ownerReferences");
        else
          body["metadata"]["ownerReferences"] = kept;
        KNAP_RETURN_IF_ERROR(txn.update(o.key, body, 0).status());
        continue;
      }
      KNAP_ASSIGN_OR_RETURN(store::Object gone, txn.remove(o.key));
      pending.push_back(metaString(gone.body, "uid"));
      removed->push_back(std::move(gone));
    }
  }
  return Status::ok();
}

// Deleting a Namespace deletes everything in it first: every namespaced kind
// and its Events (Kubernetes' namespace controller, done at once here).
Status removeNamespaceContents(store::Txn& txn, const std::string& ns, std::vector<store::Object>* removed) {
  std::vector<std::string> kinds;
  for (const ResourceInfo* r : namespacedResources()) kinds.push_back(r->kind);
  kinds.push_back(events::kStoreKind);
  for (const std::string& kind : kinds) {
    KNAP_ASSIGN_OR_RETURN(auto objs, txn.list(kind, ns));
    for (store::Object& o : objs) {
      KNAP_ASSIGN_OR_RETURN(store::Object gone, txn.remove(o.key));
      removed->push_back(std::move(gone));
    }
  }
  return Status::ok();
}

// Strategic merge patch directives ("$patch", "$retainKeys",
// "$setElementOrder/..."), dropped: the core kinds knap serves have no list
// with a merge key, so for them a strategic merge patch is a JSON merge patch.
void dropPatchDirectives(json& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end();) {
      if (!it.key().empty() && it.key()[0] == '$') {
        it = j.erase(it);
      } else {
        dropPatchDirectives(*it);
        ++it;
      }
    }
  } else if (j.is_array()) {
    for (json& e : j) dropPatchDirectives(e);
  }
}

// A list continue token: base64 of {"rv":N,"ns":"...","name":"..."}, the
// resourceVersion of the first page and the last key already returned.
struct ContinueToken {
  int64_t rv = 0;
  std::string ns;
  std::string name;
};

std::string encodeContinue(const ContinueToken& c) {
  return base64Encode(json{{"rv", c.rv}, {"ns", c.ns}, {"name", c.name}}.dump());
}

std::optional<ContinueToken> decodeContinue(const std::string& text) {
  if (text.size() > 4096) return std::nullopt;
  std::string raw;
  if (!base64Decode(text, &raw)) return std::nullopt;
  auto decoded = parseJson(raw);
  if (!decoded.isOk()) return std::nullopt;
  const json& j = *decoded;
  if (!j.is_object() || !j.contains("rv") || !j["rv"].is_number_integer() || !j.contains("ns") ||
      !j["ns"].is_string() || !j.contains("name") || !j["name"].is_string())
    return std::nullopt;
  ContinueToken c{j["rv"].get<int64_t>(), j["ns"].get<std::string>(), j["name"].get<std::string>()};
  if (c.rv <= 0) return std::nullopt;
  return c;
}

}  // namespace

std::string toJsonText(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// ---- request target ----

struct RestHandler::Query {
  std::map<std::string, std::string> params;
  std::string get(const std::string& k) const {
    auto it = params.find(k);
    return it == params.end() ? "" : it->second;
  }
  bool has(const std::string& k) const { return params.count(k) > 0; }
};

struct RestHandler::Target {
  enum class Kind { kOther, kCollection, kItem, kStatus, kAutoscaling, kMetrics, kLog, kRestart };
  Kind kind = Kind::kOther;
  std::vector<std::string> segs;
  Query query;
  const ResourceInfo* info = nullptr;
  std::string ns;  // empty for cluster-wide collections
  std::string name;

  static Target parse(const std::string& target) {
    Target t;
    size_t q = target.find('?');
    std::string path = target.substr(0, q);
    if (q != std::string::npos) {
      std::string qs = target.substr(q + 1);
      size_t start = 0;
      while (start <= qs.size()) {
        size_t amp = qs.find('&', start);
        std::string kv = qs.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
        if (!kv.empty()) {
          size_t eq = kv.find('=');
          std::string k = percentDecode(kv.substr(0, eq), true);
          std::string v = eq == std::string::npos ? "" : percentDecode(kv.substr(eq + 1), true);
          t.query.params[k] = v;
        }
        if (amp == std::string::npos) break;
        start = amp + 1;
      }
    }
    size_t start = 0;
    while (start < path.size()) {
      size_t slash = path.find('/', start);
      std::string seg = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      if (!seg.empty()) t.segs.push_back(percentDecode(seg, false));
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    const auto& s = t.segs;
    auto findPlural = [](const std::string& p) -> const ResourceInfo* {
      for (const ResourceInfo& r : resources())
        if (r.plural == p) return &r;
      return nullptr;
    };
    if (s.size() >= 4 && s[0] == "apis" && s[1] == kGroup && s[2] == kVersion) {
      if (s.size() == 4) {
        t.info = findPlural(s[3]);
        if (t.info) t.kind = Kind::kCollection;
      } else if (s[3] == "namespaces" && s.size() >= 6 && s.size() <= 8) {
        t.info = findPlural(s[5]);
        t.ns = s[4];
        if (t.info) {
          if (s.size() == 6) t.kind = Kind::kCollection;
          if (s.size() >= 7) t.name = s[6];
          if (s.size() == 7) t.kind = Kind::kItem;
          if (s.size() == 8 && s[7] == "status") t.kind = Kind::kStatus;
        }
      }
    } else if (s.size() >= 4 && s[0] == "apis" && s[1] != "knap.dev" && findApiResource(s[1], s[2], s[3]) &&
               !findApiResource(s[1], s[2], s[3])->core()) {
      // DomainMapping (serving.knative.dev/v1beta1) and the cluster-scoped
      // ClusterDomainClaim: /apis/G/V/PLURAL[/NAME[/status]].
      t.info = findApiResource(s[1], s[2], s[3]);
      if (s.size() == 4) t.kind = Kind::kCollection;
      if (s.size() >= 5 && s.size() <= 6 && !t.info->namespaced) {
        t.name = s[4];
        if (s.size() == 5) t.kind = Kind::kItem;
        if (s.size() == 6 && s[5] == "status" && t.info->has_status) t.kind = Kind::kStatus;
      }
    } else if (s.size() >= 6 && s[0] == "apis" && s[3] == "namespaces" && s.size() <= 8 &&
               findApiResource(s[1], s[2], s[5]) && findApiResource(s[1], s[2], s[5])->namespaced &&
               !findApiResource(s[1], s[2], s[5])->core()) {
      // /apis/G/V/namespaces/NS/PLURAL[/NAME[/status]] for the kinds above.
      t.info = findApiResource(s[1], s[2], s[5]);
      t.ns = s[4];
      if (s.size() == 6) t.kind = Kind::kCollection;
      if (s.size() >= 7) t.name = s[6];
      if (s.size() == 7) t.kind = Kind::kItem;
      if (s.size() == 8 && s[7] == "status" && t.info->has_status) t.kind = Kind::kStatus;
    } else if (s.size() >= 3 && s[0] == "api" && s[1] == "v1") {
      // core/v1: /api/v1/namespaces[/NAME[/status]], /api/v1/{secrets,configmaps},
      // /api/v1/namespaces/NS/{secrets,configmaps}[/NAME]. Events and the
      // placeholder services are served elsewhere (kind stays kOther).
      const ResourceInfo* ns_info = findCoreResource("namespaces");
      if (s[2] == "namespaces" && s.size() <= 5 && (s.size() != 5 || s[4] == "status")) {
        t.info = ns_info;
        if (s.size() == 3) t.kind = Kind::kCollection;
        if (s.size() >= 4) t.name = s[3];
        if (s.size() == 4) t.kind = Kind::kItem;
        if (s.size() == 5) t.kind = Kind::kStatus;
      } else if (s.size() == 3 && findCoreResource(s[2]) && findCoreResource(s[2])->namespaced) {
        t.info = findCoreResource(s[2]);
        t.kind = Kind::kCollection;
      } else if (s[2] == "namespaces" && (s.size() == 5 || s.size() == 6) && findCoreResource(s[4]) &&
                 findCoreResource(s[4])->namespaced) {
        t.info = findCoreResource(s[4]);
        t.ns = s[3];
        if (s.size() == 5) t.kind = Kind::kCollection;
        if (s.size() == 6) t.name = s[5];
        if (s.size() == 6) t.kind = Kind::kItem;
      }
    } else if (s.size() == 8 && s[0] == "apis" && s[1] == "knap.dev" && s[2] == "v1" &&
               s[3] == "namespaces" && s[5] == "revisions" &&
               (s[7] == "autoscaling" || s[7] == "log" || s[7] == "restart")) {
      t.kind = s[7] == "log" ? Kind::kLog : s[7] == "restart" ? Kind::kRestart : Kind::kAutoscaling;
      t.info = findPlural("revisions");
      t.ns = s[4];
      t.name = s[6];
    } else if (s.size() == 6 && s[0] == "apis" && s[1] == "knap.dev" && s[2] == "v1" &&
               s[3] == "namespaces" && s[5] == "metrics") {
      t.kind = Kind::kMetrics;
      t.ns = s[4];
    }
    return t;
  }
};

struct RestHandler::WriteCtx {
  const ResourceInfo* info;
  std::string ns;
  std::string name;
  bool dry_run = false;
  std::string validation = "Strict";
  bool status_sub = false;
  std::vector<std::string> warnings;
  bool raced = false;               // set by write(): the object changed since it was read (409)
  std::string manager = "unknown";  // ?fieldManager=, for metadata.managedFields
  std::string user;                 // the caller, recorded in serving.knative.dev/creator and lastModifier
  // Server-side apply: the managedFields the apply computed (null: none);
  // unset for every other write, whose changes are recorded as an Update.
  std::optional<json> apply_managed;

  // The managedFields of `obj` after admission: what the apply computed, or
  // this write's Update over `old` (null for a create).
  void manage(json& obj, const json& old, WallTime now) const {
    if (status_sub) return;  // status is server-owned: the stored managedFields stay
    if (apply_managed) {
      if (apply_managed->is_null())
        obj["metadata"].erase("managedFields");
      else
        obj["metadata"]["managedFields"] = *apply_managed;
      return;
    }
    obj = recordUpdate(old, std::move(obj), manager, info->apiVersion(), now);
  }

  HttpResponse finish(int code, const json& obj) {
    HttpResponse r = jsonResponse(code, withTypeMeta(obj, *info));
    for (const auto& w : warnings) r.warnings.push_back(warningValue(w));
    return r;
  }
};

RestHandler::RestHandler(store::Store& store, const Config& config, TimeSource& clock, RequestPolicy policy)
    : store_(store),
      config_(config),
      clock_(clock),
      policy_(std::move(policy)),
      rng_(std::random_device{}()) {
  ensureSystemNamespaces();
}

void RestHandler::ensureSystemNamespaces() {
  for (const char* name : kSystemNamespaces) {
    if (store_.get({"Namespace", "", name}).isOk()) continue;
    json ns = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}}}};
    (void)setCoreDefaults("Namespace", ns);
    auto created = store_.create({"Namespace", "", name}, ns);
    if (!created.isOk() && created.status().code() != Code::kAlreadyExists)
      LOG(ERROR) << "api: creating namespace " << name << ": " << created.status().toString();
  }
}

std::string RestHandler::newName(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(rng_mu_);
  return generateNameSuffix(prefix, rng_);
}

namespace {

std::optional<HttpResponse> guard(const HttpRequest& req, const RequestPolicy& policy) {
  RequestHeaders h{req.method, req.host, req.origin, req.content_type, !req.body.empty()};
  if (auto err = guardRequest(h, policy.allowed_hosts)) return errorResponse(*err);
  return std::nullopt;
}

}  // namespace

// ---- authentication and authorization ----

namespace {

// What kube-apiserver answers without a valid credential.
HttpResponse unauthorized() {
  HttpResponse r = errorResponse(makeApiError(401, "Unauthorized", "Unauthorized"));
  return r;
}

// Paths kube-apiserver's system:public-info-viewer role opens to anonymous callers.
bool openToAnonymous(const std::string& method, const std::vector<std::string>& segs) {
  if (method != "GET" && method != "HEAD") return false;
  if (segs.empty()) return false;
  const std::string& p = segs[0];
  if (p == "healthz" || p == "readyz" || p == "livez") return true;
  return p == "version" && segs.size() == 1;
}

// "Bearer TOKEN" (the scheme is case-insensitive); "" otherwise.
std::string bearerToken(const std::string& header) {
  if (header.size() < 7) return "";
  std::string scheme = asciiLower(header.substr(0, 7));
  if (scheme != "bearer ") return "";
  std::string token = header.substr(7);
  size_t b = token.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  token = token.substr(b);
  while (!token.empty() && token.back() == ' ') token.pop_back();
  return token;
}

}  // namespace

std::optional<HttpResponse> RestHandler::checkAccess(const HttpRequest& req, const Target& t, bool watch,
                                                     UserInfo* user) {
  const AccessControl* access = policy_.access.get();
  if (!access || req.local_admin) {
    *user = localAdmin();
    return std::nullopt;
  }
  bool authenticated = false;
  if (req.cert_user) {
    *user = *req.cert_user;
    authenticated = true;
  } else if (!req.authorization.empty()) {
    std::string token = bearerToken(req.authorization);
    std::optional<UserInfo> found;
    if (!token.empty() && access->tokens) found = access->tokens->lookup(token);
    if (!found && !token.empty() && access->service_account_tokens) {
      auto id =
          access->service_account_tokens->verify(token, kApiAudience, static_cast<int64_t>(::time(nullptr)));
      if (id.isOk())
        found = UserInfo{id->user(), "", {"system:serviceaccounts", "system:serviceaccounts:" + id->ns}};
    }
    // A credential that is sent and wrong is 401 everywhere, as in kube-apiserver.
    if (!found) return unauthorized();
    *user = std::move(*found);
    authenticated = true;
  }
  if (!authenticated) {
    if (openToAnonymous(req.method, t.segs)) {
      *user = UserInfo{"system:anonymous", "", {"system:unauthenticated"}};
      return std::nullopt;
    }
    return unauthorized();
  }
  std::string path = req.target.substr(0, req.target.find('?'));
  RequestAttributes attrs = requestAttributes(req.method, path, t.segs, watch);
  if (authorize(*user, attrs, access->bindings)) return std::nullopt;
  json details = json::object();
  if (attrs.resource_request) {
    if (!attrs.name.empty()) details["name"] = attrs.name;
    details["group"] = attrs.api_group;
    details["kind"] = attrs.resource;
  }
  return errorResponse(makeApiError(403, "Forbidden", forbiddenMessage(*user, attrs), details));
}

HttpResponse RestHandler::selfSubjectAccessReview(const HttpRequest& req, const UserInfo& user) {
  auto body = parseBody(req.body, mediaType(req.content_type).find("yaml") != std::string::npos);
  if (!body.isOk())
    return errorResponse(badRequestError("error decoding request body: " + body.status().message()));
  json review = std::move(*body);
  if (!review.is_object() || !review.contains("spec") || !review["spec"].is_object())
    return errorResponse(badRequestError("a SelfSubjectAccessReview needs a spec"));
  const json& spec = review["spec"];
  auto field = [](const json& o, const char* k) -> std::string {
    auto it = o.find(k);
    return it != o.end() && it->is_string() ? it->get<std::string>() : "";
  };
  RequestAttributes attrs;
  if (spec.contains("resourceAttributes") && spec["resourceAttributes"].is_object()) {
    const json& ra = spec["resourceAttributes"];
    attrs.verb = field(ra, "verb");
    attrs.api_group = field(ra, "group");
    attrs.resource = field(ra, "resource");
    attrs.subresource = field(ra, "subresource");
    attrs.ns = field(ra, "namespace");
    attrs.name = field(ra, "name");
  } else if (spec.contains("nonResourceAttributes") && spec["nonResourceAttributes"].is_object()) {
    attrs.resource_request = false;
    attrs.verb = field(spec["nonResourceAttributes"], "verb");
    attrs.path = field(spec["nonResourceAttributes"], "path");
  } else {
    Status st =
        invalidArgument("exactly one of nonResourceAttributes or resourceAttributes must be specified");
    st.withFieldErrors({{"spec.resourceAttributes",
                         "Required value: exactly one of nonResourceAttributes or "
                         "resourceAttributes must be specified",
                         "FieldValueRequired"}});
    return errorResponse(
        makeApiError(422, "Invalid", st.message(),
                     {{"group", "authorization.k8s.io"}, {"kind", "SelfSubjectAccessReview"}}));
  }
  std::string reason;
  bool allowed = !policy_.access || authorize(user, attrs, policy_.access->bindings, &reason);
  if (!policy_.access) reason = "access control is off: every caller is admin";
  json status = {{"allowed", allowed}};
  if (!reason.empty()) status["reason"] = reason;
  json out = {{"kind", "SelfSubjectAccessReview"},
              {"apiVersion", "authorization.k8s.io/v1"},
              {"metadata", {{"creationTimestamp", nullptr}}},
              {"spec", spec},
              {"status", status}};
  return jsonResponse(201, out);
}

HttpResponse RestHandler::selfSubjectReview(const UserInfo& user) {
  json info = {{"username", user.name}, {"groups", user.groups}};
  if (!user.uid.empty()) info["uid"] = user.uid;
  return jsonResponse(201, {{"kind", "SelfSubjectReview"},
                            {"apiVersion", "authentication.k8s.io/v1"},
                            {"metadata", {{"creationTimestamp", nullptr}}},
                            {"status", {{"userInfo", info}}}});
}

HttpResponse RestHandler::handle(const HttpRequest& req) {
  if (auto refused = guard(req, policy_)) return *refused;
  try {
    // The web console's files are public (they carry no data; the page
    // authenticates its own API calls).
    if (auto ui = consoleResponse(req)) return *ui;
    Target t = Target::parse(req.target);
    UserInfo user;
    if (auto refused = checkAccess(req, t, false, &user)) return *refused;
    const auto& s = t.segs;
    if (req.method == "POST" && s.size() == 4 && s[0] == "apis" && s[2] == "v1") {
      if (s[1] == "authorization.k8s.io" && s[3] == "selfsubjectaccessreviews")
        return selfSubjectAccessReview(req, user);
      if (s[1] == "authentication.k8s.io" && s[3] == "selfsubjectreviews") return selfSubjectReview(user);
    }
    return dispatch(req, t, user);
  } catch (const std::exception& e) {
    // A bug or a foreign exception: never let it reach the connection.
    LOG(ERROR) << "api: " << req.method << " " << req.target << " failed: " << e.what();
    return errorResponse(
        makeApiError(500, "InternalError", std::string("Internal error occurred: ") + e.what()));
  }
}

HttpResponse RestHandler::dispatch(const HttpRequest& req, const Target& t, const UserInfo& user) {
  const auto& s = t.segs;
  const std::string& m = req.method;
  bool get = m == "GET" || m == "HEAD";
  using K = Target::Kind;
  switch (t.kind) {
    case K::kCollection:
      if (get) return listObjects(req, t);
      if (t.ns.empty() && t.info->namespaced) return methodNotAllowed(m);
      if (m == "POST") return createObject(req, t, user.name);
      if (m == "DELETE") return deleteCollection(req, t);
      return methodNotAllowed(m);
    case K::kItem:
    case K::kStatus:
      if (get) return getObject(req, t);
      if (m == "PUT") return replaceObject(req, t, user.name);
      if (m == "PATCH") return patchObject(req, t, user.name);
      if (m == "DELETE" && t.kind == K::kItem) return deleteObject(req, t);
      if (m == "DELETE" && t.kind == K::kStatus) return methodNotAllowed(m);
      return methodNotAllowed(m);
    case K::kAutoscaling:
      if (get) return autoscalingView(t);
      return methodNotAllowed(m);
    case K::kMetrics:
      if (get) return metricsView(t);
      return methodNotAllowed(m);
    case K::kLog:
      if (get) return logView(t);
      return methodNotAllowed(m);
    case K::kRestart:
      if (m == "POST") return restartPods(t);
      return methodNotAllowed(m);
    case K::kOther:
      break;
  }
  if (auto events = handleEventsRequest(store_, clock_, events::kDefaultTtl, req, s, t.query.params))
    return *events;
  if (auto placeholder = handlePlaceholderRequest(m, s, store_.currentResourceVersion())) return *placeholder;
  if (!get) {
    // Every remaining endpoint is read-only; unknown paths are 404 for any method.
    if (s.empty() || s[0] == "version" || s[0] == "apis" || s[0] == "openapi" || s[0] == "api" ||
        s[0] == "healthz" || s[0] == "readyz" || s[0] == "livez") {
      if (s.size() <= 3 && (s.empty() || s[0] != "api" || s.size() <= 2)) return methodNotAllowed(m);
    }
    return notFoundPath();
  }
  if (s.empty()) {
    return jsonResponse(
        200,
        {{"paths", json::array({"/apis", "/apis/networking.internal.knative.dev",
                                "/apis/networking.internal.knative.dev/v1alpha1", "/apis/serving.knative.dev",
                                "/apis/serving.knative.dev/v1", "/apis/serving.knative.dev/v1beta1",
                                "/healthz", "/openapi/v3", "/readyz", "/version"})}});
  }
  if (s.size() == 1 && (s[0] == "healthz" || s[0] == "readyz" || s[0] == "livez")) {
    HttpResponse r;
    if (s[0] == "readyz" && !ready_.load()) {
      r.code = 503;
      r.body = "knapd is starting or stopping: not ready";
      r.content_type = "text/plain; charset=utf-8";
      return r;
    }
    r.body = "ok";
    r.content_type = "text/plain; charset=utf-8";
    return r;
  }
  if (s.size() == 1 && s[0] == "version") return jsonResponse(200, versionDocument());
  if (s.size() == 1 && s[0] == "apis") return jsonResponse(200, apiGroupListDocument());
  if (s.size() == 2 && s[0] == "apis" && s[1] == kGroup) return jsonResponse(200, apiGroupDocument());
  if (s.size() == 3 && s[0] == "apis" && s[1] == kGroup && s[2] == kVersion)
    return jsonResponse(200, apiResourceListDocument());
  if (s.size() == 2 && s[0] == "apis" && s[1] == kNetworkingGroup)
    return jsonResponse(200, networkingGroupDocument());
  if (s.size() == 2 && s[0] == "apis" && placeholderGroupDocument(s[1]))
    return jsonResponse(200, *placeholderGroupDocument(s[1]));
  if (s.size() == 3 && s[0] == "apis" && s[2] == "v1" && placeholderGroupDocument(s[1])) {
    return jsonResponse(200, {{"kind", "APIResourceList"},
                              {"apiVersion", "v1"},
                              {"groupVersion", s[1] + "/v1"},
                              {"resources", placeholderApiResources(s[1], "v1")}});
  }
  if (s.size() == 3 && s[0] == "apis" && domainResourceListDocument(s[1], s[2]))
    return jsonResponse(200, *domainResourceListDocument(s[1], s[2]));
  if (s.size() == 1 && s[0] == "api") {
    return jsonResponse(200,
                        {{"kind", "APIVersions"},
                         {"versions", json::array({"v1"})},
                         {"serverAddressByClientCIDRs",
                          json::array({{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", "127.0.0.1"}}})}});
  }
  if (s.size() == 2 && s[0] == "api" && s[1] == "v1") {
    json list = coreApiResources();
    list.push_back(eventsApiResource());
    for (const json& r : placeholderApiResources("", "v1")) list.push_back(r);
    return jsonResponse(
        200,
        {{"kind", "APIResourceList"}, {"apiVersion", "v1"}, {"groupVersion", "v1"}, {"resources", list}});
  }
  if (s.size() == 2 && s[0] == "apis" && reviewGroupDocument(s[1]))
    return jsonResponse(200, *reviewGroupDocument(s[1]));
  if (s.size() == 3 && s[0] == "apis" && s[2] == "v1" && reviewResourceListDocument(s[1]))
    return jsonResponse(200, *reviewResourceListDocument(s[1]));
  if (s.size() == 2 && s[0] == "apis" && s[1] == kEventsGroup)
    return jsonResponse(200, eventsGroupDocument());
  if (s.size() == 3 && s[0] == "apis" && s[1] == kEventsGroup && s[2] == "v1") {
    return jsonResponse(200, {{"kind", "APIResourceList"},
                              {"apiVersion", "v1"},
                              {"groupVersion", std::string(kEventsGroup) + "/v1"},
                              {"resources", json::array({eventsApiResource()})}});
  }
  if (s.size() == 2 && s[0] == "openapi" && s[1] == "v2") {
    if (req.accept.find("protobuf") != std::string::npos) {
      HttpResponse r;
      r.body = openApiV2Protobuf();
      // As kube-apiserver: the media type kubectl asked for does not parse as
      // a MIME type in Go's mime package (the '@').
      r.content_type = "application/octet-stream";
      return r;
    }
    return jsonResponse(200, openApiV2Document());
  }
  if (s.size() == 2 && s[0] == "openapi" && s[1] == "v3") return jsonResponse(200, openApiV3RootDocument());
  if (s.size() == 4 && s[0] == "openapi" && s[1] == "v3" && s[2] == "api" && s[3] == "v1") {
    HttpResponse r = jsonResponse(200, openApiV3CoreDocument());
    r.headers["ETag"] = "\"" + openApiV3CoreHash() + "\"";
    return r;
  }
  if (s.size() == 5 && s[0] == "openapi" && s[1] == "v3" && s[2] == "apis" && s[3] == kGroup &&
      s[4] == kVersion) {
    HttpResponse r = jsonResponse(200, openApiV3GroupVersionDocument());
    r.headers["ETag"] = "\"" + openApiV3Hash() + "\"";
    return r;
  }
  if (s.size() == 5 && s[0] == "openapi" && s[1] == "v3" && s[2] == "apis" &&
      openApiV3DomainDocument(s[3], s[4])) {
    HttpResponse r = jsonResponse(200, *openApiV3DomainDocument(s[3], s[4]));
    r.headers["ETag"] = "\"" + *openApiV3DomainHash(s[3], s[4]) + "\"";
    return r;
  }
  return notFoundPath();
}

// ---- reads ----

HttpResponse RestHandler::getObject(const HttpRequest& req, const Target& t) {
  auto obj = store_.get({t.info->kind, t.ns, t.name});
  if (!obj.isOk()) return errorResponse(errorFromStatus(obj.status(), t.info, t.name));
  json body = withTypeMeta(obj->body, *t.info);
  if (acceptsTable(req.accept)) {
    return jsonResponse(200, makeTable(*t.info, {body}, parseIncludeObject(t.query.get("includeObject")),
                                       std::to_string(obj->resource_version)));
  }
  return jsonResponse(200, body);
}

namespace {

// The plain JSON list of a namespaced kind, assembled from the stored text.
HttpResponse listRawObjects(store::Store& store, const ResourceInfo& info, const std::string& ns,
                            const LabelSelector& labels, int64_t limit,
                            const std::optional<ContinueToken>& cont) {
  int64_t rv = 0;
  std::vector<store::Store::RawObject> objs;
  // A selector with a requirement an object must have a label for (k=v,
  // k in (..), k) reads only the objects with that label (the store's labels
  // index); the full selector is matched below either way.
  const LabelSelector::Requirement* narrow = nullptr;
  for (LabelSelector::Op op :
       {LabelSelector::Op::kEquals, LabelSelector::Op::kIn, LabelSelector::Op::kExists}) {
    for (const auto& r : labels.requirements()) {
      if (!narrow && r.op == op) narrow = &r;
    }
  }
  for (int attempt = 0; attempt < 5; ++attempt) {  // as in listObjects: RV stable around the list
    rv = store.currentResourceVersion();
    auto listed = narrow ? store.listRawWithLabel(info.kind, ns, narrow->key, narrow->values)
                         : store.listRaw(info.kind, ns, /*with_labels=*/!labels.empty());
    if (!listed.isOk()) return errorResponse(errorFromStatus(listed.status(), nullptr, ""));
    objs = std::move(*listed);
    if (store.currentResourceVersion() == rv) break;
  }
  if (cont) rv = cont->rv;
  // The stored text already starts with this kind's type meta (nlohmann sorts
  // keys: apiVersion, kind, metadata, ...); an object that does not (stored by
  // another version) is parsed and given it.
  const std::string type_prefix =
      "{\"apiVersion\":" + toJsonText(info.apiVersion()) + ",\"kind\":" + toJsonText(info.kind) + ",";
  std::string items;
  int64_t count = 0, remaining = 0;
  const store::Store::RawObject* last = nullptr;
  for (const store::Store::RawObject& o : objs) {
    if (cont && !(std::pair(o.key.ns, o.key.name) > std::pair(cont->ns, cont->name))) continue;
    if (!labels.empty()) {
      json l = o.labels.empty() ? json() : json::parse(o.labels, nullptr, /*allow_exceptions=*/false);
      if (!labels.matches(l.is_object() ? l : json())) continue;
    }
    if (limit > 0 && count == limit) {
      ++remaining;
      continue;
    }
    if (count++ > 0) items += ',';
    if (o.json.compare(0, type_prefix.size(), type_prefix) == 0) {
      items += o.json;
    } else {
      json body = json::parse(o.json, nullptr, /*allow_exceptions=*/false);
      items += toJsonText(withTypeMeta(std::move(body), info));
    }
    last = &o;
  }
  json list_meta = {{"resourceVersion", std::to_string(rv)}};
  if (remaining > 0 && last) {
    list_meta["continue"] = encodeContinue({rv, last->key.ns, last->key.name});
    list_meta["remainingItemCount"] = remaining;
  }
  HttpResponse r;
  r.code = 200;
  r.body = "{\"apiVersion\":" + toJsonText(info.apiVersion()) + ",\"items\":[" + items +
           "],\"kind\":" + toJsonText(info.kind + "List") + ",\"metadata\":" + toJsonText(list_meta) + "}";
  return r;
}

}  // namespace

HttpResponse RestHandler::listObjects(const HttpRequest& req, const Target& t) {
  auto labels = LabelSelector::parse(t.query.get("labelSelector"));
  if (!labels.isOk()) return errorResponse(badRequestError(labels.status().message()));
  auto fields = FieldSelector::parse(t.query.get("fieldSelector"));
  if (!fields.isOk()) return errorResponse(badRequestError(fields.status().message()));
  // limit/continue: pages in (namespace, name) order. The token carries the
  // first page's resourceVersion and the last key sent; every page reports
  // that resourceVersion, so a watch from it replays whatever changed while
  // the client paged (later pages show the objects as they are now).
  int64_t limit = 0;
  std::string limit_text = t.query.get("limit");
  if (!limit_text.empty()) {
    try {
      size_t used = 0;
      limit = std::stoll(limit_text, &used);
      if (used != limit_text.size()) throw std::invalid_argument("limit");
    } catch (const std::exception&) {
      return errorResponse(badRequestError("limit: invalid value \"" + limit_text + "\""));
    }
    if (limit < 0) limit = 0;
  }
  std::optional<ContinueToken> cont;
  if (!t.query.get("continue").empty()) {
    cont = decodeContinue(t.query.get("continue"));
    if (!cont) return errorResponse(badRequestError("continue key is not valid: the token is malformed"));
    std::string rv_param = t.query.get("resourceVersion");
    if (!rv_param.empty() && rv_param != "0")
      return errorResponse(badRequestError("specifying resource version is not allowed when using continue"));
    // The token is usable while the changes since its resourceVersion are retained.
    auto since = store_.eventsSince(cont->rv, t.info->kind);
    if (!since.isOk() && since.status().code() == Code::kGone) {
      return errorResponse(makeApiError(410, "Expired",
                                        "The provided continue parameter is too old to display a consistent "
                                        "list result. You can start a new "
                                        "list without the continue parameter."));
    }
  }
  // A plain JSON list of a namespaced kind is assembled from the stored text
  // (Store::listRaw): no JSON tree per object; a label selector reads only
  // the objects carrying one of its labels, so its cost follows the matches.
  if (!acceptsTable(req.accept) && fields->empty() && t.info->namespaced)
    return listRawObjects(store_, *t.info, t.ns, *labels, limit, cont);
  // The list's resourceVersion must not be newer than what the list shows, or a
  // watch from it would miss a change: read the RV around the list until stable.
  int64_t rv = 0;
  std::vector<store::Object> objs;
  for (int attempt = 0; attempt < 5; ++attempt) {
    rv = store_.currentResourceVersion();
    auto listed = store_.list(t.info->kind, t.ns);
    if (!listed.isOk()) return errorResponse(errorFromStatus(listed.status(), nullptr, ""));
    objs = std::move(*listed);
    if (store_.currentResourceVersion() == rv) break;
  }
  if (cont) rv = cont->rv;
  std::vector<json> items;
  int64_t remaining = 0;
  for (store::Object& o : objs) {
    if (cont && !(std::pair(o.key.ns, o.key.name) > std::pair(cont->ns, cont->name))) continue;
    json* l = labelsOf(o.body);
    if (!labels->matches(l ? *l : json())) continue;
    if (!fields->matches(o.body)) continue;
    if (limit > 0 && static_cast<int64_t>(items.size()) == limit) {
      ++remaining;
      continue;
    }
    items.push_back(withTypeMeta(std::move(o.body), *t.info));
  }
  json list_meta = {{"resourceVersion", std::to_string(rv)}};
  if (remaining > 0) {
    const json& last = items.back();
    list_meta["continue"] = encodeContinue({rv, metaString(last, "namespace"), metaString(last, "name")});
    list_meta["remainingItemCount"] = remaining;
  }
  if (acceptsTable(req.accept)) {
    json table =
        makeTable(*t.info, items, parseIncludeObject(t.query.get("includeObject")), std::to_string(rv));
    table["metadata"] = list_meta;
    return jsonResponse(200, table);
  }
  json list = {{"kind", t.info->kind + "List"},
               {"apiVersion", t.info->apiVersion()},
               {"metadata", list_meta},
               {"items", json::array()}};
  for (json& i : items) list["items"].push_back(std::move(i));
  return jsonResponse(200, list);
}

// ---- writes ----

namespace {

// Reads dryRun / fieldValidation from the query. Returns an error response on bad values.
std::optional<HttpResponse> readWriteOptions(const std::map<std::string, std::string>& q, bool* dry_run,
                                             std::string* validation) {
  auto it = q.find("dryRun");
  if (it != q.end()) {
    if (it->second != "All" && !it->second.empty())
      return errorResponse(
          badRequestError("dryRun: Unsupported value: \"" + it->second + "\": supported values: \"All\""));
    *dry_run = it->second == "All";
  }
  it = q.find("fieldValidation");
  if (it != q.end() && !it->second.empty()) {
    std::string v = asciiLower(it->second);
    if (v == "strict")
      *validation = "Strict";
    else if (v == "warn")
      *validation = "Warn";
    else if (v == "ignore")
      *validation = "Ignore";
    else
      return errorResponse(badRequestError("fieldValidation: Unsupported value: \"" + it->second +
                                           "\": supported values: \"Ignore\", \"Strict\", \"Warn\""));
  }
  return std::nullopt;
}

// Whether a patch body carries a resourceVersion precondition.
bool patchSetsResourceVersion(const json& body, const std::string& type) {
  if (type == "application/json-patch+json") {
    if (!body.is_array()) return false;
    for (const json& op : body) {
      if (!op.is_object() || !op.contains("path") || !op["path"].is_string()) continue;
      std::string path = op["path"];
      if (path == "/metadata/resourceVersion" || path == "/metadata" || path.empty() || path == "/")
        return true;
    }
    return false;
  }
  if (!body.is_object() || !body.contains("metadata") || !body["metadata"].is_object()) return false;
  auto it = body["metadata"].find("resourceVersion");
  return it != body["metadata"].end() && !it->is_null();
}

std::string cannotHandle(const ResourceInfo& info) {
  return info.kind + " in version \"" + info.version + "\" cannot be handled as a " + info.kind + ": ";
}

// Checks apiVersion/kind of a decoded object and makes sure metadata is an object.
std::optional<HttpResponse> checkTypeMeta(const ResourceInfo& info, json& obj) {
  if (!obj.is_object())
    return errorResponse(badRequestError(cannotHandle(info) + "the request body must be a JSON object"));
  if (obj.contains("kind") && !(obj["kind"].is_string() && obj["kind"] == info.kind)) {
    return errorResponse(badRequestError(cannotHandle(info) + "kind " + toJsonText(obj["kind"]) +
                                         " does not match the resource's kind \"" + info.kind + "\""));
  }
  if (obj.contains("apiVersion") &&
      !(obj["apiVersion"].is_string() && obj["apiVersion"] == info.apiVersion())) {
    return errorResponse(badRequestError("the API version in the data (" +
                                         (obj["apiVersion"].is_string() ? obj["apiVersion"].get<std::string>()
                                                                        : toJsonText(obj["apiVersion"])) +
                                         ") does not match the expected API version (" + info.apiVersion() +
                                         ")"));
  }
  if (!obj.contains("metadata") || obj["metadata"].is_null()) obj["metadata"] = json::object();
  if (!obj["metadata"].is_object())
    return errorResponse(badRequestError(cannotHandle(info) + "metadata must be an object"));
  for (const char* f : {"name", "namespace", "generateName", "resourceVersion"}) {
    if (obj["metadata"].contains(f) && !obj["metadata"][f].is_string() && !obj["metadata"][f].is_null())
      return errorResponse(badRequestError(cannotHandle(info) + "metadata." + f + " must be a string"));
  }
  return std::nullopt;
}

// Checks that a body's namespace (if any) matches the URL's.
std::optional<HttpResponse> checkNamespace(json& obj, const std::string& ns) {
  std::string body_ns = metaString(obj, "namespace");
  if (!body_ns.empty() && body_ns != ns) {
    return errorResponse(badRequestError(
        "the namespace of the provided object does not match the namespace sent on the request"));
  }
  obj["metadata"]["namespace"] = ns;
  return std::nullopt;
}

std::optional<HttpResponse> checkName(json& obj, const std::string& name) {
  std::string body_name = metaString(obj, "name");
  if (!body_name.empty() && body_name != name) {
    return errorResponse(badRequestError("the name of the object (" + body_name +
                                         ") does not match the name on the URL (" + name + ")"));
  }
  obj["metadata"]["name"] = name;
  return std::nullopt;
}

void setAnnotation(json& obj, const char* key, const std::string& value) {
  json& md = obj["metadata"];
  if (!md.contains("annotations") || !md["annotations"].is_object()) md["annotations"] = json::object();
  md["annotations"][key] = value;
}

std::string annotation(const json& obj, const char* key) {
  if (!obj.contains("metadata") || !obj["metadata"].is_object()) return "";
  const json& md = obj["metadata"];
  if (!md.contains("annotations") || !md["annotations"].is_object()) return "";
  auto it = md["annotations"].find(key);
  return it != md["annotations"].end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

namespace {

// Metadata only the server sets: on update a client may send it back unchanged
// (kubectl get -o yaml | kubectl replace) or leave it out, never change it.
constexpr const char* kServerOwnedOnUpdate[] = {"uid", "creationTimestamp", "generation", "deletionTimestamp",
                                                "deletionGracePeriodSeconds"};

// As Kubernetes' ValidateObjectMetaUpdate: uid, creationTimestamp,
// deletionTimestamp and deletionGracePeriodSeconds are immutable (422). knap
// deletes objects at once and runs no finalizers, so metadata.finalizers must
// stay empty: a finalizer would promise a deletion hook nobody runs.
std::optional<HttpResponse> checkServerOwnedMetadata(const ResourceInfo& info, const json& obj,
                                                     const store::Object* live) {
  const json& md = obj["metadata"];
  std::vector<FieldError> errors;
  if (md.contains("finalizers") && !(md["finalizers"].is_array() && md["finalizers"].empty()) &&
      !md["finalizers"].is_null()) {
    errors.push_back(
        {"metadata.finalizers",
         "Forbidden: knap deletes objects at once and runs no finalizers; metadata.finalizers must be "
         "empty",
         "FieldValueForbidden"});
  }
  if (live) {
    const json& old = live->body["metadata"];
    for (const char* f : {"uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"}) {
      if (!md.contains(f) || md[f].is_null()) continue;  // left out: kept from the stored object
      if (!old.contains(f) || old[f] != md[f])
        errors.push_back({std::string("metadata.") + f,
                          "Invalid value: " + toJsonText(md[f]) + ": field is immutable",
                          "FieldValueInvalid"});
    }
  } else if (md.contains("deletionTimestamp") && !md["deletionTimestamp"].is_null()) {
    errors.push_back({"metadata.deletionTimestamp",
                      "Forbidden: may only be set by the server when it deletes an object",
                      "FieldValueForbidden"});
  }
  if (errors.empty()) return std::nullopt;
  Status st = invalidArgument(errors.front().field + ": " + errors.front().message);
  st.withFieldErrors(std::move(errors));
  return errorResponse(invalidError(info, metaString(obj, "name"), st));
}

}  // namespace

// Decodes unknown fields per fieldValidation, keeps status out of user writes,
// applies defaults and validation. On success `obj` is ready to store.
static std::optional<HttpResponse> admit(const Config& config, const ResourceInfo& info, bool status_sub,
                                         const std::string& validation, std::vector<std::string>* warnings,
                                         json& obj, const store::Object* live, const std::string& user) {
  json& md = obj["metadata"];
  // Server-owned: whatever the client sent, the write's managedFields are the
  // server's (RestHandler::WriteCtx::manage).
  md.erase("managedFields");
  md.erase("selfLink");
  if (status_sub) {
    json next = live->body;
    if (obj.contains("status"))
      next["status"] = obj["status"];
    else
      next.erase("status");
    if (md.contains("resourceVersion")) next["metadata"]["resourceVersion"] = md["resourceVersion"];
    obj = std::move(next);
  }
  // Status the user sent through the main resource is ignored, so it is not
  // decoded either; controllers write status through the store.
  json status;
  bool had_status = obj.contains("status");
  if (had_status) status = obj["status"];
  if (!status_sub) obj.erase("status");

  auto unknown = unknownFields(info.kind, obj);
  if (!unknown.isOk()) {
    std::string msg = unknown.status().message();
    for (const FieldError& fe : unknown.status().fieldErrors()) msg += "; " + fe.field + ": " + fe.message;
    return errorResponse(badRequestError(cannotHandle(info) + msg));
  }
  if (!unknown->empty()) {
    if (validation == "Strict") {
      std::string msg = cannotHandle(info) + "strict decoding error: ";
      for (size_t i = 0; i < unknown->size(); ++i) {
        if (i) msg += ", ";
        msg += "unknown field \"" + (*unknown)[i] + "\"";
      }
      return errorResponse(badRequestError(msg));
    }
    for (const std::string& f : *unknown) {
      if (validation == "Warn") warnings->push_back("unknown field \"" + f + "\"");
      removeFieldPath(obj, f);
    }
  }
  if (status_sub) return std::nullopt;

  if (auto err = checkServerOwnedMetadata(info, obj, live)) return err;
  if (live) {
    if (live->body.contains("status")) obj["status"] = live->body["status"];
    // Server-owned metadata comes from the stored object.
    for (const char* f : kServerOwnedOnUpdate) {
      if (live->body["metadata"].contains(f))
        obj["metadata"][f] = live->body["metadata"][f];
      else
        obj["metadata"].erase(f);
    }
  } else {
    for (const char* f : kServerOwnedOnUpdate) obj["metadata"].erase(f);
    obj["metadata"].erase("resourceVersion");
  }
  if (info.kind == "ClusterDomainClaim") {
    // networking.internal.knative.dev: no defaults, no creator annotations.
    Status st = validate(info.kind, obj, live ? &live->body : nullptr,
                         live ? Operation::kUpdate : Operation::kCreate, config);
    if (!st.isOk()) return errorResponse(invalidError(info, metaString(obj, "name"), st));
    return std::nullopt;
  }
  if (info.core()) {
    // core/v1 Namespaces, Secrets, ConfigMaps: kube-apiserver's rules (api/core_objects.h).
    Status st = setCoreDefaults(info.kind, obj);
    if (st.isOk()) st = validateCore(info.kind, obj, live ? &live->body : nullptr);
    if (!st.isOk()) return errorResponse(invalidError(info, metaString(obj, "name"), st));
    return std::nullopt;
  }
  setDefaults(info.kind, obj, config);
  // The stored object seen through the same defaulting, so that defaults added
  // since it was written do not count as user changes.
  json old;
  if (live) {
    old = live->body;
    setDefaults(info.kind, old, config);
  }
  if (info.kind != "Revision") {
    // Like Knative's webhook: creator is set once, lastModifier on spec changes.
    if (!live) {
      setAnnotation(obj, annotations::kCreator, user);
      setAnnotation(obj, annotations::kLastModifier, user);
    } else {
      std::string creator = annotation(live->body, annotations::kCreator);
      if (!creator.empty()) setAnnotation(obj, annotations::kCreator, creator);
      bool spec_changed = obj.value("spec", json()) != old.value("spec", json());
      if (spec_changed) {
        setAnnotation(obj, annotations::kLastModifier, user);
      } else {
        std::string last = annotation(live->body, annotations::kLastModifier);
        if (!last.empty()) setAnnotation(obj, annotations::kLastModifier, last);
      }
    }
  } else if (live && obj.value("spec", json()) != old.value("spec", json())) {
    Status st = invalidArgument("Immutable fields changed");
    st.withFieldErrors({{"spec",
                         "Immutable fields changed: the spec of a Revision cannot be changed; "
                         "change the Configuration's or Service's spec.template instead",
                         "FieldValueForbidden"}});
    return errorResponse(invalidError(info, metaString(obj, "name"), st));
  }
  Status valid =
      validate(info.kind, obj, live ? &old : nullptr, live ? Operation::kUpdate : Operation::kCreate, config);
  if (!valid.isOk()) {
    if (valid.code() == Code::kInvalidArgument)
      return errorResponse(invalidError(info, metaString(obj, "name"), valid));
    return errorResponse(errorFromStatus(valid, &info, metaString(obj, "name")));
  }
  return std::nullopt;
}

HttpResponse RestHandler::doCreate(WriteCtx& ctx, json obj, int create_code) {
  const ResourceInfo& info = *ctx.info;
  if (!info.user_creatable) {
    return errorResponse(makeApiError(
        405, "MethodNotAllowed",
        info.plural + "." + std::string(kGroup) +
            " cannot be created directly: Revisions are created by their Configuration whenever its "
            "spec.template changes; create or update a Service or Configuration instead",
        {{"group", std::string(kGroup)}, {"kind", info.plural}}));
  }
  if (!info.namespaced) {
    obj["metadata"].erase("namespace");
  } else if (auto err = checkNamespace(obj, ctx.ns)) {
    return *err;
  }
  if (info.namespaced && !isDns1123Label(ctx.ns)) {
    Status st = invalidArgument("invalid namespace");
    st.withFieldErrors(
        {{"metadata.namespace",
          "Invalid value: \"" + ctx.ns +
              "\": a namespace must be a DNS-1123 label (lower-case letters, digits and '-')"}});
    return errorResponse(invalidError(info, metaString(obj, "name"), st));
  }
  std::string name = metaString(obj, "name");
  std::string generate = metaString(obj, "generateName");
  if (name.empty() && generate.empty()) {
    Status st = invalidArgument("name or generateName is required");
    st.withFieldErrors(
        {{"metadata.name", "Required value: name or generateName is required", "FieldValueRequired"}});
    return errorResponse(invalidError(info, "", st));
  }
  // As in Kubernetes, a namespaced object needs its Namespace.
  if (info.namespaced && !store_.get({"Namespace", "", ctx.ns}).isOk()) {
    return errorResponse(makeApiError(404, "NotFound", "namespaces \"" + ctx.ns + "\" not found",
                                      {{"name", ctx.ns}, {"kind", "namespaces"}}));
  }
  for (int attempt = 0; attempt < 8; ++attempt) {
    json candidate = obj;
    if (name.empty()) candidate["metadata"]["name"] = newName(generate);
    std::vector<std::string> warnings = ctx.warnings;
    if (auto err = admit(config_, info, false, ctx.validation, &warnings, candidate, nullptr, ctx.user))
      return *err;
    ctx.manage(candidate, json(), clock_.now());
    std::string cname = metaString(candidate, "name");
    ctx.warnings = warnings;
    if (ctx.dry_run) {
      if (store_.get({info.kind, ctx.ns, cname}).isOk()) {
        if (!name.empty()) return errorResponse(alreadyExistsError(info, cname));
        continue;
      }
      return ctx.finish(create_code, candidate);
    }
    StatusOr<store::Object> created = notFound("");
    if (info.namespaced) {
      // Created in one transaction with a check of the namespace, so an object
      // cannot outlive a namespace deleted at the same moment.
      Status st = store_.transact([&](store::Txn& txn) -> Status {
        if (!txn.get({"Namespace", "", ctx.ns}).isOk())
          return Status(Code::kNotFound, "namespaces \"" + ctx.ns + "\" not found");
        created = txn.create({info.kind, ctx.ns, cname}, withTypeMeta(candidate, info));
        return created.status();
      });
      if (!st.isOk() && st.code() == Code::kNotFound)
        return errorResponse(
            makeApiError(404, "NotFound", st.message(), {{"name", ctx.ns}, {"kind", "namespaces"}}));
      if (!st.isOk()) created = st;
    } else {
      created = store_.create({info.kind, ctx.ns, cname}, withTypeMeta(candidate, info));
    }
    if (created.isOk()) return ctx.finish(create_code, created->body);
    if (created.status().code() == Code::kAlreadyExists && name.empty()) continue;
    if (created.status().code() == Code::kAlreadyExists) ctx.raced = true;
    return errorResponse(errorFromStatus(created.status(), &info, cname));
  }
  return errorResponse(makeApiError(
      500, "InternalError",
      "Internal error occurred: could not generate a unique name from generateName \"" + generate + "\""));
}

HttpResponse RestHandler::write(WriteCtx& ctx, json obj, const store::Object* live, int create_code) {
  if (!live) return doCreate(ctx, std::move(obj), create_code);
  const ResourceInfo& info = *ctx.info;
  if (!info.namespaced)
    obj["metadata"].erase("namespace");
  else if (auto err = checkNamespace(obj, ctx.ns))
    return *err;
  if (auto err = checkName(obj, ctx.name)) return *err;
  if (auto err = admit(config_, info, ctx.status_sub, ctx.validation, &ctx.warnings, obj, live, ctx.user))
    return *err;
  ctx.manage(obj, live->body, clock_.now());
  obj = withTypeMeta(std::move(obj), info);
  int64_t expected_rv = 0;
  std::string rv_text = metaString(obj, "resourceVersion");
  if (!rv_text.empty()) {
    try {
      size_t used = 0;
      expected_rv = std::stoll(rv_text, &used);
      if (used != rv_text.size() || expected_rv <= 0) throw std::invalid_argument("rv");
    } catch (const std::exception&) {
      Status st = invalidArgument("invalid resourceVersion");
      st.withFieldErrors({{"metadata.resourceVersion",
                           "Invalid value: \"" + rv_text + "\": must be a decimal resourceVersion"}});
      return errorResponse(invalidError(info, ctx.name, st));
    }
    if (expected_rv != live->resource_version) {
      ctx.raced = true;
      return errorResponse(conflictError(info, ctx.name,
                                         "the object has been modified; please apply your changes to the "
                                         "latest version and try again"));
    }
  }
  // A write that changes nothing keeps the resourceVersion (kubectl prints
  // "patched (no change)" / "unchanged" only then).
  json cmp = obj;
  cmp["metadata"]["resourceVersion"] = live->body["metadata"].value("resourceVersion", json());
  if (cmp["metadata"]["resourceVersion"].is_null()) cmp["metadata"].erase("resourceVersion");
  json live_body = withTypeMeta(live->body, info);
  if (cmp == live_body) return ctx.finish(200, live_body);
  if (ctx.dry_run) return ctx.finish(200, cmp);
  auto updated =
      store_.update({info.kind, ctx.ns, ctx.name}, obj, expected_rv ? expected_rv : live->resource_version);
  if (!updated.isOk()) {
    if (updated.status().code() == Code::kConflict || updated.status().code() == Code::kNotFound)
      ctx.raced = true;
    return errorResponse(errorFromStatus(updated.status(), &info, ctx.name));
  }
  return ctx.finish(200, updated->body);
}

HttpResponse RestHandler::createObject(const HttpRequest& req, const Target& t, const std::string& user) {
  WriteCtx ctx{t.info, t.ns, "", false, "Strict", false, {}};
  ctx.user = user;
  if (!t.query.get("fieldManager").empty()) ctx.manager = t.query.get("fieldManager");
  if (auto err = readWriteOptions(t.query.params, &ctx.dry_run, &ctx.validation)) return *err;
  if (!t.info->user_creatable) return doCreate(ctx, json::object(), 201);
  auto body = parseBody(req.body, mediaType(req.content_type).find("yaml") != std::string::npos);
  if (!body.isOk())
    return errorResponse(badRequestError("error decoding request body: " + body.status().message()));
  json obj = std::move(*body);
  if (auto err = checkTypeMeta(*t.info, obj)) return *err;
  return doCreate(ctx, std::move(obj), 201);
}

HttpResponse RestHandler::replaceObject(const HttpRequest& req, const Target& t, const std::string& user) {
  WriteCtx ctx{t.info, t.ns, t.name, false, "Strict", t.kind == Target::Kind::kStatus, {}};
  ctx.user = user;
  if (!t.query.get("fieldManager").empty()) ctx.manager = t.query.get("fieldManager");
  if (auto err = readWriteOptions(t.query.params, &ctx.dry_run, &ctx.validation)) return *err;
  auto body = parseBody(req.body, mediaType(req.content_type).find("yaml") != std::string::npos);
  if (!body.isOk())
    return errorResponse(badRequestError("error decoding request body: " + body.status().message()));
  json obj = std::move(*body);
  if (auto err = checkTypeMeta(*t.info, obj)) return *err;
  if (auto err = checkName(obj, t.name)) return *err;
  // An update without resourceVersion is unconditional: it retries a lost race.
  bool precondition = !metaString(obj, "resourceVersion").empty();
  for (int attempt = 0;; ++attempt) {
    ctx.raced = false;
    ctx.warnings.clear();
    auto live = store_.get({t.info->kind, t.ns, t.name});
    if (!live.isOk()) return errorResponse(errorFromStatus(live.status(), t.info, t.name));
    HttpResponse r = write(ctx, obj, &*live, 201);
    if (!ctx.raced || precondition || attempt >= kMaxPatchAttempts) return r;
  }
}

HttpResponse RestHandler::patchObject(const HttpRequest& req, const Target& t, const std::string& user) {
  WriteCtx ctx{t.info, t.ns, t.name, false, "Strict", t.kind == Target::Kind::kStatus, {}};
  ctx.user = user;
  if (!t.query.get("fieldManager").empty()) ctx.manager = t.query.get("fieldManager");
  if (auto err = readWriteOptions(t.query.params, &ctx.dry_run, &ctx.validation)) return *err;
  std::string type = mediaType(req.content_type);
  bool strategic = type == "application/strategic-merge-patch+json" && t.info->core();
  if (strategic) type = "application/merge-patch+json";
  if (type == "application/strategic-merge-patch+json") {
    return errorResponse(makeApiError(
        415, "UnsupportedMediaType",
        "strategic merge patch is not supported for " + qualifiedResource(*t.info) +
            " (like every custom resource); use `kubectl patch --type merge -p ...` (JSON merge patch) or "
            "`--type json` (JSON patch) instead",
        json::object()));
  }
  bool apply = type == "application/apply-patch+yaml";
  if (!apply && type != "application/merge-patch+json" && type != "application/json-patch+json") {
    return errorResponse(makeApiError(
        415, "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        json::object()));
  }
  auto body = parseBody(req.body, apply);
  if (!body.isOk()) return errorResponse(badRequestError("error decoding patch: " + body.status().message()));
  if (strategic) dropPatchDirectives(*body);
  // Like kube-apiserver's GuaranteedUpdate: a patch that sets no
  // resourceVersion precondition is re-applied to the newest object when a
  // concurrent write (a controller's status update) wins the race, so it never
  // answers 409. A patch that names a resourceVersion gets the 409.
  bool precondition = patchSetsResourceVersion(*body, type);
  for (int attempt = 0;; ++attempt) {
    ctx.raced = false;
    ctx.warnings.clear();
    HttpResponse r = patchOnce(ctx, t, type, *body);
    if (!ctx.raced || precondition || attempt >= kMaxPatchAttempts) return r;
  }
}

HttpResponse RestHandler::patchOnce(WriteCtx& ctx, const Target& t, const std::string& type,
                                    const json& body) {
  bool apply = type == "application/apply-patch+yaml";
  auto live = store_.get({t.info->kind, t.ns, t.name});
  if (!live.isOk() && live.status().code() != Code::kNotFound)
    return errorResponse(errorFromStatus(live.status(), t.info, t.name));

  json patched;
  if (apply) {
    json applied = body;
    if (auto err = checkTypeMeta(*t.info, applied)) return *err;
    if (auto err = checkName(applied, t.name)) return *err;
    if (!applied.contains("kind") || !applied.contains("apiVersion")) {
      return errorResponse(
          badRequestError(cannotHandle(*t.info) + "an applied configuration must set apiVersion and kind"));
    }
    if (!live.isOk() && ctx.status_sub) return errorResponse(notFoundError(*t.info, t.name));
    if (ctx.status_sub) {
      // Status through apply: merged over the live status; nobody owns status.
      patched = live->body;
      patched.merge_patch(applied);
    } else {
      if (t.query.get("fieldManager").empty()) {
        return errorResponse(
            makeApiError(422, "Invalid",
                         "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: "
                         "is required for apply patch",
                         json::object()));
      }
      bool force = parseBool(t.query.get("force")).value_or(false);
      ApplyResult ar = serverSideApply(live.isOk() ? live->body : json(), applied, ctx.manager, force,
                                       t.info->apiVersion(), clock_.now());
      if (!ar.conflicts.empty()) {
        json causes = json::array();
        for (const ApplyConflict& c : ar.conflicts) {
          causes.push_back({{"reason", "FieldManagerConflict"},
                            {"message", "conflict with \"" + c.manager + "\" using " + t.info->apiVersion()},
                            {"field", fieldPathString(c.path)}});
        }
        return errorResponse(makeApiError(
            409, "Conflict", conflictMessage(ar.conflicts, t.info->apiVersion()),
            {{"name", t.name}, {"group", t.info->group}, {"kind", t.info->plural}, {"causes", causes}}));
      }
      patched = std::move(ar.object);
      ctx.apply_managed =
          patched["metadata"].contains("managedFields") ? patched["metadata"]["managedFields"] : json();
      if (!live.isOk()) return doCreate(ctx, std::move(patched), 201);
    }
  } else {
    if (!live.isOk()) return errorResponse(notFoundError(*t.info, t.name));
    patched = live->body;
    if (type == "application/merge-patch+json") {
      if (!body.is_object())
        return errorResponse(
            badRequestError("error decoding patch: a JSON merge patch must be a JSON object"));
      patched.merge_patch(body);
    } else {
      auto result = applyJsonPatch(patched, body);
      if (!result.isOk() && result.status().code() == Code::kResourceExhausted)
        return errorResponse(makeApiError(413, "RequestEntityTooLarge", result.status().message()));
      if (!result.isOk()) {
        if (result.status().code() == Code::kInvalidArgument && body.is_array())
          return errorResponse(makeApiError(422, "Invalid", result.status().message()));
        return errorResponse(badRequestError("error decoding patch: " + result.status().message()));
      }
      patched = std::move(*result);
    }
  }
  // Merge patches and apply can at most add the patch to the object, but the
  // result is held to the same budget as a request body all the same.
  if (Status size = checkDocumentSize(patched); !size.isOk())
    return errorResponse(
        makeApiError(413, "RequestEntityTooLarge", "the patched object is too large: " + size.message()));
  if (auto err = checkTypeMeta(*t.info, patched)) return *err;
  if (metaString(patched, "name") != t.name || metaString(patched, "namespace") != t.ns) {
    return errorResponse(badRequestError("a patch may not change metadata.name or metadata.namespace"));
  }
  return write(ctx, std::move(patched), &*live, 201);
}

// ---- delete ----

namespace {

struct DeleteOptions {
  bool dry_run = false;
  bool orphan = false;
  std::string uid_precondition;
  std::string rv_precondition;
};

std::optional<HttpResponse> readDeleteOptions(const HttpRequest& req,
                                              const std::map<std::string, std::string>& q,
                                              DeleteOptions* out) {
  auto it = q.find("dryRun");
  if (it != q.end() && it->second == "All") out->dry_run = true;
  it = q.find("propagationPolicy");
  if (it != q.end() && it->second == "Orphan") out->orphan = true;
  it = q.find("orphanDependents");
  if (it != q.end() && parseBool(it->second).value_or(false)) out->orphan = true;
  bool blank = std::all_of(req.body.begin(), req.body.end(),
                           [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
  if (blank) return std::nullopt;
  auto body = parseBody(req.body, false);
  if (!body.isOk())
    return errorResponse(badRequestError("error decoding DeleteOptions: " + body.status().message()));
  const json& o = *body;
  if (!o.is_object())
    return errorResponse(badRequestError("error decoding DeleteOptions: expected a JSON object"));
  if (o.contains("dryRun") && o["dryRun"].is_array()) {
    for (const json& v : o["dryRun"]) {
      if (v == "All")
        out->dry_run = true;
      else
        return errorResponse(
            badRequestError("dryRun: Unsupported value: " + toJsonText(v) + ": supported values: \"All\""));
    }
  }
  if (o.contains("propagationPolicy") && o["propagationPolicy"].is_string()) {
    std::string p = o["propagationPolicy"];
    if (p != "Orphan" && p != "Background" && p != "Foreground")
      return errorResponse(
          makeApiError(422, "Invalid",
                       "propagationPolicy: Unsupported value: \"" + p +
                           "\": supported values: \"Background\", \"Foreground\", \"Orphan\""));
    out->orphan = p == "Orphan";
  }
  if (o.contains("orphanDependents") && o["orphanDependents"].is_boolean())
    out->orphan = o["orphanDependents"].get<bool>();
  if (o.contains("preconditions") && o["preconditions"].is_object()) {
    const json& p = o["preconditions"];
    if (p.contains("uid") && p["uid"].is_string()) out->uid_precondition = p["uid"];
    if (p.contains("resourceVersion") && p["resourceVersion"].is_string())
      out->rv_precondition = p["resourceVersion"];
  }
  return std::nullopt;
}

}  // namespace

HttpResponse RestHandler::deleteObject(const HttpRequest& req, const Target& t) {
  DeleteOptions opts;
  if (auto err = readDeleteOptions(req, t.query.params, &opts)) return *err;
  store::Key key{t.info->kind, t.ns, t.name};
  auto live = store_.get(key);
  if (!live.isOk()) return errorResponse(errorFromStatus(live.status(), t.info, t.name));
  std::string uid = metaString(live->body, "uid");
  if (!opts.uid_precondition.empty() && opts.uid_precondition != uid) {
    return errorResponse(conflictError(*t.info, t.name,
                                       "Precondition failed: UID in precondition: " + opts.uid_precondition +
                                           ", UID in object meta: " + uid));
  }
  if (!opts.rv_precondition.empty() && opts.rv_precondition != metaString(live->body, "resourceVersion")) {
    return errorResponse(
        conflictError(*t.info, t.name,
                      "Precondition failed: ResourceVersion in precondition: " + opts.rv_precondition +
                          ", ResourceVersion in object meta: " + metaString(live->body, "resourceVersion")));
  }
  json success = {
      {"kind", "Status"},
      {"apiVersion", "v1"},
      {"metadata", json::object()},
      {"status", "Success"},
      {"details", {{"name", t.name}, {"group", t.info->group}, {"kind", t.info->plural}, {"uid", uid}}}};
  if (opts.dry_run) return jsonResponse(200, success);
  bool is_namespace = t.info->kind == "Namespace";
  if (is_namespace && isSystemNamespace(t.name)) {
    return errorResponse(makeApiError(
        403, "Forbidden", "namespaces \"" + t.name + "\" is forbidden: this namespace may not be deleted",
        {{"name", t.name}, {"kind", "namespaces"}}));
  }
  std::vector<store::Object> removed;
  Status st = store_.transact([&](store::Txn& txn) {
    removed.clear();
    if (!opts.rv_precondition.empty() || !opts.uid_precondition.empty()) {
      KNAP_ASSIGN_OR_RETURN(store::Object cur, txn.get(key));
      if (cur.resource_version != live->resource_version) return conflict("object changed during delete");
    }
    if (is_namespace) KNAP_RETURN_IF_ERROR(removeNamespaceContents(txn, t.name, &removed));
    return cascadeDelete(txn, key, opts.orphan, &removed);
  });
  if (!st.isOk()) return errorResponse(errorFromStatus(st, t.info, t.name));
  return jsonResponse(200, success);
}

HttpResponse RestHandler::deleteCollection(const HttpRequest& req, const Target& t) {
  if (!t.info->namespaced)
    return methodNotAllowed(req.method);  // no deletecollection on namespaces, as in Kubernetes
  DeleteOptions opts;
  if (auto err = readDeleteOptions(req, t.query.params, &opts)) return *err;
  auto labels = LabelSelector::parse(t.query.get("labelSelector"));
  if (!labels.isOk()) return errorResponse(badRequestError(labels.status().message()));
  auto fields = FieldSelector::parse(t.query.get("fieldSelector"));
  if (!fields.isOk()) return errorResponse(badRequestError(fields.status().message()));
  json items = json::array();
  Status st = store_.transact([&](store::Txn& txn) {
    items = json::array();
    KNAP_ASSIGN_OR_RETURN(auto objs, txn.list(t.info->kind, t.ns));
    for (store::Object& o : objs) {
      json* l = labelsOf(o.body);
      if (!labels->matches(l ? *l : json()) || !fields->matches(o.body)) continue;
      items.push_back(withTypeMeta(o.body, *t.info));
      if (opts.dry_run) continue;
      // An earlier cascade may already have removed this object.
      if (!txn.get(o.key).isOk()) continue;
      std::vector<store::Object> removed;
      KNAP_RETURN_IF_ERROR(cascadeDelete(txn, o.key, opts.orphan, &removed));
    }
    return Status::ok();
  });
  if (!st.isOk()) return errorResponse(errorFromStatus(st, nullptr, ""));
  return jsonResponse(200,
                      {{"kind", t.info->kind + "List"},
                       {"apiVersion", t.info->apiVersion()},
                       {"metadata", {{"resourceVersion", std::to_string(store_.currentResourceVersion())}}},
                       {"items", items}});
}

// ---- knap.dev views ----

HttpResponse RestHandler::autoscalingView(const Target& t) {
  auto rev = store_.get({"Revision", t.ns, t.name});
  if (!rev.isOk()) return errorResponse(errorFromStatus(rev.status(), t.info, t.name));
  json items = json::array();
  for (const EffectiveValue& e : effectiveSettings(rev->body, config_)) {
    items.push_back({{"key", e.key}, {"value", e.value}, {"source", e.source}});
  }
  return jsonResponse(200, {{"kind", "EffectiveAutoscaling"},
                            {"apiVersion", "knap.dev/v1"},
                            {"metadata", {{"name", t.name}, {"namespace", t.ns}}},
                            {"items", items}});
}

HttpResponse RestHandler::metricsView(const Target& t) {
  if (!policy_.metrics_text) {
    return errorResponse(
        makeApiError(404, "NotFound", "metrics are not available: this API server has no router"));
  }
  HttpResponse r;
  r.body = metricsOfNamespace(policy_.metrics_text(), t.ns);
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return r;
}

// The log view's bounds per response (docs/console.md): pods listed, and log
// text across them.
constexpr size_t kLogViewMaxPods = 20;
constexpr size_t kLogViewMaxBytes = 4 << 20;

HttpResponse RestHandler::logView(const Target& t) {
  if (policy_.pod_data_dir.empty()) {
    return errorResponse(
        makeApiError(404, "NotFound", "pod logs are not available: this API server runs no pods"));
  }
  auto rev = store_.get({"Revision", t.ns, t.name});
  if (!rev.isOk()) return errorResponse(errorFromStatus(rev.status(), t.info, t.name));
  // ?limitBytes= per stream, as kubectl logs --limit-bytes (default 64 KiB, at most 1 MiB).
  size_t limit = 64 * 1024;
  std::string text = t.query.get("limitBytes");
  if (!text.empty()) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || end == text.c_str() || *end != '\0' || v <= 0)
      return errorResponse(
          badRequestError("limitBytes: invalid value \"" + text + "\": must be a positive integer"));
    limit = static_cast<size_t>(std::min<long long>(v, 1024 * 1024));
  }
  // The whole response is bounded too: at most kLogViewMaxPods pods (the
  // rest are counted in podsOmitted) and kLogViewMaxBytes of log text across
  // them; a stream past the budget gets what is left of it (truncated).
  json pods = json::array();
  size_t budget = kLogViewMaxBytes;
  int64_t omitted = 0;
  for (const PodLogFiles& p : findPodLogs(policy_.pod_data_dir, t.ns, t.name)) {
    if (p.revision != t.name) continue;
    if (pods.size() >= kLogViewMaxPods) {
      ++omitted;
      continue;
    }
    json streams = json::array();
    for (const auto& [stream, path] : {std::pair<const char*, const std::string&>{"stdout", p.stdout_path},
                                       std::pair<const char*, const std::string&>{"stderr", p.stderr_path}}) {
      bool truncated = false;
      const size_t want = std::min(limit, budget);
      StatusOr<std::string> tail = std::string();
      if (want > 0)
        tail = readLogTail(path, want, &truncated);
      else
        truncated = true;  // the response's budget is spent
      if (tail.isOk()) budget -= std::min(budget, tail->size());
      json s = {{"stream", stream}, {"truncated", truncated}};
      if (tail.isOk())
        s["text"] = *tail;
      else
        s["error"] = tail.status().message();
      streams.push_back(std::move(s));
    }
    pods.push_back({{"name", p.pod}, {"streams", std::move(streams)}});
  }
  return jsonResponse(200, {{"kind", "RevisionLog"},
                            {"apiVersion", "knap.dev/v1"},
                            {"metadata", {{"name", t.name}, {"namespace", t.ns}}},
                            {"pods", std::move(pods)},
                            {"podsOmitted", omitted}});
}

// POST .../revisions/NAME/restart: a rolling restart of the Revision's pods
// (docs/console.md). 202 with the pods being replaced; 200 with none when
// the Revision is at zero (nothing runs, so nothing restarts).
HttpResponse RestHandler::restartPods(const Target& t) {
  if (!policy_.restart_pods) {
    return errorResponse(
        makeApiError(404, "NotFound", "pod restarts are not available: this API server runs no pods"));
  }
  auto rev = store_.get({"Revision", t.ns, t.name});
  if (!rev.isOk()) return errorResponse(errorFromStatus(rev.status(), t.info, t.name));
  auto r = policy_.restart_pods(t.ns, t.name);
  if (!r.isOk()) return errorResponse(errorFromStatus(r.status(), nullptr, t.name));
  std::string message;
  const size_t n = r->pods.size();
  if (n == 0) {
    message = "revision \"" + t.name + "\" has no running pods (it is scaled to zero): nothing to restart";
  } else {
    message = "restarting " + std::to_string(n) + " pod" + (n == 1 ? "" : "s") + " of revision \"" + t.name +
              "\": each is stopped once a new pod is ready";
  }
  if (r->warm_pods > 0) message += "; " + std::to_string(r->warm_pods) + " warm pod(s) replaced";
  LOG(INFO) << "api: " << t.ns << "/" << t.name << ": " << message;
  return jsonResponse(n == 0 ? 200 : 202, {{"kind", "RevisionRestart"},
                                           {"apiVersion", "knap.dev/v1"},
                                           {"metadata", {{"name", t.name}, {"namespace", t.ns}}},
                                           {"pods", r->pods},
                                           {"warmPods", r->warm_pods},
                                           {"message", message}});
}

std::string metricsOfNamespace(const std::string& text, const std::string& ns) {
  // A label value may hold any character, escaped (\\, \", \n), so the
  // revision label is found by scanning the label set, not by searching.
  const std::string want = ns + "/";
  auto revisionLabelMatches = [&](const std::string& line) {
    size_t open = line.find('{');
    if (open == std::string::npos) return false;
    size_t i = open + 1;
    while (i < line.size() && line[i] != '}') {
      size_t eq = line.find('=', i);
      if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return false;
      std::string name = line.substr(i, eq - i);
      std::string value;
      size_t j = eq + 2;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '\\' && j + 1 < line.size()) ++j;
        value += line[j];
      }
      if (j >= line.size()) return false;
      if (name == "revision") return value.compare(0, want.size(), want) == 0;
      i = j + 1;
      if (i < line.size() && line[i] == ',') ++i;
    }
    return false;
  };
  std::string out;
  std::string pending;  // the HELP/TYPE lines of the current family, written before its first kept sample
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (line.rfind("# HELP ", 0) == 0) pending.clear();
      pending += line + "\n";
      continue;
    }
    if (!revisionLabelMatches(line)) continue;
    out += pending;
    pending.clear();
    out += line + "\n";
  }
  return out;
}

// ---- watch ----

bool RestHandler::parseWatch(const HttpRequest& req, WatchRequest* out, std::optional<HttpResponse>* error) {
  if (req.method != "GET") return false;
  Target t = Target::parse(req.target);
  if (t.kind != Target::Kind::kCollection) return false;
  if (t.query.get("watch").empty()) return false;
  std::optional<bool> w = parseBool(t.query.get("watch"));
  if (!w) {
    *error = errorResponse(
        badRequestError("watch: invalid value \"" + t.query.get("watch") +
                        "\": must be a boolean (1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)"));
    return true;
  }
  if (!*w) return false;
  if (auto refused = guard(req, policy_)) {
    *error = std::move(refused);
    return true;
  }
  UserInfo user;
  if (auto refused = checkAccess(req, t, true, &user)) {
    *error = std::move(refused);
    return true;
  }
  auto labels = LabelSelector::parse(t.query.get("labelSelector"));
  if (!labels.isOk()) {
    *error = errorResponse(badRequestError(labels.status().message()));
    return true;
  }
  auto fields = FieldSelector::parse(t.query.get("fieldSelector"));
  if (!fields.isOk()) {
    *error = errorResponse(badRequestError(fields.status().message()));
    return true;
  }
  out->info = t.info;
  out->ns = t.ns;
  out->labels = std::move(*labels);
  out->fields = std::move(*fields);
  out->table = acceptsTable(req.accept);
  out->include = parseIncludeObject(t.query.get("includeObject"));
  out->resource_version = t.query.get("resourceVersion");
  std::string timeout = t.query.get("timeoutSeconds");
  int64_t timeout_seconds = 0;
  if (!timeout.empty()) {
    try {
      timeout_seconds = std::max<int64_t>(0, std::stoll(timeout));
    } catch (const std::exception&) {
      *error = errorResponse(badRequestError("timeoutSeconds: invalid value \"" + timeout + "\""));
      return true;
    }
  }
  if (timeout_seconds > 0) {
    out->timeout = std::chrono::seconds(timeout_seconds);
  } else {
    // kube-apiserver: minRequestTimeout * (1 + rand), so watches do not all end at once.
    auto min = policy_.min_request_timeout;
    std::uniform_int_distribution<int64_t> jitter(0, min.count());
    int64_t extra;
    {
      std::lock_guard<std::mutex> lock(rng_mu_);
      extra = jitter(rng_);
    }
    out->timeout = min + std::chrono::milliseconds(extra);
  }
  out->bookmarks = t.query.get("allowWatchBookmarks") == "true";
  out->bookmark_interval = policy_.bookmark_interval;
  if (!out->resource_version.empty()) {
    try {
      size_t used = 0;
      int64_t rv = std::stoll(out->resource_version, &used);
      if (used != out->resource_version.size() || rv < 0) throw std::invalid_argument("rv");
    } catch (const std::exception&) {
      *error =
          errorResponse(badRequestError("resourceVersion: invalid value \"" + out->resource_version + "\""));
      return true;
    }
  }
  return true;
}

bool RestHandler::watchScope(const WatchRequest& w, const store::Object& obj) {
  return obj.key.kind == w.info->kind && (w.ns.empty() || obj.key.ns == w.ns);
}

bool RestHandler::watchMatches(const WatchRequest& w, const store::Object& obj) {
  if (!watchScope(w, obj)) return false;
  const json& body = obj.body;
  json labels;
  if (body.contains("metadata") && body["metadata"].is_object() && body["metadata"].contains("labels"))
    labels = body["metadata"]["labels"];
  return w.labels.matches(labels) && w.fields.matches(body);
}

void WatchState::seed(const WatchRequest& w, const store::Object& obj) {
  if (!RestHandler::watchScope(w, obj)) return;
  held_[obj.key.ns + "/" + obj.key.name] = RestHandler::watchMatches(w, obj);
}

const char* WatchState::classify(const WatchRequest& w, const store::Event& ev) {
  if (!RestHandler::watchScope(w, ev.object)) return nullptr;
  std::string key = ev.object.key.ns + "/" + ev.object.key.name;
  bool matches = RestHandler::watchMatches(w, ev.object);
  auto it = held_.find(key);
  bool known = it != held_.end();
  bool held = known && it->second;
  switch (ev.type) {
    case store::EventType::kAdded:
      held_[key] = matches;
      return matches ? "ADDED" : nullptr;
    case store::EventType::kDeleted:
      held_.erase(key);
      // The final state is the state before the delete: exact for unknown keys too.
      return held || matches ? "DELETED" : nullptr;
    case store::EventType::kModified:
      held_[key] = matches;
      if (matches) return known && !held ? "ADDED" : "MODIFIED";
      return held || !known ? "DELETED" : nullptr;
  }
  return nullptr;
}

std::string RestHandler::watchEventLine(const WatchRequest& w, const char* type, const json& obj,
                                        bool first) {
  json o = withTypeMeta(obj, *w.info);
  json ev = {{"type", type}};
  if (w.table) {
    ev["object"] = makeTable(*w.info, {o}, w.include, metaString(o, "resourceVersion"), first);
  } else {
    ev["object"] = std::move(o);
  }
  return toJsonText(ev) + "\n";
}

std::string RestHandler::watchBookmarkLine(const WatchRequest& w, int64_t rv) {
  json obj = {{"kind", w.info->kind},
              {"apiVersion", w.info->apiVersion()},
              {"metadata", {{"resourceVersion", std::to_string(rv)}}}};
  return toJsonText(json{{"type", "BOOKMARK"}, {"object", std::move(obj)}}) + "\n";
}

HttpResponse RestHandler::expiredResponse(const std::string& requested_rv) {
  return errorResponse(makeApiError(410, "Expired",
                                    "too old resource version: " + requested_rv + " (" +
                                        std::to_string(store_.currentResourceVersion()) + ")"));
}

}  // namespace knap::api
