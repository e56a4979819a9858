// redis_client.h: a small synchronous Redis client over hiredis (private to
// kvstore).
//
// Pieces, bottom up:
//   RedisEndpoint     "host:port" value type.
//   Reply / ReplyView an owned hiredis reply and a non-owning view of it (the
//                     string payload of a GET is read in place, never copied).
//   RedisConnection   one blocking connection (TCP or TLS, redis_transport.h)
//                     with connect and command timeouts and pipelining;
//                     hiredis formats the commands and parses the replies.
//                     NOT thread-safe.
//   RedisNodePool     a thread-safe pool of connections to one node, with
//                     reconnect and exponential backoff while the node is down.
//   RedisExecutor     what the Redis tier talks to: "run this pipeline on the
//                     node that owns this key". Implemented by
//                     RedisSingleNode (below) and RedisCluster
//                     (redis_cluster.h).
//
// Status codes: UNAVAILABLE for a node that cannot be reached (refused,
// reset, in reconnect backoff), DEADLINE_EXCEEDED for a command or connect
// timeout, INVALID_ARGUMENT for malformed input. A Redis error reply (-ERR ...)
// is not a Status: it comes back as a Reply of type kError, so that callers
// (the cluster router) can read MOVED/ASK redirects.
//
// hiredis types are only forward-declared here so that code including this
// header does not need hiredis' include path.
#ifndef RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_CLIENT_H_
#define RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/sync.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kvstore/redis/redis_tier.h"

struct redisReader;
struct redisReply;

