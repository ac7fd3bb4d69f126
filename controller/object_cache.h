// ObjectCache: the controller's informer — an in-memory copy of the
// Services, Configurations, Revisions, Routes, DomainMappings and
// ClusterDomainClaims (the kinds it is given), fed by committed store
// events and primed once by listing, with the indexes the reconcilers need so
// that no reconcile lists (and parses) every object of a kind:
//   - revisionsOf(ns, configuration): Revisions labelled
//     serving.knative.dev/configuration=NAME;
//   - routesReferencing(ns, kind, name): Routes whose spec.traffic names that
//     Configuration (configurationName) or Revision (revisionName), or whose
//     status.traffic names that Revision;
//   - annotatedWith(kind, ns, route): Configurations or Revisions whose
//     serving.knative.dev/routes annotation lists the Route;
//   - domainMappingsNamed(name) / domainMappingsTargeting(ns, route):
//     DomainMappings of that domain in any namespace / whose spec.ref routes
//     to that Route (controller/domain_mappings.h).
//
// Events from concurrent writers may reach apply() out of order: an object is
// replaced only by a higher resourceVersion, and a deletion leaves a tombstone
// (the last few thousand are kept) so that a late event or a list taken
// before the deletion does not bring the object back.
//
// Memory: an entry keeps the object as its compact JSON text (about a fifth
// of a parsed nlohmann::json tree) and parses it again on lookup, outside the
// mutex: with thousands of objects the cache was most of knapd's heap, while
// a reconcile looks up a handful of objects.
//
// Thread safety: every method may be called from any thread (one mutex).
// Lookups return copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace knap::controller {

class ObjectCache {
 public:
  static constexpr size_t kTombstones = 4096;

  explicit ObjectCache(std::vector<std::string> kinds) : kinds_(std::move(kinds)) {}

  // Applies a committed event (other kinds are ignored).
  void apply(const store::Event& event);
  // Lists every kind from the store and merges the result (a newer cached
  // state wins). On success the cache is primed; the keys listed are appended
  // to `listed` when given. A failing list leaves it unprimed.
  Status prime(store::Store& store, std::vector<store::Key>* listed = nullptr);
  bool primed() const;

  std::optional<store::Object> get(const store::Key& key) const;
  std::vector<store::Object> revisionsOf(const std::string& ns, const std::string& configuration) const;
  std::vector<store::Key> routesReferencing(const std::string& ns, const std::string& kind,
                                            const std::string& name) const;
  std::vector<store::Object> annotatedWith(const std::string& kind, const std::string& ns,
                                           const std::string& route) const;
  std::vector<store::Key> domainMappingsNamed(const std::string& name) const;
  std::vector<store::Key> domainMappingsTargeting(const std::string& ns, const std::string& route) const;
  size_t size() const;
  // The keys of every cached object (not tombstones).
  std::vector<store::Key> keys() const;

 private:
  struct Entry {
    store::Key key;
    int64_t resource_version = 0;
    std::string text;  // the body, compact JSON
    std::vector<std::string> index_keys;
  };
  static store::Object objectOf(const Entry& e);
  bool knownKind(const std::string& kind) const;
  void putLocked(const store::Object& object);
  void putEntryLocked(Entry e);  // unless the cache has it at this or a later version
  // prime(): the kinds with index keys, and the fields of a stored text those keys read.
  static bool needsIndexFields(const std::string& kind);
  static nlohmann::json parseIndexFields(const std::string& kind, const std::string& text);
  void eraseLocked(const std::string& id, int64_t deletion_rv);
  std::vector<std::string> indexKeysOf(const store::Object& object) const;
  std::vector<std::string> idsAtLocked(const std::string& index_key) const;
  std::vector<store::Object> objectsAt(const std::string& index_key) const;  // parsed outside mu_

  const std::vector<std::string> kinds_;
  mutable std::mutex mu_;
  bool primed_ = false;
  std::map<std::string, Entry> objects_;                // Key::toString() -> entry
  std::map<std::string, std::set<std::string>> index_;  // index key -> ids
  std::map<std::string, int64_t> tombstones_;           // id -> deletion RV
  std::deque<std::string> tombstone_order_;
};

}  // namespace knap::controller
