// knap: the command-line client of knapd, in the spirit of Knative's `kn`.
//
//   knap apply -f FILE [--wait]        create or update objects (server-side apply)
//   knap get KIND [NAME] [-o yaml|json] [-n NS | -A]
//   knap describe service NAME
//   knap delete KIND NAME
//   knap revision restart NAME          rolling restart of a Revision's pods
//   knap logs SERVICE|REVISION [-f]     pod logs from knapd's data dir (tools/knap/pods_cmd.h)
//   knap image import FILE              OCI archive into containerd (root)
//   knap image pull IMAGE               from its registry into containerd (root; tools/knap/image_pull_cmd.h)
//
// KIND: services|ksvc, configurations|config, revisions|rev, routes|rt.
// The server and credentials: --kubeconfig FILE (server, CA, client
// certificate, token of its current context), else --server URL or
// $KNAP_SERVER, else knapd's kubeconfig /var/lib/knap/kubeconfig when it is
// readable, else knapd's unix socket /var/lib/knap/knapd.sock. --token adds a
// bearer token to any of them.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "api/codec.h"
#include "api/resources.h"
#include "common/clock.h"
#include "common/json_path.h"
#include "tools/knap/http_client.h"
#include "tools/knap/image_pull_cmd.h"
#include "tools/knap/pods_cmd.h"
#include "tools/knap/table.h"

