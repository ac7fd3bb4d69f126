#include "controller/reconcilers.h"

#include <optional>
#include <set>

#include "api/naming.h"
#include "api/resources.h"
#include "common/json_path.h"
#include "common/log.h"
#include "controller/domain_mappings.h"
#include "controller/object_util.h"
#include "controller/revision_gc.h"
#include "controller/route_urls.h"

namespace knap::controller {

using nlohmann::json;
using store::Key;
using store::Object;
namespace labels = api::labels;
namespace annotations = api::annotations;

namespace {

constexpr const char* kReady = "Ready";

bool isNotFound(const Status& s) {
  return s.code() == Code::kNotFound;
}

const json& statusOf(const json& obj) {
  static const json kEmpty = json::object();
  if (!obj.is_object()) return kEmpty;
  auto it = obj.find("status");
  if (it == obj.end() || !it->is_object()) return kEmpty;
  return *it;
}

const json& specAt(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object() || !obj.contains("spec") || !obj["spec"].is_object()) return kNull;
  auto it = obj["spec"].find(key);
  return it == obj["spec"].end() ? kNull : *it;
}

// status.observedGeneration == metadata.generation: the controller of `obj`
// has seen its latest spec.
bool isUpToDate(const json& obj) {
  const json& st = statusOf(obj);
  auto it = st.find("observedGeneration");
  return it != st.end() && it->is_number_integer() && it->get<int64_t>() == generationOf(obj);
}

std::string readyStatus(const json& obj) {
  return conditionStateOf(statusOf(obj), kReady).status;
}

int64_t configGenerationLabel(const json& rev) {
  std::string v = labelOf(rev, labels::kConfigurationGeneration);
  try {
    return v.empty() ? 0 : std::stoll(v);
  } catch (...) {
    return 0;
  }
}

std::string quote(const std::string& s) {
  return "\"" + s + "\"";
}

WallTime parseTimeOr(const std::string& s, WallTime fallback) {
  WallTime t;
  return parseRfc3339(s, &t) ? t : fallback;
}

json newObject(const char* kind, const std::string& ns, const std::string& name) {
  return json{{"apiVersion", std::string(api::kApiVersion)},
              {"kind", kind},
              {"metadata", {{"name", name}, {"namespace", ns}}}};
}

// Creates `body` under `key`; a concurrent creator turns into kConflict so the
// caller's retry loop re-reads and adopts the object.
StatusOr<Object> createOrConflict(store::Store& store, const Key& key, json body) {
  auto created = store.create(key, std::move(body));
  if (!created.isOk() && created.status().code() == Code::kAlreadyExists) {
    return conflict(key.toString() + " appeared concurrently");
  }
  return created;
}

// Service status: does the Route's status.traffic equal its spec with
// configuration targets resolved to the configuration's latestReadyRevisionName
// (url and latestRevision ignored)? Knative's checkRoutesNotReady.
bool trafficMigrated(const json& route, const std::string& config_name, const std::string& latest_ready) {
  const json& spec = specAt(route, "traffic");
  const json& st = statusOf(route);
  json empty = json::array();
  const json& want = spec.is_array() ? spec : empty;
  const json& got = st.contains("traffic") && st["traffic"].is_array() ? st["traffic"] : empty;
  if (want.size() != got.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    std::string want_rev = stringAt(want[i], "revisionName");
    if (stringAt(want[i], "configurationName") == config_name) want_rev = latest_ready;
    if (want_rev != stringAt(got[i], "revisionName")) return false;
    if (stringAt(want[i], "tag") != stringAt(got[i], "tag")) return false;
    if (want[i].value("percent", json()) != got[i].value("percent", json())) return false;
  }
  return true;
}

}  // namespace

Reconcilers::Reconcilers(store::Store& store, const ObjectCache& cache, RevisionBackend& backend,
                         TimeSource& clock, const Config& config)
    : store_(store), cache_(cache), backend_(backend), clock_(clock), config_(config) {}

StatusOr<Object> Reconcilers::writeIfChanged(const Object& current, const json& desired) {
  if (sameIgnoringResourceVersion(current.body, desired)) return current;
  return store_.update(current.key, desired, current.resource_version);
}

// ---------------------------------------------------------------- Service

json Reconcilers::desiredConfiguration(const json& svc, const json* existing) const {
  const std::string name = metaString(svc, "name");
  json out = existing != nullptr ? *existing : newObject("Configuration", metaString(svc, "namespace"), name);
  auto lbls = labelsOf(svc);
  lbls[labels::kService] = name;
  lbls[labels::kServiceUid] = metaString(svc, "uid");
  auto anns = annotationsOf(svc);
  anns.erase(annotations::kLastApplied);
  anns.erase(annotations::kRolloutDuration);
  // serving.knative.dev/routes is the Route reconciler's to keep; seed it on
  // creation with the Route this Service is about to create.
  anns.erase(annotations::kRoutes);
  std::string routes = existing != nullptr ? annotationOf(*existing, annotations::kRoutes) : name;
  if (!routes.empty()) anns[annotations::kRoutes] = routes;
  setStringMap(out, "labels", lbls);
  setStringMap(out, "annotations", anns);
  out["metadata"]["ownerReferences"] = json::array({controllerOwnerRef(svc)});
  const json& tmpl = specAt(svc, "template");
  out["spec"] = json{{"template", tmpl.is_null() ? json::object() : tmpl}};
  return out;
}

