// Keep-alive connections to pods, one Upstream per pod endpoint on each
// router worker.
//
// A connection enters the pool only after a complete, in-sync exchange
// (the proxy decides that; see proxy.cc). A connection still idle at the
// next sweep() is watched from then on: the moment the pod closes it (or
// sends anything unasked) it is closed here, so no idle connection lingers
// in CLOSE-WAIT longer than one sweep period. A connection reused before
// that costs no syscall to park or take (arming a watch costs a recv, and
// so does a check): that is the keep-alive fast path.
// Idle connections older than the idle timeout are closed by sweep(), and
// drop() closes every idle connection of a pod the moment it leaves the
// endpoints.
//
// Thread safety: an UpstreamPool belongs to one worker and is touched only
// on that worker's io_context thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "common/clock.h"
#include "router/deadline_stream.h"

namespace knap::router {

// One pod endpoint's idle connections.
class Upstream {
 public:
  using Stream = DeadlineStream;
  struct Idle {
    std::unique_ptr<Stream> stream;
    MonoTime since;
    uint64_t id;
    bool watched;  // a watch is armed (sweep() arms it)
  };
  std::deque<Idle>& idle() { return idle_; }
  const std::deque<Idle>& idle() const { return idle_; }

 private:
  std::deque<Idle> idle_;  // most recently used at the back
};

class UpstreamPool {
 public:
  using Stream = DeadlineStream;
  UpstreamPool(const TimeSource& time, Duration idle_timeout, size_t max_idle_per_endpoint)
      : time_(time), idle_timeout_(idle_timeout), max_idle_(max_idle_per_endpoint) {}
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // An idle connection to `endpoint` that still looks usable, or null: the
  // most recently parked one. It is first checked for EOF or unasked bytes
  // (a MSG_PEEK) unless `can_retry` (the caller sends the request again on
  // a fresh connection if this one turns out dead: no body was consumed)
  // and it was parked less than kCheckAfterIdle ago.
  std::unique_ptr<Stream> take(const std::string& endpoint, bool can_retry);
  static constexpr Duration kCheckAfterIdle = std::chrono::milliseconds(500);
  // Parks a connection after a complete exchange (closed when the pool is full).
  void put(const std::string& endpoint, std::unique_ptr<Stream> stream);
  // Closes every idle connection to `endpoint` (the pod left the endpoints).
  void drop(const std::string& endpoint);
  // Closes connections idle longer than the idle timeout.
  void sweep();
  // Idle connections held (all endpoints).
  size_t idleCount() const;

 private:
  void watch(const std::string& endpoint, Stream& stream, uint64_t id);
  void closeId(const std::string& endpoint, uint64_t id);
  const TimeSource& time_;
  Duration idle_timeout_;
  size_t max_idle_;
  uint64_t next_id_ = 1;
  std::map<std::string, Upstream> upstreams_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // watch handlers check it
};

}  // namespace knap::router
