#include "images/registry_client.h"

#include <curl/curl.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/base64.h"
#include "common/log.h"
#include "common/string_util.h"
#include "oci/digest.h"

namespace knap::images {

namespace {

using nlohmann::json;

constexpr char kManifestAccept[] =
    "Accept: application/vnd.oci.image.index.v1+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json, "
    "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

std::string urlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

void curlGlobalInit() {
  static const bool done = [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return true;
  }();
  (void)done;
}

}  // namespace

// ------------------------------------------------------------- pure helpers

std::string normalizeRegistryHost(const std::string& key) {
  std::string k(trimSpace(key));
  size_t scheme = k.find("://");
  if (scheme != std::string::npos) k = k.substr(scheme + 3);
  size_t slash = k.find('/');
  if (slash != std::string::npos) k = k.substr(0, slash);
  k = asciiLower(k);
  if (k == "index.docker.io" || k == "registry-1.docker.io" || k == "registry.hub.docker.com") k = kDockerHub;
  return k;
}

StatusOr<AuthConfig> parseAuthConfig(const std::string& text) {
  AuthConfig out;
  try {
    json doc = json::parse(text);
    if (!doc.is_object()) return invalidArgument("auth config: not a JSON object");
    if (!doc.contains("auths")) return out;
    const json& auths = doc["auths"];
    if (!auths.is_object()) return invalidArgument("auth config: \"auths\" is not an object");
    for (const auto& [key, entry] : auths.items()) {
      if (!entry.is_object()) return invalidArgument("auth config: auths[\"" + key + "\"] is not an object");
      Credential c;
      if (entry.contains("auth") && entry["auth"].is_string() && !entry["auth"].get<std::string>().empty()) {
        std::string decoded;
        if (!base64Decode(entry["auth"].get<std::string>(), &decoded)) {
          return invalidArgument("auth config: auths[\"" + key + "\"].auth is not base64");
        }
        size_t colon = decoded.find(':');
        if (colon == std::string::npos) {
          return invalidArgument("auth config: auths[\"" + key + "\"].auth does not decode to user:password");
        }
        c.username = decoded.substr(0, colon);
        c.password = decoded.substr(colon + 1);
      } else {
        c.username = entry.value("username", "");
        c.password = entry.value("password", "");
      }
      if (c.username.empty() && c.password.empty()) continue;
      out[normalizeRegistryHost(key)] = c;
    }
  } catch (const json::exception& e) {
    return invalidArgument(std::string("auth config: ") + e.what());
  }
  return out;
}

StatusOr<AuthConfig> loadAuthConfig(const std::string& path) {
  if (path.empty()) return AuthConfig{};
  std::ifstream f(path, std::ios::binary);
  if (!f) return invalidArgument("registry auth file " + path + " cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  StatusOr<AuthConfig> c = parseAuthConfig(ss.str());
  if (!c.isOk()) return c.status().annotate(path);
  return c;
}

std::vector<AuthChallenge> parseWwwAuthenticate(const std::string& value) {
  std::vector<AuthChallenge> out;
  size_t i = 0;
  const size_t n = value.size();
  auto skipSpace = [&] {
    while (i < n && (value[i] == ' ' || value[i] == '\t' || value[i] == ',')) ++i;
  };
  while (true) {
    skipSpace();
    if (i >= n) break;
    size_t start = i;
    while (i < n && value[i] != ' ' && value[i] != '\t' && value[i] != ',' && value[i] != '=') ++i;
    std::string token = value.substr(start, i - start);
    if (i < n && value[i] == '=') {
      // A parameter of the current challenge.
      ++i;
      std::string v;
      if (i < n && value[i] == '"') {
        ++i;
        while (i < n && value[i] != '"') {
          if (value[i] == '\\' && i + 1 < n) ++i;
          v += value[i++];
        }
        if (i < n) ++i;
      } else {
        size_t vs = i;
        while (i < n && value[i] != ',' && value[i] != ' ') ++i;
        v = value.substr(vs, i - vs);
      }
      if (!out.empty()) out.back().params[asciiLower(token)] = v;
      continue;
    }
    out.push_back(AuthChallenge{asciiLower(token), {}});
  }
  return out;
}

Platform hostPlatform() {
  Platform p;
  p.os = "linux";
  struct utsname u {};
  std::string machine = ::uname(&u) == 0 ? u.machine : "x86_64";
  if (machine == "x86_64" || machine == "amd64") {
    p.architecture = "amd64";
  } else if (machine == "aarch64" || machine == "arm64") {
    p.architecture = "arm64";
    p.variant = "v8";
  } else if (machine.rfind("armv7", 0) == 0) {
    p.architecture = "arm";
    p.variant = "v7";
  } else if (machine == "ppc64le" || machine == "s390x" || machine == "riscv64") {
    p.architecture = machine;
  } else if (machine == "i686" || machine == "i386") {
    p.architecture = "386";
  } else {
    p.architecture = machine;
  }
  return p;
}

StatusOr<Platform> platformFromConfig(const std::string& configured) {
  if (configured.empty()) return hostPlatform();
  return oci::parsePlatform(configured);
}

bool isIndexMediaType(const std::string& mt) {
  return mt == oci::kMediaTypeOciIndex || mt == oci::kMediaTypeDockerManifestList;
}

bool isManifestMediaType(const std::string& mt) {
  return mt == oci::kMediaTypeOciManifest || mt == oci::kMediaTypeDockerManifest;
}

std::string sniffManifestMediaType(const std::string& body) {
  try {
    json doc = json::parse(body);
    if (doc.is_object()) {
      std::string mt = doc.value("mediaType", "");
      if (!mt.empty()) return mt;
      if (doc.contains("manifests")) return oci::kMediaTypeOciIndex;
      if (doc.contains("layers")) return oci::kMediaTypeOciManifest;
    }
  } catch (const json::exception&) {
  }
  return "";
}

StatusOr<Descriptor> choosePlatform(const std::vector<oci::IndexEntry>& entries, const Platform& platform,
                                    const std::string& image) {
  const oci::IndexEntry* exact = nullptr;
  const oci::IndexEntry* loose = nullptr;
  std::vector<std::string> offered;
  for (const oci::IndexEntry& e : entries) {
    if (!isManifestMediaType(e.descriptor.media_type) && !isIndexMediaType(e.descriptor.media_type)) continue;
    if (!e.has_platform) {
      offered.push_back("(any)");
      if (loose == nullptr) loose = &e;
      continue;
    }
    offered.push_back(e.platform.toString());
    if (e.platform.os != platform.os || e.platform.architecture != platform.architecture) continue;
    if (e.platform.variant == platform.variant) {
      if (exact == nullptr) exact = &e;
    } else if (platform.variant.empty() || e.platform.variant.empty()) {
      if (loose == nullptr || !loose->has_platform) loose = &e;
    }
  }
  if (exact != nullptr) return exact->descriptor;
  if (loose != nullptr) return loose->descriptor;
  std::string list;
  for (const std::string& o : offered) list += (list.empty() ? "" : ", ") + o;
  return notFound("image " + image + " has no manifest for " + platform.toString() +
                  " (it offers: " + (list.empty() ? "nothing" : list) + ")");
}

// ------------------------------------------------------------------ client

struct RegistryClient::Request {
  std::string method = "GET";  // GET or HEAD
  std::string host;            // API host
  std::string path;            // "/v2/..."
  std::string url;             // full URL; overrides host/path (token requests)
  std::vector<std::string> headers;
  std::string scope;  // "repository:REPO:pull"
  // Streaming body for 2xx responses; otherwise the body is buffered.
  std::function<Status(std::string_view, const Response&)> sink;
  int64_t max_body = 16 << 20;
};

struct RegistryClient::Response {
  long status = 0;
  std::map<std::string, std::string> headers;  // lower-case names, last response of a redirect chain
  std::string body;                            // buffered (non-2xx, or 2xx without sink)
};

namespace {

struct Transfer {
  RegistryClient::Response* resp;
  const std::function<Status(std::string_view, const RegistryClient::Response&)>* sink;
  int64_t max_body;
  Status sink_status;
  bool too_large = false;
};

size_t onHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (redirects, 100-continue)
    t->resp->headers.clear();
    t->resp->body.clear();
    size_t sp = line.find(' ');
    t->resp->status = sp == std::string::npos ? 0 : std::atol(line.c_str() + sp + 1);
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = asciiLower(std::string(trimSpace(line.substr(0, colon))));
    std::string value(trimSpace(line.substr(colon + 1)));
    auto it = t->resp->headers.find(name);
    if (it != t->resp->headers.end() && name == "www-authenticate") {
      it->second += ", " + value;
    } else {
      t->resp->headers[name] = value;
    }
  }
  return size * n;
}

size_t onBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  const bool ok = t->resp->status >= 200 && t->resp->status < 300;
  if (ok && t->sink != nullptr && *t->sink) {
    Status s = (*t->sink)(std::string_view(data, len), *t->resp);
    if (!s.isOk()) {
      t->sink_status = s;
      return 0;  // aborts with CURLE_WRITE_ERROR
    }
    return len;
  }
  if (static_cast<int64_t>(t->resp->body.size() + len) > t->max_body) {
    if (!ok) return len;  // error bodies are only for messages: keep the start
    t->too_large = true;
    return 0;
  }
  t->resp->body.append(data, len);
  return len;
}

