#include "api/server/managed_fields.h"

#include <algorithm>
#include <functional>
#include <map>

namespace knap::api {

using nlohmann::json;

namespace {

constexpr const char* kLastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration";

bool ownedMetadataField(const std::string& k) {
  return k == "labels" || k == "annotations" || k == "ownerReferences" || k == "finalizers";
}

// An empty object sets nothing, so it owns nothing (`labels: {}` does not
// claim other managers' labels).
void collect(const json& v, FieldPath& path, FieldSet& out) {
  if (v.is_object()) {
    for (const auto& [k, child] : v.items()) {
      path.push_back(k);
      collect(child, path, out);
      path.pop_back();
    }
    return;
  }
  out.insert(path);  // a scalar, a list or null: one atomic field
}

const json* at(const json& obj, const FieldPath& path) {
  const json* cur = &obj;
  for (const std::string& k : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

void setAt(json& obj, const FieldPath& path, const json& value) {
  json* cur = &obj;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!cur->is_object()) *cur = json::object();
    cur = &(*cur)[path[i]];
  }
  if (!cur->is_object()) *cur = json::object();
  (*cur)[path.back()] = value;
}

void removeAt(json& obj, const FieldPath& path) {
  json* cur = &obj;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!cur->is_object() || !cur->contains(path[i])) return;
    cur = &(*cur)[path[i]];
  }
  if (cur->is_object()) cur->erase(path.back());
}

// Two fields overlap when one is the other or contains it.
bool overlaps(const FieldPath& a, const FieldPath& b) {
  size_t n = std::min(a.size(), b.size());
  return std::equal(a.begin(), a.begin() + static_cast<long>(n), b.begin());
}

struct Entry {
  std::string manager;
  std::string operation;
  std::string api_version;
  std::string time;
  FieldSet fields;
  json raw;  // entries we do not understand are kept as they are
};

std::vector<Entry> readEntries(const json& obj) {
  std::vector<Entry> out;
  const json* mf = at(obj, {"metadata", "managedFields"});
  if (!mf || !mf->is_array()) return out;
  for (const json& e : *mf) {
    if (!e.is_object()) continue;
    Entry en;
    en.manager = e.value("manager", "");
    en.operation = e.value("operation", "");
    en.api_version = e.value("apiVersion", "");
    en.time = e.value("time", "");
    if (e.contains("fieldsV1")) en.fields = fromFieldsV1(e["fieldsV1"]);
    en.raw = e;
    out.push_back(std::move(en));
  }
  return out;
}

json writeEntries(const std::vector<Entry>& entries) {
  json out = json::array();
  for (const Entry& e : entries) {
    if (e.fields.empty()) continue;  // a manager that owns nothing is dropped, as in Kubernetes
    out.push_back({{"manager", e.manager},
                   {"operation", e.operation},
                   {"apiVersion", e.api_version},
                   {"time", e.time},
                   {"fieldsType", "FieldsV1"},
                   {"fieldsV1", toFieldsV1(e.fields)}});
  }
  return out;
}

void setManaged(json& obj, const std::vector<Entry>& entries) {
  json mf = writeEntries(entries);
  if (!obj.is_object()) return;
  if (mf.empty()) {
    if (obj.contains("metadata") && obj["metadata"].is_object()) obj["metadata"].erase("managedFields");
  } else {
    obj["metadata"]["managedFields"] = mf;
  }
}

Entry& entryFor(std::vector<Entry>& entries, const std::string& manager, const std::string& operation,
                const std::string& api_version) {
  for (Entry& e : entries)
    if (e.manager == manager && e.operation == operation) return e;
  entries.push_back({manager, operation, api_version, "", {}, json()});
  return entries.back();
}

// Removes from every other manager the fields that overlap `taken`.
void takeAway(std::vector<Entry>& entries, const Entry* keep, const FieldSet& taken) {
  for (Entry& e : entries) {
    if (&e == keep) continue;
    for (auto it = e.fields.begin(); it != e.fields.end();) {
      bool hit = false;
      for (const FieldPath& t : taken) {
        if (overlaps(*it, t)) {
          hit = true;
          break;
        }
      }
      it = hit ? e.fields.erase(it) : std::next(it);
    }
  }
}

}  // namespace

FieldSet fieldsOf(const json& obj) {
  FieldSet out;
  if (!obj.is_object()) return out;
  FieldPath path;
  for (const auto& [k, v] : obj.items()) {
    if (k == "apiVersion" || k == "kind" || k == "status") continue;
    if (k == "metadata") {
      if (!v.is_object()) continue;
      for (const auto& [mk, mv] : v.items()) {
        if (!ownedMetadataField(mk)) continue;
        path = {"metadata", mk};
        collect(mv, path, out);
      }
      continue;
    }
    path = {k};
    collect(v, path, out);
  }
  return out;
}

json toFieldsV1(const FieldSet& fields) {
  json out = json::object();
  for (const FieldPath& p : fields) {
    json* cur = &out;
    for (const std::string& k : p) cur = &(*cur)["f:" + k];
    if (cur->is_null()) *cur = json::object();
  }
  return out;
}

