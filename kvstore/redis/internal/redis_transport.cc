#include "kvstore/redis/internal/redis_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ragkv::kvstore::internal {
namespace {

std::string SslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out;
}

absl::Status Unavailable(const std::string& why) { return absl::UnavailableError(why); }

// TlsContextFor: one SSL_CTX per distinct (ca, cert, key), kept for the
// process (building one reads and parses the trust store).
absl::StatusOr<SSL_CTX*> TlsContextFor(const RedisTlsOptions& o) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, SSL_CTX*>();
  const std::string id = absl::StrCat(o.ca_file, "\n", o.cert_file, "\n", o.key_file);
  std::lock_guard<std::mutex> l(mu);
  if (auto it = cache->find(id); it != cache->end()) return it->second;
  if (o.cert_file.empty() != o.key_file.empty()) {
    return absl::InvalidArgumentError("redis TLS: a client certificate needs both cert and key");
  }
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return absl::InternalError("redis TLS: SSL_CTX_new: " + SslErrors());
  auto fail = [ctx](std::string what) {
    std::string why = SslErrors();
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(absl::StrCat("redis TLS: ", what, ": ", why));
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (o.ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx) != 1
                        : SSL_CTX_load_verify_locations(ctx, o.ca_file.c_str(), nullptr) != 1) {
    return fail(absl::StrCat("cannot load CA '", o.ca_file.empty() ? "(system)" : o.ca_file, "'"));
  }
  if (!o.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1) {
      return fail(absl::StrCat("cannot load certificate '", o.cert_file, "'"));
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      return fail(absl::StrCat("cannot load key '", o.key_file, "' for '", o.cert_file, "'"));
    }
  }
  cache->emplace(id, ctx);
  return ctx;
}

// SigpipeBlock: SIGPIPE blocked on this thread while OpenSSL writes to a
// socket the peer may have closed (its socket BIO uses write(), not
// send(MSG_NOSIGNAL)); a SIGPIPE raised meanwhile is consumed. The libpq
// technique: no process-wide signal disposition is changed.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~SigpipeBlock() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      const timespec zero{0, 0};
      sigtimedwait(&pipe, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
  bool was_pending_ = false;
};

int PollMs(absl::Duration d) {
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(d, absl::Milliseconds(1)));
  return static_cast<int>(std::clamp<int64_t>(ms, 1, INT_MAX));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisTransport>> RedisTransport::Connect(
    const std::string& host, int port, const RedisTlsOptions& tls, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res); rc != 0) {
    return Unavailable(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  std::string last = "no address";
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  std::unique_ptr<RedisTransport> t;
  for (addrinfo* ai = res; ai != nullptr && t == nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    std::unique_ptr<RedisTransport> cand(new RedisTransport(fd));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = std::strerror(errno);
      continue;
    }
    if (absl::Status w = cand->Wait(/*for_write=*/true, deadline - absl::Now()); !w.ok()) {
      last = std::string(w.message());
      code = w.code();
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      last = std::strerror(err != 0 ? err : errno);
      continue;
    }
    t = std::move(cand);
  }
  freeaddrinfo(res);
  if (t == nullptr) return absl::Status(code, last);
  const int one = 1;
  setsockopt(t->fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(t->fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);  // dead-peer detection
  if (tls.enabled) {
    if (absl::Status s = t->Handshake(tls, host, deadline - absl::Now()); !s.ok()) return s;
  }
  return t;
}

absl::Status RedisTransport::Handshake(const RedisTlsOptions& tls, const std::string& host,
                                       absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<SSL_CTX*> ctx = TlsContextFor(tls);
  if (!ctx.ok()) return ctx.status();
  ssl_ = SSL_new(*ctx);
  if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) {
    return absl::InternalError("TLS setup failed: " + SslErrors());
  }
  const std::string name = tls.server_name.empty() ? host : tls.server_name;
  in6_addr a6;
  in_addr a4;
  const bool is_ip = inet_pton(AF_INET, name.c_str(), &a4) == 1 ||
                     inet_pton(AF_INET6, name.c_str(), &a6) == 1;
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl_, name.c_str());
    SSL_set1_host(ssl_, name.c_str());
  }
  for (;;) {
    ERR_clear_error();
    const int r = SSL_connect(ssl_);
    if (r == 1) return absl::OkStatus();
    absl::Status s = SslRetry(r, deadline - absl::Now());
    if (!s.ok()) {
      const long v = SSL_get_verify_result(ssl_);
      if (v != X509_V_OK) {
        return Unavailable(absl::StrCat("TLS certificate verify failed for '", name,
                                        "': ", X509_verify_cert_error_string(v)));
      }
      return absl::Status(s.code(), absl::StrCat("TLS handshake: ", s.message()));
    }
  }
}

