#include "router/upstream.h"

#include <sys/socket.h>

#include <cerrno>

namespace knap::router {

namespace {

// True when an idle connection still looks usable: no EOF and no
// unexpected bytes waiting.
bool idleConnectionAlive(boost::asio::ip::tcp::socket& s) {
  if (!s.is_open()) return false;
  char byte;
  const ssize_t n = ::recv(s.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n >= 0) return false;  // 0: peer closed; > 0: garbage on an idle connection
  return errno == EAGAIN || errno == EWOULDBLOCK;
}

}  // namespace

UpstreamPool::~UpstreamPool() {
  *alive_ = false;
}

std::unique_ptr<UpstreamPool::Stream> UpstreamPool::take(const std::string& endpoint, bool can_retry) {
  auto it = upstreams_.find(endpoint);
  if (it == upstreams_.end()) return nullptr;
  auto& idle = it->second.idle();
  const MonoTime now = time_.monotonic();
  while (!idle.empty()) {
    Upstream::Idle last = std::move(idle.back());
    idle.pop_back();
    if (last.watched) {
      boost::system::error_code ignored;
      last.stream->socket().cancel(ignored);  // the watch; its handler finds the id gone
    }
    // A pod closes an idle keep-alive connection (or answers it with a 408)
    // after seconds of idleness. A request that can be retried on a fresh
    // connection trusts one parked moments ago without a syscall; any other
    // is first checked for EOF or unasked bytes.
    if ((can_retry && now - last.since < kCheckAfterIdle) || idleConnectionAlive(last.stream->socket())) {
      return std::move(last.stream);
    }
  }
  upstreams_.erase(it);
  return nullptr;
}

void UpstreamPool::put(const std::string& endpoint, std::unique_ptr<Stream> stream) {
  auto& idle = upstreams_[endpoint].idle();
  if (idle.size() >= max_idle_) return;  // closed by the unique_ptr
  stream->expires_never();
  idle.push_back(Upstream::Idle{std::move(stream), time_.monotonic(), next_id_++, false});
}

void UpstreamPool::watch(const std::string& endpoint, Stream& stream, uint64_t id) {
  // A 1-byte MSG_PEEK receive, not async_wait(wait_read): Asio starts a
  // wait without trying it first and so re-arms the descriptor with
  // epoll_ctl(MOD) on every park, EPOLLOUT included, whose edge then wakes
  // the loop for nothing. A receive is tried once (EAGAIN: nothing came)
  // and queued on the registration the socket already has, and it
  // completes on the same readiness: EOF (eof), a reset (its error) or
  // unasked bytes (left unread; the connection is closed anyway).
  static thread_local char peeked;  // written by the kernel, never read
  stream.socket().async_receive(
      boost::asio::buffer(&peeked, 1), MSG_PEEK,
      [this, alive = alive_, endpoint, id](const boost::system::error_code& ec, std::size_t) {
        if (ec == boost::asio::error::operation_aborted || !*alive)
          return;               // taken, dropped or shutting down
        closeId(endpoint, id);  // EOF, an error or unasked bytes: the connection is finished
      });
}

void UpstreamPool::closeId(const std::string& endpoint, uint64_t id) {
  auto it = upstreams_.find(endpoint);
  if (it == upstreams_.end()) return;
  auto& idle = it->second.idle();
  for (auto i = idle.begin(); i != idle.end(); ++i) {
    if (i->id == id) {
      idle.erase(i);
      break;
    }
  }
  if (idle.empty()) upstreams_.erase(it);
}

void UpstreamPool::drop(const std::string& endpoint) {
  upstreams_.erase(endpoint);
}

void UpstreamPool::sweep() {
  const MonoTime cutoff = time_.monotonic() - idle_timeout_;
  for (auto it = upstreams_.begin(); it != upstreams_.end();) {
    auto& idle = it->second.idle();
    while (!idle.empty() && idle.front().since <= cutoff) idle.pop_front();
    // Connections still idle since the last sweep are watched from now on.
    for (Upstream::Idle& i : idle) {
      if (i.watched) continue;
      watch(it->first, *i.stream, i.id);
      i.watched = true;
    }
    it = idle.empty() ? upstreams_.erase(it) : std::next(it);
  }
}

size_t UpstreamPool::idleCount() const {
  size_t n = 0;
  for (const auto& [k, u] : upstreams_) n += u.idle().size();
  return n;
}

}  // namespace knap::router