json Reconcilers::desiredRoute(const json& svc, const json* existing) const {
  const std::string name = metaString(svc, "name");
  json out = existing != nullptr ? *existing : newObject("Route", metaString(svc, "namespace"), name);
  auto lbls = labelsOf(svc);
  lbls[labels::kService] = name;
  auto anns = annotationsOf(svc);
  anns.erase(annotations::kLastApplied);
  setStringMap(out, "labels", lbls);
  setStringMap(out, "annotations", anns);
  out["metadata"]["ownerReferences"] = json::array({controllerOwnerRef(svc)});
  json traffic = json::array();
  const json& spec_traffic = specAt(svc, "traffic");
  if (spec_traffic.is_array() && !spec_traffic.empty()) {
    for (const json& t : spec_traffic) {
      json entry = t;
      if (stringAt(t, "revisionName").empty()) entry["configurationName"] = name;
      traffic.push_back(entry);
    }
  } else {
    traffic.push_back(json{{"configurationName", name}, {"percent", 100}, {"latestRevision", true}});
  }
  out["spec"] = json{{"traffic", traffic}};
  return out;
}

Status Reconcilers::reconcileService(const Key& key) {
  auto got = store_.get(key);
  if (!got.isOk()) return isNotFound(got.status()) ? Status::ok() : got.status();
  const Object svc = std::move(got).value();
  const json& s = svc.body;

  // Children: same name as the Service, controlled by it.
  auto reconcileChild = [&](const char* kind, bool* not_owned) -> StatusOr<Object> {
    Key child_key{kind, key.ns, key.name};
    bool is_config = std::string(kind) == "Configuration";
    auto existing = store_.get(child_key);
    if (existing.isOk()) {
      if (!isControlledBy(existing->body, s)) {
        *not_owned = true;
        return existing;
      }
      json desired = is_config ? desiredConfiguration(s, &existing->body) : desiredRoute(s, &existing->body);
      return writeIfChanged(existing.value(), desired);
    }
    if (!isNotFound(existing.status())) return existing.status();
    json desired = is_config ? desiredConfiguration(s, nullptr) : desiredRoute(s, nullptr);
    LOG(INFO) << "controller: creating " << child_key.toString();
    return createOrConflict(store_, child_key, desired);
  };
  bool config_not_owned = false, route_not_owned = false;
  KNAP_ASSIGN_OR_RETURN(Object config, reconcileChild("Configuration", &config_not_owned));
  KNAP_ASSIGN_OR_RETURN(Object route, reconcileChild("Route", &route_not_owned));

  const json& old_status = statusOf(s);
  json st = json::object();
  ConditionState configs_ready, routes_ready;
  std::string latest_ready;
  if (config_not_owned) {
    configs_ready = conditionFalse(
        "NotOwned", "There is an existing Configuration " + quote(key.name) + " that we do not own.");
  } else {
    const json& cs = statusOf(config.body);
    for (const char* f : {"latestCreatedRevisionName", "latestReadyRevisionName"}) {
      if (!stringAt(cs, f).empty()) st[f] = stringAt(cs, f);
    }
    latest_ready = stringAt(cs, "latestReadyRevisionName");
    configs_ready = isUpToDate(config.body)
                        ? conditionStateOf(cs, kReady)
                        : conditionUnknown("OutOfDate",
                                           "The Configuration is still working to reflect the latest desired "
                                           "specification.");
  }
  if (route_not_owned) {
    routes_ready =
        conditionFalse("NotOwned", "There is an existing Route " + quote(key.name) + " that we do not own.");
  } else if (!isUpToDate(route.body)) {
    routes_ready = conditionUnknown(
        "OutOfDate", "The Route is still working to reflect the latest desired specification.");
    for (const char* f : {"url", "address", "traffic"}) {
      if (old_status.contains(f)) st[f] = old_status[f];
    }
  } else {
    const json& rs = statusOf(route.body);
    for (const char* f : {"url", "address", "traffic"}) {
      if (rs.contains(f)) st[f] = rs[f];
    }
    routes_ready = conditionStateOf(rs, kReady);
    if (routes_ready.status != "False" && !config_not_owned &&
        !trafficMigrated(route.body, key.name, latest_ready)) {
      routes_ready =
          conditionUnknown("TrafficNotMigrated", "Traffic is not yet migrated to the latest revision.");
    }
  }
  // A bring-your-own revision name already used by another configuration or
  // generation can never be created (KNATIVE-CONTRACT §2.3).
  if (!config_not_owned) {
    std::string byo = metaString(specAt(config.body, "template"), "name");
    if (!byo.empty()) {
      auto rev = store_.get(Key{"Revision", key.ns, byo});
      if (rev.isOk() && (labelOf(rev->body, labels::kConfiguration) != key.name ||
                         configGenerationLabel(rev->body) != generationOf(config.body))) {
        routes_ready = conditionFalse("RevisionNameTaken", "The revision name " + quote(byo) + " is taken");
      }
    }
  }

  ConditionsBuilder cb(old_status, clock_.now());
  cb.set("ConfigurationsReady", configs_ready);
  cb.set("RoutesReady", routes_ready);
  cb.set(kReady, ConditionsBuilder::aggregate({configs_ready, routes_ready}));
  st["observedGeneration"] = generationOf(s);
  st["conditions"] = cb.build();
  json desired = s;
  desired["status"] = st;
  return writeIfChanged(svc, desired).status();
}

