#include "images/test_registry.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/string_util.h"
#include "oci/digest.h"

namespace knap::images::testing {

namespace {

using nlohmann::json;

bool sendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::string reasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 206:
      return "Partial Content";
    case 307:
      return "Temporary Redirect";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 416:
      return "Range Not Satisfiable";
    case 500:
      return "Internal Server Error";
    default:
      return "Status";
  }
}

std::string b64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += t[v >> 18], out += t[(v >> 12) & 63], out += t[(v >> 6) & 63], out += t[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += t[v >> 18], out += t[(v >> 12) & 63], out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += t[v >> 18], out += t[(v >> 12) & 63], out += t[(v >> 6) & 63], out += '=';
  }
  return out;
}

HttpResponse jsonError(int status, const std::string& code, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.headers.push_back({"Content-Type", "application/json"});
  r.body = json{{"errors", json::array({json{{"code", code}, {"message", message}}})}}.dump();
  return r;
}

}  // namespace

// ------------------------------------------------------------------ server

TestHttpServer::TestHttpServer(std::function<HttpResponse(const HttpRequest&)> handler)
    : handler_(std::move(handler)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    throw std::runtime_error("test server: bind/listen failed");
  }
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { acceptLoop(); });
}

TestHttpServer::~TestHttpServer() {
  stop();
}

void TestHttpServer::stop() {
  if (stopping_.exchange(true)) return;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    conns.swap(conns_);
  }
  for (std::thread& t : conns) t.join();
}

void TestHttpServer::acceptLoop() {
  while (!stopping_) {
    int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) {
      if (stopping_) return;
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    conns_.emplace_back([this, fd] { serve(fd); });
  }
}

void TestHttpServer::serve(int fd) {
  std::string buf;
  char tmp[4096];
  size_t end;
  while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
    ssize_t r = ::recv(fd, tmp, sizeof tmp, 0);
    if (r <= 0) {
      ::close(fd);
      return;
    }
    buf.append(tmp, static_cast<size_t>(r));
  }
  HttpRequest req;
  size_t line_end = buf.find("\r\n");
  std::string line = buf.substr(0, line_end);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  req.method = line.substr(0, sp1);
  req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  size_t q = req.target.find('?');
  req.path = req.target.substr(0, q);
  req.query = q == std::string::npos ? "" : req.target.substr(q + 1);
  size_t pos = line_end + 2;
  while (pos < end) {
    size_t e = buf.find("\r\n", pos);
    std::string h = buf.substr(pos, e - pos);
    size_t colon = h.find(':');
    if (colon != std::string::npos) {
      std::string v = h.substr(colon + 1);
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      req.headers[asciiLower(h.substr(0, colon))] = v;
    }
    pos = e + 2;
  }
  HttpResponse resp = handler_(req);
  std::string head = "HTTP/1.1 " + std::to_string(resp.status) + " " + reasonPhrase(resp.status) + "\r\n";
  bool has_length = false;
  for (const auto& [k, v] : resp.headers) {
    head += k + ": " + v + "\r\n";
    has_length = has_length || asciiLower(k) == "content-length";
  }
  if (!has_length) head += "Content-Length: " + std::to_string(resp.body.size()) + "\r\n";
  head += "Connection: close\r\n\r\n";
  if (sendAll(fd, head.data(), head.size()) && req.method != "HEAD") {
    size_t n = resp.cut_after >= 0 ? std::min<size_t>(static_cast<size_t>(resp.cut_after), resp.body.size())
                                   : resp.body.size();
    sendAll(fd, resp.body.data(), n);
  }
  ::shutdown(fd, SHUT_WR);
  // Drain so the close does not turn into a reset before the client read it all.
  while (::recv(fd, tmp, sizeof tmp, 0) > 0) {
  }
  ::close(fd);
}

// ------------------------------------------------------------------ images

