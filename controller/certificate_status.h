// CertificateStatus: where the Route reconciler learns whether the
// certificate of an external host is provisioned (the built-in ACME
// client, issue 14), for the Route's CertificateProvisioned condition.
// Implemented by the daemon; absent (nullptr) when certificates are only
// the operator's files and Secrets.
//
// Thread safety: called from the controller's worker thread; the
// implementation must be safe against its own writer.
#pragma once

#include <optional>
#include <string>

namespace knap::controller {

struct CertificateCondition {
  enum class State { kPending, kIssued, kFailed };
  State state = State::kPending;
  std::string message;  // kFailed: what the issuer said
};

class CertificateStatus {
 public:
  virtual ~CertificateStatus() = default;
  // nullopt: the host is not one this source provisions.
  virtual std::optional<CertificateCondition> certificateFor(const std::string& host) const = 0;
};

}  // namespace knap::controller