// ---------------------------------------------------------- Configuration

json Reconcilers::makeRevision(const json& config, const std::string& name) const {
  const json& tmpl_ref = specAt(config, "template");
  json tmpl = tmpl_ref.is_object() ? tmpl_ref : json::object();
  json rev = newObject("Revision", metaString(config, "namespace"), name);
  json md = tmpl.contains("metadata") && tmpl["metadata"].is_object() ? tmpl["metadata"] : json::object();
  md.erase("generateName");
  md["name"] = name;
  md["namespace"] = metaString(config, "namespace");
  rev["metadata"] = md;

  auto lbls = labelsOf(rev);
  lbls[labels::kConfiguration] = metaString(config, "name");
  lbls[labels::kConfigurationUid] = metaString(config, "uid");
  lbls[labels::kConfigurationGeneration] = std::to_string(generationOf(config));
  for (const char* k : {labels::kService, labels::kServiceUid}) {
    std::string v = labelOf(config, k);
    if (!v.empty()) lbls[k] = v;
  }
  lbls[labels::kRoutingState] = "pending";
  auto anns = annotationsOf(rev);
  std::string modifier = annotationOf(config, annotations::kLastModifier);
  if (!modifier.empty()) anns[annotations::kCreator] = modifier;
  std::string rollout = annotationOf(config, annotations::kRolloutDuration);
  if (!rollout.empty()) anns[annotations::kRolloutDuration] = rollout;
  anns[annotations::kRoutingStateModified] = formatRfc3339(clock_.now());
  setStringMap(rev, "labels", lbls);
  setStringMap(rev, "annotations", anns);
  rev["metadata"]["ownerReferences"] = json::array({controllerOwnerRef(config)});
  rev["spec"] = tmpl.contains("spec") ? tmpl["spec"] : json::object();
  return rev;
}