// The registry's error body: "CODE: message" of the first error, or "".
std::string registryError(const std::string& body, std::string* code) {
  try {
    json doc = json::parse(body);
    if (doc.is_object() && doc.contains("errors") && doc["errors"].is_array() && !doc["errors"].empty()) {
      const json& e = doc["errors"][0];
      *code = e.value("code", "");
      return *code + ": " + e.value("message", "");
    }
  } catch (const json::exception&) {
  }
  return "";
}

}  // namespace

StatusOr<std::unique_ptr<RegistryClient>> RegistryClient::create(RegistryOptions options, TimeSource& time) {
  KNAP_ASSIGN_OR_RETURN(AuthConfig auth, loadAuthConfig(options.auth_file));
  if (!options.ca_file.empty()) {
    std::ifstream f(options.ca_file);
    if (!f) return invalidArgument("registry CA file " + options.ca_file + " cannot be read");
  }
  return std::make_unique<RegistryClient>(std::move(options), std::move(auth), time);
}

RegistryClient::RegistryClient(RegistryOptions options, AuthConfig auth, TimeSource& time)
    : options_(std::move(options)), auth_(std::move(auth)), time_(time) {
  curlGlobalInit();
}

RegistryClient::~RegistryClient() = default;

std::string RegistryClient::schemeFor(const std::string& host) const {
  const std::string h = normalizeRegistryHost(host);
  for (const std::string& insecure : options_.insecure_registries) {
    if (normalizeRegistryHost(insecure) == h) return "http";
  }
  return "https";
}

