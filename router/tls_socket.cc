#include "router/tls_socket.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <sys/socket.h>

#include <algorithm>
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

TlsSocket* socketOf(BIO* b) {
  return static_cast<TlsSocket*>(BIO_get_data(b));
}

// The BIO: reads take what TlsSocket received (none yet: a retry, which
// OpenSSL reports as SSL_ERROR_WANT_READ); writes go to the socket.
int bioRead(BIO* b, char* data, size_t len, size_t* read) {
  BIO_clear_retry_flags(b);
  const int ret = socketOf(b)->bioRead(data, len, read);
  if (ret < 0) {
    BIO_set_retry_read(b);
    return 0;
  }
  return ret;
}

int bioWrite(BIO* b, const char* data, size_t len, size_t* written) {
  BIO_clear_retry_flags(b);
  const int ret = socketOf(b)->bioWrite(data, len, written);
  if (ret == 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(b);
  return ret;
}

long bioCtrl(BIO* b, int cmd, long, void*) {
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;  // (writes are not buffered here)
    case BIO_CTRL_PENDING:
      return static_cast<long>(socketOf(b)->bioPending());  // (TlsPump::adopt takes it over)
    default:
      return 0;
  }
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
  BIO_set_data(bio, this);  // (TlsSocket does not move: the address stays)
  SSL_set_bio(ssl_, bio, bio);
  SSL_set_accept_state(ssl_);
  // Partial writes: SSL_write returns once a record is out, like a socket
  // write; a half-sent record is finished by the next SSL_write, which may
  // offer the same bytes from another address. Idle connections keep no
  // record buffers (as nginx and asio's engine do).
  SSL_set_mode(
      ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  // One BIO read takes all the ciphertext received (records that follow
  // stay in OpenSSL's buffer for the next SSL_read), not a record header
  // and then its body.
  SSL_set_read_ahead(ssl_, 1);
}

TlsSocket::~TlsSocket() {
  if (ssl_ != nullptr) SSL_free(ssl_);  // (frees the BIO; the socket is DeadlineStream's)
}

int TlsSocket::bioRead(char* data, size_t len, size_t* read) {
  const size_t avail = rend_ - rin_;
  if (avail == 0) return eof_ ? 0 : -1;  // 0: end of stream; -1: none yet (retry)
  const size_t n = std::min(avail, len);
  std::memcpy(data, rbuf_.get() + rin_, n);
  rin_ += n;
  if (rin_ == rend_) {
    // All taken: an idle connection holds no receive buffer (the next
    // fill makes one, from the block cache: common/block_cache.h).
    rin_ = rend_ = 0;
    rbuf_.reset();
  }
  *read = n;
  return 1;
}

int TlsSocket::bioWrite(const char* data, size_t len, size_t* written) {
  // The socket's descriptor now, -1 once it is closed: not a number the
  // process may have given to another connection since (a tunnel's
  // watchdog or the drain sweep close a client socket while its TlsSocket
  // lives on).
  const int fd = tcp_.socket().native_handle();
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
    if (errno != EINTR) return 0;  // (EAGAIN: the BIO callback marks a retry)
  }
}

char* TlsSocket::gatherBuffer() {
  static thread_local char buffer[kGatherBytes];
  return buffer;
}

asio::mutable_buffer TlsSocket::fillSpace() {
  if (!rbuf_) rbuf_.reset(static_cast<char*>(::operator new(kReadBytes)));  // (not zeroed: made per fill)
  if (rin_ > 0) {  // (OpenSSL took part: keep the rest at the front)
    std::memmove(rbuf_.get(), rbuf_.get() + rin_, rend_ - rin_);
    rend_ -= rin_;
    rin_ = 0;
  }
  return asio::buffer(rbuf_.get() + rend_, kReadBytes - rend_);
}

size_t TlsSocket::receive(error_code& ec) {
  const size_t n = tcp_.read_now(fillSpace(), ec);
  if (n == 0 && rend_ == 0) rbuf_.reset();  // nothing came (or the end): hold no buffer for it
  return n;
}

bool TlsSocket::filled(const error_code& ec, size_t n) {
  fill_pending_ = false;
  if (ec == asio::error::eof) {
    eof_ = true;
    return true;
  }
  if (ec) return false;
  rend_ += n;
  return true;
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
    if (step == Step::kWantWrite) {
      co_await tcp_.async_wait(DeadlineStream::socket_type::wait_write,
                               asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      continue;
    }
    if (bioPending() == kReadBytes) {
      ec = asio::error::no_buffer_space;  // (see Op::step)
      co_return;
    }
    // Waited for first, like Op's reads: a client that connects and says
    // nothing holds no receive buffer.
    fill_pending_ = true;
    co_await tcp_.async_wait_readable(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      fill_pending_ = false;
      co_return;
    }
    const size_t n = receive(ec);
    if (ec == asio::error::would_block) {  // (a report from before)
      fill_pending_ = false;
      ec = {};
      continue;
    }
    if (!filled(ec, n)) co_return;
    ec = {};
  }
}

}  // namespace knap::router
