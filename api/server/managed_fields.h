// Server-side apply's field ownership (metadata.managedFields), the way
// kube-apiserver keeps it for custom resources without list-type markers:
// objects are recursed field by field, every list and scalar is one atomic
// field (an empty object owns nothing). Each manager owns a set of fields, recorded per manager and
// operation ("Apply" for apply patches, "Update" for every other write) as
// FieldsV1 ({"f:spec":{"f:template":{...}}}).
//
//   apply(M):  every field M applies becomes M's; a field another manager owns
//              whose value M would change is a conflict (409) unless `force`,
//              which takes the field away from that manager; a field M applied
//              before and no longer applies is removed from the object when no
//              other manager owns it; the rest of the object is kept.
//   update(U): the fields a write changed become U's and leave the others.
//
// Server-owned fields (status, metadata other than labels, annotations,
// ownerReferences and finalizers, apiVersion, kind) are never owned.
// Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace knap::api {

using FieldPath = std::vector<std::string>;
using FieldSet = std::set<FieldPath>;

// The owned fields an object (or an applied configuration) sets.
FieldSet fieldsOf(const nlohmann::json& obj);
nlohmann::json toFieldsV1(const FieldSet& fields);
FieldSet fromFieldsV1(const nlohmann::json& fields_v1);
// ".spec.template.spec.containers" for conflict messages.
std::string fieldPathString(const FieldPath& path);

struct ApplyConflict {
  std::string manager;
  FieldPath path;
};

struct ApplyResult {
  nlohmann::json object;                 // live merged with the applied configuration; managedFields set
  std::vector<ApplyConflict> conflicts;  // non-empty: refused (object is then meaningless)
};

// Applies `applied` (apiVersion/kind/metadata/spec...) for `manager` over
// `live` (the stored object, with its managedFields; null for a create).
ApplyResult serverSideApply(const nlohmann::json& live, const nlohmann::json& applied,
                            const std::string& manager, bool force, const std::string& api_version,
                            WallTime now);

// Returns `next` with managedFields updated for a non-apply write by
// `manager` (old = the stored object, null for a create).
nlohmann::json recordUpdate(const nlohmann::json& old, nlohmann::json next, const std::string& manager,
                            const std::string& api_version, WallTime now);

// The 409 Status message kube-apiserver gives:
// Apply failed with 1 conflict: conflict with "mgr": .spec.x
std::string conflictMessage(const std::vector<ApplyConflict>& conflicts, const std::string& api_version);

}  // namespace knap::api