FieldSet fromFieldsV1(const json& v1) {
  FieldSet out;
  std::function<void(const json&, FieldPath&)> walk = [&](const json& node, FieldPath& path) {
    bool child = false;
    if (node.is_object()) {
      for (const auto& [k, v] : node.items()) {
        if (k.rfind("f:", 0) != 0) continue;  // ".", "k:", "v:", "i:" markers: not produced here
        child = true;
        path.push_back(k.substr(2));
        walk(v, path);
        path.pop_back();
      }
    }
    if (!child && !path.empty()) out.insert(path);
  };
  FieldPath path;
  walk(v1, path);
  return out;
}

std::string fieldPathString(const FieldPath& path) {
  std::string s;
  for (const std::string& k : path) s += "." + k;
  return s;
}

ApplyResult serverSideApply(const json& live, const json& applied, const std::string& manager, bool force,
                            const std::string& api_version, WallTime now) {
  ApplyResult r;
  std::vector<Entry> entries = live.is_object() ? readEntries(live) : std::vector<Entry>{};
  FieldSet fields = fieldsOf(applied);
  json object = live.is_object() ? live : json::object();
  Entry* mine = nullptr;
  for (Entry& e : entries)
    if (e.manager == manager && e.operation == "Apply") mine = &e;
  // Conflicts: a field another manager owns, whose value this apply changes.
  for (const FieldPath& p : fields) {
    const json* want = at(applied, p);
    const json* have = at(object, p);
    if (have && want && *have == *want) continue;
    // kubectl's own bookkeeping annotation, written by every kubectl apply flavour.
    if (p == FieldPath{"metadata", "annotations", kLastAppliedAnnotation}) continue;
    for (const Entry& e : entries) {
      if (&e == mine) continue;
      for (const FieldPath& owned : e.fields) {
        if (!overlaps(owned, p)) continue;
        bool known = false;
        for (const ApplyConflict& c : r.conflicts)
          known = known || (c.manager == e.manager && c.path == owned);
        if (!known) r.conflicts.push_back({e.manager, owned});
        break;
      }
    }
  }
  if (!r.conflicts.empty() && !force) return r;
  r.conflicts.clear();
  // Fields this manager applied before and no longer applies: removed unless
  // someone else owns them too.
  if (mine) {
    for (const FieldPath& old : mine->fields) {
      bool still = false;
      for (const FieldPath& p : fields) still = still || overlaps(old, p);
      if (still) continue;
      bool other = false;
      for (const Entry& e : entries) {
        if (&e == mine) continue;
        for (const FieldPath& owned : e.fields) other = other || overlaps(owned, old);
      }
      if (!other) removeAt(object, old);
    }
  }
  FieldSet changed;
  for (const FieldPath& p : fields) {
    const json* want = at(applied, p);
    const json* have = at(object, p);
    if (!have || *have != *want) changed.insert(p);
    setAt(object, p, *want);
  }
  Entry& me = entryFor(entries, manager, "Apply", api_version);
  // With force, or for fields whose value changed, other managers lose them;
  // equal values stay shared.
  if (force)
    takeAway(entries, &me, fields);
  else
    takeAway(entries, &me, changed);
  if (me.fields != fields || me.time.empty()) me.time = formatRfc3339(now);
  me.fields = fields;
  me.api_version = api_version;
  for (const char* k : {"apiVersion", "kind"})
    if (applied.contains(k)) object[k] = applied[k];
  if (applied.contains("metadata") && applied["metadata"].is_object()) {
    for (const char* k : {"name", "namespace"})
      if (applied["metadata"].contains(k)) object["metadata"][k] = applied["metadata"][k];
  }
  setManaged(object, entries);
  r.object = std::move(object);
  return r;
}

json recordUpdate(const json& old, json next, const std::string& manager, const std::string& api_version,
                  WallTime now) {
  std::vector<Entry> entries = old.is_object() ? readEntries(old) : std::vector<Entry>{};
  FieldSet before = old.is_object() ? fieldsOf(old) : FieldSet{};
  FieldSet after = fieldsOf(next);
  FieldSet changed;
  for (const FieldPath& p : after) {
    const json* a = at(next, p);
    const json* b = old.is_object() ? at(old, p) : nullptr;
    if (!b || *a != *b) changed.insert(p);
  }
  for (const FieldPath& p : before)
    if (!after.count(p) && !at(next, p)) changed.insert(p);  // removed: nobody owns it any more
  if (!changed.empty()) {
    Entry& me = entryFor(entries, manager, "Update", api_version);
    takeAway(entries, &me, changed);
    for (const FieldPath& p : changed)
      if (at(next, p)) me.fields.insert(p);
    me.time = formatRfc3339(now);
    me.api_version = api_version;
  }
  // Fields that no longer exist are owned by nobody.
  for (Entry& e : entries) {
    for (auto it = e.fields.begin(); it != e.fields.end();)
      it = at(next, *it) ? std::next(it) : e.fields.erase(it);
  }
  setManaged(next, entries);
  return next;
}

std::string conflictMessage(const std::vector<ApplyConflict>& conflicts, const std::string& api_version) {
  std::string msg = "Apply failed with " + std::to_string(conflicts.size()) + " conflict" +
                    (conflicts.size() == 1 ? "" : "s") + ": ";
  for (size_t i = 0; i < conflicts.size(); ++i) {
    if (i) msg += "\n";
    msg += "conflict with \"" + conflicts[i].manager + "\" using " + api_version + ": " +
           fieldPathString(conflicts[i].path);
  }
  return msg;
}

}  // namespace knap::api
