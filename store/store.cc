#include "store/store.h"

namespace knap::store {

const char* eventTypeName(EventType t) {
  switch (t) {
    case EventType::kAdded:
      return "ADDED";
    case EventType::kModified:
      return "MODIFIED";
    case EventType::kDeleted:
      return "DELETED";
  }
  return "ERROR";
}

StatusOr<std::vector<Store::RawObject>> Store::listRaw(const std::string& kind, const std::string& ns,
                                                       bool with_labels) {
  KNAP_ASSIGN_OR_RETURN(std::vector<Object> objects, list(kind, ns));
  std::vector<RawObject> out;
  out.reserve(objects.size());
  for (const Object& o : objects) {
    std::string labels;
    if (with_labels && o.body.contains("metadata") && o.body["metadata"].is_object() &&
        o.body["metadata"].contains("labels"))
      labels = o.body["metadata"]["labels"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out.push_back({o.key, o.resource_version,
                   o.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), std::move(labels)});
  }
  return out;
}

StatusOr<std::vector<Store::RawObject>> Store::listRawWithLabel(const std::string& kind,
                                                                const std::string& ns, const std::string&,
                                                                const std::vector<std::string>&) {
  return listRaw(kind, ns);
}

StatusOr<Object> Store::create(const Key& key, nlohmann::json body) {
  Object out;
  Status st = transact([&](Txn& txn) -> Status {
    KNAP_ASSIGN_OR_RETURN(out, txn.create(key, std::move(body)));
    return Status::ok();
  });
  if (!st.isOk()) return st;
  return out;
}

StatusOr<Object> Store::update(const Key& key, nlohmann::json body, int64_t expected_rv) {
  Object out;
  Status st = transact([&](Txn& txn) -> Status {
    KNAP_ASSIGN_OR_RETURN(out, txn.update(key, std::move(body), expected_rv));
    return Status::ok();
  });
  if (!st.isOk()) return st;
  return out;
}

StatusOr<Object> Store::remove(const Key& key) {
  Object out;
  Status st = transact([&](Txn& txn) -> Status {
    KNAP_ASSIGN_OR_RETURN(out, txn.remove(key));
    return Status::ok();
  });
  if (!st.isOk()) return st;
  return out;
}

}  // namespace knap::store