Status Reconcilers::reconcileConfiguration(const Key& key) {
  auto got = store_.get(key);
  if (!got.isOk()) return isNotFound(got.status()) ? Status::ok() : got.status();
  const Object cfg = std::move(got).value();
  const json& c = cfg.body;
  const int64_t gen = generationOf(c);
  const std::string byo = metaString(specAt(c, "template"), "name");
  const std::string rev_name = byo.empty() ? api::revisionName(key.name, gen) : byo;

  std::vector<Object> mine;
  for (Object& r : cache_.revisionsOf(key.ns, key.name)) {
    if (isControlledBy(r.body, c)) mine.push_back(std::move(r));
  }

  // First, the revision this generation should have (Knative looks it up by
  // label, then by name; a name held by anything else is a failure).
  std::optional<size_t> lcr;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (configGenerationLabel(mine[i].body) == gen && (!lcr || mine[i].key.name == rev_name)) lcr = i;
  }
  std::string create_error;
  if (!lcr) {
    std::optional<Object> clash = cache_.get(Key{"Revision", key.ns, rev_name});
    if (clash) {
      std::string owner = labelOf(clash->body, labels::kConfiguration);
      create_error =
          "revisions.serving.knative.dev " + quote(rev_name) + " already exists" +
          (owner == key.name ? " for generation " + std::to_string(configGenerationLabel(clash->body))
                             : " and belongs to Configuration " + quote(owner));
    } else {
      LOG(INFO) << "controller: creating Revision " << key.ns << "/" << rev_name << " for generation " << gen;
      KNAP_ASSIGN_OR_RETURN(Object created, createOrConflict(store_, Key{"Revision", key.ns, rev_name},
                                                             makeRevision(c, rev_name)));
      mine.push_back(std::move(created));
      lcr = mine.size() - 1;
    }
  }

  const json& old_status = statusOf(c);
  std::string latest_created = stringAt(old_status, "latestCreatedRevisionName");
  std::string latest_ready = stringAt(old_status, "latestReadyRevisionName");
  if (lcr) latest_created = mine[*lcr].key.name;

  // latestReadyRevisionName only moves forward: to the newest ready revision
  // whose generation is >= the current one's. If the current one was deleted
  // only the latest created revision may take its place.
  int64_t floor_gen = 0;
  bool ready_deleted = false;
  if (!latest_ready.empty()) {
    auto it =
        std::find_if(mine.begin(), mine.end(), [&](const Object& r) { return r.key.name == latest_ready; });
    if (it == mine.end()) {
      ready_deleted = true;
    } else {
      floor_gen = configGenerationLabel(it->body);
    }
  }
  const Object* best = nullptr;
  for (size_t i = 0; i < mine.size(); ++i) {
    const Object& r = mine[i];
    if (readyStatus(r.body) != "True") continue;
    int64_t g = configGenerationLabel(r.body);
    if (g > gen || g < floor_gen) continue;
    if (ready_deleted && (!lcr || i != *lcr)) continue;
    if (best == nullptr || g > configGenerationLabel(best->body) ||
        (g == configGenerationLabel(best->body) && r.key.name == rev_name)) {
      best = &r;
    }
  }
  if (best != nullptr) {
    latest_ready = best->key.name;
    ready_deleted = false;
  }

  ConditionState ready;
  std::string lcr_ready = lcr ? readyStatus(mine[*lcr].body) : "Unknown";
  if (!create_error.empty()) {
    ready = conditionFalse("RevisionFailed", "Revision creation failed with message: " + create_error + ".");
  } else if (lcr_ready == "False") {
    ready = conditionFalse("RevisionFailed", "Revision " + quote(latest_created) + " failed with message: " +
                                                 conditionStateOf(statusOf(mine[*lcr].body), kReady).message +
                                                 ".");
  } else if (ready_deleted) {
    ready = conditionFalse("RevisionDeleted", "Revision " + quote(latest_ready) + " was deleted.");
  } else if (!latest_ready.empty() && latest_ready == latest_created) {
    ready = conditionTrue();
  } else {
    ready = conditionUnknown("", "");  // Knative leaves reason empty while the new revision comes up
  }

  json st = json::object();
  st["observedGeneration"] = gen;
  if (!latest_created.empty()) st["latestCreatedRevisionName"] = latest_created;
  if (!latest_ready.empty()) st["latestReadyRevisionName"] = latest_ready;
  ConditionsBuilder cb(old_status, clock_.now());
  cb.set(kReady, ready);
  st["conditions"] = cb.build();
  json desired = c;
  desired["status"] = st;
  KNAP_ASSIGN_OR_RETURN(Object written, writeIfChanged(cfg, desired));

  // Older revisions that never got traffic leave "pending" once superseded, so
  // the scaler can drop them and GC can see them (knap's rule: Knative leaves
  // them pending). Revisions some Route references are the Route reconciler's.
  const std::string now = formatRfc3339(clock_.now());
  for (Object& r : mine) {
    if (labelOf(r.body, labels::kRoutingState) != "pending" || r.key.name == latest_created ||
        r.key.name == latest_ready || !annotationOf(r.body, annotations::kRoutes).empty()) {
      continue;
    }
    json body = r.body;
    body["metadata"]["labels"][labels::kRoutingState] = "reserve";
    body["metadata"]["annotations"][annotations::kRoutingStateModified] = now;
    KNAP_ASSIGN_OR_RETURN(r, writeIfChanged(r, body));
  }
  return collectGarbage(written.body, mine);
}

Status Reconcilers::collectGarbage(const json& config, const std::vector<Object>& revisions) {
  const std::string latest_ready = stringAt(statusOf(config), "latestReadyRevisionName");
  std::vector<GcCandidate> candidates;
  for (const Object& r : revisions) {
    GcCandidate c;
    c.name = r.key.name;
    c.created = parseTimeOr(metaString(r.body, "creationTimestamp"), clock_.now());
    c.last_active = parseTimeOr(annotationOf(r.body, annotations::kRoutingStateModified), c.created);
    c.active = r.key.name == latest_ready || annotationOf(r.body, annotations::kNoGc) == "true" ||
               labelOf(r.body, labels::kRoutingState) != "reserve";
    candidates.push_back(std::move(c));
  }
  for (const std::string& name : revisionsToCollect(config_.gc, std::move(candidates), clock_.now())) {
    LOG(INFO) << "controller: garbage-collecting Revision " << metaString(config, "namespace") << "/" << name;
    auto removed = store_.remove(Key{"Revision", metaString(config, "namespace"), name});
    if (!removed.isOk() && !isNotFound(removed.status())) return removed.status();
  }
  return Status::ok();
}

// --------------------------------------------------------------- Revision

