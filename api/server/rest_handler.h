// RestHandler: the Kubernetes-style REST semantics of knapd's API, independent
// of the network. It turns one parsed HTTP request into one response (discovery,
// OpenAPI, GET/LIST/POST/PUT/PATCH/DELETE on serving.knative.dev/v1 objects and
// on core/v1 Namespaces, Secrets and ConfigMaps (the namespaces default,
// kube-system and kube-public are created by the constructor when missing),
// the knap.dev autoscaling view) and prepares WATCH requests, whose streaming
// the ApiServer does. Follows /work/shared/docs/KUBECTL-WIRE.md.
//
// Thread safety: handle() and the watch helpers may be called from several
// threads at once; the handler keeps no per-request state. Store, Config and
// TimeSource are borrowed and must outlive the handler.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "api/resources.h"
#include "api/server/access.h"
#include "api/server/selectors.h"
#include "api/server/tables.h"
#include "common/clock.h"
#include "common/config.h"
#include "store/store.h"

namespace knap::api {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path plus optional ?query
  std::string content_type;
  std::string accept;
  std::string body;
  std::string host;           // Host header ("" when absent)
  std::string origin;         // Origin header ("" when absent)
  std::string authorization;  // Authorization header ("" when absent)
  std::string if_none_match;  // If-None-Match header ("" when absent; the console's files)
  // Set by the transport: the caller is the local admin (the root-only unix
  // socket), or a verified client certificate named this user.
  bool local_admin = false;
  std::optional<UserInfo> cert_user;
};

struct HttpResponse {
  int code = 200;
  std::string body;  // JSON text
  std::string content_type = "application/json";
  std::vector<std::string> warnings;           // Warning header values: 299 - "..."
  std::map<std::string, std::string> headers;  // other headers (ETag)
};

// A parsed WATCH request (GET on a collection with watch=true|1).
struct WatchRequest {
  const ResourceInfo* info = nullptr;
  std::string ns;  // empty = all namespaces
  LabelSelector labels;
  FieldSelector fields;
  bool table = false;
  IncludeObject include = IncludeObject::kMetadata;
  std::string resource_version;  // as sent; "" or "0" = start with the current state
  // timeoutSeconds, or knap.min-request-timeout * (1 + a random fraction) when
  // the client sent none, as kube-apiserver does.
  std::chrono::milliseconds timeout{0};
  bool bookmarks = false;  // allowWatchBookmarks=true
  std::chrono::milliseconds bookmark_interval{60000};
};

// What a restart of a revision's pods replaces (RequestPolicy::restart_pods).
struct PodRestart {
  std::vector<std::string> pods;  // serving pods, replaced one by one; empty: none runs
  int warm_pods = 0;              // warm pods stopped (the pool refills)
};

// Request policy knapd sets from its command line (daemon/knapd.cc).
struct RequestPolicy {
  // Host names answered besides loopback names and IP literals (request_guard.h).
  std::vector<std::string> allowed_hosts;
  // A watch without timeoutSeconds ends after this plus a random fraction of it
  // (kube-apiserver's --min-request-timeout), so an abandoned watch cannot live forever.
  std::chrono::milliseconds min_request_timeout{std::chrono::seconds(1800)};
  // BOOKMARK events for watches with allowWatchBookmarks=true.
  std::chrono::milliseconds bookmark_interval{std::chrono::seconds(60)};
  // Authentication and authorization (api/server/access.h); null = every
  // caller is the local admin (unit tests, knap.api-insecure-loopback).
  std::shared_ptr<const AccessControl> access;
  // The router's metrics in Prometheus text (knapd wires Router::renderMetrics);
  // served per namespace at /apis/knap.dev/v1/namespaces/NS/metrics for the
  // web console. Null: that path answers 404.
  std::function<std::string()> metrics_text;
  // knapd's data dir, whose pods/ hold the pod logs (common/pod_logs.h),
  // served at /apis/knap.dev/v1/namespaces/NS/revisions/NAME/log for the web
  // console. Empty: that path answers 404.
  std::string pod_data_dir;
  // Starts a rolling restart of a revision's pods (knapd: the pod runner),
  // served as POST /apis/knap.dev/v1/namespaces/NS/revisions/NAME/restart.
  // Null: that path answers 404.
  std::function<StatusOr<PodRestart>(const std::string& ns, const std::string& name)> restart_pods;
};

// What one watch has told its client: which objects the client holds (they
// matched the selectors in the last event sent about them). Turns store events
// into the events Kubernetes sends to a selector watch: an object that stops
// matching is DELETED, one that starts matching is ADDED. For a watch resumed
// from a resourceVersion, objects unchanged since then are seeded from the
// current state; an object modified since then whose earlier state is unknown
// and that no longer matches gets one DELETED (an informer ignores a DELETED
// for an object it does not hold). One per watch; not thread-safe.
class WatchState {
 public:
  // Records that the client has (or has not) been given `obj` as it is now.
  void seed(const WatchRequest& w, const store::Object& obj);
  // The event type to send for `ev` ("ADDED"/"MODIFIED"/"DELETED"), or
  // nullptr to send nothing.
  const char* classify(const WatchRequest& w, const store::Event& ev);

