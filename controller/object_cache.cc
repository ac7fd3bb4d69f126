#include "controller/object_cache.h"

#include <algorithm>

#include "api/resources.h"
#include "controller/domain_mappings.h"
#include "controller/object_util.h"

namespace knap::controller {

using nlohmann::json;
using store::Key;
using store::Object;

namespace {

// Index keys: a tag, then the fields, separated by '\n' (no name, namespace
// or kind contains one).
std::string indexKey(std::initializer_list<std::string> parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += '\n';
    out += p;
  }
  return out;
}

void trafficNames(const json& traffic, std::set<std::string>* configs, std::set<std::string>* revisions) {
  if (!traffic.is_array()) return;
  for (const json& t : traffic) {
    if (!t.is_object()) continue;
    auto c = t.find("configurationName");
    if (configs != nullptr && c != t.end() && c->is_string()) configs->insert(c->get<std::string>());
    auto r = t.find("revisionName");
    if (r != t.end() && r->is_string()) revisions->insert(r->get<std::string>());
  }
}

const json& field(const json& obj, const char* a, const char* b) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto ia = obj.find(a);
  if (ia == obj.end() || !ia->is_object()) return kNull;
  auto ib = ia->find(b);
  return ib == ia->end() ? kNull : *ib;
}

}  // namespace

bool ObjectCache::knownKind(const std::string& kind) const {
  return std::find(kinds_.begin(), kinds_.end(), kind) != kinds_.end();
}

std::vector<std::string> ObjectCache::indexKeysOf(const Object& o) const {
  std::vector<std::string> out;
  const Key& k = o.key;
  if (k.kind == "Revision") {
    std::string cfg = labelOf(o.body, api::labels::kConfiguration);
    if (!cfg.empty()) out.push_back(indexKey({"rev-of", k.ns, cfg}));
  }
  if (k.kind == "Revision" || k.kind == "Configuration") {
    for (const std::string& route : splitList(annotationOf(o.body, api::annotations::kRoutes))) {
      out.push_back(indexKey({"annotated", k.kind, k.ns, route}));
    }
  }
  if (k.kind == "Route") {
    std::set<std::string> configs, revisions;
    trafficNames(field(o.body, "spec", "traffic"), &configs, &revisions);
    trafficNames(field(o.body, "status", "traffic"), nullptr, &revisions);
    for (const std::string& c : configs) out.push_back(indexKey({"route-ref", k.ns, "Configuration", c}));
    for (const std::string& r : revisions) out.push_back(indexKey({"route-ref", k.ns, "Revision", r}));
  }
  if (k.kind == "DomainMapping") {
    out.push_back(indexKey({"dm-name", k.name}));
    std::string route = domainMappingRoute(o.body);
    if (!route.empty()) out.push_back(indexKey({"dm-route", k.ns, route}));
  }
  return out;
}

void ObjectCache::eraseLocked(const std::string& id, int64_t deletion_rv) {
  auto it = objects_.find(id);
  if (it != objects_.end()) {
    for (const std::string& ik : it->second.index_keys) {
      auto s = index_.find(ik);
      if (s == index_.end()) continue;
      s->second.erase(id);
      if (s->second.empty()) index_.erase(s);
    }
    objects_.erase(it);
  }
  if (deletion_rv > 0) {
    auto [t, inserted] = tombstones_.emplace(id, deletion_rv);
    if (!inserted) {
      t->second = std::max(t->second, deletion_rv);
    } else {
      tombstone_order_.push_back(id);
      while (tombstone_order_.size() > kTombstones) {
        tombstones_.erase(tombstone_order_.front());
        tombstone_order_.pop_front();
      }
    }
  }
}

void ObjectCache::putLocked(const Object& object) {
  const std::string id = object.key.toString();
  if (auto t = tombstones_.find(id); t != tombstones_.end() && t->second >= object.resource_version) return;
  auto it = objects_.find(id);
  if (it != objects_.end() && it->second.resource_version >= object.resource_version) return;
  eraseLocked(id, 0);
  Entry e{object.key, object.resource_version,
          object.body.dump(-1, ' ', false, json::error_handler_t::replace), indexKeysOf(object)};
  for (const std::string& ik : e.index_keys) index_[ik].insert(id);
  objects_.emplace(id, std::move(e));
}

