// Status and StatusOr<T>: the error currency across every knap module boundary.
//
// Thread safety: values; copy freely. No exceptions cross module boundaries:
// foreign errors (grpc::Status, SQLite codes, error_code, CURLcode) are converted
// into a Status once, in the adapter that calls the foreign library.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace knap {

enum class Code {
  kOk = 0,
  kInvalidArgument,     // bad input from a user: HTTP 400/422
  kNotFound,            // HTTP 404
  kAlreadyExists,       // HTTP 409 AlreadyExists
  kConflict,            // optimistic-lock failure: HTTP 409 Conflict
  kFailedPrecondition,  // state does not allow the operation
  kGone,                // watch resourceVersion too old: HTTP 410
  kResourceExhausted,   // queue full, body too large: HTTP 413/503
  kDeadlineExceeded,    // HTTP 504
  kUnavailable,         // dependency down, retry later: HTTP 503
  kUnsupported,         // HTTP 415 / 405
  kUnauthenticated,     // credentials missing or refused (a registry's 401/403)
  kDataLoss,            // content does not match its digest or size
  kInternal,            // a bug or an unexpected foreign failure: HTTP 500
};

const char* codeName(Code code);

// One problem with one field of an object, e.g. {"spec.traffic[1].percent",
// "must be in [0, 100]", "FieldValueInvalid"}. Used for 422 Invalid causes.
struct FieldError {
  std::string field;    // JSON path in kubectl's notation: spec.template.spec.containers[0].image
  std::string message;  // what is wrong and what is allowed
  std::string reason = "FieldValueInvalid";  // Kubernetes CauseType
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool isOk() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::vector<FieldError>& fieldErrors() const { return field_errors_; }
  Status& withFieldErrors(std::vector<FieldError> errors) {
    field_errors_ = std::move(errors);
    return *this;
  }
  // Prefixes the message with context, e.g. "import image x: " + message.
  Status annotate(const std::string& context) const;
  std::string toString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
  std::vector<FieldError> field_errors_;
};

inline Status invalidArgument(std::string m) {
  return {Code::kInvalidArgument, std::move(m)};
}
inline Status notFound(std::string m) {
  return {Code::kNotFound, std::move(m)};
}
inline Status alreadyExists(std::string m) {
  return {Code::kAlreadyExists, std::move(m)};
}
inline Status conflict(std::string m) {
  return {Code::kConflict, std::move(m)};
}
inline Status failedPrecondition(std::string m) {
  return {Code::kFailedPrecondition, std::move(m)};
}
inline Status unavailable(std::string m) {
  return {Code::kUnavailable, std::move(m)};
}
inline Status internalError(std::string m) {
  return {Code::kInternal, std::move(m)};
}
inline Status unauthenticated(std::string m) {
  return {Code::kUnauthenticated, std::move(m)};
}
inline Status dataLoss(std::string m) {
  return {Code::kDataLoss, std::move(m)};
}

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.isOk()) status_ = internalError("StatusOr constructed from an OK status");
  }
  bool isOk() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace knap

// Returns early from the enclosing function when `expr` is not OK.
#define KNAP_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::knap::Status knap_status_ = (expr);          \
    if (!knap_status_.isOk()) return knap_status_; \
  } while (0)

#define KNAP_CONCAT_INNER(a, b) a##b
#define KNAP_CONCAT(a, b) KNAP_CONCAT_INNER(a, b)
// KNAP_ASSIGN_OR_RETURN(auto x, f()); declares x from a StatusOr or returns its error.
#define KNAP_ASSIGN_OR_RETURN(lhs, expr) \
  KNAP_ASSIGN_OR_RETURN_IMPL(KNAP_CONCAT(knap_or_, __LINE__), lhs, expr)
#define KNAP_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.isOk()) return tmp.status();            \
  lhs = std::move(tmp).value()
