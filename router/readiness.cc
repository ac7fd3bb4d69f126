#include "router/readiness.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>

#include <boost/asio/error.hpp>

namespace knap::router::readiness {

#if KNAP_READINESS_SUPPORTED

namespace {

namespace ad = boost::asio::detail;
using Reactor = ad::epoll_reactor;
using State = Reactor::descriptor_state;
using Socket = boost::asio::ip::tcp::socket;
using SocketBase = boost::asio::basic_socket<boost::asio::ip::tcp, Socket::executor_type>;
using SocketImplType =
    ad::io_object_impl<ad::reactive_socket_service<boost::asio::ip::tcp>, Socket::executor_type>;

// Private members of Asio's socket and reactor, reached through explicit
// template instantiation, where the language does not check access
// ([temp.spec.general]): Member<Tag, &C::m> defines get(Tag) returning the
// pointer to member. Each Tag names the member's exact type, so a Boost
// whose layout differs fails to compile here rather than misbehaving.
template <class Tag, typename Tag::type M>
struct Member {
  friend typename Tag::type get(Tag) { return M; }
};
struct SocketImplTag {
  using type = SocketImplType SocketBase::*;
  friend type get(SocketImplTag);
};
struct TrySpeculativeTag {
  using type = bool (State::*)[Reactor::max_ops];
  friend type get(TrySpeculativeTag);
};
struct RegisteredEventsTag {
  using type = uint32_t State::*;
  friend type get(RegisteredEventsTag);
};
struct MutexTag {
  using type = ad::conditionally_enabled_mutex State::*;
  friend type get(MutexTag);
};
struct ReactorTag {
  using type = Reactor* State::*;
  friend type get(ReactorTag);
};
struct EpollFdTag {
  using type = int Reactor::*;
  friend type get(EpollFdTag);
};
// The events of the socket's last readiness report (what the reactor
// passes to perform_io), in the descriptor state's private base.
struct TaskResultTag {
  using type = unsigned int ad::scheduler_operation::*;
  friend type get(TaskResultTag);
};
template struct Member<SocketImplTag, &SocketBase::impl_>;
template struct Member<TrySpeculativeTag, &State::try_speculative_>;
template struct Member<RegisteredEventsTag, &State::registered_events_>;
template struct Member<MutexTag, &State::mutex_>;
template struct Member<ReactorTag, &State::reactor_>;
template struct Member<EpollFdTag, &Reactor::epoll_fd_>;
template struct Member<TaskResultTag, &ad::scheduler_operation::task_result_>;

ad::reactive_socket_service_base::base_implementation_type& implOf(Socket& s) {
  return (static_cast<SocketBase&>(s).*get(SocketImplTag{})).get_implementation();
}

State* stateOf(Socket& s) {
  return implOf(s).reactor_data_;
}

// The reported events, read through the private base (a C-style cast may
// name an inaccessible base).
unsigned int reportedEvents(State* st) {
  return ((ad::scheduler_operation*)st)->*get(TaskResultTag{});
}

}  // namespace

bool mayHaveData(Socket& s) {
  State* st = stateOf(s);
  if (st == nullptr) return true;
  ad::conditionally_enabled_mutex::scoped_lock lock(st->*get(MutexTag{}));
  return (st->*get(TrySpeculativeTag{}))[Reactor::read_op];
}

namespace detail {
void startReadOp(Socket& s, ad::reactor_op* op, bool is_continuation) {
  auto& impl = implOf(s);
  State* st = impl.reactor_data_;
  if (st == nullptr) {
    // Not open: the reactor answers bad_descriptor; any reactor of the
    // context will do, so take the service.
    boost::asio::use_service<Reactor>(s.get_executor().context())
        .start_op(Reactor::read_op, impl.socket_, impl.reactor_data_, op, is_continuation, true);
    return;
  }
  (st->*get(ReactorTag{}))
      ->start_op(Reactor::read_op, impl.socket_, impl.reactor_data_, op, is_continuation, true);
}
}  // namespace detail

namespace {
// A receive just left the socket empty: reads wait for the next report from
// now on. `certain`: it found nothing (EAGAIN: no bytes, no FIN, no error;
// anything later is an edge). Otherwise it returned fewer bytes than asked,
// and a FIN, reset or urgent mark may sit behind them with no edge to come:
// the flag stays set when the last report says so. (That report may be a
// previous socket's, as the reactor reuses its per-socket state: then one
// receive finds nothing, which is certain.)
void markDrained(Socket& s, bool certain) {
  State* st = stateOf(s);
  if (st == nullptr) return;
  ad::conditionally_enabled_mutex::scoped_lock lock(st->*get(MutexTag{}));
  uint32_t& registered = st->*get(RegisteredEventsTag{});
  if (registered == 0) return;
  if (!certain) {
    if ((registered & EPOLLRDHUP) == 0) {
      // Once per socket: a FIN is reported as such from now on. The
      // reactor re-arms with registered_events_ (plus EPOLLOUT) when it
      // adds a write wait, so RDHUP stays. Modifying re-checks readiness,
      // so a FIN already there is reported anew.
      epoll_event ev{};
      ev.events = registered | EPOLLRDHUP;
      ev.data.ptr = st;
      const int epfd = (st->*get(ReactorTag{}))->*get(EpollFdTag{});
      if (epoll_ctl(epfd, EPOLL_CTL_MOD, implOf(s).socket_, &ev) != 0) return;
      registered = ev.events;
    }
    if ((reportedEvents(st) & (EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI)) != 0) return;
  }
  (st->*get(TrySpeculativeTag{}))[Reactor::read_op] = false;
}
}  // namespace

#else

bool mayHaveData(boost::asio::ip::tcp::socket&) {
  return true;
}

namespace {
void markDrained(boost::asio::ip::tcp::socket&, bool) {}
}  // namespace

#endif

std::size_t readNow(boost::asio::ip::tcp::socket& s, boost::asio::mutable_buffer b,
                    boost::system::error_code& ec) {
  ec = {};
  if (b.size() == 0) return 0;
  ssize_t n;
  do {
    n = ::recv(s.native_handle(), b.data(), b.size(), MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    if (static_cast<std::size_t>(n) < b.size()) markDrained(s, false);
    return static_cast<std::size_t>(n);
  }
  if (n == 0) {
    ec = boost::asio::error::eof;
    return 0;
  }
  const int err = errno;
  if (err == EAGAIN || err == EWOULDBLOCK) {
    markDrained(s, true);
    ec = boost::asio::error::would_block;
    return 0;
  }
  ec = boost::system::error_code(err, boost::asio::error::get_system_category());
  return 0;
}

}  // namespace knap::router::readiness