std::string RegistryClient::credentialHint(const std::string& host) const {
  std::string where = options_.auth_file.empty() ? "" : " in " + options_.auth_file;
  if (options_.extra_credentials) {
    return "check the credentials for " + host + where +
           " or give the Revision an imagePullSecrets entry naming a kubernetes.io/dockerconfigjson Secret "
           "for it";
  }
  if (options_.auth_file.empty()) return "no knap.registry-auth-file is configured";
  return "check the credentials for " + host + where;
}

StatusOr<RegistryClient::Response> RegistryClient::performOnce(const Request& req,
                                                               const std::string& authorization) {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return internalError("curl_easy_init failed");
  std::unique_ptr<CURL, void (*)(CURL*)> guard(curl, curl_easy_cleanup);
  const std::string url = req.url.empty() ? schemeFor(req.host) + "://" + req.host + req.path : req.url;
  Response resp;
  Transfer t{&resp, &req.sink, req.max_body, Status::ok()};
  char errbuf[CURL_ERROR_SIZE] = {0};
  struct curl_slist* hdrs = nullptr;
  for (const std::string& h : req.headers) hdrs = curl_slist_append(hdrs, h.c_str());
  if (!authorization.empty()) hdrs = curl_slist_append(hdrs, ("Authorization: " + authorization).c_str());
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> hguard(hdrs, curl_slist_free_all);

  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!options_.ca_file.empty()) {
    // OpenSSL uses both: the extra bundle and the system's hashed directory.
    curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file.c_str());
    curl_easy_setopt(curl, CURLOPT_CAPATH, "/etc/ssl/certs");
  }
  curl_easy_setopt(
      curl, CURLOPT_CONNECTTIMEOUT_MS,
      static_cast<long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(options_.connect_timeout).count()));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(
      curl, CURLOPT_LOW_SPEED_TIME,
      std::max(1L, static_cast<long>(
                       std::chrono::duration_cast<std::chrono::seconds>(options_.stall_timeout).count())));
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, onHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, onBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  if (req.method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);

  CURLcode rc = curl_easy_perform(curl);
  if (rc != CURLE_OK) {
    if (!t.sink_status.isOk()) return t.sink_status;
    if (t.too_large)
      return failedPrecondition(url + ": response larger than " + std::to_string(req.max_body) + " bytes");
    std::string text = curl_easy_strerror(rc);
    if (errbuf[0] != '\0') text += " (" + std::string(errbuf) + ")";
    return unavailable(url + ": " + text);
  }
  long code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
  resp.status = code;
  return resp;
}

