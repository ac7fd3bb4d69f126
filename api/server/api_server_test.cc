// In-process tests of the REST server on 127.0.0.1:0 over a real SqliteStore
// (":memory:"), driven by a small HTTP client (Beast for normal requests, raw
// POSIX sockets for malformed input and watch streams).
#include "api/server/api_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "api/server/event_handler.h"
#include "api/server/service_account_token.h"
#include "events/events.h"
#include "events/store_event_recorder.h"
#include "store/sqlite_store.h"

namespace knap::api {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;

const char* kNsPath = "/apis/serving.knative.dev/v1/namespaces/default";

struct Resp {
  int code = 0;
  std::string body;
  json j;
  std::vector<std::string> warnings;
  std::string content_type;
};

json helloService(const std::string& name = "hello") {
  return json::parse(R"({"apiVersion":"serving.knative.dev/v1","kind":"Service",
    "metadata":{"name":"NAME","namespace":"default","labels":{"app":"hello","tier":"web"}},
    "spec":{"template":{"spec":{"containers":[{"image":"ghcr.io/knative/helloworld-go:latest",
      "env":[{"name":"TARGET","value":"World"}]}]}}}})")
      .patch(json::parse(R"([{"op":"replace","path":"/metadata/name","value":")" + name + R"("}])"));
}

// A raw TCP connection with a receive timeout, for malformed requests and watches.
class RawConn {
 public:
  // rcvbuf > 0 pins the receive buffer (and turns off the kernel's autotuning, which
  // can grow it to tens of MiB on loopback) so that a client that does not read fills up.
  explicit RawConn(int port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawConn() { ::close(fd_); }
  bool ok() const { return ok_; }
  bool send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until the peer closes or the timeout passes. Returns everything read.
  std::string readAll() {
    char buf[8192];
    while (true) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = n == 0;
        break;
      }
      data_.append(buf, static_cast<size_t>(n));
    }
    return data_;
  }
  // Reads until `count` watch event lines have arrived (or timeout/close).
  std::vector<json> readEvents(size_t count) {
    char buf[8192];
    while (events().size() < count) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = n == 0;
        break;
      }
      data_.append(buf, static_cast<size_t>(n));
    }
    return events();
  }
  std::vector<json> events() const {
    std::vector<json> out;
    size_t body = data_.find("\r\n\r\n");
    if (body == std::string::npos) return out;
    std::istringstream in(data_.substr(body + 4));
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("{\"", 0) == 0) out.push_back(json::parse(line, nullptr, false));
    }
    return out;
  }
  // Reads until the response headers are complete (or timeout/close).
  bool readHeaders() {
    while (data_.find("\r\n\r\n") == std::string::npos) {
      size_t before = data_.size();
      readSome();
      if (data_.size() == before) return false;
    }
    return true;
  }
  // One recv (up to the timeout); what arrived.
  std::string readSome() {
    char buf[8192];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) data_.append(buf, static_cast<size_t>(n));
    return data_;
  }
  void setTimeout(int seconds) {
    timeval tv{seconds, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  const std::string& data() const { return data_; }
  bool closed() const { return closed_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
  bool closed_ = false;
  std::string data_;
};

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override { startServer(ApiServerOptions{}); }
  void TearDown() override {
    if (server_) server_->stop();
  }

  void startServer(ApiServerOptions options, int64_t history = 10000) {
    if (server_) server_->stop();
    server_.reset();
    auto s = store::SqliteStore::open(":memory:", clock_, history);
    ASSERT_TRUE(s.isOk()) << s.status().toString();
    store_ = std::move(*s);
    server_ = std::make_unique<ApiServer>(options, config_, *store_, clock_);
    base_rv_ = store_->currentResourceVersion();  // the system namespaces
    Status st = server_->start();
    ASSERT_TRUE(st.isOk()) << st.toString();
    if (!options.tcp_listen.empty()) ASSERT_GT(server_->tcpPort(), 0);
  }

  Resp request(const std::string& method, const std::string& target, const std::string& body = "",
               const std::string& content_type = "application/json",
               const std::string& accept = "application/json") {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.expires_after(std::chrono::seconds(10));
    stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"),
                                          static_cast<unsigned short>(server_->tcpPort())));
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::accept, accept);
    if (!bearer_.empty()) req.set(http::field::authorization, "Bearer " + bearer_);
    if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
      req.set(http::field::content_type, content_type);
      req.body() = body;
    }
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    http::read(stream, buffer, parser);
    auto& res = parser.get();
    Resp r;
    r.code = res.result_int();
    r.body = res.body();
    r.content_type = std::string(res[http::field::content_type]);
    for (auto it = res.find(http::field::warning); it != res.end() && it->name() == http::field::warning;
         ++it)
      r.warnings.push_back(std::string(it->value()));
    r.j = json::parse(r.body, nullptr, false);
    beast::error_code ec;
    stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
    return r;
  }

  Resp create(const json& obj, const std::string& plural = "services", const std::string& query = "") {
    return request("POST", std::string(kNsPath) + "/" + plural + query, obj.dump());
  }
  std::string path(const std::string& plural, const std::string& name = "") {
    return std::string(kNsPath) + "/" + plural + (name.empty() ? "" : "/" + name);
  }
  // Writes an object straight into the store, as a controller would.
  store::Object storeCreate(const std::string& kind, const std::string& name, json body) {
    body["apiVersion"] = "serving.knative.dev/v1";
    body["kind"] = kind;
    body["metadata"]["name"] = name;
    body["metadata"]["namespace"] = "default";
    auto o = store_->create({kind, "default", name}, body);
    EXPECT_TRUE(o.isOk()) << o.status().toString();
    return *o;
  }
  std::string rvOf(const json& obj) { return obj["metadata"]["resourceVersion"].get<std::string>(); }

  std::string bearer_;  // sent as a bearer token by request() when set
  SimulatedTimeSource clock_;
  Config config_ = defaultConfig();
  std::unique_ptr<store::SqliteStore> store_;
  std::unique_ptr<ApiServer> server_;
  int64_t base_rv_ = 0;
};

void expectStatus(const Resp& r, int code, const std::string& reason) {
  EXPECT_EQ(r.code, code) << r.body;
  EXPECT_EQ(r.j.value("kind", ""), "Status") << r.body;
  EXPECT_EQ(r.j.value("apiVersion", ""), "v1") << r.body;
  EXPECT_EQ(r.j.value("status", ""), "Failure") << r.body;
  EXPECT_EQ(r.j.value("reason", ""), reason) << r.body;
  EXPECT_EQ(r.j.value("code", 0), code) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
}

// ---------------------------------------------------------------- discovery

TEST_F(ApiServerTest, VersionReportsMinor30) {
  Resp r = request("GET", "/version?timeout=5s");
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(r.j["major"], "1");
  EXPECT_EQ(r.j["minor"], "30");
  EXPECT_EQ(r.j["gitVersion"], "v1.30.0-knap");
}