Status Reconcilers::reconcileRevision(const Key& key) {
  const std::string id = key.ns + "/" + key.name;
  auto got = store_.get(key);
  if (!got.isOk()) {
    if (!isNotFound(got.status())) return got.status();
    ensured_.erase(id);
    backend_.remove(key.ns, key.name);
    return Status::ok();
  }
  const Object rev = std::move(got).value();
  const json& r = rev.body;
  json view = {{"uid", metaString(r, "uid")},
               {"labels", r["metadata"].value("labels", json::object())},
               {"annotations", r["metadata"].value("annotations", json::object())},
               {"spec", r.value("spec", json::object())}};
  std::string view_text = view.dump(-1, ' ', false, json::error_handler_t::replace);
  auto seen = ensured_.find(id);
  if (seen == ensured_.end() || seen->second != view_text) {
    backend_.ensure(r);
    ensured_[id] = std::move(view_text);
  }
  RevisionHealth h = backend_.health(key.ns, key.name);

  const json& old_status = statusOf(r);
  ConditionsBuilder cb(old_status, clock_.now());
  cb.set("ResourcesAvailable", h.resources_available);
  cb.set("ContainerHealthy", h.container_healthy);
  cb.set("Active", h.active, "Info");  // not part of Ready: a revision at zero stays Ready
  cb.set(kReady, ConditionsBuilder::aggregate({h.resources_available, h.container_healthy}));
  json st = json::object();
  st["observedGeneration"] = generationOf(r);
  st["conditions"] = cb.build();
  st["actualReplicas"] = h.actual_replicas;
  st["desiredReplicas"] = h.desired_replicas;
  const json& containers = specAt(r, "containers");
  if (containers.is_array() && containers.size() > 1 && h.image_digests.size() == containers.size()) {
    json cs = json::array();
    for (size_t i = 0; i < containers.size(); ++i) {
      cs.push_back(json{{"name", stringAt(containers[i], "name")}, {"imageDigest", h.image_digests[i]}});
    }
    st["containerStatuses"] = cs;
  } else if (!h.image_digest.empty() && containers.is_array() && !containers.empty()) {
    st["containerStatuses"] =
        json::array({json{{"name", stringAt(containers[0], "name")}, {"imageDigest", h.image_digest}}});
  } else if (old_status.contains("containerStatuses")) {
    st["containerStatuses"] = old_status["containerStatuses"];  // keep what was resolved once
  }
  json desired = r;
  desired["status"] = st;
  return writeIfChanged(rev, desired).status();
}

// ------------------------------------------------------------------ Route