Status RegistryClient::answerChallenge(const Reference& ref, const std::string& scope,
                                       const std::string& www_authenticate, std::string* authorization) {
  const std::string host = ref.apiHost();
  const std::string auth_key = normalizeRegistryHost(ref.registry);
  const Credential* cred = nullptr;
  std::optional<Credential> extra;
  if (auto it = auth_.find(auth_key); it != auth_.end()) {
    cred = &it->second;
  } else if (options_.extra_credentials && (extra = options_.extra_credentials(auth_key))) {
    cred = &*extra;
  }
  std::vector<AuthChallenge> challenges = parseWwwAuthenticate(www_authenticate);
  for (const AuthChallenge& c : challenges) {
    if (c.scheme == "bearer") {
      auto realm = c.params.find("realm");
      if (realm == c.params.end() || realm->second.empty()) {
        return unauthenticated("unauthorized: " + host + " sent a Bearer challenge without a realm");
      }
      std::string url = realm->second;
      std::string query;
      if (auto s = c.params.find("service"); s != c.params.end()) query += "service=" + urlEncode(s->second);
      std::string want_scope = scope;
      if (auto s = c.params.find("scope"); s != c.params.end() && !s->second.empty()) want_scope = s->second;
      if (!want_scope.empty())
        query += std::string(query.empty() ? "" : "&") + "scope=" + urlEncode(want_scope);
      if (!query.empty()) url += (url.find('?') == std::string::npos ? "?" : "&") + query;
      Request treq;
      treq.url = url;
      treq.max_body = 1 << 20;
      std::string basic;
      if (cred != nullptr) basic = "Basic " + base64Encode(cred->username + ":" + cred->password);
      KNAP_ASSIGN_OR_RETURN(Response tresp, performOnce(treq, basic));
      if (tresp.status == 401 || tresp.status == 403) {
        return unauthenticated("unauthorized: the token service " + realm->second + " refused " +
                               (cred ? "the credentials" : "anonymous access") + " for " + ref.repository +
                               ": " + credentialHint(auth_key));
      }
      if (tresp.status < 200 || tresp.status >= 300) {
        Status s = tresp.status >= 500 ? unavailable("") : failedPrecondition("");
        return Status(s.code(),
                      "token service " + realm->second + " answered HTTP " + std::to_string(tresp.status));
      }
      std::string token;
      int64_t expires_in = 60;
      try {
        json doc = json::parse(tresp.body);
        token = doc.value("token", "");
        if (token.empty()) token = doc.value("access_token", "");
        if (doc.contains("expires_in") && doc["expires_in"].is_number())
          expires_in = doc["expires_in"].get<int64_t>();
      } catch (const json::exception& e) {
        return unavailable("token service " + realm->second + " sent malformed JSON: " + e.what());
      }
      if (token.empty()) return unavailable("token service " + realm->second + " sent no token");
      *authorization = "Bearer " + token;
      std::lock_guard<std::mutex> lock(mu_);
      // Leave a margin so a token does not expire in flight.
      auth_cache_[host + "|" + scope] = CachedAuth{
          *authorization, time_.monotonic() + std::chrono::seconds(std::max<int64_t>(expires_in - 10, 1))};
      return Status::ok();
    }
  }
  for (const AuthChallenge& c : challenges) {
    if (c.scheme == "basic") {
      if (cred == nullptr) {
        return unauthenticated("unauthorized: " + host + " requires credentials; " +
                               credentialHint(auth_key));
      }
      *authorization = "Basic " + base64Encode(cred->username + ":" + cred->password);
      std::lock_guard<std::mutex> lock(mu_);
      auth_cache_[host + "|"] = CachedAuth{*authorization, MonoTime::max()};
      return Status::ok();
    }
  }
  return unauthenticated("unauthorized: " + host + " answered 401 with no usable challenge (" +
                         www_authenticate + "); " + credentialHint(auth_key));
}

