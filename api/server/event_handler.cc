#include "api/server/event_handler.h"

#include <algorithm>
#include <cctype>

#include "api/server/k8s_status.h"
#include "api/server/selectors.h"
#include "api/server/tables.h"
#include "common/json_path.h"
#include "events/events.h"

namespace knap::api {

using nlohmann::json;

namespace {

HttpResponse reply(int code, const json& body) {
  HttpResponse r;
  r.code = code;
  r.body = toJsonText(body);
  return r;
}

HttpResponse replyError(const ApiError& e) {
  return reply(e.code, e.body);
}

json tableOf(const std::vector<json>& events, WallTime now, IncludeObject include, const std::string& rv) {
  auto col = [](const char* name, const char* description, int priority = 0) {
    return json{{"name", name},
                {"type", "string"},
                {"format", ""},
                {"description", description},
                {"priority", priority}};
  };
  json columns =
      json::array({col("Last Seen", "Time since the event was last seen"), col("Type", "Normal or Warning"),
                   col("Reason", "Why the event happened"), col("Object", "The object the event is about"),
                   col("Message", "What happened"), col("Source", "Who reported it", 1),
                   col("Count", "How often it happened", 1), col("Name", "The event's name", 1)});
  json rows = json::array();
  for (const json& e : events) {
    std::string kind = stringAt(e, {"involvedObject", "kind"});
    for (char& c : kind) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    json row = {{"cells",
                 {humanDuration(now - events::lastSeen(e)), stringAt(e, "type"), stringAt(e, "reason"),
                  kind + "/" + stringAt(e, {"involvedObject", "name"}), stringAt(e, "message"),
                  stringAt(e, {"source", "component"}), std::to_string(e.value("count", 1)),
                  stringAt(e, {"metadata", "name"})}}};
    if (include == IncludeObject::kObject) {
      row["object"] = e;
    } else if (include == IncludeObject::kMetadata) {
      row["object"] = {{"kind", "PartialObjectMetadata"},
                       {"apiVersion", "meta.k8s.io/v1"},
                       {"metadata", e.value("metadata", json::object())}};
    }
    rows.push_back(std::move(row));
  }
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", {{"resourceVersion", rv}}},
          {"columnDefinitions", columns},
          {"rows", rows}};
}

}  // namespace

std::string humanDuration(Duration d) {
  int64_t s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  if (s < 0) s = 0;
  auto n = [](int64_t v) { return std::to_string(v); };
  if (s < 120) return n(s) + "s";
  int64_t m = s / 60;
  if (s < 600) return s % 60 ? n(m) + "m" + n(s % 60) + "s" : n(m) + "m";
  int64_t h = m / 60;
  if (m < 180) return n(m) + "m";
  if (h < 8) return m % 60 ? n(h) + "h" + n(m % 60) + "m" : n(h) + "h";
  if (h < 48) return n(h) + "h";
  int64_t days = h / 24;
  if (h < 24 * 8) return h % 24 ? n(days) + "d" + n(h % 24) + "h" : n(days) + "d";
  return n(days) + "d";
}

json eventsApiResource() {
  return {{"name", "events"},
          {"singularName", "event"},
          {"namespaced", true},
          {"kind", "Event"},
          {"verbs", json::array({"get", "list"})},
          {"shortNames", json::array({"ev"})}};
}

std::optional<HttpResponse> handleEventsRequest(store::Store& store, const TimeSource& clock, Duration ttl,
                                                const HttpRequest& req, const std::vector<std::string>& s,
                                                const std::map<std::string, std::string>& query) {
  // Which form, and the rest of the path after the group/version.
  bool v1_group;
  size_t base;
  if (s.size() >= 3 && s[0] == "api" && s[1] == "v1") {
    v1_group = false;
    base = 2;
  } else if (s.size() >= 4 && s[0] == "apis" && s[1] == kEventsGroup && s[2] == "v1") {
    v1_group = true;
    base = 3;
  } else {
    return std::nullopt;
  }
  std::string ns, name;
  size_t n = s.size() - base;
  if (n == 1 && s[base] == "events") {
  } else if ((n == 3 || n == 4) && s[base] == "namespaces" && s[base + 2] == "events") {
    ns = s[base + 1];
    if (n == 4) name = s[base + 3];
  } else {
    return std::nullopt;
  }
  if (req.method != "GET" && req.method != "HEAD") {
    return replyError(makeApiError(405, "MethodNotAllowed",
                                   "the server does not allow this method on the requested resource (" +
                                       req.method + "): knapd's Events are read-only",
                                   json::object()));
  }
  auto q = [&](const char* k) {
    auto it = query.find(k);
    return it == query.end() ? std::string() : it->second;
  };
  auto present = [&](json e) { return v1_group ? events::toEventsV1(e) : e; };
  WallTime now = clock.now();
  if (!name.empty()) {
    auto got = store.get({events::kStoreKind, ns, name});
    if (!got.isOk() || events::expired(got->body, now, ttl)) {
      return replyError(makeApiError(404, "NotFound", "events \"" + name + "\" not found",
                                     {{"name", name}, {"kind", "events"}}));
    }
    return reply(200, present(got->body));
  }
  auto labels = LabelSelector::parse(q("labelSelector"));
  if (!labels.isOk()) return replyError(badRequestError(labels.status().message()));
  auto fields = FieldSelector::parse(q("fieldSelector"),
                                     v1_group ? events::eventsV1FieldLabels() : events::coreFieldLabels());
  if (!fields.isOk()) return replyError(badRequestError(fields.status().message()));
  int64_t limit = 0;
  try {
    if (!q("limit").empty()) limit = std::stoll(q("limit"));
  } catch (const std::exception&) {
    return replyError(badRequestError("limit: invalid value \"" + q("limit") + "\""));
  }
  int64_t rv = store.currentResourceVersion();
  auto listed = store.list(events::kStoreKind, ns);
  if (!listed.isOk()) return replyError(errorFromStatus(listed.status(), nullptr, ""));
  std::vector<json> items;
  for (store::Object& o : *listed) {
    if (events::expired(o.body, now, ttl)) continue;
    json l = o.body.contains("metadata") ? o.body["metadata"].value("labels", json()) : json();
    if (!labels->matches(l) || !fields->matches(o.body)) continue;
    items.push_back(std::move(o.body));
  }
  // Oldest first, as kubectl prints them (by last seen, then name).
  std::stable_sort(items.begin(), items.end(),
                   [](const json& a, const json& b) { return events::lastSeen(a) < events::lastSeen(b); });
  if (limit > 0 && static_cast<int64_t>(items.size()) > limit) items.resize(static_cast<size_t>(limit));
  auto accept = req.accept;
  if (acceptsTable(accept)) {
    std::vector<json> shown;
    for (json& e : items) shown.push_back(e);
    auto it = query.find("includeObject");
    return reply(200, tableOf(shown, now, parseIncludeObject(it == query.end() ? "" : it->second),
                              std::to_string(rv)));
  }
  json list = {{"kind", "EventList"},
               {"apiVersion", v1_group ? "events.k8s.io/v1" : "v1"},
               {"metadata", {{"resourceVersion", std::to_string(rv)}}},
               {"items", json::array()}};
  for (json& e : items) list["items"].push_back(present(std::move(e)));
  return reply(200, list);
}

}  // namespace knap::api