namespace knap::cli {
namespace {

using nlohmann::json;

struct Options {
  std::string server;
  std::string kubeconfig;
  std::string token;
  std::string ns = "default";
  bool all_namespaces = false;
  std::string output;  // "", "yaml", "json"
  std::vector<std::string> files;
  bool wait = false;
  int wait_seconds = 120;
  std::vector<std::string> args;  // positional
};

const char* kUsage =
    "knap — client for knapd, a single-machine Knative Serving runtime\n"
    "\n"
    "Usage:\n"
    "  knap apply -f FILE [-f FILE...] [--wait] [--timeout SECONDS]\n"
    "  knap get services|configurations|revisions|routes|domainmappings [NAME] [-o yaml|json] [-n NS | -A]\n"
    "  knap describe service NAME [-n NS]\n"
    "  knap delete service|configuration|route|revision|domainmapping NAME [-n NS]\n"
    "  knap revision restart NAME [-n NS]   new pods replace the running ones, each once a new one is ready\n"
    "  knap logs SERVICE|REVISION [-f] [-n NS] [-c CONTAINER | --all-containers] [--data-dir DIR]\n"
    "  knap image import FILE [--name NAME] [--containerd-socket PATH]\n"
    "  knap image pull IMAGE [--config FILE] [--platform os/arch] [--containerd-socket PATH] [--namespace "
    "NS]\n"
    "\n"
    "Global flags:\n"
    "  --kubeconfig FILE  server and credentials (default /var/lib/knap/kubeconfig when readable,\n"
    "                 else the unix socket /var/lib/knap/knapd.sock)\n"
    "  --server URL   knapd API (unix:///var/lib/knap/knapd.sock or https://127.0.0.1:6443); env "
    "KNAP_SERVER\n"
    "  --token TOKEN  bearer token (a line of knapd's knap.api-token-file)\n"
    "  -n, --namespace NS (default \"default\")\n";

constexpr const char* kDefaultKubeconfig = "/var/lib/knap/kubeconfig";
constexpr const char* kDefaultSocket = "unix:///var/lib/knap/knapd.sock";

// Resolves the server and credentials from the flags (see the header comment).
Status resolveServer(const Options& opt, std::string* server, Credentials* creds) {
  std::string explicit_server = opt.server;
  if (explicit_server.empty()) {
    if (const char* env = std::getenv("KNAP_SERVER"); env && *env) explicit_server = env;
  }
  std::string kubeconfig = opt.kubeconfig;
  if (kubeconfig.empty() && explicit_server.empty() && access(kDefaultKubeconfig, R_OK) == 0)
    kubeconfig = kDefaultKubeconfig;
  if (!kubeconfig.empty()) KNAP_RETURN_IF_ERROR(loadKubeconfig(kubeconfig, server, creds));
  if (!explicit_server.empty()) *server = explicit_server;
  if (server->empty()) *server = kDefaultSocket;
  if (!opt.token.empty()) creds->token = opt.token;
  return Status::ok();
}

// Prints a Kubernetes Status error the way a person wants to read it.
int reportHttpError(const HttpResponse& res, const std::string& what) {
  std::string message = res.body;
  try {
    json st = json::parse(res.body);
    if (st.value("kind", "") == "Status") {
      message = st.value("message", "");
      if (st.contains("details") && st["details"].contains("causes")) {
        for (const auto& c : st["details"]["causes"]) {
          message += "\n  " + c.value("field", "") + ": " + c.value("message", "");
        }
      }
    }
  } catch (...) {
  }
  std::cerr << "Error: " << what << ": " << message << "\n";
  return 1;
}

int reportStatus(const Status& st) {
  std::cerr << "Error: " << st.message() << "\n";
  return 1;
}

// The serving.knative.dev kinds the CLI handles: the four v1 kinds and the
// v1beta1 DomainMapping, by plural, kind, singular or short name.
const api::ResourceInfo* findServingKind(std::string_view name) {
  if (const api::ResourceInfo* r = api::findResource(name)) return r;
  const api::ResourceInfo* dm = api::findKind("DomainMapping");
  if (name == dm->kind || name == dm->plural || name == dm->singular ||
      std::find(dm->short_names.begin(), dm->short_names.end(), name) != dm->short_names.end())
    return dm;
  return nullptr;
}

std::string collectionPath(const api::ResourceInfo& r, const std::string& ns, bool all) {
  std::string base = "/apis/" + r.apiVersion() + "/";
  if (all) return base + r.plural;
  return base + "namespaces/" + ns + "/" + r.plural;
}

std::string condition(const json& obj, const std::string& type, const std::string& field) {
  if (!obj.contains("status") || !obj["status"].contains("conditions")) return "";
  for (const auto& c : obj["status"]["conditions"]) {
    if (c.value("type", "") == type) return c.value(field, "");
  }
  return "";
}

std::string age(const json& obj) {
  WallTime created;
  std::string ts = obj["metadata"].value("creationTimestamp", "");
  if (!parseRfc3339(ts, &created)) return "";
  auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() - created).count();
  if (secs < 0) secs = 0;
  if (secs < 120) return std::to_string(secs) + "s";
  if (secs < 7200) return std::to_string(secs / 60) + "m";
  if (secs < 172800) return std::to_string(secs / 3600) + "h";
  return std::to_string(secs / 86400) + "d";
}

std::string conditionsSummary(const json& obj) {
  if (!obj.contains("status") || !obj["status"].contains("conditions")) return "0 OK / 0";
  int ok = 0, total = 0;
  for (const auto& c : obj["status"]["conditions"]) {
    ++total;
    if (c.value("status", "") == "True") ++ok;
  }
  return std::to_string(ok) + " OK / " + std::to_string(total);
}

std::string str(const json& obj, std::initializer_list<const char*> path) {
  const json* cur = jsonAt(obj, path);
  if (cur == nullptr) return "";
  if (cur->is_string()) return cur->get<std::string>();
  if (cur->is_null()) return "";
  return cur->dump();
}

void printList(const api::ResourceInfo& r, const std::vector<json>& items, bool all_ns) {
  Table t;
  std::vector<std::string> head;
  if (all_ns) head.push_back("NAMESPACE");
  if (r.kind == "Service") {
    for (auto h : {"NAME", "URL", "LATEST", "AGE", "CONDITIONS", "READY", "REASON"}) head.push_back(h);
  } else if (r.kind == "Configuration") {
    for (auto h : {"NAME", "LATEST CREATED", "LATEST READY", "AGE", "READY", "REASON"}) head.push_back(h);
  } else if (r.kind == "Revision") {
    for (auto h :
         {"NAME", "SERVICE", "TRAFFIC", "TAGS", "GENERATION", "AGE", "CONDITIONS", "READY", "REASON"})
      head.push_back(h);
  } else {
    for (auto h : {"NAME", "URL", "AGE", "CONDITIONS", "READY", "REASON"}) head.push_back(h);
  }
  t.header(head);
  for (const auto& o : items) {
    std::vector<std::string> row;
    if (all_ns) row.push_back(str(o, {"metadata", "namespace"}));
    row.push_back(str(o, {"metadata", "name"}));
    if (r.kind == "Service") {
      row.insert(row.end(),
                 {str(o, {"status", "url"}), str(o, {"status", "latestReadyRevisionName"}), age(o),
                  conditionsSummary(o), condition(o, "Ready", "status"), condition(o, "Ready", "reason")});
    } else if (r.kind == "Configuration") {
      row.insert(row.end(), {str(o, {"status", "latestCreatedRevisionName"}),
                             str(o, {"status", "latestReadyRevisionName"}), age(o),
                             condition(o, "Ready", "status"), condition(o, "Ready", "reason")});
    } else if (r.kind == "Revision") {
      row.insert(row.end(),
                 {str(o, {"metadata", "labels", api::labels::kService}), "", "",
                  str(o, {"metadata", "labels", api::labels::kConfigurationGeneration}), age(o),
                  conditionsSummary(o), condition(o, "Ready", "status"), condition(o, "Ready", "reason")});
    } else {
      row.insert(row.end(), {str(o, {"status", "url"}), age(o), conditionsSummary(o),
                             condition(o, "Ready", "status"), condition(o, "Ready", "reason")});
    }
    t.row(row);
  }
  std::cout << t.render();
}

// Fills the TRAFFIC and TAGS columns of revisions from their Routes' status.
void annotateRevisionTraffic(HttpClient& client, const Options& opt, std::vector<json>& revisions) {
  auto res = client.request("GET", collectionPath(*api::findResource("routes"), opt.ns, opt.all_namespaces));
  if (!res.isOk() || res->status != 200) return;
  json routes = json::parse(res->body, nullptr, false);
  if (!routes.is_object()) return;
  for (auto& rev : revisions) {
    int percent = 0;
    std::vector<std::string> tags;
    for (const auto& rt : routes.value("items", json::array())) {
      if (str(rt, {"metadata", "namespace"}) != str(rev, {"metadata", "namespace"})) continue;
      if (!rt.contains("status") || !rt["status"].contains("traffic")) continue;
      for (const auto& tt : rt["status"]["traffic"]) {
        if (tt.value("revisionName", "") != str(rev, {"metadata", "name"})) continue;
        percent += tt.value("percent", 0);
        if (tt.contains("tag")) tags.push_back(tt["tag"].get<std::string>());
      }
    }
    rev["__traffic"] = percent ? std::to_string(percent) + "%" : "";
    std::string joined;
    for (const auto& t : tags) joined += (joined.empty() ? "" : ",") + t;
    rev["__tags"] = joined;
  }
}

int cmdGet(HttpClient& client, const Options& opt) {
  if (opt.args.empty()) {
    std::cerr << "Error: get needs a kind: services, configurations, revisions, routes or domainmappings\n";
    return 2;
  }
  const api::ResourceInfo* r = findServingKind(opt.args[0]);
  if (!r) {
    std::cerr << "Error: unknown kind \"" << opt.args[0]
              << "\" (use services, configurations, revisions, routes or domainmappings)\n";
    return 2;
  }
  std::string path = collectionPath(*r, opt.ns, opt.all_namespaces && opt.args.size() < 2);
  if (opt.args.size() >= 2) path += "/" + opt.args[1];
  auto res = client.request("GET", path);
  if (!res.isOk()) return reportStatus(res.status());
  if (res->status != 200) return reportHttpError(*res, "get " + r->plural);
  json body = json::parse(res->body, nullptr, false);
  if (body.is_discarded()) return reportStatus(internalError("knapd sent invalid JSON"));
  if (opt.output == "json") {
    std::cout << body.dump(2) << "\n";
    return 0;
  }
  if (opt.output == "yaml") {
    std::cout << api::toYaml(body);
    return 0;
  }
  if (!opt.output.empty()) {
    std::cerr << "Error: unknown output format \"" << opt.output << "\" (use yaml or json)\n";
    return 2;
  }
  std::vector<json> items;
  if (opt.args.size() >= 2)
    items.push_back(body);
  else
    for (const auto& i : body.value("items", json::array())) items.push_back(i);
  if (items.empty()) {
    std::cout << "No " << r->plural << " found.\n";
    return 0;
  }
  if (r->kind == "Revision") {
    annotateRevisionTraffic(client, opt, items);
    Table t;
    std::vector<std::string> head;
    if (opt.all_namespaces) head.push_back("NAMESPACE");
    for (auto h :
         {"NAME", "SERVICE", "TRAFFIC", "TAGS", "GENERATION", "AGE", "CONDITIONS", "READY", "REASON"})
      head.push_back(h);
    t.header(head);
    for (const auto& o : items) {
      std::vector<std::string> row;
      if (opt.all_namespaces) row.push_back(str(o, {"metadata", "namespace"}));
      row.insert(row.end(),
                 {str(o, {"metadata", "name"}), str(o, {"metadata", "labels", api::labels::kService}),
                  o.value("__traffic", ""), o.value("__tags", ""),
                  str(o, {"metadata", "labels", api::labels::kConfigurationGeneration}), age(o),
                  conditionsSummary(o), condition(o, "Ready", "status"), condition(o, "Ready", "reason")});
      t.row(row);
    }
    std::cout << t.render();
    return 0;
  }
  printList(*r, items, opt.all_namespaces);
  return 0;
}

StatusOr<std::string> readInput(const std::string& file) {
  std::stringstream ss;
  if (file == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(file);
  if (!in) return notFound("cannot read " + file);
  ss << in.rdbuf();
  return ss.str();
}

bool isReady(const json& obj) {
  if (!obj.contains("status")) return false;
  if (obj["status"].value("observedGeneration", int64_t{-1}) !=
      obj["metadata"].value("generation", int64_t{0}))
    return false;
  return condition(obj, "Ready", "status") == "True";
}

int waitReady(HttpClient& client, const std::string& path, const std::string& what, int seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::string last_reason;
  while (std::chrono::steady_clock::now() < deadline) {
    auto res = client.request("GET", path);
    if (res.isOk() && res->status == 200) {
      json obj = json::parse(res->body, nullptr, false);
      if (obj.is_object() && isReady(obj)) {
        std::string url = str(obj, {"status", "url"});
        std::cout << what << " is ready" << (url.empty() ? "" : " at URL:\n" + url) << "\n";
        return 0;
      }
      if (obj.is_object() && condition(obj, "Ready", "status") == "False") {
        std::cerr << "Error: " << what << " failed: " << condition(obj, "Ready", "reason") << ": "
                  << condition(obj, "Ready", "message") << "\n";
        return 1;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::cerr << "Error: timed out after " << seconds << "s waiting for " << what << " to become ready\n";
  return 1;
}

int cmdApply(HttpClient& client, const Options& opt) {
  if (opt.files.empty()) {
    std::cerr << "Error: apply needs -f FILE\n";
    return 2;
  }
  int rc = 0;
  for (const auto& file : opt.files) {
    auto text = readInput(file);
    if (!text.isOk()) return reportStatus(text.status());
    auto docs = api::parseYamlDocuments(*text);
    if (!docs.isOk()) return reportStatus(docs.status().annotate(file));
    for (auto& doc : *docs) {
      if (doc.is_null()) continue;
      if (!doc.is_object()) {
        std::cerr << "Error: " << file << ": a document is not an object\n";
        return 1;
      }
      const api::ResourceInfo* r = findServingKind(doc.value("kind", ""));
      if (!r || doc.value("apiVersion", "") != r->apiVersion()) {
        std::cerr << "Error: " << file << ": unsupported apiVersion/kind \"" << doc.value("apiVersion", "")
                  << "/" << doc.value("kind", "")
                  << "\" (knap applies serving.knative.dev/v1 Service, Configuration, Route and "
                     "serving.knative.dev/v1beta1 DomainMapping)\n";
        return 1;
      }
      std::string ns = doc.contains("metadata") ? doc["metadata"].value("namespace", opt.ns) : opt.ns;
      std::string name = doc.contains("metadata") ? doc["metadata"].value("name", "") : "";
      if (name.empty()) {
        std::cerr << "Error: " << file << ": metadata.name is required for apply\n";
        return 1;
      }
      std::string path = collectionPath(*r, ns, false) + "/" + name;
      auto before = client.request("GET", path);
      if (!before.isOk()) return reportStatus(before.status());
      std::string old_rv;
      if (before->status == 200)
        old_rv = str(json::parse(before->body, nullptr, false), {"metadata", "resourceVersion"});
      auto res = client.request("PATCH", path + "?fieldManager=knap&fieldValidation=Strict&force=true",
                                doc.dump(), "application/apply-patch+yaml");
      if (!res.isOk()) return reportStatus(res.status());
      if (res->status >= 300) {
        rc = reportHttpError(*res, "apply " + r->kind + " \"" + name + "\"");
        continue;
      }
      json obj = json::parse(res->body, nullptr, false);
      std::string verb = before->status == 404                                 ? "created"
                         : str(obj, {"metadata", "resourceVersion"}) == old_rv ? "unchanged"
                                                                               : "configured";
      std::cout << r->kind << " '" << name << "' " << verb << " in namespace '" << ns << "'.\n";
      if (opt.wait && r->kind != "Revision") {
        int w = waitReady(client, path, r->kind + " '" + name + "'", opt.wait_seconds);
        if (w != 0) rc = w;
      }
    }
  }
  return rc;
}

int cmdDelete(HttpClient& client, const Options& opt) {
  if (opt.args.size() < 2) {
    std::cerr << "Error: delete needs a kind and a name, e.g. knap delete service hello\n";
    return 2;
  }
  const api::ResourceInfo* r = findServingKind(opt.args[0]);
  if (!r) {
    std::cerr << "Error: unknown kind \"" << opt.args[0] << "\"\n";
    return 2;
  }
  int rc = 0;
  for (size_t i = 1; i < opt.args.size(); ++i) {
    auto res = client.request("DELETE", collectionPath(*r, opt.ns, false) + "/" + opt.args[i],
                              R"({"propagationPolicy":"Background"})", "application/json");
    if (!res.isOk()) return reportStatus(res.status());
    if (res->status >= 300) {
      rc = reportHttpError(*res, "delete " + r->singular + " \"" + opt.args[i] + "\"");
      continue;
    }
    std::cout << r->kind << " '" << opt.args[i] << "' successfully deleted in namespace '" << opt.ns
              << "'.\n";
  }
  return rc;
}

// `knap revision restart NAME...`: POST .../revisions/NAME/restart (a rolling
// restart in knapd's pod runner; docs/console.md). At zero there is nothing
// to restart: said, and not an error.
int cmdRestart(HttpClient& client, const Options& opt) {
  if (opt.args.size() < 2) {
    std::cerr << "Error: restart needs a revision name, e.g. knap revision restart hello-00001\n";
    return 2;
  }
  int rc = 0;
  for (size_t i = 1; i < opt.args.size(); ++i) {
    const std::string& name = opt.args[i];
    auto res =
        client.request("POST", "/apis/knap.dev/v1/namespaces/" + opt.ns + "/revisions/" + name + "/restart");
    if (!res.isOk()) return reportStatus(res.status());
    if (res->status >= 300) {
      rc = reportHttpError(*res, "restart revision \"" + name + "\"");
      continue;
    }
    json body = json::parse(res->body, nullptr, false);
    std::string message = body.is_object() ? body.value("message", "") : "";
    std::cout << "Revision '" << name << "': " << (message.empty() ? res->body : message) << "\n";
    if (body.is_object() && body.contains("pods") && body["pods"].is_array()) {
      for (const auto& p : body["pods"]) {
        if (p.is_string()) std::cout << "  replacing pod " << p.get<std::string>() << "\n";
      }
    }
  }
  return rc;
}

void printConditions(const json& obj, const std::string& indent) {
  if (!obj.contains("status") || !obj["status"].contains("conditions")) return;
  Table t;
  t.header({"OK", "TYPE", "AGE", "REASON", "MESSAGE"});
  for (const auto& c : obj["status"]["conditions"]) {
    std::string s = c.value("status", "");
    std::string mark = s == "True" ? "++" : s == "False" ? "!!" : "??";
    WallTime when;
    std::string a;
    if (parseRfc3339(c.value("lastTransitionTime", ""), &when)) {
      json fake = {{"metadata", {{"creationTimestamp", c.value("lastTransitionTime", "")}}}};
      a = age(fake);
    }
    t.row({mark, c.value("type", ""), a, c.value("reason", ""), c.value("message", "")});
  }
  std::istringstream lines(t.render());
  for (std::string line; std::getline(lines, line);) std::cout << indent << line << "\n";
}

// The object's Events, oldest first, selected as kubectl describe does (by
// involvedObject name, kind and uid).
void printEvents(HttpClient& client, const std::string& ns, const std::string& kind, const std::string& name,
                 const std::string& uid) {
  std::string selector = "involvedObject.name%3D" + name + "%2CinvolvedObject.kind%3D" + kind;
  if (!uid.empty()) selector += "%2CinvolvedObject.uid%3D" + uid;
  auto res = client.request("GET", "/api/v1/namespaces/" + ns + "/events?fieldSelector=" + selector);
  json list = res.isOk() && res->status == 200 ? json::parse(res->body, nullptr, false) : json();
  const json items = list.is_object() ? list.value("items", json::array()) : json::array();
  if (!items.is_array() || items.empty()) {
    std::cout << "\nEvents: <none>\n";
    return;
  }
  std::cout << "\nEvents:\n";
  Table t;
  t.header({"TYPE", "REASON", "AGE", "FROM", "COUNT", "MESSAGE"});
  for (const auto& e : items) {
    json seen = {{"metadata", {{"creationTimestamp", e.value("lastTimestamp", "")}}}};
    t.row({e.value("type", ""), e.value("reason", ""), age(seen), str(e, {"source", "component"}),
           std::to_string(e.value("count", 1)), e.value("message", "")});
  }
  std::istringstream lines(t.render());
  for (std::string line; std::getline(lines, line);) std::cout << "  " << line << "\n";
}

int cmdDescribe(HttpClient& client, const Options& opt) {
  if (opt.args.size() < 2) {
    std::cerr << "Error: describe needs a kind and a name, e.g. knap describe service hello\n";
    return 2;
  }
  const api::ResourceInfo* r = findServingKind(opt.args[0]);
  if (!r) {
    std::cerr << "Error: unknown kind \"" << opt.args[0] << "\"\n";
    return 2;
  }
  const std::string& name = opt.args[1];
  auto res = client.request("GET", collectionPath(*r, opt.ns, false) + "/" + name);
  if (!res.isOk()) return reportStatus(res.status());
  if (res->status != 200) return reportHttpError(*res, "describe " + r->singular + " \"" + name + "\"");
  json obj = json::parse(res->body);
  if (opt.output == "yaml") {
    std::cout << api::toYaml(obj);
    return 0;
  }
  std::cout << "Name:       " << name << "\n";
  std::cout << "Namespace:  " << opt.ns << "\n";
  std::cout << "Age:        " << age(obj) << "\n";
  if (!str(obj, {"status", "url"}).empty())
    std::cout << "URL:        " << str(obj, {"status", "url"}) << "\n";
  if (!str(obj, {"status", "address", "url"}).empty())
    std::cout << "Address:    " << str(obj, {"status", "address", "url"}) << "\n";
  const json* tmpl = nullptr;
  if (obj.contains("spec") && obj["spec"].contains("template")) tmpl = &obj["spec"]["template"];
  if (tmpl && tmpl->contains("spec") && (*tmpl)["spec"].contains("containers")) {
    for (const auto& c : (*tmpl)["spec"]["containers"])
      std::cout << "Image:      " << c.value("image", "") << "\n";
  }
  if (r->kind == "Revision" && obj.contains("spec") && obj["spec"].contains("containers") &&
      obj["spec"]["containers"].is_array()) {
    for (const auto& c : obj["spec"]["containers"])
      std::cout << "Image:      " << c.value("image", "") << "\n";
    // The digest the image was pinned to (resolved once, when the Revision was created).
    const json& cs =
        obj.contains("status") ? obj["status"].value("containerStatuses", json::array()) : json::array();
    if (cs.is_array() && !cs.empty() && cs[0].is_object() && !cs[0].value("imageDigest", "").empty())
      std::cout << "Digest:     " << cs[0].value("imageDigest", "") << "\n";
  }
  // Revisions of this service (or configuration), with their traffic share.
  std::string selector;
  if (r->kind == "Service")
    selector = std::string(api::labels::kService) + "%3D" + name;
  else if (r->kind == "Configuration")
    selector = std::string(api::labels::kConfiguration) + "%3D" + name;
  if (obj.contains("status") && obj["status"].contains("traffic")) {
    std::cout << "\nTraffic:\n";
    for (const auto& tt : obj["status"]["traffic"]) {
      std::string line = "  " + std::to_string(tt.value("percent", 0)) + "%  " + tt.value("revisionName", "");
      if (tt.value("latestRevision", false)) line += " (latest)";
      if (tt.contains("tag")) line += "  #" + tt["tag"].get<std::string>() + " " + tt.value("url", "");
      std::cout << line << "\n";
    }
  }
  std::string latest;
  if (!selector.empty()) {
    auto revs = client.request(
        "GET", collectionPath(*api::findResource("revisions"), opt.ns, false) + "?labelSelector=" + selector);
    if (revs.isOk() && revs->status == 200) {
      json list = json::parse(revs->body, nullptr, false);
      if (list.is_object() && !list.value("items", json::array()).empty()) {
        std::cout << "\nRevisions:\n";
        Table t;
        t.header({"NAME", "GENERATION", "AGE", "READY", "REASON", "IMAGE"});
        for (const auto& rev : list["items"]) {
          std::string img;
          if (rev.contains("spec") && rev["spec"].contains("containers") &&
              !rev["spec"]["containers"].empty())
            img = rev["spec"]["containers"][0].value("image", "");
          t.row({str(rev, {"metadata", "name"}),
                 str(rev, {"metadata", "labels", api::labels::kConfigurationGeneration}), age(rev),
                 condition(rev, "Ready", "status"), condition(rev, "Ready", "reason"), img});
        }
        std::istringstream lines(t.render());
        for (std::string line; std::getline(lines, line);) std::cout << "  " << line << "\n";
      }
    }
    latest = str(obj, {"status", "latestReadyRevisionName"});
    if (latest.empty()) latest = str(obj, {"status", "latestCreatedRevisionName"});
  } else if (r->kind == "Revision") {
    latest = name;
  }
  if (!latest.empty()) {
    auto eff = client.request(
        "GET", "/apis/knap.dev/v1/namespaces/" + opt.ns + "/revisions/" + latest + "/autoscaling");
    if (eff.isOk() && eff->status == 200) {
      json e = json::parse(eff->body, nullptr, false);
      if (e.is_object()) {
        std::cout << "\nAutoscaling (" << latest << "):\n";
        Table t;
        t.header({"KEY", "VALUE", "SOURCE"});
        for (const auto& item : e.value("items", json::array()))
          t.row({item.value("key", ""), item.value("value", ""), item.value("source", "")});
        std::istringstream lines(t.render());
        for (std::string line; std::getline(lines, line);) std::cout << "  " << line << "\n";
      }
    }
  }
  std::cout << "\nConditions:\n";
  printConditions(obj, "  ");
  printEvents(client, opt.ns, r->kind, name, str(obj, {"metadata", "uid"}));
  return 0;
}

}  // namespace

int run(int argc, char** argv) {
  Options opt;
  std::vector<std::string> raw(argv + 1, argv + argc);
  // Local commands with their own flags (`-f` means follow for logs).
  if (!raw.empty() && raw[0] == "logs") return cmdLogs({raw.begin() + 1, raw.end()});
  {
    // `knap [--server URL] image pull ...` (--server is irrelevant to a pull).
    size_t i = 0;
    while (i + 1 < raw.size() && (raw[i] == "--server" || raw[i] == "--kubeconfig" || raw[i] == "--token"))
      i += 2;
    if (i + 1 < raw.size() && raw[i] == "image" && raw[i + 1] == "pull") {
      return cmdImagePull({raw.begin() + static_cast<long>(i) + 2, raw.end()});
    }
  }
  if (!raw.empty() && raw[0] == "image") return cmdImage({raw.begin() + 1, raw.end()});
  std::string command;
  for (size_t i = 0; i < raw.size(); ++i) {
    const std::string& a = raw[i];
    auto next = [&](const char* flag) -> std::string {
      if (i + 1 >= raw.size()) {
        std::cerr << "Error: " << flag << " needs a value\n";
        std::exit(2);
      }
      return raw[++i];
    };
    if (a == "-h" || a == "--help" || a == "help") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--server")
      opt.server = next("--server");
    else if (a == "--kubeconfig")
      opt.kubeconfig = next("--kubeconfig");
    else if (a == "--token")
      opt.token = next("--token");
    else if (a == "-n" || a == "--namespace")
      opt.ns = next("--namespace");
    else if (a == "-A" || a == "--all-namespaces")
      opt.all_namespaces = true;
    else if (a == "-o" || a == "--output")
      opt.output = next("--output");
    else if (a.rfind("-o", 0) == 0 && a.size() > 2)
      opt.output = a.substr(2);
    else if (a == "-f" || a == "--filename")
      opt.files.push_back(next("-f"));
    else if (a == "--wait")
      opt.wait = true;
    else if (a == "--timeout")
      opt.wait_seconds = std::atoi(next("--timeout").c_str());
    else if (!a.empty() && a[0] == '-') {
      std::cerr << "Error: unknown flag " << a << "\n\n" << kUsage;
      return 2;
    } else if (command.empty())
      command = a;
    else
      opt.args.push_back(a);
  }
  if (command.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  std::string server;
  Credentials creds;
  if (Status st = resolveServer(opt, &server, &creds); !st.isOk()) return reportStatus(st);
  HttpClient client(server, creds);
  if (command == "apply") return cmdApply(client, opt);
  if (command == "get" || command == "list") return cmdGet(client, opt);
  if (command == "describe") return cmdDescribe(client, opt);
  if (command == "delete") return cmdDelete(client, opt);
  // kn style: `knap service list`, `knap revision list`
  if (findServingKind(command) && !opt.args.empty()) {
    std::string verb = opt.args[0];
    opt.args[0] = command;
    if (verb == "list" || verb == "get") return cmdGet(client, opt);
    if (verb == "describe") return cmdDescribe(client, opt);
    if (verb == "delete") return cmdDelete(client, opt);
    if (verb == "restart" && findServingKind(command)->kind == "Revision") return cmdRestart(client, opt);
    if (verb == "restart") {
      std::cerr
          << "Error: only revisions restart (knap revision restart NAME); to redeploy a service, change its "
             "template (a new Revision)\n";
      return 2;
    }
  }
  std::cerr << "Error: unknown command \"" << command << "\"\n\n" << kUsage;
  return 2;
}

}  // namespace knap::cli

int main(int argc, char** argv) {
  return knap::cli::run(argc, argv);
}