StatusOr<RegistryClient::Response> RegistryClient::perform(const Reference& ref, Request& req) {
  const std::string host = req.host;
  std::string authorization;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& key : {host + "|" + req.scope, host + "|"}) {
      auto it = auth_cache_.find(key);
      if (it != auth_cache_.end() && it->second.expires > time_.monotonic()) {
        authorization = it->second.header;
        break;
      }
    }
  }
  KNAP_ASSIGN_OR_RETURN(Response resp, performOnce(req, authorization));
  if (resp.status != 401) return resp;
  auto wa = resp.headers.find("www-authenticate");
  if (wa == resp.headers.end()) {
    return unauthenticated("unauthorized: " + host + " answered 401 without a challenge; " +
                           credentialHint(normalizeRegistryHost(ref.registry)));
  }
  std::string fresh;
  KNAP_RETURN_IF_ERROR(answerChallenge(ref, req.scope, wa->second, &fresh));
  return performOnce(req, fresh);
}

Status RegistryClient::httpError(const Reference& ref, const Response& resp, const std::string& what) const {
  std::string code;
  std::string detail = registryError(resp.body, &code);
  const std::string where = what + " from " + ref.apiHost() + ": HTTP " + std::to_string(resp.status) +
                            (detail.empty() ? "" : " " + detail);
  if (resp.status == 401 || resp.status == 403) {
    return unauthenticated("unauthorized: " + credentialHint(normalizeRegistryHost(ref.registry)) + " (" +
                           where + ")");
  }
  if (resp.status == 404 || code == "MANIFEST_UNKNOWN" || code == "NAME_UNKNOWN" || code == "BLOB_UNKNOWN") {
    return notFound(where);
  }
  if (resp.status >= 500 || resp.status == 429 || resp.status == 408) return unavailable(where);
  return failedPrecondition(where);
}

StatusOr<Descriptor> RegistryClient::resolve(const Reference& ref) {
  Request req;
  req.method = "HEAD";
  req.host = ref.apiHost();
  req.path = "/v2/" + ref.repository + "/manifests/" + ref.manifestReference();
  req.headers = {kManifestAccept};
  req.scope = "repository:" + ref.repository + ":pull";
  KNAP_ASSIGN_OR_RETURN(Response resp, perform(ref, req));
  if (resp.status >= 200 && resp.status < 300) {
    auto d = resp.headers.find("docker-content-digest");
    if (d != resp.headers.end() && oci::isSha256Digest(d->second)) {
      Descriptor desc;
      desc.digest = d->second;
      std::string ct = resp.headers.count("content-type") ? resp.headers["content-type"] : "";
      desc.media_type = std::string(trimSpace(ct.substr(0, ct.find(';'))));
      if (resp.headers.count("content-length"))
        desc.size = std::atoll(resp.headers["content-length"].c_str());
      if (isIndexMediaType(desc.media_type) || isManifestMediaType(desc.media_type)) return desc;
    }
  } else if (resp.status != 405 && resp.status != 400) {
    return httpError(ref, resp, "manifest " + ref.manifestReference() + " of " + ref.repository);
  }
  // No usable digest header: GET and hash.
  KNAP_ASSIGN_OR_RETURN(FetchedManifest m, getManifest(ref, ref.manifestReference()));
  Descriptor desc;
  desc.digest = m.digest;
  desc.media_type = m.media_type;
  desc.size = static_cast<int64_t>(m.body.size());
  return desc;
}

