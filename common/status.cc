#include "common/status.h"

namespace knap {

const char* codeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kNotFound:
      return "NotFound";
    case Code::kAlreadyExists:
      return "AlreadyExists";
    case Code::kConflict:
      return "Conflict";
    case Code::kFailedPrecondition:
      return "FailedPrecondition";
    case Code::kGone:
      return "Gone";
    case Code::kResourceExhausted:
      return "ResourceExhausted";
    case Code::kDeadlineExceeded:
      return "DeadlineExceeded";
    case Code::kUnavailable:
      return "Unavailable";
    case Code::kUnsupported:
      return "Unsupported";
    case Code::kUnauthenticated:
      return "Unauthenticated";
    case Code::kDataLoss:
      return "DataLoss";
    case Code::kInternal:
      return "Internal";
  }
  return "Unknown";
}

Status Status::annotate(const std::string& context) const {
  if (isOk()) return *this;
  Status s(code_, context + ": " + message_);
  s.field_errors_ = field_errors_;
  return s;
}

std::string Status::toString() const {
  if (isOk()) return "OK";
  std::string out = std::string(codeName(code_)) + ": " + message_;
  for (const auto& fe : field_errors_) out += "\n  " + fe.field + ": " + fe.message;
  return out;
}

}  // namespace knap