Status Reconcilers::reconcileRoute(const Key& key) {
  auto got = store_.get(key);
  if (!got.isOk()) {
    if (!isNotFound(got.status())) return got.status();
    return syncRoutingMetadata(key.ns, key.name, {}, {});  // the route is gone: release its revisions
  }
  const Object route = std::move(got).value();
  const json& r = route.body;
  const json& old_status = statusOf(r);
  std::string owner_service;
  if (const json* ref = controllerRefOf(r); ref != nullptr && ref->value("kind", "") == "Service") {
    owner_service = ref->value("name", "");
  }

  // The targets' objects, looked up once each in the cache (nullptr: absent).
  std::map<std::string, std::optional<Object>> seen_configs, seen_revs;
  auto lookup = [&](std::map<std::string, std::optional<Object>>& seen, const char* kind,
                    const std::string& name) -> const json* {
    auto it = seen.find(name);
    if (it == seen.end()) it = seen.emplace(name, cache_.get(Key{kind, key.ns, name})).first;
    return it->second ? &it->second->body : nullptr;
  };
  auto config = [&](const std::string& name) { return lookup(seen_configs, "Configuration", name); };
  auto revision = [&](const std::string& name) { return lookup(seen_revs, "Revision", name); };

  std::vector<ConditionState> problems;
  std::set<std::string> ref_configs, ref_revs;
  json traffic = json::array();
  const json& spec_traffic = specAt(r, "traffic");
  const json targets = spec_traffic.is_array() ? spec_traffic : json::array();
  for (const json& t : targets) {
    const std::string cfg_name = stringAt(t, "configurationName");
    const std::string rev_name = stringAt(t, "revisionName");
    std::string resolved;
    if (!cfg_name.empty()) {
      const json* cfg = config(cfg_name);
      if (cfg == nullptr) {
        problems.push_back(conditionFalse("ConfigurationMissing", "Configuration " + quote(cfg_name) +
                                                                      " referenced in traffic not found."));
        continue;
      }
      ref_configs.insert(cfg_name);
      resolved = stringAt(statusOf(*cfg), "latestReadyRevisionName");
      if (resolved.empty()) {
        problems.push_back(
            readyStatus(*cfg) == "False"
                ? conditionFalse("RevisionMissing",
                                 "Configuration " + quote(cfg_name) + " does not have any ready Revision.")
                : conditionUnknown("RevisionMissing", "Configuration " + quote(cfg_name) +
                                                          " is waiting for a Revision to become ready."));
        continue;
      }
      if (revision(resolved) == nullptr) {
        problems.push_back(conditionFalse(
            "RevisionMissing", "Revision " + quote(resolved) + " referenced in traffic not found."));
        continue;
      }
    } else if (!rev_name.empty()) {
      const json* rev = revision(rev_name);
      if (rev == nullptr) {
        problems.push_back(conditionFalse(
            "RevisionMissing", "Revision " + quote(rev_name) + " referenced in traffic not found."));
        continue;
      }
      ref_revs.insert(rev_name);
      if (!owner_service.empty() && labelOf(*rev, labels::kService) != owner_service) {
        problems.push_back(conditionFalse(
            "RevisionNotOwned",
            "Revision " + quote(rev_name) + " is not owned by Service " + quote(owner_service) + "."));
        continue;
      }
      std::string ready = readyStatus(*rev);
      if (ready != "True") {
        problems.push_back(
            ready == "False"
                ? conditionFalse("RevisionMissing",
                                 "Revision " + quote(rev_name) + " failed to become ready.")
                : conditionUnknown("RevisionMissing", "Revision " + quote(rev_name) + " is not yet ready."));
        continue;
      }
      resolved = rev_name;
    } else {
      problems.push_back(
          conditionFalse("RevisionMissing", "A traffic target names no revision or configuration."));
      continue;
    }
    ref_revs.insert(resolved);
    json entry = {{"revisionName", resolved},
                  {"latestRevision", t.contains("latestRevision") && t["latestRevision"].is_boolean()
                                         ? t["latestRevision"].get<bool>()
                                         : !cfg_name.empty()}};
    if (t.contains("percent")) entry["percent"] = t["percent"];
    std::string tag = stringAt(t, "tag");
    if (!tag.empty()) {
      entry["tag"] = tag;
      auto host = routeHostFor(config_, r, tag);
      if (!host.isOk()) {
        problems.insert(problems.begin(), conditionFalse("ErrorConfig", host.status().message()));
        continue;
      }
      entry["url"] = host->url();
    }
    traffic.push_back(entry);
  }

  json st = json::object();
  st["observedGeneration"] = generationOf(r);
  auto main_host = routeHostFor(config_, r);
  if (main_host.isOk()) {
    st["url"] = main_host->url();
  } else {
    problems.insert(problems.begin(), conditionFalse("ErrorConfig", main_host.status().message()));
  }
  st["address"] = json{{"url", "http://" + clusterLocalHost(key.name, key.ns)}};

  ConditionState assigned = problems.empty() ? conditionTrue() : ConditionsBuilder::aggregate(problems);
  ConditionState ingress;
  if (problems.empty()) {
    st["traffic"] = traffic;
    // Ready only once the router serves this traffic (the data plane
    // re-queues the Route when it has), or when the last status already
    // said so for the same traffic (a restarted knapd's router may not have
    // reported yet; it serves what is stored before it listens).
    const std::string fingerprint = programFingerprint(json{{"status", st}});
    const bool served = ingress_ == nullptr || ingress_->programmed("Route", key.ns, key.name, fingerprint) ||
                        (conditionStateOf(old_status, "IngressReady").status == "True" &&
                         programFingerprint(json{{"status", old_status}}) == fingerprint);
    ingress = served ? conditionTrue()
                     : conditionUnknown("IngressNotConfigured", "Ingress has not yet been reconciled.");
  } else {
    // Keep serving the last traffic that did resolve until the new one can.
    if (old_status.contains("traffic")) {
      st["traffic"] = old_status["traffic"];
      for (const json& t : old_status["traffic"]) {
        if (!stringAt(t, "revisionName").empty()) ref_revs.insert(stringAt(t, "revisionName"));
      }
    }
    ingress = isUpToDate(r) && findCondition(old_status, "IngressReady") != nullptr
                  ? conditionStateOf(old_status, "IngressReady")
                  : conditionUnknown("IngressNotConfigured", "Ingress has not yet been reconciled.");
  }
  // Certificates are the operator's (knap.router-tls-certificates-dir and
  // kubernetes.io/tls Secrets, served by the router by SNI) unless the
  // built-in ACME client provisions the route's external hosts.
  ConditionState cert = config_.network.externalDomainTls()
                            ? conditionTrue("ExternalCertificates",
                                            "certificates come from knap.router-tls-certificates-dir and "
                                            "kubernetes.io/tls Secrets, chosen by SNI")
                            : conditionTrue("TLSNotEnabled", "external-domain-tls is not enabled");
  if (config_.network.externalDomainTls() && certificates_ != nullptr && problems.empty()) {
    std::vector<std::string> urls = {stringAt(st, "url")};
    for (const json& t : st.value("traffic", json::array())) urls.push_back(stringAt(t, "url"));
    std::vector<std::string> pending, failed;
    bool any = false;
    for (const std::string& u : urls) {
      auto scheme = u.find("://");
      if (scheme == std::string::npos) continue;
      const std::string host = u.substr(scheme + 3, u.find('/', scheme + 3) - scheme - 3);
      auto c = certificates_->certificateFor(host);
      if (!c) continue;
      any = true;
      if (c->state == CertificateCondition::State::kPending) pending.push_back(host);
      if (c->state == CertificateCondition::State::kFailed) failed.push_back(host + ": " + c->message);
    }
    auto join = [](const std::vector<std::string>& v, const char* sep) {
      std::string out;
      for (const std::string& x : v) out += (out.empty() ? "" : sep) + x;
      return out;
    };
    if (!failed.empty()) {
      cert = conditionFalse("CertificateProvisionFailed", "ACME: " + join(failed, "; "));
    } else if (!pending.empty()) {
      cert =
          conditionUnknown("CertificateNotReady", "ACME certificate being issued for " + join(pending, ", "));
    } else if (any) {
      cert = conditionTrue("CertificateProvisioned", "ACME certificates issued for the external hosts");
    }
  }

  KNAP_RETURN_IF_ERROR(syncRoutingMetadata(key.ns, key.name, ref_configs, ref_revs));

  ConditionsBuilder cb(old_status, clock_.now());
  cb.set("AllTrafficAssigned", assigned);
  cb.set("IngressReady", ingress);
  cb.set("CertificateProvisioned", cert);
  cb.set(kReady, ConditionsBuilder::aggregate({assigned, ingress, cert}));
  st["conditions"] = cb.build();
  json desired = r;
  desired["status"] = st;
  return writeIfChanged(route, desired).status();
}