TestImage makeTestImage(const std::vector<std::string>& layers, const std::string& arch,
                        bool docker_media_types) {
  TestImage img;
  json diff_ids = json::array();
  for (const std::string& l : layers) diff_ids.push_back(oci::sha256Digest(l));
  json config = {{"architecture", arch},
                 {"os", "linux"},
                 {"config", {{"Cmd", json::array({"/bin/app"})}}},
                 {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}};
  std::string config_json = config.dump();
  img.config.media_type =
      docker_media_types ? "application/vnd.docker.container.image.v1+json" : oci::kMediaTypeOciConfig;
  img.config.digest = oci::sha256Digest(config_json);
  img.config.size = static_cast<int64_t>(config_json.size());
  img.blobs[img.config.digest] = config_json;
  json jl = json::array();
  for (const std::string& l : layers) {
    oci::Descriptor d;
    d.media_type =
        docker_media_types ? "application/vnd.docker.image.rootfs.diff.tar" : oci::kMediaTypeOciLayer;
    d.digest = oci::sha256Digest(l);
    d.size = static_cast<int64_t>(l.size());
    img.layers.push_back(d);
    img.blobs[d.digest] = l;
    jl.push_back({{"mediaType", d.media_type}, {"digest", d.digest}, {"size", d.size}});
  }
  const std::string mt = docker_media_types ? oci::kMediaTypeDockerManifest : oci::kMediaTypeOciManifest;
  json manifest = {
      {"schemaVersion", 2},
      {"mediaType", mt},
      {"config",
       {{"mediaType", img.config.media_type}, {"digest", img.config.digest}, {"size", img.config.size}}},
      {"layers", jl}};
  img.manifest_json = manifest.dump();
  img.manifest.media_type = mt;
  img.manifest.digest = oci::sha256Digest(img.manifest_json);
  img.manifest.size = static_cast<int64_t>(img.manifest_json.size());
  return img;
}

std::string makeTestIndex(const std::vector<std::pair<oci::Platform, const TestImage*>>& images,
                          bool docker_list) {
  json ms = json::array();
  for (const auto& [p, img] : images) {
    json plat = {{"os", p.os}, {"architecture", p.architecture}};
    if (!p.variant.empty()) plat["variant"] = p.variant;
    ms.push_back({{"mediaType", img->manifest.media_type},
                  {"digest", img->manifest.digest},
                  {"size", img->manifest.size},
                  {"platform", plat}});
  }
  return json{{"schemaVersion", 2},
              {"mediaType", docker_list ? oci::kMediaTypeDockerManifestList : oci::kMediaTypeOciIndex},
              {"manifests", ms}}
      .dump();
}

// ---------------------------------------------------------------- registry

TestRegistry::TestRegistry(Auth auth, std::string user, std::string password)
    : auth_(auth),
      user_(std::move(user)),
      password_(std::move(password)),
      server_([this](const HttpRequest& r) { return handle(r); }) {}

TestRegistry::~TestRegistry() {
  server_.stop();
}

void TestRegistry::addBlob(const std::string& data) {
  std::lock_guard<std::mutex> lock(mu_);
  blobs_[oci::sha256Digest(data)] = data;
}

std::string TestRegistry::addManifest(const std::string& repo, const std::string& tag,
                                      const std::string& media_type, const std::string& body) {
  std::string d = oci::sha256Digest(body);
  std::lock_guard<std::mutex> lock(mu_);
  manifests_[repo + "@" + d] = {media_type, body};
  if (!tag.empty()) tags_[repo + ":" + tag] = d;
  return d;
}

void TestRegistry::push(const std::string& repo, const std::string& tag, const TestImage& image) {
  for (const auto& [d, data] : image.blobs) addBlob(data);
  addManifest(repo, tag, image.manifest.media_type, image.manifest_json);
}

void TestRegistry::corruptBlob(const std::string& digest) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string data = blobs_[digest];
  if (!data.empty()) data[data.size() / 2] ^= 0x5a;
  corrupt_[digest] = data;
}

void TestRegistry::cutBlobOnce(const std::string& digest, int64_t after) {
  std::lock_guard<std::mutex> lock(mu_);
  cut_once_[digest] = after;
}

int TestRegistry::blobGets(const std::string& digest) const {
  return count("GET", "/blobs/" + digest);
}

int TestRegistry::rangeGets(const std::string& digest) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const HttpRequest& r : log_) {
    if (r.method == "GET" && r.path.find("/blobs/" + digest) != std::string::npos && r.headers.count("range"))
      ++n;
  }
  return n;
}

int TestRegistry::tokenRequests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_issued_;
}

int TestRegistry::count(const std::string& method, const std::string& needle) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const HttpRequest& r : log_) {
    if (r.method == method && r.path.find(needle) != std::string::npos) ++n;
  }
  return n;
}

std::vector<HttpRequest> TestRegistry::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