TEST_F(ApiServerTest, DiscoveryDocuments) {
  Resp apis = request("GET", "/apis?timeout=32s");
  ASSERT_EQ(apis.code, 200);
  EXPECT_EQ(apis.j["kind"], "APIGroupList");
  EXPECT_EQ(apis.j["groups"][0]["name"], "serving.knative.dev");
  EXPECT_EQ(apis.j["groups"][0]["preferredVersion"]["groupVersion"], "serving.knative.dev/v1");

  Resp group = request("GET", "/apis/serving.knative.dev");
  EXPECT_EQ(group.j["kind"], "APIGroup");

  Resp list = request("GET", "/apis/serving.knative.dev/v1?timeout=32s");
  ASSERT_EQ(list.code, 200);
  EXPECT_EQ(list.j["kind"], "APIResourceList");
  std::map<std::string, json> byName;
  for (const json& r : list.j["resources"]) byName[r["name"]] = r;
  ASSERT_TRUE(byName.count("services"));
  EXPECT_EQ(byName["services"]["kind"], "Service");
  EXPECT_EQ(byName["services"]["singularName"], "service");
  EXPECT_NE(
      std::find(byName["services"]["shortNames"].begin(), byName["services"]["shortNames"].end(), "ksvc"),
      byName["services"]["shortNames"].end());
  EXPECT_EQ(byName["services"]["categories"], json::array({"all", "knative", "serving"}));
  EXPECT_EQ(byName["revisions"]["shortNames"], json::array({"rev"}));
  EXPECT_EQ(byName["routes"]["shortNames"], json::array({"rt"}));
  ASSERT_TRUE(byName.count("services/status"));
  EXPECT_EQ(byName["services/status"]["verbs"], json::array({"get", "patch", "update"}));
  for (const char* p : {"configurations", "revisions", "routes", "configurations/status"})
    EXPECT_TRUE(byName.count(p)) << p;

  Resp core = request("GET", "/api?timeout=32s");
  EXPECT_EQ(core.code, 200);
  EXPECT_EQ(core.j["kind"], "APIVersions");
  Resp v2 = request("GET", "/openapi/v2?timeout=32s");
  EXPECT_EQ(v2.code, 200);
  EXPECT_EQ(v2.j["swagger"], "2.0");
  // What kubectl asks for: openapi.v2.Document{swagger: "2.0", info: {title, version}} as protobuf.
  Resp pb = request("GET", "/openapi/v2?timeout=32s", "", "application/json",
                    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf");
  EXPECT_EQ(pb.code, 200);
  const std::string want_prefix = std::string(
      "\x0a\x03"
      "2.0"
      "\x12",
      6);
  EXPECT_EQ(pb.body.substr(0, 6), want_prefix);
  EXPECT_NE(pb.body.find("knap"), std::string::npos);
  Resp events =
      request("GET", "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dhello&limit=500");
  ASSERT_EQ(events.code, 200);
  EXPECT_EQ(events.j["kind"], "EventList");
  EXPECT_TRUE(events.j["items"].is_array());
  EXPECT_EQ(request("GET", "/healthz").code, 200);
  EXPECT_EQ(request("GET", "/readyz").code, 200);
  expectStatus(request("GET", "/no/such/path"), 404, "NotFound");
  // /readyz follows the daemon (starting, stopping); health stays 200.
  server_->setReady(false);
  Resp starting = request("GET", "/readyz");
  EXPECT_EQ(starting.code, 503);
  EXPECT_NE(starting.body.find("not ready"), std::string::npos) << starting.body;
  EXPECT_EQ(request("GET", "/healthz").code, 200);
  EXPECT_EQ(request("GET", "/livez").code, 200);
  server_->setReady(true);
  EXPECT_EQ(request("GET", "/readyz").code, 200);
}

TEST_F(ApiServerTest, DomainMappingAndClusterDomainClaimAreServed) {
  // Discovery: the two group versions and their kinds.
  Resp groups = request("GET", "/apis");
  ASSERT_EQ(groups.code, 200);
  bool serving_v1beta1 = false, networking = false;
  for (const json& g : groups.j["groups"]) {
    for (const json& v : g["versions"]) {
      if (v["groupVersion"] == "serving.knative.dev/v1beta1") serving_v1beta1 = true;
      if (v["groupVersion"] == "networking.internal.knative.dev/v1alpha1") networking = true;
    }
    if (g["name"] == "serving.knative.dev") EXPECT_EQ(g["preferredVersion"]["version"], "v1");
  }
  EXPECT_TRUE(serving_v1beta1 && networking) << groups.body;
  Resp dm_list = request("GET", "/apis/serving.knative.dev/v1beta1");
  ASSERT_EQ(dm_list.code, 200);
  EXPECT_EQ(dm_list.j["resources"][0]["name"], "domainmappings");
  EXPECT_EQ(dm_list.j["resources"][0]["namespaced"], true);
  EXPECT_EQ(dm_list.j["resources"][1]["name"], "domainmappings/status");
  Resp cdc_list = request("GET", "/apis/networking.internal.knative.dev/v1alpha1");
  ASSERT_EQ(cdc_list.code, 200);
  EXPECT_EQ(cdc_list.j["resources"].size(), 1u);
  EXPECT_EQ(cdc_list.j["resources"][0]["namespaced"], false);
  Resp root = request("GET", "/openapi/v3");
  std::string url = root.j["paths"]["apis/serving.knative.dev/v1beta1"]["serverRelativeURL"];
  Resp gv = request("GET", url);
  ASSERT_EQ(gv.code, 200);
  EXPECT_TRUE(gv.j["components"]["schemas"]["dev.knative.serving.v1beta1.DomainMapping"]["properties"]["spec"]
                  ["properties"]["ref"]["properties"]
                      .contains("apiVersion"));

  // Create: defaulted ref namespace, creator annotation; Knative's validation.
  const std::string base = "/apis/serving.knative.dev/v1beta1/namespaces/default/domainmappings";
  auto dm = [](const std::string& name, const json& ref) {
    return json{{"apiVersion", "serving.knative.dev/v1beta1"},
                {"kind", "DomainMapping"},
                {"metadata", {{"name", name}}},
                {"spec", {{"ref", ref}}}}
        .dump();
  };
  json ref = {{"apiVersion", "serving.knative.dev/v1"}, {"kind", "Service"}, {"name", "hello"}};
  Resp c = request("POST", base, dm("app.example.com", ref));
  ASSERT_EQ(c.code, 201) << c.body;
  EXPECT_EQ(c.j["apiVersion"], "serving.knative.dev/v1beta1");
  EXPECT_EQ(c.j["spec"]["ref"]["namespace"], "default");
  EXPECT_TRUE(c.j["metadata"]["annotations"].contains("serving.knative.dev/creator"));
  EXPECT_EQ(request("GET", base + "/app.example.com").code, 200);
  EXPECT_EQ(request("GET", "/apis/serving.knative.dev/v1beta1/domainmappings").j["items"].size(), 1u);

  Resp bad = request("POST", base, dm("x.svc.cluster.local", ref));
  expectStatus(bad, 422, "Invalid");
  EXPECT_NE(bad.j["message"].get<std::string>().find("metadata.name: invalid name \"x.svc.cluster.local\": "
                                                     "must not be a subdomain of cluster local domain "
                                                     "\"cluster.local\""),
            std::string::npos)
      << bad.body;
  bad = request("POST", base, dm("single", ref));
  expectStatus(bad, 422, "Invalid");
  EXPECT_NE(bad.j["message"].get<std::string>().find(
                "invalid name \"single\": name: Invalid value: \"single\": "
                "should be a domain with at least two segments separated by dots"),
            std::string::npos)
      << bad.body;
  bad = request("POST", base, dm("b.example.com", {{"name", "hello"}, {"namespace", "other"}}));
  expectStatus(bad, 422, "Invalid");
  for (const char* f : {"spec.ref.apiVersion", "spec.ref.kind", "spec.ref.namespace: mismatched namespaces"})
    EXPECT_NE(bad.j["message"].get<std::string>().find(f), std::string::npos) << f << " " << bad.body;
  EXPECT_EQ(bad.j["details"]["group"], "serving.knative.dev");

  // The cluster-scoped claim: no namespace in the path or the object.
  const std::string claims = "/apis/networking.internal.knative.dev/v1alpha1/clusterdomainclaims";
  Resp claim =
      request("POST", claims,
              R"({"apiVersion":"networking.internal.knative.dev/v1alpha1","kind":"ClusterDomainClaim",)"
              R"("metadata":{"name":"c.example.com","namespace":"x"},"spec":{"namespace":"default"}})");
  ASSERT_EQ(claim.code, 201) << claim.body;
  EXPECT_FALSE(claim.j["metadata"].contains("namespace"));
  EXPECT_FALSE(claim.j["metadata"].contains("annotations"));
  EXPECT_EQ(request("GET", claims + "/c.example.com").code, 200);
  bad = request("POST", claims,
                R"({"apiVersion":"networking.internal.knative.dev/v1alpha1","kind":"ClusterDomainClaim",)"
                R"("metadata":{"name":"d.example.com"},"spec":{}})");
  expectStatus(bad, 422, "Invalid");
  EXPECT_NE(bad.j["message"].get<std::string>().find("spec.namespace: missing field(s)"), std::string::npos)
      << bad.body;
  EXPECT_EQ(request("DELETE", claims + "/c.example.com").code, 200);
  EXPECT_EQ(request("GET", claims + "/c.example.com").code, 404);
}

TEST_F(ApiServerTest, PruneAllowlistKindsAreListableAndEmpty) {
  Resp core = request("GET", "/api/v1");
  std::set<std::string> names;
  for (const json& r : core.j["resources"]) names.insert(r["name"].get<std::string>());
  for (const char* n : {"services", "pods", "endpoints", "persistentvolumeclaims", "persistentvolumes",
                        "replicationcontrollers"})
    EXPECT_TRUE(names.count(n)) << n;
  Resp apps = request("GET", "/apis/apps/v1");
  ASSERT_EQ(apps.code, 200);
  EXPECT_EQ(apps.j["resources"].size(), 4u);
  EXPECT_EQ(request("GET", "/apis/batch").code, 200);
  Resp list = request("GET", "/apis/apps/v1/namespaces/default/deployments?labelSelector=app%3Dx");
  ASSERT_EQ(list.code, 200);
  EXPECT_EQ(list.j["kind"], "DeploymentList");
  EXPECT_TRUE(list.j["items"].empty());
  EXPECT_EQ(request("GET", "/api/v1/persistentvolumes").j["kind"], "PersistentVolumeList");
  expectStatus(request("GET", "/api/v1/namespaces/default/pods/p"), 404, "NotFound");
  expectStatus(request("POST", "/apis/batch/v1/namespaces/default/jobs", "{}"), 405, "MethodNotAllowed");
  // persistentvolumes are cluster-scoped.
  expectStatus(request("GET", "/api/v1/namespaces/default/persistentvolumes"), 404, "NotFound");
}

TEST_F(ApiServerTest, OpenApiV3AdvertisesFieldValidationWithoutStrategicMerge) {
  Resp root = request("GET", "/openapi/v3?timeout=32s");
  ASSERT_EQ(root.code, 200);
  std::string url = root.j["paths"]["apis/serving.knative.dev/v1"]["serverRelativeURL"];
  EXPECT_EQ(url.rfind("/openapi/v3/apis/serving.knative.dev/v1?hash=", 0), 0u) << url;
  Resp gv = request("GET", url + "&timeout=32s");
  ASSERT_EQ(gv.code, 200);
  for (const char* plural : {"services", "configurations", "revisions", "routes"}) {
    const json& op = gv.j["paths"]["/apis/serving.knative.dev/v1/namespaces/{namespace}/" +
                                   std::string(plural) + "/{name}"]["patch"];
    ASSERT_TRUE(op.is_object()) << plural;
    EXPECT_EQ(op["x-kubernetes-group-version-kind"]["group"], "serving.knative.dev");
    bool has_fv = false;
    for (const json& p : op["parameters"]) has_fv |= p["name"] == "fieldValidation" && p["in"] == "query";
    EXPECT_TRUE(has_fv) << plural;
    EXPECT_FALSE(op["requestBody"]["content"].contains("application/strategic-merge-patch+json"));
    EXPECT_TRUE(op["requestBody"]["content"].contains("application/merge-patch+json"));
  }
}

// ---------------------------------------------------------------- create / get / list

TEST_F(ApiServerTest, CreateGetListAndErrors) {
  Resp c =
      create(helloService(), "services", "?fieldManager=kubectl-client-side-apply&fieldValidation=Strict");
  ASSERT_EQ(c.code, 201) << c.body;
  EXPECT_EQ(c.j["kind"], "Service");
  EXPECT_EQ(c.j["apiVersion"], "serving.knative.dev/v1");
  EXPECT_FALSE(c.j["metadata"]["uid"].get<std::string>().empty());
  EXPECT_EQ(c.j["metadata"]["generation"], 1);
  EXPECT_FALSE(rvOf(c.j).empty());

  Resp g = request("GET", path("services", "hello"));
  ASSERT_EQ(g.code, 200);
  EXPECT_EQ(g.j["metadata"]["uid"], c.j["metadata"]["uid"]);
  EXPECT_EQ(g.j["kind"], "Service");

  Resp dup = create(helloService());
  expectStatus(dup, 409, "AlreadyExists");
  EXPECT_EQ(dup.j["message"], "services.serving.knative.dev \"hello\" already exists");

  Resp missing = request("GET", path("services", "nope"));
  expectStatus(missing, 404, "NotFound");
  EXPECT_EQ(missing.j["message"], "services.serving.knative.dev \"nope\" not found");
  EXPECT_EQ(missing.j["details"]["name"], "nope");
  EXPECT_EQ(missing.j["details"]["group"], "serving.knative.dev");
  EXPECT_EQ(missing.j["details"]["kind"], "services");

  Resp list = request("GET", path("services") + "?limit=500");
  ASSERT_EQ(list.code, 200);
  EXPECT_EQ(list.j["kind"], "ServiceList");
  EXPECT_EQ(list.j["apiVersion"], "serving.knative.dev/v1");
  ASSERT_EQ(list.j["items"].size(), 1u);
  EXPECT_EQ(list.j["metadata"]["resourceVersion"], std::to_string(store_->currentResourceVersion()));

  Resp all = request("GET", "/apis/serving.knative.dev/v1/services?limit=500");
  ASSERT_EQ(all.code, 200);
  EXPECT_EQ(all.j["items"].size(), 1u);
  Resp other_ns = request("GET", "/apis/serving.knative.dev/v1/namespaces/other/services");
  EXPECT_EQ(other_ns.j["items"].size(), 0u);
  expectStatus(request("POST", "/apis/serving.knative.dev/v1/services", helloService("x").dump()), 405,
               "MethodNotAllowed");
}

TEST_F(ApiServerTest, GenerateNameAndDryRunCreate) {
  json obj = helloService();
  obj["metadata"].erase("name");
  obj["metadata"]["generateName"] = "gen-";
  Resp c = create(obj);
  ASSERT_EQ(c.code, 201) << c.body;
  std::string name = c.j["metadata"]["name"];
  EXPECT_EQ(name.rfind("gen-", 0), 0u);
  EXPECT_EQ(name.size(), 9u);
  EXPECT_EQ(request("GET", path("services", name)).code, 200);

  int64_t rv = store_->currentResourceVersion();
  Resp dry = create(helloService("dry"), "services", "?dryRun=All");
  EXPECT_EQ(dry.code, 201) << dry.body;
  EXPECT_EQ(dry.j["metadata"]["name"], "dry");
  EXPECT_EQ(request("GET", path("services", "dry")).code, 404);
  EXPECT_EQ(store_->currentResourceVersion(), rv);

  json noname = helloService();
  noname["metadata"].erase("name");
  expectStatus(create(noname), 422, "Invalid");
}

TEST_F(ApiServerTest, RevisionsCannotBeCreatedByUsers) {
  json rev = {{"apiVersion", "serving.knative.dev/v1"},
              {"kind", "Revision"},
              {"metadata", {{"name", "hello-00001"}}},
              {"spec", {{"containers", json::array({{{"image", "x"}}})}}}};
  Resp r = create(rev, "revisions");
  expectStatus(r, 405, "MethodNotAllowed");
  EXPECT_NE(r.j["message"].get<std::string>().find("created by their Configuration"), std::string::npos)
      << r.body;
  EXPECT_EQ(request("GET", path("revisions", "hello-00001")).code, 404);
}

TEST_F(ApiServerTest, NamespaceAndKindMismatchesAreBadRequests) {
  json obj = helloService();
  obj["metadata"]["namespace"] = "other";
  expectStatus(create(obj), 400, "BadRequest");
  json wrong_kind = helloService();
  wrong_kind["kind"] = "Route";
  expectStatus(create(wrong_kind), 400, "BadRequest");
  json wrong_version = helloService();
  wrong_version["apiVersion"] = "serving.knative.dev/v2";
  expectStatus(create(wrong_version), 400, "BadRequest");
  EXPECT_EQ(store_->currentResourceVersion(), base_rv_);
}

// ---------------------------------------------------------------- field validation

TEST_F(ApiServerTest, UnknownFieldsStrictWarnIgnore) {
  json bad = helloService("bad");
  bad["spec"]["foo"] = "bar";
  Resp strict = create(bad, "services", "?fieldValidation=Strict");
  expectStatus(strict, 400, "BadRequest");
  EXPECT_EQ(strict.j["message"],
            "Service in version \"v1\" cannot be handled as a Service: strict decoding error: unknown field "
            "\"spec.foo\"");
  Resp dflt = create(bad);
  expectStatus(dflt, 400, "BadRequest");
  EXPECT_EQ(request("GET", path("services", "bad")).code, 404);

  Resp warn = create(bad, "services", "?fieldValidation=Warn");
  ASSERT_EQ(warn.code, 201) << warn.body;
  ASSERT_EQ(warn.warnings.size(), 1u);
  EXPECT_EQ(warn.warnings[0], "299 - \"unknown field \\\"spec.foo\\\"\"");
  EXPECT_FALSE(warn.j["spec"].contains("foo"));

  json bad2 = helloService("bad2");
  bad2["spec"]["foo"] = "bar";
  Resp ignore = create(bad2, "services", "?fieldValidation=Ignore");
  ASSERT_EQ(ignore.code, 201) << ignore.body;
  EXPECT_TRUE(ignore.warnings.empty());
  EXPECT_FALSE(request("GET", path("services", "bad2")).j["spec"].contains("foo"));

  expectStatus(create(helloService("x"), "services", "?fieldValidation=Sometimes"), 400, "BadRequest");
}

TEST_F(ApiServerTest, InvalidObjectGives422WithCauses) {
  json obj = helloService("noimage");
  obj["spec"]["template"]["spec"]["containers"][0].erase("image");
  Resp r = create(obj);
  expectStatus(r, 422, "Invalid");
  EXPECT_EQ(r.j["details"]["kind"], "Service");
  EXPECT_EQ(r.j["details"]["name"], "noimage");
  EXPECT_EQ(r.j["details"]["group"], "serving.knative.dev");
  ASSERT_TRUE(r.j["details"]["causes"].is_array());
  ASSERT_FALSE(r.j["details"]["causes"].empty());
  bool found = false;
  for (const json& c : r.j["details"]["causes"])
    found |= c["field"] == "spec.template.spec.containers[0].image";
  EXPECT_TRUE(found) << r.body;
  EXPECT_EQ(request("GET", path("services", "noimage")).code, 404);
}

TEST_F(ApiServerTest, MalformedBodiesLeaveStateUnchanged) {
  ASSERT_EQ(create(helloService()).code, 201);
  int64_t rv = store_->currentResourceVersion();
  Resp r = request("POST", path("services"), "{\"apiVersion\": \"serving.knative.dev/v1\", \"kind\": ");
  expectStatus(r, 400, "BadRequest");
  EXPECT_NE(r.j["message"].get<std::string>().find("line 1, column"), std::string::npos) << r.body;
  expectStatus(request("POST", path("services"), "[1,2,3]"), 400, "BadRequest");
  expectStatus(request("POST", path("services"), std::string(100000, '[')), 400, "BadRequest");
  expectStatus(request("PUT", path("services", "hello"), "not json"), 400, "BadRequest");
  expectStatus(request("PATCH", path("services", "hello"), "{bad", "application/merge-patch+json"), 400,
               "BadRequest");
  expectStatus(
      request("PATCH", path("services", "hello"), "[{\"op\":\"nope\"}]", "application/json-patch+json"), 400,
      "BadRequest");
  expectStatus(request("DELETE", path("services", "hello"), "{oops"), 400, "BadRequest");
  expectStatus(request("PATCH", path("services", "hello"), "a: [b", "application/apply-patch+yaml"), 400,
               "BadRequest");
  EXPECT_EQ(store_->currentResourceVersion(), rv);
  EXPECT_EQ(request("GET", path("services", "hello")).code, 200);
}

// ---------------------------------------------------------------- update

TEST_F(ApiServerTest, PutWithOptimisticLockingAndStatusRules) {
  Resp c = create(helloService());
  ASSERT_EQ(c.code, 201);
  json obj = c.j;
  obj["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/knative/helloworld-go:v2";
  obj["status"] = {{"url", "http://user-set"}};
  Resp u = request("PUT", path("services", "hello"), obj.dump());
  ASSERT_EQ(u.code, 200) << u.body;
  EXPECT_EQ(u.j["metadata"]["generation"], 2);
  EXPECT_NE(rvOf(u.j), rvOf(c.j));
  EXPECT_FALSE(u.j.contains("status") && u.j["status"].contains("url"))
      << "status via main resource is ignored";

  // Stale resourceVersion -> 409 Conflict.
  obj["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/knative/helloworld-go:v3";
  Resp stale = request("PUT", path("services", "hello"), obj.dump());
  expectStatus(stale, 409, "Conflict");
  EXPECT_NE(stale.j["message"].get<std::string>().find(
                "Operation cannot be fulfilled on services.serving.knative.dev \"hello\""),
            std::string::npos);

  // Status subresource: only status changes, spec edits are ignored.
  json st = u.j;
  st["status"] = {{"url", "http://hello.default.example.com"}, {"observedGeneration", 2}};
  st["spec"]["template"]["spec"]["containers"][0]["image"] = "ignored";
  Resp su = request("PUT", path("services", "hello") + "/status", st.dump());
  ASSERT_EQ(su.code, 200) << su.body;
  EXPECT_EQ(su.j["status"]["url"], "http://hello.default.example.com");
  EXPECT_EQ(su.j["spec"]["template"]["spec"]["containers"][0]["image"], "ghcr.io/knative/helloworld-go:v2");
  EXPECT_EQ(su.j["metadata"]["generation"], 2);

  // Status survives a later user write through the main resource.
  json again = su.j;
  again["metadata"]["labels"]["extra"] = "yes";
  again.erase("status");
  Resp u2 = request("PUT", path("services", "hello"), again.dump());
  ASSERT_EQ(u2.code, 200) << u2.body;
  EXPECT_EQ(u2.j["status"]["url"], "http://hello.default.example.com");
  EXPECT_EQ(u2.j["metadata"]["generation"], 2);

  // Identical PUT keeps the resourceVersion.
  Resp same = request("PUT", path("services", "hello"), u2.j.dump());
  ASSERT_EQ(same.code, 200);
  EXPECT_EQ(rvOf(same.j), rvOf(u2.j));

  json renamed = u2.j;
  renamed["metadata"]["name"] = "other";
  expectStatus(request("PUT", path("services", "hello"), renamed.dump()), 400, "BadRequest");
  expectStatus(request("PUT", path("services", "nope"), helloService("nope").dump()), 404, "NotFound");
}

TEST_F(ApiServerTest, RevisionSpecIsImmutable) {
  store::Object rev = storeCreate("Revision", "hello-00001",
                                  {{"metadata", json::object()},
                                   {"spec", {{"containers", json::array({{{"image", "ghcr.io/x/y:1"}}})}}}});
  json body = rev.body;
  body["spec"]["containers"][0]["image"] = "ghcr.io/x/y:2";
  Resp r = request("PUT", path("revisions", "hello-00001"), body.dump());
  expectStatus(r, 422, "Invalid");
  EXPECT_EQ(r.j["details"]["kind"], "Revision");
  Resp p = request("PATCH", path("revisions", "hello-00001"),
                   R"({"spec":{"containers":[{"image":"ghcr.io/x/y:3"}]}})", "application/merge-patch+json");
  expectStatus(p, 422, "Invalid");
  EXPECT_EQ(store_->get({"Revision", "default", "hello-00001"})->resource_version, rev.resource_version);
  // Labels may change.
  Resp l = request("PATCH", path("revisions", "hello-00001"), R"({"metadata":{"labels":{"k":"v"}}})",
                   "application/merge-patch+json");
  EXPECT_EQ(l.code, 200) << l.body;
}

// ---------------------------------------------------------------- patch

TEST_F(ApiServerTest, MergePatchAndNoOpKeepsResourceVersion) {
  Resp c = create(helloService());
  ASSERT_EQ(c.code, 201);
  Resp p = request(
      "PATCH", path("services", "hello") + "?fieldManager=kubectl-patch",
      R"({"metadata":{"labels":{"tier":null,"new":"x"}},"spec":{"template":{"metadata":{"annotations":{"autoscaling.knative.dev/min-scale":"1"}}}}})",
      "application/merge-patch+json");
  ASSERT_EQ(p.code, 200) << p.body;
  EXPECT_FALSE(p.j["metadata"]["labels"].contains("tier"));
  EXPECT_EQ(p.j["metadata"]["labels"]["new"], "x");
  EXPECT_EQ(p.j["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"], "1");
  EXPECT_EQ(p.j["spec"]["template"]["spec"]["containers"][0]["image"],
            "ghcr.io/knative/helloworld-go:latest");
  EXPECT_NE(rvOf(p.j), rvOf(c.j));

  int64_t rv = store_->currentResourceVersion();
  Resp same = request("PATCH", path("services", "hello"), R"({"metadata":{"labels":{"new":"x"}}})",
                      "application/merge-patch+json");
  ASSERT_EQ(same.code, 200);
  EXPECT_EQ(rvOf(same.j), rvOf(p.j));
  EXPECT_EQ(store_->currentResourceVersion(), rv);
  Resp get = request("GET", path("services", "hello"));
  EXPECT_EQ(get.j, same.j) << "kubectl prints 'patched (no change)' only when PATCH returns the GET result";

  // A resourceVersion in the patch is a precondition.
  Resp stale =
      request("PATCH", path("services", "hello"),
              R"({"metadata":{"resourceVersion":"1","labels":{"a":"b"}}})", "application/merge-patch+json");
  expectStatus(stale, 409, "Conflict");

  expectStatus(request("PATCH", path("services", "nope"), "{}", "application/merge-patch+json"), 404,
               "NotFound");
  json foo = {{"spec", {{"foo", 1}}}};
  expectStatus(request("PATCH", path("services", "hello"), foo.dump(), "application/merge-patch+json"), 400,
               "BadRequest");
  Resp dry = request("PATCH", path("services", "hello") + "?dryRun=All",
                     R"({"metadata":{"labels":{"dry":"run"}}})", "application/merge-patch+json");
  EXPECT_EQ(dry.code, 200);
  EXPECT_EQ(dry.j["metadata"]["labels"]["dry"], "run");
  EXPECT_EQ(store_->currentResourceVersion(), rv);
}

TEST_F(ApiServerTest, JsonPatchOperations) {
  ASSERT_EQ(create(helloService()).code, 201);
  Resp p = request("PATCH", path("services", "hello"),
                   R"([{"op":"test","path":"/metadata/labels/app","value":"hello"},
                       {"op":"add","path":"/metadata/labels/added","value":"1"},
                       {"op":"copy","from":"/metadata/labels/app","path":"/metadata/labels/copied"},
                       {"op":"move","from":"/metadata/labels/tier","path":"/metadata/labels/moved"},
                       {"op":"replace","path":"/spec/template/spec/containers/0/image","value":"ghcr.io/x/y:2"},
                       {"op":"remove","path":"/spec/template/spec/containers/0/env"}])",
                   "application/json-patch+json");
  ASSERT_EQ(p.code, 200) << p.body;
  const json& l = p.j["metadata"]["labels"];
  EXPECT_EQ(l["added"], "1");
  EXPECT_EQ(l["copied"], "hello");
  EXPECT_EQ(l["moved"], "web");
  EXPECT_FALSE(l.contains("tier"));
  EXPECT_EQ(p.j["spec"]["template"]["spec"]["containers"][0]["image"], "ghcr.io/x/y:2");
  EXPECT_FALSE(p.j["spec"]["template"]["spec"]["containers"][0].contains("env"));
  EXPECT_EQ(p.j["metadata"]["generation"], 2);

  int64_t rv = store_->currentResourceVersion();
  Resp failed = request("PATCH", path("services", "hello"),
                        R"([{"op":"test","path":"/metadata/labels/app","value":"other"},
                            {"op":"add","path":"/metadata/labels/never","value":"1"}])",
                        "application/json-patch+json");
  expectStatus(failed, 422, "Invalid");
  expectStatus(request("PATCH", path("services", "hello"), R"([{"op":"remove","path":"/no/such"}])",
                       "application/json-patch+json"),
               422, "Invalid");
  expectStatus(request("PATCH", path("services", "hello"), R"({"op":"add"})", "application/json-patch+json"),
               400, "BadRequest");
  EXPECT_EQ(store_->currentResourceVersion(), rv);
}

