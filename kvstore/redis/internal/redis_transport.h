// redis_transport.h: one blocking byte stream to a Redis node -- TCP, or TLS
// over TCP (OpenSSL) -- with connect and idle timeouts (private to kvstore).
//
// hiredis 0.14 (Debian 12) has no TLS, so RedisConnection does its own I/O
// through this class and uses hiredis only to format commands and parse
// replies (redisFormatCommandArgv, redisReader).
//
// TLS: the server certificate is always verified, against ca_file or the
// system trust store, and must name server_name (or the endpoint's host;
// an IP address host is matched as an IP SAN); the SNI carries the same
// name. An optional client certificate and key serve servers with
// tls-auth-clients. TLS contexts are built once per distinct option set and
// kept for the process.
//
// Errors carry only the cause ("connection refused", "timed out", "TLS
// certificate verify failed: ..."); RedisConnection adds the endpoint and
// the command. UNAVAILABLE: refused, reset, closed, unresolvable host, TLS
// handshake or verification failure; DEADLINE_EXCEEDED: connect or I/O
// timeout; INVALID_ARGUMENT: unreadable CA/cert/key file.
// Thread safety: one user at a time.
#ifndef RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_TRANSPORT_H_
#define RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_TRANSPORT_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kvstore/redis/redis_tier.h"

struct ssl_st;

namespace ragkv::kvstore::internal {

class RedisTransport {
 public:
  // Connect: TCP connect to host:port (and the TLS handshake when
  // tls.enabled) within `timeout`.
  static absl::StatusOr<std::unique_ptr<RedisTransport>> Connect(const std::string& host, int port,
                                                                 const RedisTlsOptions& tls,
                                                                 absl::Duration timeout);
  ~RedisTransport();
  RedisTransport(const RedisTransport&) = delete;
  RedisTransport& operator=(const RedisTransport&) = delete;

  // WriteAll: sends all of `data`; fails when no byte can be sent for
  // `idle_timeout`.
  absl::Status WriteAll(std::string_view data, absl::Duration idle_timeout);
  // ReadSome: reads 1..cap bytes into buf; fails when none arrive within
  // `idle_timeout`, and with UNAVAILABLE "connection closed by server" at EOF.
  absl::StatusOr<size_t> ReadSome(char* buf, size_t cap, absl::Duration idle_timeout);

  bool tls() const { return ssl_ != nullptr; }

 private:
  explicit RedisTransport(int fd) : fd_(fd) {}
  absl::Status Handshake(const RedisTlsOptions& tls, const std::string& host,
                         absl::Duration timeout);
  // Wait: poll for readability (or writability) up to `timeout`.
  absl::Status Wait(bool for_write, absl::Duration timeout);
  // SslRetry: after SSL_* returned `ret`, waits as OpenSSL asks (OK: call
  // again) or returns the error.
  absl::Status SslRetry(int ret, absl::Duration timeout);

  int fd_ = -1;
  ssl_st* ssl_ = nullptr;
};

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_TRANSPORT_H_