// ---------------------------------------------------------------- DomainMapping

Status Reconcilers::reconcileDomainMapping(const Key& key) {
  const Key claim_key{"ClusterDomainClaim", "", key.name};
  auto got = store_.get(key);
  if (!got.isOk()) {
    if (!isNotFound(got.status())) return got.status();
    // Deleted: release the claim this namespace holds (only claims knap
    // creates are knap's to delete).
    if (!config_.network.autocreate_cluster_domain_claims) return Status::ok();
    auto claim = store_.get(claim_key);
    if (!claim.isOk()) return isNotFound(claim.status()) ? Status::ok() : claim.status();
    const json& holder = specAt(claim->body, "namespace");
    if (!holder.is_string() || holder.get<std::string>() != key.ns) return Status::ok();
    LOG(INFO) << "controller: releasing " << claim_key.toString() << " (" << key.toString()
              << " was deleted)";
    auto removed = store_.remove(claim_key);
    return removed.isOk() || isNotFound(removed.status()) ? Status::ok() : removed.status();
  }
  const Object dm = std::move(got).value();
  const json& d = dm.body;
  const json& old_status = statusOf(d);
  json st = json::object();
  if (old_status.contains("annotations")) st["annotations"] = old_status["annotations"];
  const bool external_tls = specAt(d, "tls").is_object();
  const std::string url =
      (external_tls ? "https" : config_.network.default_external_scheme) + "://" + key.name;
  st["url"] = url;
  st["address"] = {{"url", url}};

  // The claim: the domain is this namespace's, or another's.
  ConditionState claimed = conditionTrue();
  auto claim = store_.get(claim_key);
  if (!claim.isOk() && !isNotFound(claim.status())) return claim.status();
  if (!claim.isOk()) {
    if (config_.network.autocreate_cluster_domain_claims) {
      json body = {
          {"apiVersion", std::string(api::kNetworkingGroup) + "/" + std::string(api::kNetworkingVersion)},
          {"kind", "ClusterDomainClaim"},
          {"metadata", {{"name", key.name}}},
          {"spec", {{"namespace", key.ns}}}};
      LOG(INFO) << "controller: creating " << claim_key.toString() << " for " << key.toString();
      KNAP_RETURN_IF_ERROR(createOrConflict(store_, claim_key, body).status());
    } else {
      claimed = conditionFalse("DomainAlreadyClaimed",
                               "The domain name is already in use by another DomainMapping");
    }
  } else {
    const json& cns = specAt(claim->body, "namespace");
    if (!cns.is_string() || cns.get<std::string>() != key.ns)
      claimed = conditionFalse("DomainAlreadyClaimed",
                               "The domain name is already in use by another DomainMapping");
  }

  ConditionState cert =
      external_tls ? conditionTrue("CertificateNotRequired", "TLS certificate was provided externally")
                   : conditionTrue("TLSNotEnabled", "external-domain-tls is not enabled");
  ConditionState resolved,
      ingress = conditionUnknown("IngressNotConfigured", "Ingress has not yet been reconciled.");
  if (claimed.status == "True") {
    const json& ref = specAt(d, "ref");
    std::string kind = ref.is_object() ? stringAt(ref, "kind") : "";
    std::string name = ref.is_object() ? stringAt(ref, "name") : "";
    std::string ref_ns =
        ref.is_object() && !stringAt(ref, "namespace").empty() ? stringAt(ref, "namespace") : key.ns;
    std::string route_name = domainMappingRoute(d);
    if (route_name.empty()) {
      resolved = conditionFalse("ResolveFailed",
                                "failed to get object " + ref_ns + "/" + name + ": knap resolves " +
                                    "only serving.knative.dev/v1 Services and Routes, not " +
                                    (ref.is_object() ? stringAt(ref, "apiVersion") : "") + " " + kind);
    } else if (ref_ns != key.ns) {
      resolved = conditionFalse("ResolveFailed", "resolved URI \"http://" + clusterLocalHost(name, ref_ns) +
                                                     "\" must be in same namespace as DomainMapping");
    } else {
      std::string plural = kind == "Service" ? "services" : "routes";
      auto target = cache_.get(Key{kind, key.ns, name});
      const json* address = target ? &statusOf(target->body) : nullptr;
      if (!target) {
        resolved =
            conditionFalse("ResolveFailed", "failed to get object " + key.ns + "/" + name + ": " + plural +
                                                ".serving.knative.dev " + quote(name) + " not found");
      } else if (!address->contains("address") || !(*address)["address"].is_object() ||
                 stringAt((*address)["address"], "url").empty()) {
        resolved = conditionFalse("ResolveFailed", "address not set for " + kind + " " + key.ns + "/" + name);
      } else {
        resolved = conditionTrue();
        auto route = cache_.get(Key{"Route", key.ns, route_name});
        if (!route) {
          ingress = conditionUnknown("IngressNotConfigured", "Waiting for target Route " + key.ns + "/" +
                                                                 route_name + " to be created.");
        } else if (kind == "Service" && !isControlledBy(route->body, target->body)) {
          ingress = conditionFalse("NotOwned", "Service " + key.ns + "/" + name + " does not own Route " +
                                                   key.ns + "/" + route_name + ".");
        } else {
          bool serving = false;
          if (auto table = routingTable(config_, route->body); table.isOk()) {
            for (const HostSplit& split : *table)
              serving = serving || (split.tag.empty() && !split.revisions.empty());
          }
          // Served once the router has the mapping's host (the data plane
          // re-queues it) and the Route's own traffic; or as the last status
          // said for the same spec (a restarted knapd's router serves what is
          // stored before it listens).
          const bool programmed =
              ingress_ == nullptr ||
              (ingress_->programmed("DomainMapping", key.ns, key.name, domainFingerprint(d)) &&
               conditionStateOf(statusOf(route->body), "IngressReady").status == "True") ||
              (conditionStateOf(old_status, "IngressReady").status == "True" && isUpToDate(d));
          if (!serving) {
            ingress = conditionUnknown("IngressNotConfigured", "Waiting for target Route " + key.ns + "/" +
                                                                   route_name + " to have traffic.");
          } else if (!programmed) {
            ingress = conditionUnknown("IngressNotConfigured", "Ingress has not yet been reconciled.");
          } else {
            ingress = conditionTrue();
          }
        }
      }
    }
  }

  ConditionsBuilder cb(old_status, clock_.now());
  cb.set("CertificateProvisioned", cert);
  cb.set("DomainClaimed", claimed);
  cb.set("IngressReady", ingress);
  cb.set("ReferenceResolved", resolved);
  cb.set(kReady, ConditionsBuilder::aggregate({resolved, claimed, ingress, cert}));
  st["conditions"] = cb.build();
  st["observedGeneration"] = generationOf(d);
  json desired = d;
  desired["status"] = st;
  return writeIfChanged(dm, desired).status();
}