TEST_F(ApiServerTest, StrategicMergePatchIs415WithHint) {
  ASSERT_EQ(create(helloService()).code, 201);
  Resp r = request("PATCH", path("services", "hello"), R"({"metadata":{"labels":{"a":"b"}}})",
                   "application/strategic-merge-patch+json");
  expectStatus(r, 415, "UnsupportedMediaType");
  EXPECT_NE(r.j["message"].get<std::string>().find("--type merge"), std::string::npos) << r.body;
  expectStatus(request("PATCH", path("services", "hello"), "{}", "text/plain"), 415, "UnsupportedMediaType");
}

TEST_F(ApiServerTest, ServerSideApplyCreatesThenMerges) {
  json applied = helloService("ssa");
  Resp c =
      request("PATCH", path("services", "ssa") + "?fieldManager=kubectl&fieldValidation=Strict&force=false",
              applied.dump(), "application/apply-patch+yaml");
  ASSERT_EQ(c.code, 201) << c.body;
  EXPECT_EQ(c.j["metadata"]["name"], "ssa");

  std::string yaml =
      "apiVersion: serving.knative.dev/v1\n"
      "kind: Service\n"
      "metadata:\n"
      "  name: ssa\n"
      "  labels:\n"
      "    added: \"yes\"\n"
      "spec:\n"
      "  template:\n"
      "    spec:\n"
      "      containers:\n"
      "      - image: ghcr.io/knative/helloworld-go:v2\n";
  Resp u = request("PATCH", path("services", "ssa") + "?fieldManager=kubectl&force=true", yaml,
                   "application/apply-patch+yaml");
  ASSERT_EQ(u.code, 200) << u.body;
  EXPECT_EQ(u.j["metadata"]["labels"]["added"], "yes");
  // The manager applied these labels before and dropped them now: they go.
  EXPECT_FALSE(u.j["metadata"]["labels"].contains("app")) << u.body;
  EXPECT_EQ(u.j["spec"]["template"]["spec"]["containers"][0]["image"], "ghcr.io/knative/helloworld-go:v2");
  EXPECT_EQ(u.j["metadata"]["generation"], 2);

  Resp same = request("PATCH", path("services", "ssa") + "?fieldManager=kubectl", yaml,
                      "application/apply-patch+yaml");
  EXPECT_EQ(same.code, 200);
  EXPECT_EQ(rvOf(same.j), rvOf(u.j));

  json wrong = helloService("other");
  expectStatus(request("PATCH", path("services", "ssa"), wrong.dump(), "application/apply-patch+yaml"), 400,
               "BadRequest");
}

TEST_F(ApiServerTest, ServerSideApplyKeepsManagedFieldsPerManagerAndReportsConflicts) {
  auto apply = [&](const json& cfg, const std::string& manager, bool force = false) {
    return request("PATCH",
                   path("services", "owned") + "?fieldManager=" + manager + (force ? "&force=true" : ""),
                   cfg.dump(), "application/apply-patch+yaml");
  };
  json a = helloService("owned");
  a["metadata"]["labels"] = {{"team", "a"}, {"keep", "1"}};
  Resp c = apply(a, "alice");
  ASSERT_EQ(c.code, 201) << c.body;
  ASSERT_EQ(c.j["metadata"]["managedFields"].size(), 1u) << c.body;
  const json& mf = c.j["metadata"]["managedFields"][0];
  EXPECT_EQ(mf["manager"], "alice");
  EXPECT_EQ(mf["operation"], "Apply");
  EXPECT_EQ(mf["fieldsType"], "FieldsV1");
  EXPECT_TRUE(mf["fieldsV1"]["f:metadata"]["f:labels"].contains("f:team")) << mf.dump();
  EXPECT_TRUE(mf["fieldsV1"]["f:spec"]["f:template"]["f:spec"].contains("f:containers")) << mf.dump();

  // bob applies a different team label: conflict with alice, 409 with a cause per field.
  json b = {{"apiVersion", "serving.knative.dev/v1"},
            {"kind", "Service"},
            {"metadata", {{"name", "owned"}, {"labels", {{"team", "b"}}}}}};
  Resp conflict = apply(b, "bob");
  expectStatus(conflict, 409, "Conflict");
  EXPECT_EQ(conflict.j["message"],
            "Apply failed with 1 conflict: conflict with \"alice\" using "
            "serving.knative.dev/v1: .metadata.labels.team");
  EXPECT_EQ(conflict.j["details"]["causes"][0]["reason"], "FieldManagerConflict");
  EXPECT_EQ(conflict.j["details"]["causes"][0]["field"], ".metadata.labels.team");
  // The same value is no conflict: shared ownership.
  b["metadata"]["labels"]["team"] = "a";
  b["metadata"]["labels"]["bob"] = "1";
  ASSERT_EQ(apply(b, "bob").code, 200);
  // Forced: bob takes the field from alice.
  b["metadata"]["labels"]["team"] = "b";
  Resp forced = apply(b, "bob", true);
  ASSERT_EQ(forced.code, 200) << forced.body;
  EXPECT_EQ(forced.j["metadata"]["labels"]["team"], "b");
  std::map<std::string, json> by_manager;
  for (const json& e : forced.j["metadata"]["managedFields"]) by_manager[e["manager"]] = e;
  ASSERT_EQ(by_manager.size(), 2u);
  EXPECT_FALSE(by_manager["alice"]["fieldsV1"]["f:metadata"]["f:labels"].contains("f:team"));
  EXPECT_TRUE(by_manager["bob"]["fieldsV1"]["f:metadata"]["f:labels"].contains("f:team"));

  // alice drops the "keep" label from her configuration: removed (nobody else owns it);
  // "team" is bob's now, so alice no longer applying it leaves it alone.
  a["metadata"]["labels"] = json::object();
  Resp dropped = apply(a, "alice");
  ASSERT_EQ(dropped.code, 200) << dropped.body;
  EXPECT_FALSE(dropped.j["metadata"]["labels"].contains("keep")) << dropped.body;
  EXPECT_EQ(dropped.j["metadata"]["labels"]["team"], "b");
  EXPECT_EQ(dropped.j["metadata"]["labels"]["bob"], "1");

  // A merge patch records an Update by its manager and takes the field over.
  Resp p = request("PATCH", path("services", "owned") + "?fieldManager=kubectl-label",
                   R"({"metadata":{"labels":{"bob":"2"}}})", "application/merge-patch+json");
  ASSERT_EQ(p.code, 200) << p.body;
  bool found = false;
  for (const json& e : p.j["metadata"]["managedFields"]) {
    if (e["manager"] == "kubectl-label") {
      found = true;
      EXPECT_EQ(e["operation"], "Update");
      EXPECT_TRUE(e["fieldsV1"]["f:metadata"]["f:labels"].contains("f:bob"));
    }
  }
  EXPECT_TRUE(found) << p.body;
  // Now bob's re-apply of bob=1 conflicts with kubectl-label.
  b["metadata"]["labels"] = {{"team", "b"}, {"bob", "1"}};
  expectStatus(apply(b, "bob"), 409, "Conflict");
  // Clients cannot write managedFields themselves.
  Resp spoof = request(
      "PATCH", path("services", "owned"),
      R"({"metadata":{"managedFields":[{"manager":"evil","operation":"Update","fieldsType":"FieldsV1","fieldsV1":{}}]}})",
      "application/merge-patch+json");
  ASSERT_EQ(spoof.code, 200) << spoof.body;
  for (const json& e : spoof.j["metadata"]["managedFields"]) EXPECT_NE(e["manager"], "evil");
  // An apply without fieldManager is refused.
  EXPECT_EQ(request("PATCH", path("services", "owned"), b.dump(), "application/apply-patch+yaml").code, 422);
}

// ---------------------------------------------------------------- selectors

