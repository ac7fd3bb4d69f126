// JSON document helpers for PATCH and field pruning: RFC 6902 JSON patch
// (JSON merge patch, RFC 7386, is nlohmann::json::merge_patch) and removal of
// a field named by a kubectl-style path. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "api/codec.h"
#include "common/status.h"

namespace knap::api {

// Applies an RFC 6902 patch (add, remove, replace, move, copy, test) to `doc`.
// kInvalidArgument when the patch is not an array of operations, an operation
// is malformed, a path does not exist or a test fails (message says which).
// kResourceExhausted when it has more than 10,000 operations or an operation
// would grow the document beyond limits.max_nodes values (checked before the
// operation runs, so a self-copying patch costs at most the budget).
StatusOr<nlohmann::json> applyJsonPatch(const nlohmann::json& doc, const nlohmann::json& patch,
                                        const DecodeLimits& limits = {});

// Removes the field at `path` ("spec.template.spec.containers[0].foo") from
// `obj`; returns false when no such field exists.
bool removeFieldPath(nlohmann::json& obj, const std::string& path);

}  // namespace knap::api
