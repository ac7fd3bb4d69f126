#include "router/tls_socket.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <cstdint>

#include <boost/asio/error.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace knap::router {

namespace {

namespace asio = boost::asio;

// The socket's descriptor now, -1 once it is closed: the BIO holds the
// socket, not a number the process may have given to another connection
// since (a tunnel's watchdog or the drain sweep close a client socket while
// its TlsSocket lives on).
int fdOf(BIO* b) {
  return static_cast<asio::ip::tcp::socket*>(BIO_get_data(b))->native_handle();
}

// The socket BIO: recv, and send without SIGPIPE. A would-block is a retry
// (SSL_ERROR_WANT_READ/WRITE); end of stream and errors are not (OpenSSL
// reports them, errno kept).
int bioWrite(BIO* b, const char* data, size_t len, size_t* written) {
  BIO_clear_retry_flags(b);
  const int fd = fdOf(b);
  if (fd < 0) {
    errno = EBADF;
    return 0;
  }
  for (;;) {
    const ssize_t n = ::send(fd, data, len, MSG_NOSIGNAL);
    if (n >= 0) {
      *written = static_cast<size_t>(n);
      return 1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(b);
    return 0;
  }
}

int bioRead(BIO* b, char* data, size_t len, size_t* read) {
  BIO_clear_retry_flags(b);
  const int fd = fdOf(b);
  if (fd < 0) {
    errno = EBADF;
    return 0;
  }
  for (;;) {
    const ssize_t n = ::recv(fd, data, len, 0);
    if (n > 0) {
      *read = static_cast<size_t>(n);
      return 1;
    }
    if (n == 0) return 0;  // end of stream
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(b);
    return 0;
  }
}

long bioCtrl(BIO*, int cmd, long, void*) {
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;  // (writes are not buffered here)
}

int bioCreate(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

// SSL_get_error reads the thread's error queue, which must be empty before
// the call; every failure path here clears it, but another user of OpenSSL
// on the worker thread may not have. (Peeking is cheaper than clearing.)
void clearStaleErrors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

const BIO_METHOD* socketMethod() {
  static const BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "knap router socket");
    if (m == nullptr) return static_cast<BIO_METHOD*>(nullptr);
    BIO_meth_set_write_ex(m, bioWrite);
    BIO_meth_set_read_ex(m, bioRead);
    BIO_meth_set_ctrl(m, bioCtrl);
    BIO_meth_set_create(m, bioCreate);
    return m;
  }();
  return method;
}

}  // namespace

TlsSocket::TlsSocket(asio::ip::tcp::socket s, SSL_CTX* ctx) : tcp_(std::move(s)) {
  error_code ec;
  tcp_.socket().non_blocking(true, ec);
  ssl_ = SSL_new(ctx);
  const BIO_METHOD* m = socketMethod();
  BIO* bio = (ssl_ != nullptr && m != nullptr) ? BIO_new(m) : nullptr;
  if (bio == nullptr) {
    // (Out of memory: the handshake fails, naming it.)
    if (ssl_ != nullptr) SSL_free(ssl_);
    ssl_ = nullptr;
    return;
  }
  BIO_set_data(bio, &tcp_.socket());  // (TlsSocket does not move: the address stays)
  SSL_set_bio(ssl_, bio, bio);
  SSL_set_accept_state(ssl_);
  // Partial writes: SSL_write returns once a record is out, like a socket
  // write; a half-sent record is finished by the next SSL_write, which may
  // offer the same bytes from another address. Idle connections keep no
  // record buffers (as nginx and asio's engine do).
  SSL_set_mode(
      ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  // One recv takes what has arrived (records that follow stay in OpenSSL's
  // buffer for the next SSL_read), not a record header and then its body.
  SSL_set_read_ahead(ssl_, 1);
}

TlsSocket::~TlsSocket() {
  if (ssl_ != nullptr) SSL_free(ssl_);  // (frees the BIO; the socket is DeadlineStream's)
}

TlsSocket::Step TlsSocket::result(int ret, error_code* ec) {
  const int err = SSL_get_error(ssl_, ret);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      return Step::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return Step::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      *ec = asio::error::eof;  // close_notify
      break;
    case SSL_ERROR_SYSCALL:
      // errno from recv/send; none: the peer closed without close_notify.
      *ec = errno != 0 ? error_code(errno, asio::error::get_system_category()) : error_code(asio::error::eof);
      break;
    default: {
      const unsigned long e = ERR_peek_last_error();
      if (ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        *ec = asio::error::eof;
      } else {
        *ec = error_code(static_cast<int>(e), asio::error::get_ssl_category());
      }
      break;
    }
  }
  ERR_clear_error();
  return Step::kDone;
}

TlsSocket::Step TlsSocket::tryRead(asio::mutable_buffer b, size_t* n, error_code* ec) {
  *n = 0;
  *ec = {};
  if (ssl_ == nullptr) {
    *ec = asio::error::no_memory;
    return Step::kDone;
  }
  if (b.size() == 0) return Step::kDone;
  clearStaleErrors();
  errno = 0;
  const int ret = SSL_read_ex(ssl_, b.data(), b.size(), n);
  if (ret == 1) return Step::kDone;
  *n = 0;
  return result(ret, ec);
}

TlsSocket::Step TlsSocket::tryWriteBytes(const void* data, size_t len, size_t* n, error_code* ec) {
  *n = 0;
  *ec = {};
  if (ssl_ == nullptr) {
    *ec = asio::error::no_memory;
    return Step::kDone;
  }
  clearStaleErrors();
  errno = 0;
  const int ret = SSL_write_ex(ssl_, data, len, n);
  if (ret == 1) return Step::kDone;
  *n = 0;
  return result(ret, ec);
}

asio::awaitable<void> TlsSocket::handshake(error_code& ec) {
  ec = {};
  if (ssl_ == nullptr) {
    ec = asio::error::no_memory;
    co_return;
  }
  for (;;) {
    clearStaleErrors();
    errno = 0;
    const int ret = SSL_do_handshake(ssl_);
    if (ret == 1) co_return;
    const Step step = result(ret, &ec);
    if (step == Step::kDone) {
      if (!ec) ec = asio::ssl::error::stream_truncated;
      co_return;
    }
    co_await tcp_.async_wait(step == Step::kWantRead ? DeadlineStream::socket_type::wait_read
                                                     : DeadlineStream::socket_type::wait_write,
                             asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
  }
}

}  // namespace knap::router