void ObjectCache::apply(const store::Event& event) {
  if (!knownKind(event.object.key.kind)) return;
  std::lock_guard<std::mutex> l(mu_);
  if (event.type == store::EventType::kDeleted) {
    const std::string id = event.object.key.toString();
    auto it = objects_.find(id);
    if (it != objects_.end() && it->second.resource_version > event.resource_version) return;  // recreated
    eraseLocked(id, event.resource_version);
  } else {
    putLocked(event.object);
  }
}

Status ObjectCache::prime(store::Store& store, std::vector<Key>* listed) {
  std::vector<std::vector<Object>> lists;
  for (const std::string& kind : kinds_) {
    auto objs = store.list(kind, "");
    if (!objs.isOk()) return objs.status();
    lists.push_back(std::move(objs).value());
  }
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& list : lists) {
    for (const Object& o : list) {
      putLocked(o);
      if (listed != nullptr) listed->push_back(o.key);
    }
  }
  primed_ = true;
  return Status::ok();
}

bool ObjectCache::primed() const {
  std::lock_guard<std::mutex> l(mu_);
  return primed_;
}

Object ObjectCache::objectOf(const Entry& e) {
  // The text is what dump() wrote: it parses.
  return Object{e.key, json::parse(e.text), e.resource_version};
}

std::optional<Object> ObjectCache::get(const Key& key) const {
  Entry copy;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = objects_.find(key.toString());
    if (it == objects_.end()) return std::nullopt;
    copy.key = it->second.key;
    copy.resource_version = it->second.resource_version;
    copy.text = it->second.text;
  }
  return objectOf(copy);
}

std::vector<std::string> ObjectCache::idsAtLocked(const std::string& index_key) const {
  auto it = index_.find(index_key);
  if (it == index_.end()) return {};
  return std::vector<std::string>(it->second.begin(), it->second.end());
}

std::vector<Object> ObjectCache::objectsAt(const std::string& index_key) const {
  std::vector<Entry> copies;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const std::string& id : idsAtLocked(index_key)) {
      const Entry& e = objects_.at(id);
      copies.push_back(Entry{e.key, e.resource_version, e.text, {}});
    }
  }
  std::vector<Object> out;
  out.reserve(copies.size());
  for (const Entry& e : copies) out.push_back(objectOf(e));
  return out;  // sorted by id, i.e. by name within the namespace
}

std::vector<Object> ObjectCache::revisionsOf(const std::string& ns, const std::string& configuration) const {
  return objectsAt(indexKey({"rev-of", ns, configuration}));
}

std::vector<Key> ObjectCache::routesReferencing(const std::string& ns, const std::string& kind,
                                                const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Key> out;
  for (const std::string& id : idsAtLocked(indexKey({"route-ref", ns, kind, name}))) {
    out.push_back(objects_.at(id).key);
  }
  return out;
}

std::vector<Object> ObjectCache::annotatedWith(const std::string& kind, const std::string& ns,
                                               const std::string& route) const {
  return objectsAt(indexKey({"annotated", kind, ns, route}));
}

std::vector<Key> ObjectCache::domainMappingsNamed(const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Key> out;
  for (const std::string& id : idsAtLocked(indexKey({"dm-name", name}))) out.push_back(objects_.at(id).key);
  return out;
}

std::vector<Key> ObjectCache::domainMappingsTargeting(const std::string& ns, const std::string& route) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Key> out;
  for (const std::string& id : idsAtLocked(indexKey({"dm-route", ns, route})))
    out.push_back(objects_.at(id).key);
  return out;
}

size_t ObjectCache::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return objects_.size();
}

std::vector<Key> ObjectCache::keys() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Key> out;
  out.reserve(objects_.size());
  for (const auto& [id, entry] : objects_) out.push_back(entry.key);
  return out;
}

}  // namespace knap::controller