bool TestRegistry::authorized(const HttpRequest& req, HttpResponse* challenge) {
  auto it = req.headers.find("authorization");
  const std::string have = it == req.headers.end() ? "" : it->second;
  if (auth_ == Auth::kNone) return true;
  if (auth_ == Auth::kBasic) {
    if (have == "Basic " + b64(user_ + ":" + password_)) return true;
    *challenge = jsonError(401, "UNAUTHORIZED", "authentication required");
    challenge->headers.push_back({"WWW-Authenticate", "Basic realm=\"test registry\""});
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (have.rfind("Bearer tok-", 0) == 0) return true;
  }
  std::string repo = req.path.substr(4);  // after "/v2/"
  size_t cut = repo.find("/manifests/");
  if (cut == std::string::npos) cut = repo.find("/blobs/");
  repo = repo.substr(0, cut);
  *challenge = jsonError(401, "UNAUTHORIZED", "authentication required");
  challenge->headers.push_back(
      {"WWW-Authenticate", "Bearer realm=\"http://" + host() +
                               "/token\",service=\"test-registry\",scope=\"repository:" + repo + ":pull\""});
  return false;
}

HttpResponse TestRegistry::handle(const HttpRequest& req) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back(req);
  }
  if (req.path == "/token") {
    auto it = req.headers.find("authorization");
    if (!user_.empty() &&
        (it == req.headers.end() || it->second != "Basic " + b64(user_ + ":" + password_))) {
      return jsonError(401, "UNAUTHORIZED", "bad credentials");
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++tokens_issued_;
    HttpResponse r;
    r.headers.push_back({"Content-Type", "application/json"});
    r.body = json{{"token", "tok-" + std::to_string(tokens_issued_)}, {"expires_in", 300}}.dump();
    return r;
  }
  if (req.path.rfind("/v2/", 0) != 0) return jsonError(404, "NOT_FOUND", "no route");
  HttpResponse challenge;
  if (!authorized(req, &challenge)) return challenge;
  std::string rest = req.path.substr(4);
  std::lock_guard<std::mutex> lock(mu_);
  if (size_t m = rest.find("/manifests/"); m != std::string::npos) {
    std::string repo = rest.substr(0, m), reference = rest.substr(m + 11);
    std::string digest = reference;
    if (reference.rfind("sha256:", 0) != 0) {
      auto t = tags_.find(repo + ":" + reference);
      if (t == tags_.end()) return jsonError(404, "MANIFEST_UNKNOWN", "manifest unknown");
      digest = t->second;
    }
    auto it = manifests_.find(repo + "@" + digest);
    if (it == manifests_.end()) return jsonError(404, "MANIFEST_UNKNOWN", "manifest unknown");
    HttpResponse r;
    r.headers.push_back({"Content-Type", it->second.first});
    if (!omit_digest_header_) r.headers.push_back({"Docker-Content-Digest", digest});
    r.body = it->second.second;
    if (req.method == "HEAD") r.headers.push_back({"Content-Length", std::to_string(r.body.size())});
    return r;
  }
  if (size_t b = rest.find("/blobs/"); b != std::string::npos) {
    std::string digest = rest.substr(b + 7);
    if (!blob_redirect_.empty()) {
      HttpResponse r;
      r.status = 307;
      r.headers.push_back({"Location", blob_redirect_ + "/" + digest});
      return r;
    }
    auto it = blobs_.find(digest);
    if (it == blobs_.end()) return jsonError(404, "BLOB_UNKNOWN", "blob unknown");
    std::string data = corrupt_.count(digest) ? corrupt_[digest] : it->second;
    HttpResponse r;
    r.headers.push_back({"Content-Type", "application/octet-stream"});
    r.headers.push_back({"Docker-Content-Digest", digest});
    int64_t start = 0;
    auto range = req.headers.find("range");
    if (range != req.headers.end() && !ignore_range_ && range->second.rfind("bytes=", 0) == 0) {
      start = std::atoll(range->second.c_str() + 6);
      if (start >= static_cast<int64_t>(data.size())) return jsonError(416, "RANGE", "range not satisfiable");
      r.status = 206;
      r.headers.push_back({"Content-Range", "bytes " + std::to_string(start) + "-" +
                                                std::to_string(data.size() - 1) + "/" +
                                                std::to_string(data.size())});
    }
    r.body = data.substr(static_cast<size_t>(start));
    if (auto c = cut_once_.find(digest); c != cut_once_.end()) {
      r.cut_after = c->second;
      cut_once_.erase(c);
    }
    return r;
  }
  return jsonError(404, "NOT_FOUND", "no route");
}

}  // namespace knap::images::testing
