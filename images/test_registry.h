// Test-only: a tiny HTTP/1.1 server on 127.0.0.1 and an OCI registry on top
// of it, with auth modes and fault injection (corrupt blobs, transfers cut
// half way, ignored Range requests), counting what clients asked for.
//
// Thread safety: every method is safe from any thread; the server answers
// each connection on its own thread and closes it after one response.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "oci/oci_layout.h"

namespace knap::images::testing {

struct HttpRequest {
  std::string method;
  std::string target;  // path?query
  std::string path;
  std::string query;
  std::map<std::string, std::string> headers;  // lower-case names
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  int64_t cut_after = -1;  // >= 0: close the connection after this many body bytes
};

class TestHttpServer {
 public:
  explicit TestHttpServer(std::function<HttpResponse(const HttpRequest&)> handler);
  ~TestHttpServer();
  int port() const { return port_; }
  std::string hostPort() const { return "127.0.0.1:" + std::to_string(port_); }
  // Stops accepting and waits for connections in flight.
  void stop();

 private:
  void acceptLoop();
  void serve(int fd);
  std::function<HttpResponse(const HttpRequest&)> handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
};

// An image made by hand: arbitrary layer bytes (diff_id = sha256 of the
// bytes, as for uncompressed layers).
struct TestImage {
  oci::Descriptor manifest;
  std::string manifest_json;
  oci::Descriptor config;
  std::vector<oci::Descriptor> layers;
  std::map<std::string, std::string> blobs;  // digest -> bytes (config, layers)
};
TestImage makeTestImage(const std::vector<std::string>& layers, const std::string& arch = "amd64",
                        bool docker_media_types = false);
// An index (OCI, or a Docker manifest list) over images with their platforms.
std::string makeTestIndex(const std::vector<std::pair<oci::Platform, const TestImage*>>& images,
                          bool docker_list = false);

class TestRegistry {
 public:
  enum class Auth { kNone, kBasic, kBearer };
  explicit TestRegistry(Auth auth = Auth::kNone, std::string user = "", std::string password = "");
  ~TestRegistry();

  std::string host() const { return server_.hostPort(); }
  void stop() { server_.stop(); }

  void addBlob(const std::string& data);
  // Stores body under its digest and (if not empty) the tag.
  std::string addManifest(const std::string& repo, const std::string& tag, const std::string& media_type,
                          const std::string& body);
  // Blobs + manifest of `image` under repo:tag.
  void push(const std::string& repo, const std::string& tag, const TestImage& image);

  // --- faults ---
  void corruptBlob(const std::string& digest);                 // same size, other bytes
  void cutBlobOnce(const std::string& digest, int64_t after);  // the next GET stops after `after` bytes
  void setIgnoreRange(bool ignore) { ignore_range_ = ignore; }
  void setOmitDigestHeader(bool omit) { omit_digest_header_ = omit; }
  // Blob GETs answer 307 to <base>/<digest> (a CDN, as Docker Hub does).
  void setBlobRedirect(const std::string& base) {
    std::lock_guard<std::mutex> lock(mu_);
    blob_redirect_ = base;
  }

  // --- what clients did ---
  int blobGets(const std::string& digest) const;
  int rangeGets(const std::string& digest) const;
  int tokenRequests() const;
  int count(const std::string& method, const std::string& path_prefix) const;
  std::vector<HttpRequest> requests() const;

 private:
  HttpResponse handle(const HttpRequest& req);
  bool authorized(const HttpRequest& req, HttpResponse* challenge);

  Auth auth_;
  std::string user_, password_;
  std::atomic<bool> ignore_range_{false};
  std::atomic<bool> omit_digest_header_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::string> blobs_;
  std::map<std::string, std::pair<std::string, std::string>>
      manifests_;                            // "repo@digest" -> (media type, body)
  std::map<std::string, std::string> tags_;  // "repo:tag" -> digest
  std::map<std::string, std::string> corrupt_;
  std::map<std::string, int64_t> cut_once_;
  std::vector<HttpRequest> log_;
  std::string blob_redirect_;
  int tokens_issued_ = 0;
  TestHttpServer server_;  // last: starts after everything above exists
};

}  // namespace knap::images::testing