TEST_F(ApiServerTest, LabelAndFieldSelectors) {
  auto mk = [&](const std::string& name, json labels) {
    json o = helloService(name);
    o["metadata"]["labels"] = labels;
    ASSERT_EQ(create(o).code, 201);
  };
  mk("a", {{"app", "x"}, {"env", "prod"}});
  mk("b", {{"app", "y"}, {"env", "dev"}});
  mk("c", {{"app", "x"}});
  auto names = [&](const std::string& query) {
    Resp r = request("GET", path("services") + "?" + query);
    EXPECT_EQ(r.code, 200) << query << " " << r.body;
    std::vector<std::string> out;
    for (const json& i : r.j["items"]) out.push_back(i["metadata"]["name"]);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names("labelSelector=app%3Dx"), (V{"a", "c"}));
  EXPECT_EQ(names("labelSelector=app%3D%3Dx"), (V{"a", "c"}));
  EXPECT_EQ(names("labelSelector=app!%3Dx"), (V{"b"}));
  EXPECT_EQ(names("labelSelector=env+in+(prod,dev)"), (V{"a", "b"}));
  EXPECT_EQ(names("labelSelector=env%20notin%20(prod)"), (V{"b", "c"}));
  EXPECT_EQ(names("labelSelector=env"), (V{"a", "b"}));
  EXPECT_EQ(names("labelSelector=!env"), (V{"c"}));
  EXPECT_EQ(names("labelSelector=app%3Dx,env%3Dprod"), (V{"a"}));
  EXPECT_EQ(names("labelSelector=app%3Dx,!env"), (V{"c"}));
  EXPECT_EQ(names("labelSelector=env,app+notin+(y)"), (V{"a"}));
  EXPECT_EQ(names("labelSelector=app+in+(x,y),env!%3Dprod"), (V{"b", "c"}));
  EXPECT_EQ(names("labelSelector=nope"), V{});
  EXPECT_EQ(names("fieldSelector=metadata.name%3Db"), (V{"b"}));
  EXPECT_EQ(names("fieldSelector=metadata.name!%3Db"), (V{"a", "c"}));
  EXPECT_EQ(names("fieldSelector=metadata.namespace%3Ddefault&labelSelector=app%3Dy"), (V{"b"}));
  expectStatus(request("GET", path("services") + "?labelSelector=app+in+(x"), 400, "BadRequest");
  expectStatus(request("GET", path("services") + "?fieldSelector=spec.foo%3Dx"), 400, "BadRequest");
  // The store's labels index follows a relabelling.
  ASSERT_EQ(request("PATCH", path("services", "c"), R"({"metadata":{"labels":{"app":"y","env":"dev"}}})",
                    "application/merge-patch+json")
                .code,
            200);
  EXPECT_EQ(names("labelSelector=app%3Dx"), (V{"a"}));
  EXPECT_EQ(names("labelSelector=env%3Ddev"), (V{"b", "c"}));
  EXPECT_EQ(names("labelSelector=!env"), V{});
}

// ---------------------------------------------------------------- tables

TEST_F(ApiServerTest, TablesForListGetAndIncludeObject) {
  const std::string kTable =
      "application/json;as=Table;v=v1;g=meta.k8s.io,application/"
      "json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
  ASSERT_EQ(create(helloService()).code, 201);
  Resp st = request(
      "PATCH", path("services", "hello") + "/status",
      R"({"status":{"url":"http://hello.default.example.com","latestCreatedRevisionName":"hello-00001",
                        "latestReadyRevisionName":"hello-00001","conditions":[{"type":"Ready","status":"True"}]}})",
      "application/merge-patch+json");
  ASSERT_EQ(st.code, 200) << st.body;
  Resp t = request("GET", path("services") + "?limit=500", "", "", kTable);
  ASSERT_EQ(t.code, 200);
  EXPECT_EQ(t.j["kind"], "Table");
  EXPECT_EQ(t.j["apiVersion"], "meta.k8s.io/v1");
  std::vector<std::string> cols;
  for (const json& c : t.j["columnDefinitions"]) cols.push_back(c["name"]);
  EXPECT_EQ(cols,
            (std::vector<std::string>{"Name", "URL", "LatestCreated", "LatestReady", "Ready", "Reason"}));
  ASSERT_EQ(t.j["rows"].size(), 1u);
  EXPECT_EQ(t.j["rows"][0]["cells"], json::array({"hello", "http://hello.default.example.com", "hello-00001",
                                                  "hello-00001", "True", ""}));
  EXPECT_EQ(t.j["rows"][0]["object"]["kind"], "PartialObjectMetadata");
  EXPECT_EQ(t.j["rows"][0]["object"]["metadata"]["name"], "hello");
  EXPECT_FALSE(t.j["rows"][0]["object"].contains("spec"));

  Resp full = request("GET", path("services") + "?includeObject=Object", "", "", kTable);
  EXPECT_EQ(full.j["rows"][0]["object"]["kind"], "Service");
  EXPECT_TRUE(full.j["rows"][0]["object"].contains("spec"));

  Resp one = request("GET", path("services", "hello"), "", "", kTable);
  EXPECT_EQ(one.j["kind"], "Table");
  EXPECT_EQ(one.j["rows"].size(), 1u);

  storeCreate("Revision", "hello-00001",
              {{"metadata",
                {{"labels",
                  {{"serving.knative.dev/configuration", "hello"},
                   {"serving.knative.dev/configurationGeneration", "1"}}}}},
               {"spec", {{"containers", json::array({{{"image", "x"}}})}}},
               {"status", {{"actualReplicas", 1}, {"desiredReplicas", 2}}}});
  Resp rt = request("GET", path("revisions"), "", "", kTable);
  cols.clear();
  for (const json& c : rt.j["columnDefinitions"]) cols.push_back(c["name"]);
  EXPECT_EQ(cols, (std::vector<std::string>{"Name", "Config Name", "Generation", "Ready", "Reason",
                                            "Actual Replicas", "Desired Replicas"}));
  EXPECT_EQ(rt.j["rows"][0]["cells"], json::array({"hello-00001", "hello", "1", "", "", 1, 2}));
}

// ---------------------------------------------------------------- delete

TEST_F(ApiServerTest, DeleteCascadesThroughOwnerReferences) {
  Resp svc = create(helloService());
  ASSERT_EQ(svc.code, 201);
  auto owner = [](const json& o, const std::string& kind) {
    return json::array({{{"apiVersion", "serving.knative.dev/v1"},
                         {"kind", kind},
                         {"name", o["metadata"]["name"]},
                         {"uid", o["metadata"]["uid"]},
                         {"controller", true},
                         {"blockOwnerDeletion", true}}});
  };
  store::Object cfg = storeCreate("Configuration", "hello",
                                  {{"metadata", {{"ownerReferences", owner(svc.j, "Service")}}},
                                   {"spec", {{"template", svc.j["spec"]["template"]}}}});
  storeCreate("Route", "hello",
              {{"metadata", {{"ownerReferences", owner(svc.j, "Service")}}}, {"spec", json::object()}});
  storeCreate(
      "Revision", "hello-00001",
      {{"metadata", {{"ownerReferences", owner(cfg.body, "Configuration")}}}, {"spec", json::object()}});
  storeCreate("Revision", "unrelated-00001", {{"metadata", json::object()}, {"spec", json::object()}});

  // dryRun in the body (kubectl delete --dry-run=server) deletes nothing.
  Resp dry =
      request("DELETE", path("services", "hello"), R"({"propagationPolicy":"Background","dryRun":["All"]})");
  EXPECT_EQ(dry.code, 200) << dry.body;
  EXPECT_EQ(request("GET", path("services", "hello")).code, 200);
  EXPECT_EQ(request("GET", path("revisions", "hello-00001")).code, 200);

  Resp del = request("DELETE", path("services", "hello"), R"({"propagationPolicy":"Background"})");
  ASSERT_EQ(del.code, 200) << del.body;
  EXPECT_EQ(del.j["kind"], "Status");
  EXPECT_EQ(del.j["status"], "Success");
  EXPECT_EQ(request("GET", path("services", "hello")).code, 404);
  EXPECT_EQ(request("GET", path("configurations", "hello")).code, 404);
  EXPECT_EQ(request("GET", path("routes", "hello")).code, 404);
  EXPECT_EQ(request("GET", path("revisions", "hello-00001")).code, 404);
  EXPECT_EQ(request("GET", path("revisions", "unrelated-00001")).code, 200);

  Resp again = request("DELETE", path("services", "hello"), R"({"propagationPolicy":"Background"})");
  expectStatus(again, 404, "NotFound");
  EXPECT_EQ(again.j["message"], "services.serving.knative.dev \"hello\" not found");
}

TEST_F(ApiServerTest, DeleteOrphanKeepsDependentsAndPreconditionsConflict) {
  Resp svc = create(helloService());
  ASSERT_EQ(svc.code, 201);
  json refs = json::array({{{"apiVersion", "serving.knative.dev/v1"},
                            {"kind", "Service"},
                            {"name", "hello"},
                            {"uid", svc.j["metadata"]["uid"]},
                            {"controller", true}}});
  storeCreate("Route", "hello", {{"metadata", {{"ownerReferences", refs}}}, {"spec", json::object()}});
  expectStatus(request("DELETE", path("services", "hello"), R"({"preconditions":{"uid":"wrong"}})"), 409,
               "Conflict");
  Resp del = request("DELETE", path("services", "hello"), R"({"propagationPolicy":"Orphan"})");
  ASSERT_EQ(del.code, 200) << del.body;
  Resp route = request("GET", path("routes", "hello"));
  ASSERT_EQ(route.code, 200);
  EXPECT_FALSE(route.j["metadata"].contains("ownerReferences"));
}

TEST_F(ApiServerTest, DeleteCollectionBySelector) {
  for (const char* n : {"a", "b"}) ASSERT_EQ(create(helloService(n)).code, 201);
  json c = helloService("c");
  c["metadata"]["labels"] = {{"keep", "me"}};
  ASSERT_EQ(create(c).code, 201);
  Resp r = request("DELETE", path("services") + "?labelSelector=app%3Dhello");
  ASSERT_EQ(r.code, 200) << r.body;
  EXPECT_EQ(r.j["items"].size(), 2u);
  EXPECT_EQ(request("GET", path("services")).j["items"].size(), 1u);
}

// ---------------------------------------------------------------- watch

std::string watchRequest(const std::string& target, const std::string& accept = "application/json") {
  return "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: " + accept + "\r\n\r\n";
}

