// CertificateManager: keeps an ACME certificate for every host it is given
// (issue 14). One background Loop (common/loop.h) walks the hosts: a certificate already
// under <data-dir>/acme/certs/<host>.crt (+ .key, 0600) that is not within
// `renew_before` of its expiry is kept; otherwise AcmeClient::issue runs
// and the result is written there (the daemon serves that directory like
// knap.router-tls-certificates-dir). A failure is retried with exponential
// back-off (10 s doubling to 1 h); a certificate is never renewed less
// than kMinRenewInterval after it was issued, so a renew-before longer
// than the CA's lifetime cannot hammer the CA.
//
// The account key is <data-dir>/acme/account.key (0600), created once and
// reused. HTTP-01 tokens being validated are handed to `set_challenges`
// (the router answers /.well-known/acme-challenge/<token>). Every change
// of a host's state calls `on_change(host)` (the daemon re-reconciles the
// Route or DomainMapping serving the host so that CertificateProvisioned
// follows).
//
// Every time (due dates, back-off, expiry checks, the client's polling
// pauses) is read from the TimeSource the daemon hands down, so tests step a
// SimulatedTimeSource through the back-off instead of waiting for it.
//
// Thread safety: setHosts/state from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/loop.h"
#include "common/status.h"

namespace knap::acme {

using Challenges = std::unordered_map<std::string, std::string>;  // token -> key authorization

struct ManagerOptions {
  std::string directory_url;
  std::string email;
  std::string ca_file;   // trust for the ACME server's own TLS ("" = system CAs)
  std::string data_dir;  // keys and certificates go to <data_dir>/acme
  std::chrono::seconds renew_before{30 * 24 * 3600};
  std::function<void(std::shared_ptr<const Challenges>)> set_challenges;
  std::function<void(const std::string& host)> on_change;
};

struct HostState {
  enum class Kind { kPending, kIssued, kFailed };
  Kind kind = Kind::kPending;
  std::string message;    // the ACME error of the last attempt (kFailed)
  int64_t not_after = 0;  // kIssued: the certificate's expiry (epoch seconds)
};

class CertificateManager {
 public:
  static constexpr std::chrono::seconds kMinRenewInterval{30};
  static constexpr std::chrono::seconds kFirstRetry{10};
  static constexpr std::chrono::seconds kMaxRetry{3600};

  // `time` must outlive the manager.
  CertificateManager(ManagerOptions options, const TimeSource& time);
  ~CertificateManager();
  CertificateManager(const CertificateManager&) = delete;
  CertificateManager& operator=(const CertificateManager&) = delete;

  Status start();  // creates <data_dir>/acme and the account key; starts the loop
  void stop();

  // The hosts that need a certificate (lower case); others are forgotten
  // (their files stay).
  void setHosts(const std::vector<std::string>& hosts);
  // nullopt: not a managed host.
  std::optional<HostState> state(const std::string& host) const;
  std::string certDir() const { return options_.data_dir + "/acme/certs"; }

 private:
  struct Entry {
    HostState state;
    MonoTime due{};
    std::chrono::seconds backoff{0};
    bool checked_disk = false;
  };
  // The loop's step: works on at most one due host; returns when the next is due.
  MonoTime step();
  void work(const std::string& host);
  void publish(const std::string& token, const std::string& key_authorization);
  void setState(const std::string& host, HostState s, MonoTime due, std::chrono::seconds backoff);

  ManagerOptions options_;
  const TimeSource& time_;
  std::string account_pem_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // ends the client's polling pauses on stop()
  std::map<std::string, Entry> hosts_;
  Challenges challenges_;
  bool stopping_ = false;
  Loop loop_;  // last: stopped (joined) before the state it reads is destroyed
};

}  // namespace knap::acme
