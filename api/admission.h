// Admission: what happens to a user's object before it is stored — strict
// decoding (unknown fields), Knative defaulting and Knative validation
// (KNATIVE-CONTRACT §3). Pure functions over JSON; no I/O; thread-safe.
//
// Field paths in errors use kubectl's notation:
//   spec.template.spec.containers[0].ports[0].containerPort
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"

namespace knap::api {

enum class Operation { kCreate, kUpdate };

// Fields of `obj` (a full object of `kind`, including metadata and status) that
// the serving.knative.dev/v1 schema does not know, as field paths
// ("spec.foo", "spec.template.spec.containers[0].bar"). Wrong JSON types are
// reported as FieldErrors in the returned Status (kInvalidArgument) instead.
StatusOr<std::vector<std::string>> unknownFields(const std::string& kind, const nlohmann::json& obj);

// Applies Knative's defaults in place (containerConcurrency, timeoutSeconds,
// container name, readiness probe, traffic := 100% latest, ...). Idempotent.
void setDefaults(const std::string& kind, nlohmann::json& obj, const Config& config);

// Validates a defaulted object. `old` is the stored object on update (nullptr
// on create) for the update-time rules (immutable Revision spec, BYO name
// changes, creator annotation). Returns kInvalidArgument with one FieldError per
// problem, each naming the field path and the allowed values.
Status validate(const std::string& kind, const nlohmann::json& obj, const nlohmann::json* old, Operation op,
                const Config& config);

}  // namespace knap::api