namespace ragkv::kvstore::internal {

class RedisTransport;

// Sv: std::string_view -> absl::string_view. Debian's abseil is built in
// C++14 mode, so absl::string_view is its own type and absl functions
// (StrCat, StartsWith, SimpleAtoi, ...) do not accept std::string_view.
inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }
// StdSv: the reverse.
inline std::string_view StdSv(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// RedisEndpoint: a TCP endpoint.
struct RedisEndpoint {
  std::string host;
  int port = 0;

  // Parse: "host:port" or "[v6addr]:port". INVALID_ARGUMENT when malformed or
  // the port is outside 1..65535.
  static absl::StatusOr<RedisEndpoint> Parse(std::string_view host_port);
  // ToString: "host:port" (IPv6 hosts bracketed).
  std::string ToString() const;
  friend bool operator==(const RedisEndpoint&, const RedisEndpoint&) = default;
};

// ReplyType: hiredis' reply kinds (RESP2).
enum class ReplyType { kNone, kString, kArray, kInteger, kNil, kStatus, kError };

// ReplyView: non-owning view of a reply; valid while the owning Reply lives.
class ReplyView {
 public:
  ReplyView() = default;
  explicit ReplyView(const redisReply* r) : r_(r) {}

  ReplyType type() const;
  bool IsError() const { return type() == ReplyType::kError; }
  bool IsNil() const { return type() == ReplyType::kNil; }
  bool IsString() const { return type() == ReplyType::kString; }
  // str: payload of kString / kStatus / kError, empty otherwise.
  std::string_view str() const;
  // integer: value of kInteger, 0 otherwise.
  int64_t integer() const;
  // size: number of elements of kArray, 0 otherwise.
  size_t size() const;
  // operator[]: element i of an array (precondition i < size()).
  ReplyView operator[](size_t i) const;
  // DebugString: short human-readable rendering (payloads truncated).
  std::string DebugString() const;

 private:
  const redisReply* r_ = nullptr;
};

// Reply: owns one hiredis reply tree. Move-only.
class Reply {
 public:
  Reply() = default;
  explicit Reply(redisReply* r) : r_(r) {}
  ~Reply();
  Reply(Reply&& o) noexcept : r_(o.r_) { o.r_ = nullptr; }
  Reply& operator=(Reply&& o) noexcept;
  Reply(const Reply&) = delete;
  Reply& operator=(const Reply&) = delete;

  ReplyView view() const { return ReplyView(r_); }
  ReplyType type() const { return view().type(); }
  bool IsError() const { return view().IsError(); }
  bool IsNil() const { return view().IsNil(); }
  bool IsString() const { return view().IsString(); }
  std::string_view str() const { return view().str(); }
  int64_t integer() const { return view().integer(); }
  size_t size() const { return view().size(); }
  ReplyView operator[](size_t i) const { return view()[i]; }

 private:
  redisReply* r_ = nullptr;
};

// LargeBuffer: a buffer from the process-wide pool of large read buffers.
// Replies of at least kPooledReplyBytes, and reassembled split values, live
// in buffers recycled through this pool: steady-state reads of multi-MiB
// values then reuse memory that is already mapped, instead of fresh pages
// that the kernel must fault in and zero (glibc returns large freed blocks
// to the OS). The pool keeps at most kMaxPooledBytes idle. Thread-safe.
inline constexpr size_t kPooledReplyBytes = size_t{64} << 10;
inline constexpr size_t kMaxPooledBytes = size_t{256} << 20;
struct LargeBufferDeleter {
  size_t capacity = 0;
  void operator()(char* p) const;
};
using LargeBuffer = std::unique_ptr<char[], LargeBufferDeleter>;
// AcquireLargeBuffer: at least `bytes` bytes (capacity in get_deleter()).
LargeBuffer AcquireLargeBuffer(size_t bytes);
// PooledBytesIdle: bytes currently idle in the pool (for tests/metrics).
size_t PooledBytesIdle();

// ReplyToStatus: OK unless `r` is an error reply, which becomes INTERNAL
// "<what>: <redis error text>" (or UNAVAILABLE for -LOADING/-CLUSTERDOWN/
// -TRYAGAIN/-MASTERDOWN, which are transient).
absl::Status ReplyToStatus(ReplyView r, std::string_view what);

// RedisArgv: one command as argument views; they must outlive the call.
using RedisArgv = std::vector<std::string_view>;

// ReplyCallback: receives reply `index` (the position of its command in the
// pipeline) as soon as it has been read. Called on the caller's thread.
using ReplyCallback = std::function<void(size_t index, Reply reply)>;

// RedisConnectionOptions: how to reach one node.
struct RedisConnectionOptions {
  RedisEndpoint endpoint;
  // connect_timeout: TCP connect (and AUTH) limit. Default 500 ms.
  absl::Duration connect_timeout = absl::Milliseconds(500);
  // command_timeout: per socket read/write limit while a command runs; a
  // pipeline of large values may take several of these. Default 2 s.
  absl::Duration command_timeout = absl::Seconds(2);
  // username / password: AUTH [username] password after connecting when
  // the password is non-empty. Never logged.
  std::string username;
  std::string password;
  // tls: TLS to the node (redis_transport.h).
  RedisTlsOptions tls;
  // reader_buffer_keep_bytes: hiredis frees its (grown) read buffer after a
  // reply when more than this much is unused (hiredis default 16 KiB). Values
  // of several MiB then regrow the buffer from 16 KiB on every reply (a chain
  // of reallocs and copies); keeping up to this many bytes per connection
  // avoids that. 0 = hiredis default. Default 0.
  size_t reader_buffer_keep_bytes = 0;
};

// RedisConnection: one blocking connection. Not thread-safe: one caller at a
// time (RedisNodePool hands each connection to one caller). After any
// transport error the connection is broken() and must be discarded.
class RedisConnection {
 public:
  // Connect: opens the connection (and AUTHs). UNAVAILABLE / DEADLINE_EXCEEDED
  // with the endpoint and the OS error in the message.
  static absl::StatusOr<std::unique_ptr<RedisConnection>> Connect(
      const RedisConnectionOptions& options);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Pipeline: sends all commands, then reads one reply per command, in order.
  // Error replies are returned as replies. A transport error fails the whole
  // call and breaks the connection (some commands may have executed).
  absl::StatusOr<std::vector<Reply>> Pipeline(absl::Span<const RedisArgv> commands);
  // PipelineStream: as Pipeline, but hands reply i to on_reply(i, ...) as
  // soon as it is parsed, in order, instead of collecting them. On a
  // transport error the replies already delivered stay delivered.
  absl::Status PipelineStream(absl::Span<const RedisArgv> commands, const ReplyCallback& on_reply);
  // Command: Pipeline of one.
  absl::StatusOr<Reply> Command(const RedisArgv& argv);

  bool broken() const { return io_ == nullptr; }
  const RedisEndpoint& endpoint() const { return options_.endpoint; }

 private:
  explicit RedisConnection(const RedisConnectionOptions& options);
  // Fail: `cause` with the endpoint and `during` in its message; the
  // connection is dropped (broken()).
  absl::Status Fail(std::string_view during, const absl::Status& cause);
  // NextReply: the next parsed reply, reading more as needed.
  absl::StatusOr<Reply> NextReply(absl::Duration timeout);

  RedisConnectionOptions options_;
  absl::Duration io_timeout_;  // connect_timeout while connecting, then command_timeout
  std::unique_ptr<RedisTransport> io_;
  redisReader* reader_ = nullptr;
  std::string obuf_;                  // the pipeline being sent
  std::unique_ptr<char[]> ibuf_;      // socket reads, fed to reader_
};

// RedisNodePoolOptions: a pool of connections to one node.
struct RedisNodePoolOptions {
  RedisConnectionOptions connection;
  // max_connections: at most this many open connections; callers beyond it
  // wait for a free one. Default 4.
  int max_connections = 4;
  // reconnect_backoff_initial / _max: after a failed connect the node is
  // considered down and calls fail fast with UNAVAILABLE until the backoff
  // (doubling per consecutive failure, capped) has elapsed. Defaults 20 ms / 1 s.
  absl::Duration reconnect_backoff_initial = absl::Milliseconds(20);
  absl::Duration reconnect_backoff_max = absl::Seconds(1);
};

// RedisNodePool: thread-safe connection pool to one node.
//
// Retry policy: when a pooled connection that had been idle fails with a
// transport error (e.g. the server restarted and closed it), the pipeline is
// retried once on a fresh connection. Commands sent through the pool must
// therefore be idempotent (GET/SET/DEL/SADD/SREM/EXPIRE are; INCR is not).
class RedisNodePool {
 public:
  explicit RedisNodePool(RedisNodePoolOptions options);
  ~RedisNodePool();

  absl::StatusOr<std::vector<Reply>> Pipeline(absl::Span<const RedisArgv> commands);
  // PipelineStream: RedisConnection::PipelineStream on a pooled connection.
  // The retry on a dead idle connection happens only if no reply had been
  // delivered yet.
  absl::Status PipelineStream(absl::Span<const RedisArgv> commands, const ReplyCallback& on_reply);
  absl::StatusOr<Reply> Command(const RedisArgv& argv);

  const RedisEndpoint& endpoint() const { return options_.connection.endpoint; }
  // open_connections: connections currently open (idle + lent out).
  int open_connections() const;

 private:
  // Acquire: an idle connection, or a new one if under the cap (subject to
  // backoff), else waits for a release. `fresh` says it was just opened.
  absl::StatusOr<std::unique_ptr<RedisConnection>> Acquire(bool* fresh);
  void Release(std::unique_ptr<RedisConnection> conn);
  absl::StatusOr<std::unique_ptr<RedisConnection>> OpenNew();

  const RedisNodePoolOptions options_;
  // kvstore's std-based mutex (base/sync.h), not absl::Mutex: Debian's
  // abseil is not TSan-instrumented, so its locks hide from ThreadSanitizer.
  mutable Mutex mu_;
  CondVar cv_;  // signalled whenever idle_ or open_ changes
  std::vector<std::unique_ptr<RedisConnection>> idle_ ABSL_GUARDED_BY(mu_);
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  int consecutive_connect_failures_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_connect_allowed_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string last_connect_error_ ABSL_GUARDED_BY(mu_);
};

// RedisExecutor: runs pipelines on the node owning a key's slot. All keys in
// one pipeline must hash to the slot of `routing_key` (use a {hash tag}).
// Thread-safe. Commands must be idempotent (see RedisNodePool).
class RedisExecutor {
 public:
  virtual ~RedisExecutor() = default;
  virtual absl::StatusOr<std::vector<Reply>> Pipeline(std::string_view routing_key,
                                                      absl::Span<const RedisArgv> commands) = 0;
  // PipelineStream: as Pipeline, but each reply goes to on_reply(i, ...) as
  // soon as it has been read: exactly once per command when OK, in command
  // order except that redirected commands (cluster MOVED/ASK) come after the
  // others. On an error Status some replies may have been delivered. The
  // callback runs while a pooled connection is held: it must not block or
  // call into the executor. Default: Pipeline, then every reply in order.
  virtual absl::Status PipelineStream(std::string_view routing_key,
                                      absl::Span<const RedisArgv> commands,
                                      const ReplyCallback& on_reply);
  absl::StatusOr<Reply> Command(std::string_view routing_key, const RedisArgv& argv);
  // NodeKeyFor: an identifier of the node currently serving `routing_key`
  // (callers group keys by it to batch one pipeline per node); "" if unknown
  // or if there is only one node.
  virtual std::string NodeKeyFor(std::string_view routing_key) const { return ""; }
  // Describe: e.g. "redis 127.0.0.1:6379" or "redis-cluster(3 masters)".
  virtual std::string Describe() const = 0;
};

// RedisSingleNode: RedisExecutor over one standalone server.
class RedisSingleNode : public RedisExecutor {
 public:
  explicit RedisSingleNode(RedisNodePoolOptions options) : pool_(std::move(options)) {}
  absl::StatusOr<std::vector<Reply>> Pipeline(std::string_view routing_key,
                                              absl::Span<const RedisArgv> commands) override {
    return pool_.Pipeline(commands);
  }
  absl::Status PipelineStream(std::string_view routing_key, absl::Span<const RedisArgv> commands,
                              const ReplyCallback& on_reply) override {
    return pool_.PipelineStream(commands, on_reply);
  }
  std::string Describe() const override { return "redis " + pool_.endpoint().ToString(); }
  RedisNodePool& pool() { return pool_; }

 private:
  RedisNodePool pool_;
};

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_CLIENT_H_
