// Kubernetes `Status` objects (kind Status, apiVersion v1): the error bodies
// the REST server sends, and the mapping from knap::Status to HTTP codes and
// Kubernetes reasons (KUBECTL-WIRE §10). Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "api/resources.h"
#include "common/status.h"

namespace knap::api {

// An HTTP reply whose body is a Kubernetes Status (always application/json).
struct ApiError {
  int code = 500;
  nlohmann::json body;
};

// {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",...}.
// `details` is omitted when null.
ApiError makeApiError(int code, const std::string& reason, const std::string& message,
                      nlohmann::json details = nullptr);

// "services.serving.knative.dev"
std::string qualifiedResource(const ResourceInfo& info);

ApiError notFoundError(const ResourceInfo& info, const std::string& name);
ApiError alreadyExistsError(const ResourceInfo& info, const std::string& name);
ApiError conflictError(const ResourceInfo& info, const std::string& name, const std::string& why);
ApiError badRequestError(const std::string& message);
// 422 Invalid with details {name, group, kind: Kind, causes[]} from the field errors.
ApiError invalidError(const ResourceInfo& info, const std::string& name, const Status& status);

// Maps a failed knap::Status from the store or admission for an object of
// `info` named `name` onto the matching Kubernetes error.
ApiError errorFromStatus(const Status& status, const ResourceInfo* info, const std::string& name);

}  // namespace knap::api