Status Reconcilers::syncRoutingMetadata(const std::string& ns, const std::string& route,
                                        const std::set<std::string>& configs,
                                        const std::set<std::string>& revisions) {
  // Returns the new routes set, or nullopt when `route` neither is nor should be in it.
  auto updatedRoutes = [&](const json& obj, bool want) -> std::optional<std::set<std::string>> {
    auto set = splitList(annotationOf(obj, annotations::kRoutes));
    bool has = set.count(route) > 0;
    if (has == want) return std::nullopt;
    if (want) {
      set.insert(route);
    } else {
      set.erase(route);
    }
    return set;
  };
  auto setRoutes = [](json& body, const std::set<std::string>& set) {
    if (set.empty()) {
      if (body["metadata"].contains("annotations"))
        body["metadata"]["annotations"].erase(annotations::kRoutes);
    } else {
      body["metadata"]["annotations"][annotations::kRoutes] = joinList(set);
    }
  };

  // Only objects that are to be in the set or already name the route can
  // change: the wanted ones and those the cache has annotated with it.
  auto candidates = [&](const char* kind, const std::set<std::string>& wanted) {
    std::map<std::string, Object> out;
    for (Object& o : cache_.annotatedWith(kind, ns, route)) out.emplace(o.key.name, std::move(o));
    for (const std::string& name : wanted) {
      if (out.count(name) > 0) continue;
      if (auto o = cache_.get(Key{kind, ns, name})) out.emplace(name, std::move(*o));
    }
    return out;
  };
  for (const auto& [name, c] : candidates("Configuration", configs)) {
    auto set = updatedRoutes(c.body, configs.count(c.key.name) > 0);
    if (!set) continue;
    json body = c.body;
    setRoutes(body, *set);
    KNAP_RETURN_IF_ERROR(writeIfChanged(c, body).status());
  }

  const std::string now = formatRfc3339(clock_.now());
  for (const auto& [name, rev] : candidates("Revision", revisions)) {
    bool want = revisions.count(rev.key.name) > 0;
    auto set = updatedRoutes(rev.body, want);
    std::string state = labelOf(rev.body, labels::kRoutingState);
    std::string new_state = state;
    if (want) {
      new_state = "active";
    } else if (set && set->empty()) {
      new_state = "reserve";
    }
    if (!set && new_state == state) continue;
    json body = rev.body;
    if (set) setRoutes(body, *set);
    if (new_state != state) {
      body["metadata"]["labels"][labels::kRoutingState] = new_state;
      body["metadata"]["annotations"][annotations::kRoutingStateModified] = now;
    }
    KNAP_RETURN_IF_ERROR(writeIfChanged(rev, body).status());
  }
  return Status::ok();
}

}  // namespace knap::controller
