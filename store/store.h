// Store: durable state for knapd's API objects, with Kubernetes semantics.
//
// The store owns the server-set metadata fields. On create it sets
// metadata.uid (random v4 UUID), metadata.generation = 1,
// metadata.creationTimestamp (from the injected TimeSource) and
// metadata.resourceVersion. On update it bumps metadata.generation only when
// `spec` changed, and always gives a new resourceVersion. resourceVersions are
// one global, strictly increasing counter (decimal strings on the wire).
//
// Every committed change is appended to an event log that watch replays from
// a resourceVersion; events older than the retained history give kGone.
//
// Thread safety: all methods may be called from any thread; a Store
// serialises writers internally. Listeners are called after commit, on the
// writer's thread, without store locks held; they must not block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace knap::store {

// Identity of a namespaced object. kind is the Kind ("Service", "Configuration",
// "Revision", "Route"); the store treats it as an opaque string.
struct Key {
  std::string kind;
  std::string ns;
  std::string name;
  bool operator==(const Key&) const = default;
  std::string toString() const { return kind + " " + ns + "/" + name; }
};

struct Object {
  Key key;
  nlohmann::json body;           // full object: apiVersion, kind, metadata, spec, status
  int64_t resource_version = 0;  // == stoll(body.metadata.resourceVersion)
};

enum class EventType { kAdded, kModified, kDeleted };
const char* eventTypeName(EventType t);  // "ADDED", "MODIFIED", "DELETED"

struct Event {
  EventType type;
  int64_t resource_version;  // the RV of this change (for DELETED: the RV of the deletion)
  Object object;             // state after the change (for DELETED: last state, with the deletion RV)
};

// Writes inside one transaction: all or nothing. Returned objects carry the
// metadata the store set.
class Txn {
 public:
  virtual ~Txn() = default;
  virtual StatusOr<Object> get(const Key& key) = 0;  // kNotFound
  virtual StatusOr<std::vector<Object>> list(const std::string& kind, const std::string& ns) = 0;
  // Keys of the objects in `ns` (every namespace when empty) whose
  // metadata.ownerReferences may name `owner_uid`: an index lookup, a superset
  // (callers check the body), in (namespace, kind, name) order.
  virtual StatusOr<std::vector<Key>> dependentsOf(const std::string& ns, const std::string& owner_uid) = 0;
  // kAlreadyExists if the key exists. The body's server-set fields are overwritten.
  virtual StatusOr<Object> create(const Key& key, nlohmann::json body) = 0;
  // Replaces the object. If expected_rv != 0 and differs from the stored RV: kConflict.
  // kNotFound if absent. uid and creationTimestamp are kept from the stored object.
  virtual StatusOr<Object> update(const Key& key, nlohmann::json body, int64_t expected_rv) = 0;
  // Deletes; returns the last state. kNotFound if absent.
  virtual StatusOr<Object> remove(const Key& key) = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  virtual StatusOr<Object> get(const Key& key) = 0;
  // ns empty = all namespaces. Sorted by namespace, then name.
  virtual StatusOr<std::vector<Object>> list(const std::string& kind, const std::string& ns) = 0;
  // The same list as stored text: each object's compact JSON (keys sorted, as
  // nlohmann::json dumps them) and its metadata.labels as JSON text ("" when
  // it has none), without building a JSON tree per object. The API's list
  // answers with it. The default implementation dumps list(). With
  // `with_labels` false, `labels` is left empty: a list without a selector
  // does not need them, and extracting them costs SqliteStore a pass of
  // SQLite's JSON reader over every body.
  struct RawObject {
    Key key;
    int64_t resource_version = 0;
    std::string json;
    std::string labels;
  };
  virtual StatusOr<std::vector<RawObject>> listRaw(const std::string& kind, const std::string& ns,
                                                   bool with_labels = true);
  // A label-selector list's candidates: listRaw restricted to the objects
  // whose metadata.labels has `label_key` with one of `values` (with any
  // string value when `values` is empty), in the same order. It may return
  // more (objects whose labels the store cannot read without their key, such
  // as sealed ones), never fewer: callers still match each object's labels.
  // SqliteStore reads only those rows (its labels index); the default
  // implementation is listRaw.
  virtual StatusOr<std::vector<RawObject>> listRawWithLabel(const std::string& kind, const std::string& ns,
                                                            const std::string& label_key,
                                                            const std::vector<std::string>& values);
  // The RV of the latest committed change (what a LIST reports as metadata.resourceVersion).
  virtual int64_t currentResourceVersion() = 0;

  // Runs fn in one transaction; commits if it returns OK, else rolls back and
  // returns fn's status. Listeners see the events only after commit.
  virtual Status transact(const std::function<Status(Txn&)>& fn) = 0;

  // Convenience single-operation transactions.
  StatusOr<Object> create(const Key& key, nlohmann::json body);
  StatusOr<Object> update(const Key& key, nlohmann::json body, int64_t expected_rv);
  StatusOr<Object> remove(const Key& key);

  // Events with resource_version > since_rv, oldest first, for `kind` (empty =
  // all kinds). kGone when since_rv is older than the retained history.
  virtual StatusOr<std::vector<Event>> eventsSince(int64_t since_rv, const std::string& kind) = 0;

  // Registers a listener for committed events; returns an id for removeListener.
  virtual int addListener(std::function<void(const Event&)> fn) = 0;
  virtual void removeListener(int id) = 0;
};

}  // namespace knap::store