TEST_F(ApiServerTest, WatchReplaysFromResourceVersionThenStreamsLive) {
  Resp a = create(helloService("a"));
  ASSERT_EQ(a.code, 201);
  std::string rv_after_a = rvOf(a.j);
  ASSERT_EQ(create(helloService("b")).code, 201);
  ASSERT_EQ(request("PATCH", path("services", "a"), R"({"metadata":{"labels":{"x":"1"}}})",
                    "application/merge-patch+json")
                .code,
            200);
  RawConn conn(server_->tcpPort());
  ASSERT_TRUE(conn.send(watchRequest(path("services") + "?watch=true&resourceVersion=" + rv_after_a)));
  auto evs = conn.readEvents(2);
  ASSERT_EQ(evs.size(), 2u) << conn.data();
  EXPECT_NE(conn.data().find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_EQ(evs[0]["type"], "ADDED");
  EXPECT_EQ(evs[0]["object"]["metadata"]["name"], "b");
  EXPECT_EQ(evs[0]["object"]["kind"], "Service");
  EXPECT_EQ(evs[0]["object"]["apiVersion"], "serving.knative.dev/v1");
  EXPECT_EQ(evs[1]["type"], "MODIFIED");
  EXPECT_EQ(evs[1]["object"]["metadata"]["name"], "a");

  // Live events after the replay.
  ASSERT_EQ(create(helloService("c")).code, 201);
  ASSERT_EQ(request("DELETE", path("services", "b")).code, 200);
  evs = conn.readEvents(4);
  ASSERT_EQ(evs.size(), 4u) << conn.data();
  EXPECT_EQ(evs[2]["type"], "ADDED");
  EXPECT_EQ(evs[2]["object"]["metadata"]["name"], "c");
  EXPECT_EQ(evs[3]["type"], "DELETED");
  EXPECT_EQ(evs[3]["object"]["metadata"]["name"], "b");
  EXPECT_EQ(evs[3]["object"]["kind"], "Service");
}

TEST_F(ApiServerTest, WatchWithoutResourceVersionStartsWithCurrentStateAndFilters) {
  json x = helloService("x");
  x["metadata"]["labels"] = {{"pick", "yes"}};
  ASSERT_EQ(create(x).code, 201);
  ASSERT_EQ(create(helloService("y")).code, 201);
  RawConn conn(server_->tcpPort());
  ASSERT_TRUE(conn.send(watchRequest(path("services") + "?watch=1&labelSelector=pick%3Dyes")));
  auto evs = conn.readEvents(1);
  ASSERT_EQ(evs.size(), 1u) << conn.data();
  EXPECT_EQ(evs[0]["type"], "ADDED");
  EXPECT_EQ(evs[0]["object"]["metadata"]["name"], "x");
  ASSERT_EQ(request("PATCH", path("services", "y"), R"({"metadata":{"labels":{"other":"1"}}})",
                    "application/merge-patch+json")
                .code,
            200);
  ASSERT_EQ(request("PATCH", path("services", "x"), R"({"metadata":{"labels":{"other":"1"}}})",
                    "application/merge-patch+json")
                .code,
            200);
  evs = conn.readEvents(2);
  ASSERT_EQ(evs.size(), 2u) << conn.data();
  EXPECT_EQ(evs[1]["type"], "MODIFIED");
  EXPECT_EQ(evs[1]["object"]["metadata"]["name"], "x");

  // A watch restricted by field selector (kubectl wait) in another namespace sees nothing of default.
  RawConn other(server_->tcpPort());
  ASSERT_TRUE(other.send(
      watchRequest("/apis/serving.knative.dev/v1/namespaces/other/services?watch=true&timeoutSeconds=1")));
  std::string all = other.readAll();
  EXPECT_TRUE(other.closed()) << "timeoutSeconds ends the stream";
  EXPECT_TRUE(other.events().empty()) << all;
  EXPECT_NE(all.find("0\r\n\r\n"), std::string::npos) << all;
}

TEST_F(ApiServerTest, WatchTooOldResourceVersionIs410) {
  startServer(ApiServerOptions{}, /*history=*/3);
  for (int i = 0; i < 6; ++i) ASSERT_EQ(create(helloService("s" + std::to_string(i))).code, 201);
  Resp r = request("GET", path("services") + "?watch=true&resourceVersion=1");
  expectStatus(r, 410, "Expired");
  EXPECT_EQ(r.j["message"].get<std::string>().rfind("too old resource version: 1 (", 0), 0u) << r.body;
  // The server keeps serving.
  EXPECT_EQ(request("GET", path("services")).j["items"].size(), 6u);
}

TEST_F(ApiServerTest, WatchAsTableSendsOneRowTables) {
  ASSERT_EQ(create(helloService("a")).code, 201);
  RawConn conn(server_->tcpPort());
  std::string rv = std::to_string(store_->currentResourceVersion());
  ASSERT_TRUE(conn.send(watchRequest(path("services") + "?resourceVersion=" + rv + "&watch=true",
                                     "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")));
  ASSERT_EQ(request("PATCH", path("services", "a"), R"({"metadata":{"labels":{"x":"1"}}})",
                    "application/merge-patch+json")
                .code,
            200);
  auto evs = conn.readEvents(1);
  ASSERT_EQ(evs.size(), 1u) << conn.data();
  EXPECT_EQ(evs[0]["type"], "MODIFIED");
  EXPECT_EQ(evs[0]["object"]["kind"], "Table");
  ASSERT_EQ(evs[0]["object"]["rows"].size(), 1u);
  EXPECT_EQ(evs[0]["object"]["rows"][0]["cells"][0], "a");
}

TEST_F(ApiServerTest, SlowWatcherIsClosedWhenItsBufferOverflows) {
  ApiServerOptions opts;
  opts.watch_buffer_events = 2;
  startServer(opts);
  RawConn conn(server_->tcpPort(), /*rcvbuf=*/16 * 1024);
  // Not reading from the watch; the server must not block writers or grow without bound.
  // 200 events of 100 KB are 20 MB: far more than the server's send buffer (tcp_wmem max,
  // 4 MiB on Debian) plus the pinned receive buffer can hold.
  ASSERT_TRUE(conn.send(watchRequest(path("services") + "?watch=true")));
  for (int i = 0; i < 200; ++i) {
    json o = helloService("s" + std::to_string(i));
    o["metadata"]["annotations"] = {{"pad", std::string(100000, 'x')}};
    ASSERT_EQ(create(o).code, 201);
  }
  conn.readAll();
  EXPECT_TRUE(conn.closed());
  EXPECT_LT(conn.events().size(), 200u);
  EXPECT_EQ(request("GET", "/version").code, 200);
}

TEST_F(ApiServerTest, ConcurrentWritersAndWatchersSeeEveryEventInOrder) {
  ApiServerOptions opts;
  opts.threads = 2;
  startServer(opts);
  std::vector<std::unique_ptr<RawConn>> watchers;
  for (int i = 0; i < 3; ++i) {
    watchers.push_back(std::make_unique<RawConn>(server_->tcpPort()));
    ASSERT_TRUE(watchers.back()->send(watchRequest(path("services") + "?watch=true&resourceVersion=0")));
  }
  // Make sure every watch is registered before writing: one event each.
  ASSERT_EQ(create(helloService("first")).code, 201);
  for (auto& w : watchers) ASSERT_EQ(w->readEvents(1).size(), 1u) << w->data();
  constexpr int kWriters = 4, kOps = 15;
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < kWriters; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        std::string name = "w" + std::to_string(t) + "-" + std::to_string(i);
        if (create(helloService(name)).code != 201) ++failures;
        if (request("PATCH", path("services", name), R"({"metadata":{"labels":{"n":"1"}}})",
                    "application/merge-patch+json")
                .code != 200)
          ++failures;
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(failures.load(), 0);
  const size_t want = 1 + kWriters * kOps * 2;
  for (auto& w : watchers) {
    auto evs = w->readEvents(want);
    ASSERT_EQ(evs.size(), want);
    int64_t last = 0;
    for (const json& e : evs) {
      int64_t rv = std::stoll(e["object"]["metadata"]["resourceVersion"].get<std::string>());
      EXPECT_GT(rv, last);
      last = rv;
    }
  }
}

// ---------------------------------------------------------------- client fidelity

TEST_F(ApiServerTest, WatchParameterIsAnyParseBoolValue) {
  ASSERT_EQ(create(helloService("a")).code, 201);
  for (const char* yes : {"True", "TRUE", "t", "T", "1", "true"}) {
    RawConn conn(server_->tcpPort());
    ASSERT_TRUE(conn.send(watchRequest(path("services") + "?watch=" + yes + "&timeoutSeconds=1")));
    conn.readAll();
    auto evs = conn.events();
    ASSERT_EQ(evs.size(), 1u) << yes << ": " << conn.data();
    EXPECT_EQ(evs[0]["type"], "ADDED") << yes;
  }
  for (const char* no : {"False", "false", "0", "f"}) {
    Resp r = request("GET", path("services") + "?watch=" + no);
    EXPECT_EQ(r.code, 200) << no;
    EXPECT_EQ(r.j["kind"], "ServiceList") << no;
  }
  expectStatus(request("GET", path("services") + "?watch=yes"), 400, "BadRequest");
}

TEST_F(ApiServerTest, SelectorWatchSendsDeletedWhenAnObjectStopsMatchingAndAddedWhenItStarts) {
  json x = helloService("x");
  x["metadata"]["labels"] = {{"pick", "yes"}};
  ASSERT_EQ(create(x).code, 201);
  RawConn conn(server_->tcpPort());
  ASSERT_TRUE(conn.send(watchRequest(path("services") + "?watch=true&labelSelector=pick%3Dyes")));
  ASSERT_EQ(conn.readEvents(1).size(), 1u) << conn.data();
  auto relabel = [&](const std::string& name, const char* value) {
    std::string patch = std::string(R"({"metadata":{"labels":{"pick":)") + value + "}}}";
    ASSERT_EQ(request("PATCH", path("services", name), patch, "application/merge-patch+json").code, 200);
  };
  relabel("x", "\"no\"");   // leaves the selector
  relabel("x", "\"no2\"");  // still outside: nothing
  relabel("x", "\"yes\"");  // back in
  std::string rv_in = std::to_string(store_->currentResourceVersion());
  relabel("x", "null");
  auto evs = conn.readEvents(4);
  ASSERT_EQ(evs.size(), 4u) << conn.data();
  EXPECT_EQ(evs[1]["type"], "DELETED");
  EXPECT_EQ(evs[1]["object"]["metadata"]["labels"]["pick"], "no");
  EXPECT_EQ(evs[2]["type"], "ADDED");
  EXPECT_EQ(evs[3]["type"], "DELETED");
  // A watch resumed from a resourceVersion at which x matched sees it leave.
  RawConn resumed(server_->tcpPort());
  ASSERT_TRUE(resumed.send(
      watchRequest(path("services") + "?watch=true&labelSelector=pick%3Dyes&resourceVersion=" + rv_in)));
  evs = resumed.readEvents(1);
  ASSERT_EQ(evs.size(), 1u) << resumed.data();
  EXPECT_EQ(evs[0]["type"], "DELETED");
  // An object that never matched sends nothing to a resumed watch when it is unchanged since.
  ASSERT_EQ(create(helloService("quiet")).code, 201);
  std::string rv_quiet = std::to_string(store_->currentResourceVersion());
  RawConn quiet(server_->tcpPort());
  ASSERT_TRUE(quiet.send(
      watchRequest(path("services") +
                   "?watch=true&timeoutSeconds=1&labelSelector=pick%3Dyes&resourceVersion=" + rv_quiet)));
  // The response headers come once the watch has read its history: only then is the relabel a change the
  // watch sees happen (with several API threads it could otherwise land first, and the watch, not knowing
  // whether the client had the object, would say DELETED).
  ASSERT_TRUE(quiet.readHeaders()) << quiet.data();
  relabel("quiet", "\"no\"");
  quiet.readAll();
  EXPECT_TRUE(quiet.events().empty()) << quiet.data();
}

TEST_F(ApiServerTest, ListPagesWithLimitAndContinue) {
  for (int i = 0; i < 7; ++i) {
    json o = helloService("p" + std::to_string(i));
    if (i % 3 == 0) o["metadata"]["labels"]["third"] = "yes";
    ASSERT_EQ(create(o).code, 201);
  }
  std::vector<std::string> names;
  std::string token, first_rv;
  int pages = 0;
  do {
    Resp r = request("GET", path("services") + "?limit=3" + (token.empty() ? "" : "&continue=" + token));
    ASSERT_EQ(r.code, 200) << r.body;
    ++pages;
    if (first_rv.empty()) first_rv = r.j["metadata"]["resourceVersion"];
    EXPECT_EQ(r.j["metadata"]["resourceVersion"], first_rv);
    for (const json& i : r.j["items"]) names.push_back(i["metadata"]["name"]);
    token = r.j["metadata"].value("continue", "");
    if (!token.empty()) {
      EXPECT_EQ(r.j["items"].size(), 3u);
      // p9 (created after page 1) counts from page 2 on: later pages show the objects as they are now.
      EXPECT_EQ(r.j["metadata"]["remainingItemCount"], (pages == 1 ? 7 : 8) - static_cast<int>(names.size()));
      // Creating an object between pages does not disturb the walk's resourceVersion.
      if (pages == 1) ASSERT_EQ(create(helloService("p9")).code, 201);
    }
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(names, (std::vector<std::string>{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p9"}));
  // The continue walk respects selectors.
  Resp sel = request("GET", path("services") + "?limit=2&labelSelector=third%3Dyes");
  ASSERT_EQ(sel.j["items"].size(), 2u);
  Resp sel2 = request("GET", path("services") + "?limit=2&labelSelector=third%3Dyes&continue=" +
                                 sel.j["metadata"]["continue"].get<std::string>());
  ASSERT_EQ(sel2.j["items"].size(), 1u) << sel2.body;
  EXPECT_EQ(sel2.j["items"][0]["metadata"]["name"], "p6");
  EXPECT_FALSE(sel2.j["metadata"].contains("continue"));
  // Without limit (or limit=0) everything comes in one page.
  EXPECT_EQ(request("GET", path("services") + "?limit=0").j["items"].size(), 8u);
  // Tables page too (kubectl get --chunk-size).
  Resp table = request("GET", path("services") + "?limit=5", "", "application/json",
                       "application/json;as=Table;v=v1;g=meta.k8s.io,application/json");
  EXPECT_EQ(table.j["rows"].size(), 5u);
  EXPECT_TRUE(table.j["metadata"].contains("continue"));
  expectStatus(request("GET", path("services") + "?limit=2&continue=not-a-token"), 400, "BadRequest");
  expectStatus(request("GET", path("services") + "?limit=x"), 400, "BadRequest");
}

TEST_F(ApiServerTest, ContinueTokenOlderThanHistoryIs410) {
  startServer(ApiServerOptions{}, /*history=*/3);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(create(helloService("s" + std::to_string(i))).code, 201);
  Resp page = request("GET", path("services") + "?limit=2");
  std::string token = page.j["metadata"]["continue"];
  for (int i = 4; i < 10; ++i) ASSERT_EQ(create(helloService("s" + std::to_string(i))).code, 201);
  expectStatus(request("GET", path("services") + "?limit=2&continue=" + token), 410, "Expired");
}

TEST_F(ApiServerTest, PatchWithoutResourceVersionNeverConflictsWithAStatusWriter) {
  ApiServerOptions opts;
  opts.threads = 2;
  startServer(opts);
  ASSERT_EQ(create(helloService("busy")).code, 201);
  std::atomic<bool> stop{false};
  // A controller rewriting status as fast as it can, straight through the store.
  std::thread controller([&] {
    int n = 0;
    while (!stop) {
      auto live = store_->get({"Service", "default", "busy"});
      if (!live.isOk()) continue;
      json body = live->body;
      body["status"]["observedGeneration"] = ++n;
      (void)store_->update(live->key, body, live->resource_version);
    }
  });
  std::atomic<int> conflicts{0}, others{0};
  constexpr int kPatchers = 3, kPatches = 40;
  std::vector<std::thread> patchers;
  for (int p = 0; p < kPatchers; ++p) {
    patchers.emplace_back([&, p] {
      for (int i = 0; i < kPatches; ++i) {
        std::string label = "l" + std::to_string(p);
        std::string body = R"({"metadata":{"labels":{")" + label + R"(":")" + std::to_string(i) + R"("}}})";
        Resp r = request("PATCH", path("services", "busy"), body, "application/merge-patch+json");
        if (r.code == 409)
          ++conflicts;
        else if (r.code != 200)
          ++others;
      }
    });
  }
  for (auto& t : patchers) t.join();
  stop = true;
  controller.join();
  EXPECT_EQ(conflicts.load(), 0);
  EXPECT_EQ(others.load(), 0);
  Resp got = request("GET", path("services", "busy"));
  for (int p = 0; p < kPatchers; ++p)
    EXPECT_EQ(got.j["metadata"]["labels"]["l" + std::to_string(p)], std::to_string(kPatches - 1));
  // A patch that names a stale resourceVersion still gets its 409.
  expectStatus(
      request("PATCH", path("services", "busy"), R"({"metadata":{"resourceVersion":"1","labels":{"z":"1"}}})",
              "application/merge-patch+json"),
      409, "Conflict");
}

TEST_F(ApiServerTest, DiscoveryAdvertisesOnlyAcceptedVerbs) {
  Resp list = request("GET", "/apis/serving.knative.dev/v1");
  for (const json& r : list.j["resources"]) {
    const std::string name = r["name"];
    bool has_create = std::find(r["verbs"].begin(), r["verbs"].end(), "create") != r["verbs"].end();
    if (name == "revisions") EXPECT_FALSE(has_create);
    if (name == "services" || name == "configurations" || name == "routes") EXPECT_TRUE(has_create) << name;
  }
  Resp doc = request("GET", "/openapi/v3/apis/serving.knative.dev/v1");
  EXPECT_FALSE(
      doc.j["paths"]["/apis/serving.knative.dev/v1/namespaces/{namespace}/revisions"].contains("post"));
  EXPECT_TRUE(
      doc.j["paths"]["/apis/serving.knative.dev/v1/namespaces/{namespace}/services"].contains("post"));
}

TEST_F(ApiServerTest, EventsServedAsCoreV1AndEventsV1WithInvolvedObjectFieldSelectors) {
  events::StoreEventRecorder recorder(*store_, clock_);
  Resp svc = create(helloService("hello"));
  ASSERT_EQ(svc.code, 201);
  ObjectRef hello = objectRefOf(svc.j);
  recorder.record(hello, EventType::kNormal, "Created", "Created Configuration \"hello\"", "knap-controller");
  clock_.advance(std::chrono::seconds(3));
  recorder.record({"serving.knative.dev/v1", "Revision", "default", "hello-00001", ""}, EventType::kWarning,
                  "BackOff", "Pod p1 exited with code 1", "knap-runtime");
  recorder.record({"serving.knative.dev/v1", "Service", "default", "hello", "other-uid"}, EventType::kNormal,
                  "Created", "an older object of the same name", "knap-controller");
  recorder.flush();

  // What kubectl describe ksvc/hello sends.
  std::string sel =
      "involvedObject.name%3Dhello%2CinvolvedObject.namespace%3Ddefault%2CinvolvedObject.kind%3DService"
      "%2CinvolvedObject.uid%3D" +
      hello.uid;
  Resp list = request("GET", "/api/v1/namespaces/default/events?fieldSelector=" + sel + "&limit=500");
  ASSERT_EQ(list.code, 200) << list.body;
  EXPECT_EQ(list.j["kind"], "EventList");
  ASSERT_EQ(list.j["items"].size(), 1u) << list.body;
  const json& ev = list.j["items"][0];
  EXPECT_EQ(ev["reason"], "Created");
  EXPECT_EQ(ev["type"], "Normal");
  EXPECT_EQ(ev["involvedObject"]["uid"], hello.uid);
  EXPECT_EQ(ev["source"]["component"], "knap-controller");
  EXPECT_EQ(ev["count"], 1);
  // All namespaces, every event; type and reason selectors.
  EXPECT_EQ(request("GET", "/api/v1/events").j["items"].size(), 3u);
  EXPECT_EQ(
      request("GET", "/api/v1/namespaces/default/events?fieldSelector=type%3DWarning").j["items"].size(), 1u);
  EXPECT_EQ(request("GET", "/api/v1/namespaces/other/events").j["items"].size(), 0u);
  expectStatus(request("GET", "/api/v1/namespaces/default/events?fieldSelector=spec.x%3D1"), 400,
               "BadRequest");
  // One event by name.
  std::string name = ev["metadata"]["name"];
  Resp one = request("GET", "/api/v1/namespaces/default/events/" + name);
  ASSERT_EQ(one.code, 200);
  EXPECT_EQ(one.j["message"], "Created Configuration \"hello\"");
  expectStatus(request("GET", "/api/v1/namespaces/default/events/nope"), 404, "NotFound");
  expectStatus(request("DELETE", "/api/v1/namespaces/default/events/" + name), 405, "MethodNotAllowed");

  // events.k8s.io/v1: the same Events, in that group's shape and field labels.
  Resp v1 = request(
      "GET", "/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector=regarding.name%3Dhello-00001");
  ASSERT_EQ(v1.code, 200) << v1.body;
  ASSERT_EQ(v1.j["items"].size(), 1u);
  EXPECT_EQ(v1.j["items"][0]["apiVersion"], "events.k8s.io/v1");
  EXPECT_EQ(v1.j["items"][0]["regarding"]["kind"], "Revision");
  EXPECT_EQ(v1.j["items"][0]["note"], "Pod p1 exited with code 1");
  EXPECT_EQ(v1.j["items"][0]["reportingController"], "knap-runtime");

  // kubectl get events asks for a Table.
  Resp table = request("GET", "/api/v1/namespaces/default/events?limit=500", "", "application/json",
                       "application/json;as=Table;v=v1;g=meta.k8s.io,application/json");
  ASSERT_EQ(table.j["kind"], "Table") << table.body;
  ASSERT_EQ(table.j["rows"].size(), 3u);
  EXPECT_EQ(table.j["columnDefinitions"][0]["name"], "Last Seen");
  EXPECT_EQ(table.j["rows"][0]["cells"][3], "service/hello");
  EXPECT_EQ(table.j["rows"][0]["cells"][0], "3s");

  // Discovery: the core group and events.k8s.io list events.
  EXPECT_EQ(request("GET", "/api").j["versions"], json::array({"v1"}));
  Resp core = request("GET", "/api/v1");
  bool core_events = false;
  for (const json& r : core.j["resources"]) core_events |= r["name"] == "events";
  EXPECT_TRUE(core_events);
  Resp groups = request("GET", "/apis");
  bool has_events_group = false;
  for (const json& g : groups.j["groups"]) has_events_group |= g["name"] == "events.k8s.io";
  EXPECT_TRUE(has_events_group);
  EXPECT_EQ(request("GET", "/apis/events.k8s.io/v1").j["resources"][0]["kind"], "Event");

  // Past the ttl an Event is hidden, even before the recorder prunes it.
  clock_.advance(events::kDefaultTtl + std::chrono::minutes(1));
  EXPECT_EQ(request("GET", "/api/v1/events").j["items"].size(), 0u);
  EXPECT_EQ(request("GET", "/api/v1/namespaces/default/events/" + name).code, 404);
}

TEST(HumanDuration, LikeKubectl) {
  using std::chrono::hours;
  using std::chrono::minutes;
  using std::chrono::seconds;
  EXPECT_EQ(humanDuration(seconds(5)), "5s");
  EXPECT_EQ(humanDuration(seconds(119)), "119s");
  EXPECT_EQ(humanDuration(seconds(150)), "2m30s");
  EXPECT_EQ(humanDuration(minutes(5)), "5m");
  EXPECT_EQ(humanDuration(minutes(45)), "45m");
  EXPECT_EQ(humanDuration(hours(3) + minutes(20)), "3h20m");
  EXPECT_EQ(humanDuration(hours(30)), "30h");
  EXPECT_EQ(humanDuration(hours(51)), "2d3h");
  EXPECT_EQ(humanDuration(hours(24 * 10)), "10d");
  EXPECT_EQ(humanDuration(seconds(-3)), "0s");
}

// ---------------------------------------------------------------- robustness

TEST_F(ApiServerTest, BodyLimitIs413AndStateUnchanged) {
  ApiServerOptions opts;
  opts.max_body_bytes = 4096;
  startServer(opts);
  json big = helloService("big");
  big["metadata"]["annotations"] = {{"pad", std::string(10000, 'x')}};
  Resp r = request("POST", path("services"), big.dump());
  expectStatus(r, 413, "RequestEntityTooLarge");
  EXPECT_EQ(request("GET", path("services", "big")).code, 404);
  EXPECT_EQ(store_->currentResourceVersion(), base_rv_);
  EXPECT_EQ(create(helloService("small")).code, 201);
}

TEST_F(ApiServerTest, MalformedHttpClosesConnectionAndServerKeepsServing) {
  {
    RawConn conn(server_->tcpPort());
    ASSERT_TRUE(conn.send("THIS IS NOT HTTP\r\n\r\n"));
    std::string got = conn.readAll();
    EXPECT_TRUE(conn.closed());
    EXPECT_NE(got.find("400"), std::string::npos) << got;
  }
  {
    RawConn conn(server_->tcpPort());
    ASSERT_TRUE(
        conn.send("POST /apis/serving.knative.dev/v1/namespaces/default/services HTTP/1.1\r\n"
                  "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"));
    conn.readAll();
    EXPECT_TRUE(conn.closed());
  }
  {
    RawConn conn(server_->tcpPort());
    ASSERT_TRUE(conn.send("GET /version HTTP/1.1\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n"));
    std::string got = conn.readAll();
    EXPECT_TRUE(conn.closed());
    EXPECT_NE(got.find("431"), std::string::npos) << got.substr(0, 200);
  }
  {
    // A truncated request followed by close.
    RawConn conn(server_->tcpPort());
    ASSERT_TRUE(
        conn.send("POST /apis/serving.knative.dev/v1/namespaces/default/services HTTP/1.1\r\n"
                  "Content-Length: 1000\r\n\r\n{\"apiVersion\""));
  }
  EXPECT_EQ(store_->currentResourceVersion(), base_rv_);
  EXPECT_EQ(request("GET", "/version").code, 200);
  EXPECT_EQ(create(helloService()).code, 201);
}

TEST_F(ApiServerTest, SlowClientIsDisconnectedAfterReadTimeout) {
  ApiServerOptions opts;
  opts.read_timeout = std::chrono::seconds(1);
  startServer(opts);
  RawConn conn(server_->tcpPort());
  ASSERT_TRUE(
      conn.send("POST /apis/serving.knative.dev/v1/namespaces/default/services HTTP/1.1\r\nContent-Le"));
  conn.readAll();  // returns when the server closes (the client's own timeout is 5 s)
  EXPECT_TRUE(conn.closed());
  EXPECT_EQ(request("GET", "/version").code, 200);
}

TEST_F(ApiServerTest, CreateRejectsInvalidNamespaceName) {
  json obj = helloService();
  obj["metadata"].erase("namespace");
  Resp r = request("POST", "/apis/serving.knative.dev/v1/namespaces/Bad_NS/services", obj.dump());
  expectStatus(r, 422, "Invalid");
  EXPECT_EQ(store_->currentResourceVersion(), base_rv_);
}

// core/v1 Namespaces: the system ones exist; objects need their namespace;
// deleting a namespace deletes everything in it.
TEST_F(ApiServerTest, NamespacesHoldTheirObjects) {
  Resp list = request("GET", "/api/v1/namespaces");
  ASSERT_EQ(list.code, 200) << list.body;
  EXPECT_EQ(list.j["kind"], "NamespaceList");
  std::set<std::string> names;
  for (const json& n : list.j["items"]) {
    names.insert(n["metadata"]["name"].get<std::string>());
    EXPECT_FALSE(n["metadata"].contains("namespace")) << n.dump();
    EXPECT_EQ(n["status"]["phase"], "Active");
  }
  EXPECT_EQ(names, (std::set<std::string>{"default", "kube-public", "kube-system"}));
  // A missing namespace: 404 with Kubernetes' message, nothing stored.
  int64_t rv = store_->currentResourceVersion();
  json cm = {
      {"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "app"}}}, {"data", {{"a", "1"}}}};
  Resp missing = request("POST", "/api/v1/namespaces/team-a/configmaps", cm.dump());
  expectStatus(missing, 404, "NotFound");
  EXPECT_EQ(missing.j["message"], "namespaces \"team-a\" not found");
  json svc = helloService();
  svc["metadata"].erase("namespace");
  expectStatus(request("POST", "/apis/serving.knative.dev/v1/namespaces/team-a/services", svc.dump()), 404,
               "NotFound");
  EXPECT_EQ(store_->currentResourceVersion(), rv);
  // Create it and fill it.
  Resp created =
      request("POST", "/api/v1/namespaces",
              json{{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "team-a"}}}}.dump());
  ASSERT_EQ(created.code, 201) << created.body;
  EXPECT_EQ(created.j["apiVersion"], "v1");
  ASSERT_EQ(request("POST", "/api/v1/namespaces/team-a/configmaps", cm.dump()).code, 201);
  json secret = {{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata", {{"name", "db"}}},
                 {"stringData", {{"pw", "x"}}}};
  ASSERT_EQ(request("POST", "/api/v1/namespaces/team-a/secrets", secret.dump()).code, 201);
  ASSERT_EQ(request("POST", "/apis/serving.knative.dev/v1/namespaces/team-a/services", svc.dump()).code, 201);
  ASSERT_TRUE(store_->create({"Event", "team-a", "hello.1"}, {{"reason", "Test"}}).isOk());
  ASSERT_TRUE(store_->create({"Route", "team-a", "r"}, {{"spec", json::object()}}).isOk());
  // The system namespaces cannot be deleted; a bad name is 422.
  expectStatus(request("DELETE", "/api/v1/namespaces/default"), 403, "Forbidden");
  expectStatus(
      request("POST", "/api/v1/namespaces",
              json{{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "Team_A"}}}}.dump()),
      422, "Invalid");
  expectStatus(request("DELETE", "/api/v1/namespaces"), 405, "MethodNotAllowed");
  // Deleting the namespace deletes everything in it, then the namespace.
  Resp del = request("DELETE", "/api/v1/namespaces/team-a");
  ASSERT_EQ(del.code, 200) << del.body;
  for (const char* kind : {"Service", "Route", "Secret", "ConfigMap", "Event"}) {
    auto left = store_->list(kind, "team-a");
    ASSERT_TRUE(left.isOk());
    EXPECT_TRUE(left->empty()) << kind;
  }
  expectStatus(request("GET", "/api/v1/namespaces/team-a"), 404, "NotFound");
  EXPECT_EQ(request("GET", "/api/v1/namespaces/team-a").j["message"], "namespaces \"team-a\" not found");
}

// Secrets and ConfigMaps: full REST with kube-apiserver's admission, tables,
// strategic merge patch as merge patch, and watch.
TEST_F(ApiServerTest, SecretsAndConfigMapsRest) {
  const std::string base = "/api/v1/namespaces/default";
  json secret = {{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata", {{"name", "db"}}},
                 {"stringData", {{"password", "s3cr3t"}}}};
  Resp created = request("POST", base + "/secrets", secret.dump());
  ASSERT_EQ(created.code, 201) << created.body;
  EXPECT_EQ(created.j["type"], "Opaque");
  EXPECT_EQ(created.j["data"]["password"], "czNjcjN0");
  EXPECT_FALSE(created.j.contains("stringData"));
  EXPECT_FALSE(created.j["metadata"]["annotations"].contains("serving.knative.dev/creator")) << created.body;
  // Unknown fields are refused like any strict decode; wrong kinds too.
  json unknown = secret;
  unknown["metadata"]["name"] = "x";
  unknown["spec"] = json::object();
  expectStatus(request("POST", base + "/secrets", unknown.dump()), 400, "BadRequest");
  json wrong = secret;
  wrong["apiVersion"] = "serving.knative.dev/v1";
  expectStatus(request("POST", base + "/secrets", wrong.dump()), 400, "BadRequest");
  json tls = {{"apiVersion", "v1"},
              {"kind", "Secret"},
              {"metadata", {{"name", "web"}}},
              {"type", "kubernetes.io/tls"},
              {"stringData", {{"tls.crt", "c"}}}};
  Resp bad_tls = request("POST", base + "/secrets", tls.dump());
  expectStatus(bad_tls, 422, "Invalid");
  EXPECT_EQ(bad_tls.j["message"], "Secret \"web\" is invalid: data[tls.key]: Required value") << bad_tls.body;
  // Strategic merge patch (kubectl's default for core kinds) = merge patch.
  Resp patched =
      request("PATCH", base + "/secrets/db", R"({"stringData":{"user":"admin"},"$setElementOrder/x":[]})",
              "application/strategic-merge-patch+json");
  ASSERT_EQ(patched.code, 200) << patched.body;
  EXPECT_EQ(patched.j["data"].size(), 2u);
  // Type is immutable.
  expectStatus(request("PATCH", base + "/secrets/db", R"({"type":"kubernetes.io/basic-auth"})",
                       "application/merge-patch+json"),
               422, "Invalid");
  // ConfigMaps: watch from the list's resourceVersion sees a create.
  Resp cms = request("GET", base + "/configmaps");
  ASSERT_EQ(cms.code, 200);
  EXPECT_EQ(cms.j["kind"], "ConfigMapList");
  EXPECT_EQ(cms.j["apiVersion"], "v1");
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", "app"}}},
             {"data", {{"a", "1"}}},
             {"binaryData", {{"b", "AAE="}}}};
  ASSERT_EQ(request("POST", base + "/configmaps", cm.dump()).code, 201);
  Resp watch = request("GET", base + "/configmaps?watch=true&timeoutSeconds=1&resourceVersion=" +
                                  cms.j["metadata"]["resourceVersion"].get<std::string>());
  EXPECT_NE(watch.body.find("\"type\":\"ADDED\""), std::string::npos) << watch.body;
  EXPECT_NE(watch.body.find("\"kind\":\"ConfigMap\""), std::string::npos) << watch.body;
  // Tables: kubectl's columns.
  Resp table = request("GET", base + "/secrets", "", "application/json",
                       "application/json;as=Table;v=v1;g=meta.k8s.io");
  ASSERT_EQ(table.code, 200);
  EXPECT_EQ(table.j["columnDefinitions"][1]["name"], "Type");
  EXPECT_EQ(table.j["rows"][0]["cells"][1], "Opaque");
  EXPECT_EQ(table.j["rows"][0]["cells"][2], 2);
  Resp cm_table = request("GET", base + "/configmaps/app", "", "application/json",
                          "application/json;as=Table;v=v1;g=meta.k8s.io");
  EXPECT_EQ(cm_table.j["rows"][0]["cells"][1], 2);
  // Discovery and OpenAPI know them.
  Resp v1 = request("GET", "/api/v1");
  std::set<std::string> listed;
  for (const json& r : v1.j["resources"]) listed.insert(r["name"].get<std::string>());
  for (const char* n : {"namespaces", "namespaces/status", "secrets", "configmaps", "events", "services"})
    EXPECT_TRUE(listed.count(n)) << n;
  Resp root = request("GET", "/openapi/v3");
  ASSERT_TRUE(root.j["paths"].contains("api/v1")) << root.body;
  Resp core_doc = request("GET", "/openapi/v3/api/v1");
  EXPECT_TRUE(core_doc.j["paths"].contains("/api/v1/namespaces/{namespace}/secrets/{name}"));
  EXPECT_TRUE(core_doc.j["components"]["schemas"].contains("io.k8s.api.core.v1.ConfigMap"));
  // Delete.
  ASSERT_EQ(request("DELETE", base + "/secrets/db").code, 200);
  Resp gone = request("GET", base + "/secrets/db");
  expectStatus(gone, 404, "NotFound");
  EXPECT_EQ(gone.j["message"], "secrets \"db\" not found");
}

TEST_F(ApiServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  RawConn conn(server_->tcpPort());
  ASSERT_TRUE(
      conn.send("GET /version HTTP/1.1\r\nHost: localhost\r\n\r\nGET /apis HTTP/1.1\r\nHost: "
                "localhost\r\nConnection: close\r\n\r\n"));
  std::string got = conn.readAll();
  EXPECT_NE(got.find("\"minor\":\"30\""), std::string::npos);
  EXPECT_NE(got.find("APIGroupList"), std::string::npos);
}

TEST_F(ApiServerTest, UnixSocketIsOwnerOnlyAndServes) {
  std::string sock = ::testing::TempDir() + "knap-api-test-" + std::to_string(::getpid()) + ".sock";
  ApiServerOptions opts;
  opts.tcp_listen = "";
  opts.unix_socket_path = sock;
  startServer(opts);
  struct stat st {};
  ASSERT_EQ(::stat(sock.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::string req = "GET /version HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_NE(got.find("\"minor\":\"30\""), std::string::npos) << got;
  server_->stop();
  EXPECT_NE(::stat(sock.c_str(), &st), 0) << "socket file removed on stop";
}

TEST_F(ApiServerTest, EffectiveAutoscalingView) {
  storeCreate("Revision", "hello-00001",
              {{"metadata", {{"annotations", {{"autoscaling.knative.dev/min-scale", "2"}}}}},
               {"spec", {{"containers", json::array({{{"image", "x"}}})}}}});
  Resp r = request("GET", "/apis/knap.dev/v1/namespaces/default/revisions/hello-00001/autoscaling");
  ASSERT_EQ(r.code, 200) << r.body;
  std::map<std::string, json> byKey;
  for (const json& i : r.j["items"]) byKey[i["key"]] = i;
  ASSERT_TRUE(byKey.count("min-scale")) << r.body;
  EXPECT_EQ(byKey["min-scale"]["value"], "2");
  EXPECT_EQ(byKey["min-scale"]["source"], "annotation");
  ASSERT_TRUE(byKey.count("window"));
  EXPECT_NE(byKey["window"]["source"], "annotation");
  expectStatus(request("GET", "/apis/knap.dev/v1/namespaces/default/revisions/nope/autoscaling"), 404,
               "NotFound");
}

TEST(MetricsOfNamespace, KeepsOnlyTheNamespacesRevisionsAndTheirFamilyHeaders) {
  std::string text =
      "# HELP knap_router_requests_total Requests.\n# TYPE knap_router_requests_total counter\n"
      "knap_router_requests_total{revision=\"default/a-00001\",code=\"200\"} 3\n"
      "knap_router_requests_total{revision=\"other/b-00001\",code=\"200\"} 4\n"
      "knap_router_requests_total{revision=\"defaultx/c-00001\",code=\"200\"} 5\n"
      "# HELP knap_router_open_connections Open.\n# TYPE knap_router_open_connections gauge\n"
      "knap_router_open_connections{listener=\"external\"} 1\n"
      "# HELP knap_cold_start_seconds Cold.\n# TYPE knap_cold_start_seconds histogram\n"
      "knap_cold_start_seconds_count{path=\"x\\\",revision=\\\"default/\",revision=\"other/d\"} 1\n"
      "knap_cold_start_seconds_count{revision=\"default/a-00001\",path=\"warm\"} 2\n"
      "broken{revision=\"default/unterminated\n";
  EXPECT_EQ(metricsOfNamespace(text, "default"),
            "# HELP knap_router_requests_total Requests.\n# TYPE knap_router_requests_total counter\n"
            "knap_router_requests_total{revision=\"default/a-00001\",code=\"200\"} 3\n"
            "# HELP knap_cold_start_seconds Cold.\n# TYPE knap_cold_start_seconds histogram\n"
            "knap_cold_start_seconds_count{revision=\"default/a-00001\",path=\"warm\"} 2\n");
  EXPECT_EQ(metricsOfNamespace(text, "nope"), "");
}

TEST_F(ApiServerTest, ApiResponsesAreNeverCachedNorSniffed) {
  auto raw = [&](const std::string& target, const std::string& extra = "") {
    RawConn c(server_->tcpPort());
    c.send("GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra + "\r\n");
    return c.readAll();
  };
  auto head = [](const std::string& resp) { return resp.substr(0, resp.find("\r\n\r\n") + 2); };
  for (const std::string& target :
       {std::string("/version"), std::string("/apis/serving.knative.dev/v1/namespaces/default/services"),
        std::string("/apis/serving.knative.dev/v1/namespaces/default/services/missing"), std::string("/nope"),
        std::string(
            "/apis/serving.knative.dev/v1/namespaces/default/services?watch=true&timeoutSeconds=1")}) {
    std::string h = head(raw(target));
    ASSERT_EQ(h.rfind("HTTP/1.1 ", 0), 0u) << target << "\n" << h;
    EXPECT_NE(h.find("Cache-Control: no-store\r\n"), std::string::npos) << target << "\n" << h;
    EXPECT_EQ(h.find("no-cache"), std::string::npos) << target << "\n" << h;
    EXPECT_NE(h.find("X-Content-Type-Options: nosniff\r\n"), std::string::npos) << target << "\n" << h;
  }
  // The console's files keep their own caching (and one Cache-Control).
  std::string ui = head(raw("/ui/"));
  EXPECT_NE(ui.find("Cache-Control: no-cache\r\n"), std::string::npos) << ui;
  EXPECT_EQ(ui.find("no-store"), std::string::npos) << ui;
}

TEST_F(ApiServerTest, ConsoleFilesAreServedWithStrictHeaders) {
  auto raw = [&](const std::string& target, const std::string& extra = "") {
    RawConn c(server_->tcpPort());
    c.send("GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra + "\r\n");
    return c.readAll();
  };
  std::string index = raw("/ui/");
  ASSERT_EQ(index.rfind("HTTP/1.1 200", 0), 0u) << index;
  EXPECT_NE(index.find("Content-Type: text/html; charset=utf-8"), std::string::npos);
  EXPECT_NE(index.find("Content-Security-Policy: default-src 'none'; script-src 'self';"), std::string::npos);
  EXPECT_NE(index.find("frame-ancestors 'none'"), std::string::npos);
  EXPECT_NE(index.find("X-Content-Type-Options: nosniff"), std::string::npos);
  EXPECT_NE(index.find("Cache-Control: no-cache\r\n"), std::string::npos);
  size_t src = index.find("/ui/", index.find("<script"));
  ASSERT_NE(src, std::string::npos) << index;
  std::string script = index.substr(src, index.find('"', src) - src);  // /ui/<bundle>/app.js
  std::string js = raw(script);
  ASSERT_EQ(js.rfind("HTTP/1.1 200", 0), 0u) << script << "\n" << js;
  EXPECT_NE(js.find("Content-Type: text/javascript; charset=utf-8"), std::string::npos);
  EXPECT_NE(js.find("Cache-Control: public, max-age=31536000, immutable"), std::string::npos);
  size_t etag = js.find("ETag: ");
  ASSERT_NE(etag, std::string::npos);
  std::string tag = js.substr(etag + 6, js.find("\r\n", etag) - etag - 6);
  EXPECT_EQ(raw(script, "If-None-Match: W/" + tag + "\r\n").rfind("HTTP/1.1 304", 0), 0u);
  EXPECT_EQ(raw(script, "If-None-Match: \"other\"\r\n").rfind("HTTP/1.1 200", 0), 0u);
  std::string moved = raw("/ui");
  EXPECT_EQ(moved.rfind("HTTP/1.1 301", 0), 0u) << moved;
  EXPECT_NE(moved.find("Location: /ui/"), std::string::npos);
  EXPECT_EQ(raw("/ui/0000000000000000/app.js").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(raw("/ui/../apis").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(request("DELETE", "/ui/").code, 405);
  // Without a router the metrics path is a 404 Status.
  expectStatus(request("GET", "/apis/knap.dev/v1/namespaces/default/metrics"), 404, "NotFound");
}

TEST_F(ApiServerTest, RevisionLogViewServesTheTailOfEachPodsStreams) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(::testing::TempDir()) / ("knap-api-logs-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "pods/pod-a");
  std::ofstream(dir / "pods/pod-a/meta.json")
      << R"({"pod":"pod-a","namespace":"default","revision":"hello-00001","service":"hello"})";
  std::ofstream(dir / "pods/pod-a/stdout.log") << "one\ntwo\nthree\n";
  expectStatus(request("GET", "/apis/knap.dev/v1/namespaces/default/revisions/hello-00001/log"), 404,
               "NotFound");
  ApiServerOptions opts;
  opts.policy.pod_data_dir = dir.string();
  startServer(opts);
  expectStatus(request("GET", "/apis/knap.dev/v1/namespaces/default/revisions/hello-00001/log"), 404,
               "NotFound");
  storeCreate("Revision", "hello-00001",
              {{"metadata", json::object()}, {"spec", {{"containers", json::array({{{"image", "x"}}})}}}});
  Resp r = request("GET", "/apis/knap.dev/v1/namespaces/default/revisions/hello-00001/log");
  ASSERT_EQ(r.code, 200) << r.body;
  ASSERT_EQ(r.j["pods"].size(), 1u) << r.body;
  EXPECT_EQ(r.j["pods"][0]["name"], "pod-a");
  EXPECT_EQ(r.j["pods"][0]["streams"][0]["stream"], "stdout");
  EXPECT_EQ(r.j["pods"][0]["streams"][0]["text"], "one\ntwo\nthree\n");
  EXPECT_EQ(r.j["pods"][0]["streams"][1]["text"], "");  // no stderr.log yet
  r = request("GET", "/apis/knap.dev/v1/namespaces/default/revisions/hello-00001/log?limitBytes=7");
  EXPECT_EQ(r.j["pods"][0]["streams"][0]["text"], "three\n");
  EXPECT_EQ(r.j["pods"][0]["streams"][0]["truncated"], true);
  expectStatus(request("GET", "/apis/knap.dev/v1/namespaces/default/revisions/hello-00001/log?limitBytes=x"),
               400, "BadRequest");
  EXPECT_EQ(request("DELETE", "/apis/knap.dev/v1/namespaces/default/revisions/hello-00001/log").code, 405);
  fs::remove_all(dir);
}

TEST_F(ApiServerTest, RevisionRestartStartsARollingRestartOrSaysThereIsNothingToRestart) {
  const std::string url = "/apis/knap.dev/v1/namespaces/default/revisions/hello-00001/restart";
  expectStatus(request("POST", url), 404, "NotFound");  // no runtime: no restarts
  std::vector<std::string> calls;
  std::vector<std::string> running = {"hello-00001-a", "hello-00001-b"};
  ApiServerOptions opts;
  opts.policy.restart_pods = [&](const std::string& ns, const std::string& name) -> StatusOr<PodRestart> {
    calls.push_back(ns + "/" + name);
    return PodRestart{running, 0};
  };
  startServer(opts);
  expectStatus(request("POST", url), 404, "NotFound");  // no such Revision
  EXPECT_TRUE(calls.empty());
  storeCreate("Revision", "hello-00001",
              {{"metadata", json::object()}, {"spec", {{"containers", json::array({{{"image", "x"}}})}}}});
  Resp r = request("POST", url);
  ASSERT_EQ(r.code, 202) << r.body;
  EXPECT_EQ(r.j["kind"], "RevisionRestart");
  EXPECT_EQ(r.j["apiVersion"], "knap.dev/v1");
  EXPECT_EQ(r.j["metadata"]["name"], "hello-00001");
  EXPECT_EQ(r.j["pods"], json(running));
  EXPECT_NE(r.j["message"].get<std::string>().find("restarting 2 pods"), std::string::npos) << r.body;
  EXPECT_EQ(calls, std::vector<std::string>{"default/hello-00001"});
  running.clear();  // scaled to zero
  r = request("POST", url);
  ASSERT_EQ(r.code, 200) << r.body;
  EXPECT_EQ(r.j["pods"], json::array());
  EXPECT_NE(r.j["message"].get<std::string>().find("scaled to zero"), std::string::npos) << r.body;
  EXPECT_EQ(request("GET", url).code, 405);
  EXPECT_EQ(request("DELETE", url).code, 405);
}

TEST_F(ApiServerTest, RevisionLogViewIsBoundedAcrossPods) {
  const size_t kLogViewMaxPods = 20, kLogViewMaxBytes = 4 << 20;  // rest_handler.cc
  namespace fs = std::filesystem;
  fs::path dir = fs::path(::testing::TempDir()) / ("knap-api-logs-bound-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string line = std::string(99, 'x') + "\n";
  std::string text;
  for (int i = 0; i < 3000; ++i) text += line;  // 300 KB per stream
  const size_t pods = kLogViewMaxPods + 5;
  for (size_t i = 0; i < pods; ++i) {
    fs::path pd = dir / "pods" / ("pod-" + std::to_string(100 + i));
    fs::create_directories(pd);
    std::ofstream(pd / "meta.json")
        << R"({"pod":"pod-)" << 100 + i
        << R"(","namespace":"default","revision":"hello-00001","service":"hello"})";
    std::ofstream(pd / "stdout.log") << text;
    std::ofstream(pd / "stderr.log") << text;
  }
  ApiServerOptions opts;
  opts.policy.pod_data_dir = dir.string();
  startServer(opts);
  storeCreate("Revision", "hello-00001",
              {{"metadata", json::object()}, {"spec", {{"containers", json::array({{{"image", "x"}}})}}}});
  Resp r =
      request("GET", "/apis/knap.dev/v1/namespaces/default/revisions/hello-00001/log?limitBytes=1048576");
  ASSERT_EQ(r.code, 200) << r.body.substr(0, 300);
  ASSERT_EQ(r.j["pods"].size(), kLogViewMaxPods);
  EXPECT_EQ(r.j["podsOmitted"], 5);
  size_t total = 0;
  bool cut = false;
  for (const auto& p : r.j["pods"]) {
    for (const auto& st : p["streams"]) {
      total += st.value("text", std::string()).size();
      if (st["truncated"] == true) cut = true;
    }
  }
  EXPECT_LE(total, kLogViewMaxBytes);
  EXPECT_GT(total, kLogViewMaxBytes - 2 * text.size());  // the budget is used, not wasted
  EXPECT_TRUE(cut);
  EXPECT_EQ(r.j["pods"][kLogViewMaxPods - 1]["streams"][1]["truncated"], true);
  EXPECT_EQ(r.j["pods"][kLogViewMaxPods - 1]["streams"][1]["text"], "");
  fs::remove_all(dir);
}

TEST_F(ApiServerTest, WriteKubeconfig) {
  std::string path = ::testing::TempDir() + "knap-kubeconfig-" + std::to_string(::getpid());
  ASSERT_TRUE(writeKubeconfig(path, server_->url()).isOk());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("server: " + server_->url()), std::string::npos);
  EXPECT_NE(text.str().find("current-context: knap"), std::string::npos);
  EXPECT_NE(text.str().find("namespace: default"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ::unlink(path.c_str());
}

// ---------------------------------------------------------------- access control (issue 9)

class AccessTest : public ApiServerTest {
 protected:
  void SetUp() override {
    auto tokens = TokenFile::parse("view-tok,viewer,1\nedit-tok,dev,2,\"devs,other\"\n", "tokens");
    ASSERT_TRUE(tokens.isOk()) << tokens.status().message();
    auto access = std::make_shared<AccessControl>();
    access->tokens = std::move(*tokens);
    access->bindings = {{"view", false, "viewer", "default"},
                        {"edit", true, "devs", "default"},
                        {"view", false, "system:serviceaccount:default:reader", "default"}};
    access->service_account_tokens =
        std::make_shared<const ServiceAccountTokens>(ServiceAccountTokens::withKey(std::string(32, 's')));
    ApiServerOptions opts;
    opts.policy.access = access;
    startServer(opts);
  }
  Resp ssar(const std::string& verb, const std::string& ns) {
    json review = {{"apiVersion", "authorization.k8s.io/v1"},
                   {"kind", "SelfSubjectAccessReview"},
                   {"spec",
                    {{"resourceAttributes",
                      {{"namespace", ns},
                       {"verb", verb},
                       {"group", "serving.knative.dev"},
                       {"resource", "services"}}}}}};
    return request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review.dump());
  }
};

TEST_F(AccessTest, NoCredentialsIs401ExceptHealthAndVersion) {
  Resp r = request("GET", path("services"));
  expectStatus(r, 401, "Unauthorized");
  EXPECT_EQ(r.j["message"], "Unauthorized");
  for (const char* open : {"/healthz", "/readyz", "/livez", "/version"})
    EXPECT_EQ(request("GET", open).code, 200) << open;
  expectStatus(request("GET", "/apis"), 401, "Unauthorized");
  expectStatus(request("POST", path("services"), helloService().dump()), 401, "Unauthorized");
  bearer_ = "wrong";
  expectStatus(request("GET", "/version"), 401, "Unauthorized");  // a wrong credential is never anonymous
  bearer_ = "view-to";
  expectStatus(request("GET", path("services")), 401, "Unauthorized");
}

TEST_F(AccessTest, ServiceAccountTokensAuthenticateForTheApiAudienceOnly) {
  auto tokens = ServiceAccountTokens::withKey(std::string(32, 's'));
  const int64_t now = static_cast<int64_t>(::time(nullptr));
  auto token = tokens.issue("default", "reader", "", 3600, now);
  ASSERT_TRUE(token.isOk());
  bearer_ = *token;
  EXPECT_EQ(request("GET", path("services")).code, 200);
  Resp denied = create(helloService());
  expectStatus(denied, 403, "Forbidden");
  EXPECT_NE(denied.j["message"].get<std::string>().find("User \"system:serviceaccount:default:reader\""),
            std::string::npos);
  // Another audience, another key, or an expired token: 401.
  bearer_ = *tokens.issue("default", "reader", "api", 3600, now);
  expectStatus(request("GET", path("services")), 401, "Unauthorized");
  bearer_ = *ServiceAccountTokens::withKey(std::string(32, 'x')).issue("default", "reader", "", 3600, now);
  expectStatus(request("GET", path("services")), 401, "Unauthorized");
  bearer_ = *tokens.issue("default", "reader", "", 600, now - 3600);
  expectStatus(request("GET", path("services")), 401, "Unauthorized");
}

TEST_F(AccessTest, ViewerReadsButCannotWriteAndEditorWrites) {
  bearer_ = "view-tok";
  EXPECT_EQ(request("GET", path("services")).code, 200);
  EXPECT_EQ(request("GET", "/apis/serving.knative.dev/v1").code, 200);  // discovery
  Resp denied = create(helloService());
  expectStatus(denied, 403, "Forbidden");
  EXPECT_EQ(
      denied.j["message"],
      "services.serving.knative.dev is forbidden: User \"viewer\" cannot create resource \"services\" in API "
      "group \"serving.knative.dev\" in the namespace \"default\"");
  expectStatus(request("GET", "/apis/serving.knative.dev/v1/namespaces/other/services"), 403, "Forbidden");
  expectStatus(request("GET", "/apis/serving.knative.dev/v1/services"), 403, "Forbidden");  // -A
  RawConn watch(server_->tcpPort());
  watch.send("GET " + path("services") +
             "?watch=true HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Authorization: Bearer view-tok\r\n\r\n");
  EXPECT_EQ(watch.readSome().rfind("HTTP/1.1 200", 0), 0u) << watch.data();
  RawConn other(server_->tcpPort());
  other.send(
      "GET /apis/serving.knative.dev/v1/namespaces/other/services?watch=true HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Authorization: Bearer view-tok\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(other.readAll().rfind("HTTP/1.1 403", 0), 0u) << other.data();

  bearer_ = "edit-tok";
  Resp made = create(helloService());
  ASSERT_EQ(made.code, 201) << made.body;
  EXPECT_EQ(made.j["metadata"]["annotations"]["serving.knative.dev/creator"], "dev");
  json st = {{"status", {{"observedGeneration", 1}}}};
  Resp status =
      request("PATCH", path("services", "hello") + "/status", st.dump(), "application/merge-patch+json");
  expectStatus(status, 403, "Forbidden");
  EXPECT_NE(status.j["message"].get<std::string>().find("resource \"services/status\""), std::string::npos);
}

TEST_F(AccessTest, ConsoleFilesAreOpenAndMetricsNeedARoleInTheNamespace) {
  EXPECT_EQ(request("GET", "/ui/").code, 200);  // the page holds no data; its API calls authenticate
  ApiServerOptions opts;
  auto tokens = TokenFile::parse("view-tok,viewer,1\n", "tokens");
  ASSERT_TRUE(tokens.isOk());
  auto access = std::make_shared<AccessControl>();
  access->tokens = std::move(*tokens);
  access->bindings = {{"view", false, "viewer", "default"}};
  opts.policy.access = access;
  opts.policy.metrics_text = [] {
    return std::string(
        "knap_router_requests_total{revision=\"default/a-00001\",code=\"200\"} 3\n"
        "knap_router_requests_total{revision=\"other/b-00001\",code=\"200\"} 4\n");
  };
  startServer(opts);
  expectStatus(request("GET", "/apis/knap.dev/v1/namespaces/default/metrics"), 401, "Unauthorized");
  bearer_ = "view-tok";
  Resp r = request("GET", "/apis/knap.dev/v1/namespaces/default/metrics");
  EXPECT_EQ(r.code, 200);
  EXPECT_EQ(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(r.body, "knap_router_requests_total{revision=\"default/a-00001\",code=\"200\"} 3\n");
  expectStatus(request("GET", "/apis/knap.dev/v1/namespaces/other/metrics"), 403, "Forbidden");
  EXPECT_EQ(request("POST", "/apis/knap.dev/v1/namespaces/default/metrics", "{}").code, 403);
}

TEST_F(AccessTest, RevisionRestartNeedsTheEditRole) {
  int restarts = 0;
  ApiServerOptions opts;
  auto tokens = TokenFile::parse("view-tok,viewer,1\nedit-tok,dev,2,\"devs\"\n", "tokens");
  ASSERT_TRUE(tokens.isOk());
  auto access = std::make_shared<AccessControl>();
  access->tokens = std::move(*tokens);
  access->bindings = {{"view", false, "viewer", "default"}, {"edit", true, "devs", "default"}};
  opts.policy.access = access;
  opts.policy.restart_pods = [&](const std::string&, const std::string&) -> StatusOr<PodRestart> {
    ++restarts;
    return PodRestart{{"p-1"}, 0};
  };
  startServer(opts);
  storeCreate("Revision", "hello-00001",
              {{"metadata", json::object()}, {"spec", {{"containers", json::array({{{"image", "x"}}})}}}});
  const std::string url = "/apis/knap.dev/v1/namespaces/default/revisions/hello-00001/restart";
  expectStatus(request("POST", url), 401, "Unauthorized");
  bearer_ = "view-tok";
  Resp denied = request("POST", url);
  expectStatus(denied, 403, "Forbidden");
  EXPECT_NE(denied.j["message"].get<std::string>().find("cannot create resource \"revisions/restart\""),
            std::string::npos)
      << denied.body;
  EXPECT_EQ(restarts, 0);
  bearer_ = "edit-tok";
  EXPECT_EQ(request("POST", url).code, 202);
  expectStatus(request("POST", "/apis/knap.dev/v1/namespaces/other/revisions/hello-00001/restart"), 403,
               "Forbidden");
  EXPECT_EQ(restarts, 1);
}

TEST_F(AccessTest, SelfSubjectAccessReviewAndSelfSubjectReview) {
  bearer_ = "view-tok";
  Resp r = ssar("get", "default");
  ASSERT_EQ(r.code, 201) << r.body;
  EXPECT_EQ(r.j["kind"], "SelfSubjectAccessReview");
  EXPECT_EQ(r.j["status"]["allowed"], true);
  EXPECT_EQ(ssar("create", "default").j["status"]["allowed"], false);
  bearer_ = "edit-tok";
  EXPECT_EQ(ssar("create", "default").j["status"]["allowed"], true);
  EXPECT_EQ(ssar("create", "other").j["status"]["allowed"], false);
  Resp who = request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                     R"({"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"})");
  ASSERT_EQ(who.code, 201) << who.body;
  EXPECT_EQ(who.j["status"]["userInfo"]["username"], "dev");
  EXPECT_EQ(who.j["status"]["userInfo"]["uid"], "2");
  EXPECT_EQ(who.j["status"]["userInfo"]["groups"], json::array({"devs", "other", "system:authenticated"}));
  // Discovery advertises both groups and serves their resource lists (kubectl api-resources reads them all).
  Resp apis = request("GET", "/apis");
  std::set<std::string> groups;
  for (const json& g : apis.j["groups"]) groups.insert(g["name"].get<std::string>());
  EXPECT_TRUE(groups.count("authorization.k8s.io") && groups.count("authentication.k8s.io")) << apis.body;
  for (const json& g : apis.j["groups"]) {
    std::string gv = g["preferredVersion"]["groupVersion"];
    Resp list = request("GET", "/apis/" + gv);
    EXPECT_EQ(list.code, 200) << gv;
    EXPECT_EQ(list.j["kind"], "APIResourceList") << gv;
    EXPECT_EQ(list.j["groupVersion"], gv);
  }
  bearer_ = "";
  expectStatus(ssar("get", "default"), 401, "Unauthorized");
}

TEST_F(AccessTest, UnixSocketIsTheLocalAdmin) {
  std::string sock = ::testing::TempDir() + "knap-api-access-" + std::to_string(::getpid()) + ".sock";
  ApiServerOptions opts;
  opts.unix_socket_path = sock;
  opts.policy.access = std::make_shared<AccessControl>();
  startServer(opts);
  expectStatus(request("GET", path("services")), 401, "Unauthorized");
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::string body = helloService().dump();
  std::string req = "POST " + path("services") +
                    " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                    "Content-Type: application/json\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 201", 0), 0u) << got;
  EXPECT_NE(got.find("\"serving.knative.dev/creator\":\"knap-admin\""), std::string::npos) << got;
}

TEST_F(ApiServerTest, ListeningBeyondLoopbackNeedsTlsAndAuthentication) {
  ApiServerOptions opts;
  opts.tcp_listen = "0.0.0.0:0";
  ApiServer plain(opts, config_, *store_, clock_);
  Status st = plain.start();
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("without TLS and authentication"), std::string::npos) << st.message();
}

TEST_F(ApiServerTest, ConnectionCapHoldsNewClientsUntilOneCloses) {
  ApiServerOptions opts;
  opts.max_connections = 2;
  startServer(opts);
  const std::string ping = "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  auto first = std::make_unique<RawConn>(server_->tcpPort());
  RawConn second(server_->tcpPort());
  ASSERT_TRUE(first->send(ping) && second.send(ping));
  EXPECT_NE(first->readSome().find("200 OK"), std::string::npos);
  EXPECT_NE(second.readSome().find("200 OK"), std::string::npos);
  RawConn third(server_->tcpPort());  // connects (the kernel's backlog) but is not served
  ASSERT_TRUE(third.ok());
  ASSERT_TRUE(third.send(ping));
  third.setTimeout(1);
  EXPECT_EQ(third.readSome(), "");
  first.reset();  // frees a slot: the third client is served
  third.setTimeout(20);
  EXPECT_NE(third.readSome().find("200 OK"), std::string::npos);
}

TEST_F(ApiServerTest, AcceptBacksOffAtFdExhaustionInsteadOfSpinning) {
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  int client = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(client, 0);
  int open_fds = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) (void)e, ++open_fds;
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(open_fds + 8);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd; (fd = ::dup(client)) >= 0;) filler.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->tcpPort()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);  // waits in the backlog
  std::string ping = "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(client, ping.data(), ping.size(), MSG_NOSIGNAL), static_cast<ssize_t>(ping.size()));
  auto cpu = [] {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  };
  double before = cpu();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  double used = cpu() - before;
  for (int fd : filler) ::close(fd);
  ::setrlimit(RLIMIT_NOFILE, &old);
  EXPECT_LT(used, 0.5) << "the accept loop spun while accept() failed with EMFILE";
  // Once descriptors are free again the waiting client is served (the back-off is at most 1 s).
  timeval tv{20, 0};
  ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(client, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(client);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
}

TEST_F(ApiServerTest, WatchesHoldNoWorkerThread) {
  ApiServerOptions opts;
  opts.threads = 1;
  startServer(opts);
  std::vector<std::unique_ptr<RawConn>> watches;
  for (int i = 0; i < 16; ++i) {
    watches.push_back(std::make_unique<RawConn>(server_->tcpPort()));
    ASSERT_TRUE(
        watches.back()->send("GET " + path("services") + "?watch=true HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    EXPECT_EQ(watches.back()->readSome().rfind("HTTP/1.1 200", 0), 0u);
  }
  // One thread, sixteen open watches: ordinary requests and writes are still served, and every watch sees the
  // write.
  EXPECT_EQ(request("GET", "/readyz").code, 200);
  ASSERT_EQ(create(helloService()).code, 201);
  for (auto& w : watches) {
    auto events = w->readEvents(1);
    ASSERT_EQ(events.size(), 1u) << w->data();
    EXPECT_EQ(events[0]["type"], "ADDED");
  }
}

}  // namespace
}  // namespace knap::api