RedisTransport::~RedisTransport() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  if (fd_ >= 0) close(fd_);
}

absl::Status RedisTransport::Wait(bool for_write, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return absl::DeadlineExceededError("timed out");
  const absl::Time deadline = absl::Now() + timeout;
  pollfd p{fd_, static_cast<short>(for_write ? POLLOUT : POLLIN), 0};
  for (;;) {
    const int r = poll(&p, 1, PollMs(deadline - absl::Now()));
    if (r > 0) return absl::OkStatus();  // ready, or an error the next call reports
    if (r == 0) return absl::DeadlineExceededError("timed out");
    if (errno != EINTR) return Unavailable(absl::StrCat("poll: ", std::strerror(errno)));
  }
}

absl::Status RedisTransport::SslRetry(int ret, absl::Duration timeout) {
  const int saved_errno = errno;
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
      return Wait(/*for_write=*/false, timeout);
    case SSL_ERROR_WANT_WRITE:
      return Wait(/*for_write=*/true, timeout);
    case SSL_ERROR_ZERO_RETURN:
      return Unavailable("connection closed by server");
    case SSL_ERROR_SYSCALL: {
      std::string why = SslErrors();
      if (why.empty()) why = saved_errno != 0 ? std::strerror(saved_errno) : "connection closed by server";
      return Unavailable(why);
    }
    default: {
      std::string why = SslErrors();
      return Unavailable(why.empty() ? "TLS error" : why);
    }
  }
}

absl::Status RedisTransport::WriteAll(std::string_view data, absl::Duration idle_timeout) {
  size_t off = 0;
  while (off < data.size()) {
    const size_t want = std::min<size_t>(data.size() - off, INT_MAX);
    if (ssl_ != nullptr) {
      SigpipeBlock block;
      ERR_clear_error();
      errno = 0;
      const int w = SSL_write(ssl_, data.data() + off, static_cast<int>(want));
      if (w > 0) {
        off += static_cast<size_t>(w);
        continue;
      }
      if (absl::Status s = SslRetry(w, idle_timeout); !s.ok()) return s;
      continue;
    }
    const ssize_t w = send(fd_, data.data() + off, want, MSG_NOSIGNAL);
    if (w > 0) {
      off += static_cast<size_t>(w);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (absl::Status s = Wait(/*for_write=*/true, idle_timeout); !s.ok()) return s;
    } else if (errno != EINTR) {
      return Unavailable(std::strerror(errno));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> RedisTransport::ReadSome(char* buf, size_t cap, absl::Duration idle_timeout) {
  const int want = static_cast<int>(std::min<size_t>(cap, INT_MAX));
  for (;;) {
    if (ssl_ != nullptr) {
      ERR_clear_error();
      errno = 0;
      const int r = SSL_read(ssl_, buf, want);
      if (r > 0) return static_cast<size_t>(r);
      if (absl::Status s = SslRetry(r, idle_timeout); !s.ok()) return s;
      continue;
    }
    const ssize_t r = recv(fd_, buf, static_cast<size_t>(want), 0);
    if (r > 0) return static_cast<size_t>(r);
    if (r == 0) return Unavailable("connection closed by server");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (absl::Status s = Wait(/*for_write=*/false, idle_timeout); !s.ok()) return s;
    } else if (errno != EINTR) {
      return Unavailable(std::strerror(errno));
    }
  }
}

}  // namespace ragkv::kvstore::internal
