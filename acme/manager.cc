#include "acme/manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "acme/client.h"
#include "acme/jws.h"
#include "common/log.h"
#include "common/tls.h"

namespace knap::acme {
namespace {

StatusOr<std::string> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return notFound(path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (1 << 20)) return invalidArgument(path + ": larger than 1 MiB");
  return ss.str();
}

// Writes `data` to `path` atomically (a temporary beside it, then rename) with `mode`.
Status writeFile(const std::string& path, const std::string& data, mode_t mode) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return unavailable(tmp + ": " + std::strerror(errno));
  ::fchmod(fd, mode);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string err = std::strerror(errno);
      ::close(fd);
      return unavailable(tmp + ": " + err);
    }
    off += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return unavailable(path + ": " + std::strerror(errno));
  return Status::ok();
}

Status makeDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return unavailable(dir + ": " + std::strerror(errno));
  return Status::ok();
}

}  // namespace

CertificateManager::CertificateManager(ManagerOptions options, const TimeSource& time)
    : options_(std::move(options)), time_(time), loop_(time, "ACME loop") {}

CertificateManager::~CertificateManager() {
  stop();
}

Status CertificateManager::start() {
  KNAP_RETURN_IF_ERROR(makeDir(options_.data_dir + "/acme"));
  KNAP_RETURN_IF_ERROR(makeDir(certDir()));
  const std::string key_path = options_.data_dir + "/acme/account.key";
  auto pem = readFile(key_path);
  if (pem.isOk()) {
    auto key = AccountKey::fromPem(*pem);
    if (!key.isOk()) return invalidArgument("ACME account key " + key_path + ": " + key.status().message());
    account_pem_ = *pem;
  } else {
    auto key = AccountKey::generate();
    if (!key.isOk()) return key.status();
    account_pem_ = key->pem();
    KNAP_RETURN_IF_ERROR(writeFile(key_path, account_pem_, 0600));
    LOG(INFO) << "ACME: created the account key " << key_path;
  }
  loop_.start([this] { return step(); });
  return Status::ok();
}

void CertificateManager::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  loop_.stop();
}

void CertificateManager::setHosts(const std::vector<std::string>& hosts) {
  std::vector<std::string> added;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, Entry> next;
    for (const std::string& h : hosts) {
      // The host names a file: DNS names only (no '/', no "..", no wildcard).
      const bool dns = !h.empty() && h.size() <= 253 && h.front() != '.' &&
                       h.find("..") == std::string::npos && std::all_of(h.begin(), h.end(), [](char c) {
                         return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
                       });
      if (!dns) {
        LOG(WARNING) << "ACME: not a DNS host name, no certificate requested: \"" << h.substr(0, 100) << "\"";
        continue;
      }
      auto it = hosts_.find(h);
      if (it == hosts_.end()) added.push_back(h);
      next[h] = it != hosts_.end() ? it->second : Entry{};
    }
    hosts_ = std::move(next);
  }
  if (added.empty()) return;
  loop_.wake();
  // A new host is pending: its Route's condition says so from now on.
  if (options_.on_change) {
    for (const std::string& h : added) options_.on_change(h);
  }
}

std::optional<HostState> CertificateManager::state(const std::string& host) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return std::nullopt;
  return it->second.state;
}

void CertificateManager::publish(const std::string& token, const std::string& key_authorization) {
  std::shared_ptr<const Challenges> snapshot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (key_authorization.empty()) {
      challenges_.erase(token);
    } else {
      challenges_[token] = key_authorization;
    }
    snapshot = std::make_shared<const Challenges>(challenges_);
  }
  if (options_.set_challenges) options_.set_challenges(snapshot);
}

void CertificateManager::setState(const std::string& host, HostState s, MonoTime due,
                                  std::chrono::seconds backoff) {
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = hosts_.find(host);
    if (it == hosts_.end()) return;
    Entry& e = it->second;
    changed = e.state.kind != s.kind || e.state.message != s.message || e.state.not_after != s.not_after;
    e.state = std::move(s);
    e.due = due;
    e.backoff = backoff;
    e.checked_disk = true;
  }
  if (changed && options_.on_change) options_.on_change(host);
}

