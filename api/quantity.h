// Kubernetes resource quantities ("100m", "128Mi", "1.5", "2e3", 1).
// Pure functions; thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace knap::api {

// The value of a quantity in base units (cores, bytes): "100m" -> 0.1,
// "128Mi" -> 134217728. Accepts a JSON string or number. Returns
// kInvalidArgument with the Kubernetes wording ("quantities must match the
// regular expression ...") otherwise.
StatusOr<double> parseQuantity(const nlohmann::json& value);
StatusOr<double> parseQuantity(const std::string& text);

}  // namespace knap::api
