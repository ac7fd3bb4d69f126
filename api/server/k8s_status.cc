#include "api/server/k8s_status.h"

namespace knap::api {

using nlohmann::json;

ApiError makeApiError(int code, const std::string& reason, const std::string& message, json details) {
  json body = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
               {"status", "Failure"}, {"message", message}, {"reason", reason},
               {"code", code}};
  if (!details.is_null()) body["details"] = std::move(details);
  return {code, std::move(body)};
}

std::string qualifiedResource(const ResourceInfo& info) {
  return info.core() ? info.plural : info.plural + "." + info.group;
}

namespace {
json details(const ResourceInfo& info, const std::string& name, const std::string& kind) {
  json d = {{"group", info.group}, {"kind", kind}};
  if (!name.empty()) d["name"] = name;
  return d;
}
}  // namespace

ApiError notFoundError(const ResourceInfo& info, const std::string& name) {
  return makeApiError(404, "NotFound", qualifiedResource(info) + " \"" + name + "\" not found",
                      details(info, name, info.plural));
}

ApiError alreadyExistsError(const ResourceInfo& info, const std::string& name) {
  return makeApiError(409, "AlreadyExists", qualifiedResource(info) + " \"" + name + "\" already exists",
                      details(info, name, info.plural));
}

ApiError conflictError(const ResourceInfo& info, const std::string& name, const std::string& why) {
  return makeApiError(
      409, "Conflict",
      "Operation cannot be fulfilled on " + qualifiedResource(info) + " \"" + name + "\": " + why,
      details(info, name, info.plural));
}

ApiError badRequestError(const std::string& message) {
  return makeApiError(400, "BadRequest", message);
}

ApiError invalidError(const ResourceInfo& info, const std::string& name, const Status& status) {
  json causes = json::array();
  std::string summary;
  for (const FieldError& fe : status.fieldErrors()) {
    causes.push_back({{"reason", fe.reason}, {"message", fe.message}, {"field", fe.field}});
    if (!summary.empty()) summary += ", ";
    summary += fe.field.empty() ? fe.message : fe.field + ": " + fe.message;
  }
  if (causes.empty()) {
    causes.push_back({{"reason", "FieldValueInvalid"}, {"message", status.message()}, {"field", ""}});
    summary = status.message();
  }
  json d = details(info, name, info.kind);
  d["causes"] = std::move(causes);
  std::string message = (info.core() ? info.kind : info.kind + "." + info.group) + " \"" + name +
                        "\" is invalid: " + (status.fieldErrors().size() > 1 ? "[" + summary + "]" : summary);
  return makeApiError(422, "Invalid", message, std::move(d));
}

ApiError errorFromStatus(const Status& status, const ResourceInfo* info, const std::string& name) {
  switch (status.code()) {
    case Code::kNotFound:
      if (info) return notFoundError(*info, name);
      return makeApiError(404, "NotFound", status.message());
    case Code::kAlreadyExists:
      if (info) return alreadyExistsError(*info, name);
      return makeApiError(409, "AlreadyExists", status.message());
    case Code::kConflict:
      if (info)
        return conflictError(*info, name,
                             "the object has been modified; please apply your changes to the "
                             "latest version and try again");
      return makeApiError(409, "Conflict", status.message());
    case Code::kInvalidArgument:
      if (info) return invalidError(*info, name, status);
      return badRequestError(status.message());
    case Code::kGone:
      return makeApiError(410, "Expired", status.message());
    case Code::kResourceExhausted:
      return makeApiError(429, "TooManyRequests", status.message());
    case Code::kUnsupported:
      return makeApiError(415, "UnsupportedMediaType", status.message());
    case Code::kFailedPrecondition:
      return makeApiError(400, "BadRequest", status.message());
    case Code::kUnavailable:
      return makeApiError(503, "ServiceUnavailable", status.message());
    case Code::kDeadlineExceeded:
      return makeApiError(504, "Timeout", status.message());
    default:
      return makeApiError(500, "InternalError", "Internal error occurred: " + status.message());
  }
}

}  // namespace knap::api