 private:
  std::map<std::string, bool> held_;  // "ns/name" -> the client holds it
};

class RestHandler {
 public:
  RestHandler(store::Store& store, const Config& config, TimeSource& clock, RequestPolicy policy = {});

  // Handles any non-watch request. Never throws; malformed input gives a
  // Kubernetes Status with code 4xx, unexpected failures 500. Requests the
  // browser defences refuse (api/server/request_guard.h) get 403/415; a
  // caller without a valid credential gets 401 (but /healthz, /readyz,
  // /livez and /version are open, as in kube-apiserver), one whose roles do
  // not allow the request 403.
  HttpResponse handle(const HttpRequest& req);
  // /readyz answers 503 until the daemon says the whole of knapd is up
  // (kubeconfig written, router and runtime started) and again once it is
  // shutting down; /healthz and /livez stay 200. Ready by default. Any thread.
  void setReady(bool ready) { ready_.store(ready); }

  // If `req` is a watch, fills `out` and returns true. If it is a watch with
  // bad parameters or one the caller may not make, sets `error` and returns
  // true. Otherwise returns false.
  bool parseWatch(const HttpRequest& req, WatchRequest* out, std::optional<HttpResponse>* error);

  // Whether the watcher wants this object (kind, namespace, selectors).
  static bool watchMatches(const WatchRequest& w, const store::Object& obj);
  // Whether the object is of the watched kind and namespace (selectors aside).
  static bool watchScope(const WatchRequest& w, const store::Object& obj);
  // One stream line: {"type":"ADDED","object":...}\n (a Table row object when
  // w.table). `first` adds the column definitions to a Table event.
  static std::string watchEventLine(const WatchRequest& w, const char* type, const nlohmann::json& obj,
                                    bool first);
  // A BOOKMARK event line at resourceVersion `rv` (objects carry only kind,
  // apiVersion and metadata.resourceVersion, as in Kubernetes).
  static std::string watchBookmarkLine(const WatchRequest& w, int64_t rv);
  // The 410 Expired Status for a too-old resourceVersion.
  HttpResponse expiredResponse(const std::string& requested_rv);

 private:
  std::atomic<bool> ready_{true};
  struct Query;
  struct Target;
  struct WriteCtx;

  // The caller, or the 401/403 to answer instead.
  std::optional<HttpResponse> checkAccess(const HttpRequest& req, const Target& t, bool watch,
                                          UserInfo* user);
  HttpResponse selfSubjectAccessReview(const HttpRequest& req, const UserInfo& user);
  HttpResponse selfSubjectReview(const UserInfo& user);

  HttpResponse dispatch(const HttpRequest& req, const Target& t, const UserInfo& user);
  HttpResponse getObject(const HttpRequest& req, const Target& t);
  HttpResponse listObjects(const HttpRequest& req, const Target& t);
  HttpResponse createObject(const HttpRequest& req, const Target& t, const std::string& user);
  HttpResponse replaceObject(const HttpRequest& req, const Target& t, const std::string& user);
  HttpResponse patchObject(const HttpRequest& req, const Target& t, const std::string& user);
  HttpResponse patchOnce(WriteCtx& ctx, const Target& t, const std::string& type, const nlohmann::json& body);
  HttpResponse deleteObject(const HttpRequest& req, const Target& t);
  HttpResponse deleteCollection(const HttpRequest& req, const Target& t);
  HttpResponse autoscalingView(const Target& t);
  HttpResponse metricsView(const Target& t);
  HttpResponse logView(const Target& t);
  HttpResponse restartPods(const Target& t);

  // Shared by create, replace and patch: decode policy, status handling,
  // defaulting, validation, no-op detection, the store write.
  HttpResponse write(WriteCtx& ctx, nlohmann::json obj, const store::Object* live, int create_code);
  HttpResponse doCreate(WriteCtx& ctx, nlohmann::json obj, int create_code);

  std::string newName(const std::string& prefix);
  // Creates the namespaces that always exist (api/core_objects.h kSystemNamespaces) when missing.
  void ensureSystemNamespaces();

  store::Store& store_;
  const Config& config_;
  TimeSource& clock_;
  const RequestPolicy policy_;
  std::mutex rng_mu_;
  std::mt19937 rng_;
};

// The lines of a Prometheus text exposition that concern namespace `ns`:
// samples whose revision label is "NS/..." and the HELP/TYPE lines of the
// families that keep a sample. Other samples (no revision label, other
// namespaces) are dropped.
std::string metricsOfNamespace(const std::string& text, const std::string& ns);

// JSON text for the wire: invalid UTF-8 is replaced, never thrown.
std::string toJsonText(const nlohmann::json& j);

}  // namespace knap::api