MonoTime CertificateManager::step() {
  auto earliest = [this](std::string* host) {
    std::lock_guard<std::mutex> lock(mu_);
    MonoTime due = MonoTime::max();  // no host: setHosts() wakes the loop
    for (const auto& [h, e] : hosts_) {
      if (e.due < due) {
        due = e.due;
        *host = h;
      }
    }
    return stopping_ ? MonoTime::max() : due;
  };
  std::string host;
  if (earliest(&host) <= time_.monotonic()) work(host);
  host.clear();
  return earliest(&host);
}

void CertificateManager::work(const std::string& host) {
  using std::chrono::seconds;
  const MonoTime now = time_.monotonic();
  const int64_t wall = static_cast<int64_t>(std::chrono::system_clock::to_time_t(time_.now()));
  const std::string crt = certDir() + "/" + host + ".crt";
  const std::string key = certDir() + "/" + host + ".key";
  Entry entry;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = hosts_.find(host);
    if (it == hosts_.end()) return;
    entry = it->second;
  }
  // What is on disk (a restart keeps its certificates).
  int64_t not_after = 0;
  if (auto chain = readFile(crt); chain.isOk()) {
    if (auto k = readFile(key); k.isOk()) {
      if (auto cert = tls::loadServerCertificate(*chain, *k, "file " + crt); cert.isOk())
        not_after = cert->not_after;
    }
  }
  const int64_t renew_at = not_after - options_.renew_before.count();
  if (!entry.checked_disk && not_after > 0 && renew_at > wall) {
    setState(host, {HostState::Kind::kIssued, "", not_after}, now + seconds(renew_at - wall), seconds(0));
    return;
  }

  LOG(INFO) << "ACME: requesting a certificate for " << host << " from " << options_.directory_url
            << (not_after > 0 ? " (renewal)" : "");
  auto account = AccountKey::fromPem(account_pem_);
  StatusOr<Issued> issued = unavailable("ACME account key: unusable");
  if (!account.isOk()) {
    issued = account.status();
  } else {
    auto transport = makeCurlTransport({options_.ca_file, std::chrono::milliseconds(30000), 1 << 20});
    ClientOptions co;
    co.directory_url = options_.directory_url;
    co.email = options_.email;
    co.sleep = [this](std::chrono::milliseconds d) {
      std::unique_lock<std::mutex> lock(mu_);
      return !time_.waitUntil(lock, cv_, time_.monotonic() + d, [this] { return stopping_; });
    };
    AcmeClient client(*transport, *account, co);
    issued = client.issue(host, [this](const std::string& t, const std::string& ka) { publish(t, ka); });
  }
  if (issued.isOk()) {
    auto cert =
        tls::loadServerCertificate(issued->chain_pem, issued->key_pem, "ACME certificate for " + host);
    Status st = cert.status();
    if (st.isOk()) st = writeFile(key, issued->key_pem, 0600);
    if (st.isOk()) st = writeFile(crt, issued->chain_pem, 0644);
    if (st.isOk()) {
      const int64_t next = std::max<int64_t>(cert->not_after - options_.renew_before.count() - wall,
                                             kMinRenewInterval.count());
      LOG(INFO) << "ACME: certificate for " << host << " issued, valid until " << cert->not_after
                << " (epoch s); next renewal in " << next << " s";
      setState(host, {HostState::Kind::kIssued, "", cert->not_after}, now + seconds(next), seconds(0));
      return;
    }
    issued = st;
  }
  const seconds backoff = entry.backoff.count() == 0 ? kFirstRetry : std::min(entry.backoff * 2, kMaxRetry);
  LOG(WARNING) << "ACME: certificate for " << host << " failed (retry in " << backoff.count()
               << " s): " << issued.status().message();
  if (not_after > wall) {
    // A renewal failed but the current certificate is still served.
    setState(host, {HostState::Kind::kIssued, "", not_after}, now + backoff, backoff);
  } else {
    setState(host, {HostState::Kind::kFailed, issued.status().message(), 0}, now + backoff, backoff);
  }
}

}  // namespace knap::acme
