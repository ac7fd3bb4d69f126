#include "images/pull_credentials.h"

namespace knap::images {

void PullCredentials::set(const std::string& requester, AuthConfig auth) {
  std::lock_guard<std::mutex> l(mu_);
  if (auth.empty()) {
    by_requester_.erase(requester);
  } else {
    by_requester_[requester] = std::move(auth);
  }
}

void PullCredentials::release(const std::string& requester) {
  std::lock_guard<std::mutex> l(mu_);
  by_requester_.erase(requester);
}

std::optional<Credential> PullCredentials::lookup(const std::string& host) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [requester, auth] : by_requester_) {
    if (auto it = auth.find(host); it != auth.end()) return it->second;
  }
  return std::nullopt;
}

}  // namespace knap::images
