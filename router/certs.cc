#include "router/certs.h"

#include <cctype>

namespace knap::router {

namespace {

// Lower case, no trailing dot; "" for a value that cannot be a host name.
std::string normalise(std::string_view host) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty() || host.size() > 253) return "";
  std::string out(host);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::shared_ptr<const CertTable> CertTable::empty() {
  return std::make_shared<const CertTable>();
}

std::shared_ptr<const CertTable> CertTable::build(std::vector<CertEntry> entries,
                                                  std::vector<std::string>* shadowed) {
  auto t = std::make_shared<CertTable>();
  for (CertEntry& e : entries) {
    e.name = normalise(e.name);
    if (e.name.empty() || !e.ctx) continue;
    const bool wild = e.name.rfind("*.", 0) == 0;
    auto& map = wild ? t->wildcard_ : t->exact_;
    std::string key = wild ? e.name.substr(2) : e.name;
    auto it = map.find(key);
    if (it != map.end()) {
      if (shadowed != nullptr) {
        shadowed->push_back(e.name + ": " + e.origin + " is shadowed by " + it->second.origin);
      }
      continue;
    }
    map.emplace(std::move(key), std::move(e));
  }
  return t;
}

const CertEntry* CertTable::lookup(std::string_view host) const {
  const std::string h = normalise(host);
  if (h.empty()) return nullptr;
  if (auto it = exact_.find(h); it != exact_.end()) return &it->second;
  const size_t dot = h.find('.');
  if (dot == std::string::npos || dot == 0) return nullptr;
  if (auto it = wildcard_.find(h.substr(dot + 1)); it != wildcard_.end()) return &it->second;
  return nullptr;
}

bool CertTable::covers(std::string_view host) const {
  if (!host.empty() && host.front() == '[') return false;  // an IPv6 literal
  const size_t colon = host.rfind(':');
  if (colon != std::string_view::npos) host = host.substr(0, colon);
  return lookup(host) != nullptr;
}

std::vector<SSL_CTX*> CertTable::contexts() const {
  std::vector<SSL_CTX*> out;
  out.reserve(size());
  for (const auto* m : {&exact_, &wildcard_}) {
    for (const auto& [k, e] : *m) out.push_back(e.ctx.get());
  }
  return out;
}

}  // namespace knap::router