StatusOr<FetchedManifest> RegistryClient::getManifest(const Reference& ref, const std::string& reference) {
  Request req;
  req.host = ref.apiHost();
  req.path = "/v2/" + ref.repository + "/manifests/" + reference;
  req.headers = {kManifestAccept};
  req.scope = "repository:" + ref.repository + ":pull";
  req.max_body = options_.max_manifest_bytes;
  KNAP_ASSIGN_OR_RETURN(Response resp, perform(ref, req));
  if (resp.status < 200 || resp.status >= 300) {
    return httpError(ref, resp, "manifest " + reference + " of " + ref.repository);
  }
  FetchedManifest m;
  m.body = std::move(resp.body);
  m.digest = oci::sha256Digest(m.body);
  if (reference.rfind("sha256:", 0) == 0 && m.digest != reference) {
    return dataLoss("manifest of " + ref.name() + ": expected digest " + reference +
                    " but the registry sent " + m.digest);
  }
  if (auto d = resp.headers.find("docker-content-digest");
      d != resp.headers.end() && oci::isSha256Digest(d->second) && d->second != m.digest) {
    return dataLoss("manifest " + reference + " of " + ref.name() + ": Docker-Content-Digest says " +
                    d->second + " but the body hashes to " + m.digest);
  }
  std::string ct = resp.headers.count("content-type") ? resp.headers["content-type"] : "";
  m.media_type = std::string(trimSpace(ct.substr(0, ct.find(';'))));
  if (!isIndexMediaType(m.media_type) && !isManifestMediaType(m.media_type)) {
    std::string sniffed = sniffManifestMediaType(m.body);
    if (isIndexMediaType(sniffed) || isManifestMediaType(sniffed)) {
      m.media_type = sniffed;
    } else {
      return failedPrecondition("manifest " + reference + " of " + ref.name() +
                                " has unsupported media type \"" + m.media_type +
                                "\" (schema 1 manifests are not supported)");
    }
  }
  return m;
}

Status RegistryClient::fetchBlob(const Reference& ref, const std::string& digest, int64_t offset,
                                 const BlobSink& sink) {
  Request req;
  req.host = ref.apiHost();
  req.path = "/v2/" + ref.repository + "/blobs/" + digest;
  req.scope = "repository:" + ref.repository + ":pull";
  if (offset > 0) req.headers.push_back("Range: bytes=" + std::to_string(offset) + "-");
  int64_t at = -1;
  req.sink = [&](std::string_view chunk, const Response& r) -> Status {
    // A 206 continues at `offset`; a 200 (Range ignored) starts again at 0.
    if (at < 0) at = r.status == 206 ? offset : 0;
    Status s = sink(chunk, at);
    at += static_cast<int64_t>(chunk.size());
    return s;
  };
  KNAP_ASSIGN_OR_RETURN(Response resp, perform(ref, req));
  if (resp.status < 200 || resp.status >= 300) return httpError(ref, resp, "blob " + digest);
  return Status::ok();
}

StatusOr<std::string> RegistryClient::getBlob(const Reference& ref, const std::string& digest,
                                              int64_t max_bytes) {
  std::string data;
  KNAP_RETURN_IF_ERROR(fetchBlob(ref, digest, 0, [&](std::string_view chunk, int64_t at) -> Status {
    if (at == 0) data.clear();
    if (static_cast<int64_t>(data.size() + chunk.size()) > max_bytes) {
      return failedPrecondition("blob " + digest + " is larger than " + std::to_string(max_bytes) + " bytes");
    }
    data.append(chunk);
    return Status::ok();
  }));
  std::string actual = oci::sha256Digest(data);
  if (actual != digest) {
    return dataLoss("blob of " + ref.name() + ": expected digest " + digest + " but got " + actual);
  }
  return data;
}

}  // namespace knap::images
