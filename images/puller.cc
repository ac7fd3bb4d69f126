#include "images/puller.h"

namespace knap::images {

std::string pullFailureReason(const Status& status) {
  switch (status.code()) {
    case Code::kUnauthenticated:
      return "Unauthorized";
    case Code::kNotFound:
      return "ManifestUnknown";
    case Code::kUnavailable:
    case Code::kDeadlineExceeded:
      return "RegistryUnreachable";
    case Code::kDataLoss:
      return "DigestMismatch";
    case Code::kInvalidArgument:
      return "InvalidImageName";
    default:
      return "ImagePullFailed";
  }
}

}  // namespace knap::images
