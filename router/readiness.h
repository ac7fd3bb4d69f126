// Socket reads that trust epoll's edges, as nginx does, instead of trying
// recv first: DeadlineStream::async_read_some (router/deadline_stream.h)
// is built on these, so every read of a client or pod connection is.
//
// Why: Asio (Boost 1.74) tries every read at once and waits only when it
// finds nothing. A proxy mostly reads when nothing is there yet (the pod's
// answer right after the request went out, the client's next request right
// after its response), so at 32 connections 1.5 recv per request failed
// with EAGAIN, about 1.1 µs each on this machine (some 5 % of the proxy's CPU).
//
// How: the reactor registers every socket edge-triggered and keeps, per
// socket, whether to try an operation before waiting (`try_speculative_`),
// set again by every readiness report. readNow() receives and, when the
// receive left the socket empty (EAGAIN, or fewer bytes than asked), clears
// that flag in the same step: any byte, FIN or reset arriving later is a new
// edge, whose report sets it again. A read while the flag is clear waits on
// the registration the socket already has (no syscall) and receives once
// the report comes. A FIN that arrived with the last bytes would come with
// no further edge, so the registration also asks for EPOLLRDHUP (once per
// socket) and a receive after a report carrying RDHUP, HUP or ERR never
// clears the flag.
//
// These use three private members of Boost 1.74's epoll reactor (see the
// .cc). With another Boost or reactor kSupported is false and
// DeadlineStream reads as Asio does.
#pragma once

#include <cstddef>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>
#include <boost/version.hpp>

#if BOOST_VERSION == 107400 && defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IOCP)
#define KNAP_READINESS_SUPPORTED 1
#include <boost/asio/detail/epoll_reactor.hpp>
#include <boost/asio/detail/handler_cont_helpers.hpp>
#include <boost/asio/detail/reactive_wait_op.hpp>
#else
#define KNAP_READINESS_SUPPORTED 0
#endif

namespace knap::router::readiness {

inline constexpr bool kSupported = KNAP_READINESS_SUPPORTED;

// False when the socket was left empty by readNow and no readiness report
// came since (a receive now would find nothing); true otherwise.
bool mayHaveData(boost::asio::ip::tcp::socket& s);

// One non-blocking receive into `b`: the bytes received (> 0), or 0 with
// `ec` set: eof, the socket's error, or would_block when nothing is there
// (then wait with asyncWaitReadable).
std::size_t readNow(boost::asio::ip::tcp::socket& s, boost::asio::mutable_buffer b,
                    boost::system::error_code& ec);

#if KNAP_READINESS_SUPPORTED
namespace detail {
// Starts `op` as a read-side operation on the socket's registration,
// allowed to complete at once when the socket may hold data.
void startReadOp(boost::asio::ip::tcp::socket& s, boost::asio::detail::reactor_op* op, bool is_continuation);
}  // namespace detail

// Calls handler(error_code) once the reactor reports the socket readable
// (or at once when it may be already); cancel() and close() end it with
// operation_aborted. No syscall to start it.
template <class Handler>
void asyncWaitReadable(boost::asio::ip::tcp::socket& s, Handler handler) {
  using Op = boost::asio::detail::reactive_wait_op<Handler, boost::asio::ip::tcp::socket::executor_type>;
  const bool cont = boost_asio_handler_cont_helpers::is_continuation(handler);
  typename Op::ptr p = {boost::asio::detail::addressof(handler), Op::ptr::allocate(handler), nullptr};
  p.p = new (p.v) Op(boost::system::error_code(), handler, s.get_executor());
  detail::startReadOp(s, p.p, cont);
  p.v = p.p = nullptr;
}
#endif

}  // namespace knap::router::readiness
