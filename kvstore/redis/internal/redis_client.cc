#include "kvstore/redis/internal/redis_client.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kvstore/redis/internal/redis_transport.h"

namespace ragkv::kvstore::internal {
namespace {

// TransportStatus: a transport failure (code from redis_transport.h) with
// the endpoint and what was being done.
absl::Status TransportStatus(const RedisEndpoint& ep, std::string_view during,
                             absl::string_view err, absl::StatusCode code) {
  return absl::Status(code, absl::StrCat("redis ", ep.ToString(), ": ", Sv(during),
                                         " failed: ", err));
}

// ------------------------------------------------------------ buffer pool --

class LargeBufferPool {
 public:
  static LargeBufferPool& Instance() {
    static LargeBufferPool* pool = new LargeBufferPool();  // never destroyed
    return *pool;
  }
  // Acquire: an idle buffer of capacity in [n, n + n/4], else a new one of
  // n rounded up to 64 KiB.
  char* Acquire(size_t n, size_t* capacity) {
    {
      absl::MutexLock l(&mu_);
      auto it = idle_.lower_bound(n);
      if (it != idle_.end() && it->first <= n + n / 4) {
        *capacity = it->first;
        char* p = it->second;
        idle_.erase(it);
        idle_bytes_ -= *capacity;
        return p;
      }
    }
    *capacity = (n + kPooledReplyBytes - 1) / kPooledReplyBytes * kPooledReplyBytes;
    return static_cast<char*>(std::malloc(*capacity));
  }
  void Release(char* p, size_t capacity) {
    {
      absl::MutexLock l(&mu_);
      if (idle_bytes_ + capacity <= kMaxPooledBytes) {
        idle_.emplace(capacity, p);
        idle_bytes_ += capacity;
        return;
      }
    }
    std::free(p);
  }
  size_t idle_bytes() {
    absl::MutexLock l(&mu_);
    return idle_bytes_;
  }

 private:
  absl::Mutex mu_;
  std::multimap<size_t, char*> idle_ ABSL_GUARDED_BY(mu_);
  size_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// hiredis reply-object functions (same objects as hiredis' defaults, see
// hiredis.c), except that large strings live in pooled buffers. A string
// reply's `integer` field (unused for strings) holds the pooled capacity, or
// 0 for a plain malloc'ed string.
redisReply* NewReply(const redisReadTask* task, int type) {
  auto* r = static_cast<redisReply*>(std::calloc(1, sizeof(redisReply)));
  if (r == nullptr) return nullptr;
  r->type = type;
  if (task->parent != nullptr) {
    auto* parent = static_cast<redisReply*>(task->parent->obj);
    parent->element[task->idx] = r;
  }
  return r;
}

void FreeReplyTree(void* obj) {
  auto* r = static_cast<redisReply*>(obj);
  if (r == nullptr) return;
  switch (r->type) {
    case REDIS_REPLY_ARRAY:
      if (r->element != nullptr) {
        for (size_t i = 0; i < r->elements; ++i) FreeReplyTree(r->element[i]);
        std::free(r->element);
      }
      break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      if (r->str != nullptr) {
        if (r->integer > 0) {
          LargeBufferPool::Instance().Release(r->str, static_cast<size_t>(r->integer));
        } else {
          std::free(r->str);
        }
      }
      break;
    default:
      break;
  }
  std::free(r);
}

void* CreateString(const redisReadTask* task, char* str, size_t len) {
  char* buf;
  size_t capacity = 0;
  if (len + 1 >= kPooledReplyBytes) {
    buf = LargeBufferPool::Instance().Acquire(len + 1, &capacity);
  } else {
    buf = static_cast<char*>(std::malloc(len + 1));
  }
  if (buf == nullptr) return nullptr;
  redisReply* r = NewReply(task, task->type);
  if (r == nullptr) {
    if (capacity > 0) {
      LargeBufferPool::Instance().Release(buf, capacity);
    } else {
      std::free(buf);
    }
    return nullptr;
  }
  std::memcpy(buf, str, len);
  buf[len] = '\0';
  r->str = buf;
  r->len = len;
  r->integer = static_cast<long long>(capacity);
  return r;
}

void* CreateArray(const redisReadTask* task, int elements) {
  redisReply* r = NewReply(task, REDIS_REPLY_ARRAY);
  if (r == nullptr) return nullptr;
  if (elements > 0) {
    r->element = static_cast<redisReply**>(std::calloc(elements, sizeof(redisReply*)));
    if (r->element == nullptr) {
      if (task->parent != nullptr) {
        static_cast<redisReply*>(task->parent->obj)->element[task->idx] = nullptr;
      }
      std::free(r);
      return nullptr;
    }
  }
  r->elements = elements;
  return r;
}

void* CreateInteger(const redisReadTask* task, long long value) {
  redisReply* r = NewReply(task, REDIS_REPLY_INTEGER);
  if (r != nullptr) r->integer = value;
  return r;
}

void* CreateNil(const redisReadTask* task) { return NewReply(task, REDIS_REPLY_NIL); }

redisReplyObjectFunctions kPooledReplyFunctions = {CreateString, CreateArray, CreateInteger,
                                                   CreateNil, FreeReplyTree};

}  // namespace

void LargeBufferDeleter::operator()(char* p) const {
  if (p != nullptr) LargeBufferPool::Instance().Release(p, capacity);
}

LargeBuffer AcquireLargeBuffer(size_t bytes) {
  size_t capacity = 0;
  char* p = LargeBufferPool::Instance().Acquire(std::max<size_t>(bytes, 1), &capacity);
  return LargeBuffer(p, LargeBufferDeleter{capacity});
}

size_t PooledBytesIdle() { return LargeBufferPool::Instance().idle_bytes(); }

// ---------------------------------------------------------------- endpoint --

absl::StatusOr<RedisEndpoint> RedisEndpoint::Parse(std::string_view s) {
  RedisEndpoint ep;
  std::string_view port_str;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("bad redis endpoint '", Sv(s), "'"));
    }
    ep.host = std::string(s.substr(1, close - 1));
    port_str = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad redis endpoint '", Sv(s), "': expected host:port"));
    }
    ep.host = std::string(s.substr(0, colon));
    port_str = s.substr(colon + 1);
  }
  int port = 0;
  if (ep.host.empty() || !absl::SimpleAtoi(Sv(port_str), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad redis endpoint '", Sv(s), "'"));
  }
  ep.port = port;
  return ep;
}

std::string RedisEndpoint::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

// ------------------------------------------------------------------ replies --

ReplyType ReplyView::type() const {
  if (r_ == nullptr) return ReplyType::kNone;
  switch (r_->type) {
    case REDIS_REPLY_STRING: return ReplyType::kString;
    case REDIS_REPLY_ARRAY: return ReplyType::kArray;
    case REDIS_REPLY_INTEGER: return ReplyType::kInteger;
    case REDIS_REPLY_NIL: return ReplyType::kNil;
    case REDIS_REPLY_STATUS: return ReplyType::kStatus;
    case REDIS_REPLY_ERROR: return ReplyType::kError;
    default: return ReplyType::kNone;
  }
}

std::string_view ReplyView::str() const {
  if (r_ == nullptr || r_->str == nullptr) return {};
  switch (r_->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return std::string_view(r_->str, r_->len);
    default:
      return {};
  }
}

int64_t ReplyView::integer() const {
  return (r_ != nullptr && r_->type == REDIS_REPLY_INTEGER) ? r_->integer : 0;
}

size_t ReplyView::size() const {
  return (r_ != nullptr && r_->type == REDIS_REPLY_ARRAY) ? r_->elements : 0;
}

ReplyView ReplyView::operator[](size_t i) const { return ReplyView(r_->element[i]); }

std::string ReplyView::DebugString() const {
  auto trunc = [](std::string_view s) {
    return s.size() <= 64 ? std::string(s) : absl::StrCat(Sv(s.substr(0, 64)), "...");
  };
  switch (type()) {
    case ReplyType::kNone: return "(none)";
    case ReplyType::kString: return absl::StrCat("\"", trunc(str()), "\"");
    case ReplyType::kStatus: return absl::StrCat("+", trunc(str()));
    case ReplyType::kError: return absl::StrCat("-", trunc(str()));
    case ReplyType::kInteger: return absl::StrCat(":", integer());
    case ReplyType::kNil: return "(nil)";
    case ReplyType::kArray: {
      std::string out = "[";
      for (size_t i = 0; i < size() && i < 8; ++i) {
        absl::StrAppend(&out, i ? ", " : "", (*this)[i].DebugString());
      }
      absl::StrAppend(&out, size() > 8 ? ", ...]" : "]");
      return out;
    }
  }
  return "?";
}

Reply::~Reply() {
  if (r_ != nullptr) FreeReplyTree(r_);
}

Reply& Reply::operator=(Reply&& o) noexcept {
  if (this != &o) {
    if (r_ != nullptr) FreeReplyTree(r_);
    r_ = o.r_;
    o.r_ = nullptr;
  }
  return *this;
}

absl::Status ReplyToStatus(ReplyView r, std::string_view what) {
  if (!r.IsError()) return absl::OkStatus();
  std::string_view e = r.str();
  std::string msg = absl::StrCat(Sv(what), ": redis error: ", Sv(e));
  for (const char* transient : {"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY"}) {
    if (absl::StartsWith(Sv(e), transient)) return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

// --------------------------------------------------------------- connection --

// Socket read size: replies of several MiB arrive in a few reads.
constexpr size_t kReadChunkBytes = size_t{256} << 10;

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::Connect(
    const RedisConnectionOptions& options) {
  std::unique_ptr<RedisConnection> conn(new RedisConnection(options));
  const RedisEndpoint& ep = options.endpoint;
  absl::StatusOr<std::unique_ptr<RedisTransport>> io =
      RedisTransport::Connect(ep.host, ep.port, options.tls, options.connect_timeout);
  if (!io.ok()) {
    if (absl::IsInvalidArgument(io.status())) return io.status();  // TLS files: not transient
    return TransportStatus(ep, options.tls.enabled ? "TLS connect" : "connect",
                           io.status().message(), io.status().code());
  }
  // Our reply objects: same layout as hiredis', large strings pooled. Every
  // reply is therefore freed by Reply (FreeReplyTree).
  conn->reader_ = redisReaderCreateWithFunctions(&kPooledReplyFunctions);
  if (conn->reader_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("redis ", ep.ToString(), ": cannot allocate a reply reader"));
  }
  if (options.reader_buffer_keep_bytes > 0) conn->reader_->maxbuf = options.reader_buffer_keep_bytes;
  conn->ibuf_ = std::make_unique<char[]>(kReadChunkBytes);
  conn->io_ = *std::move(io);
  // AUTH runs under the connect timeout, then commands get their own.
  conn->io_timeout_ = options.connect_timeout;
  if (!options.password.empty()) {
    RedisArgv auth = {"AUTH"};
    if (!options.username.empty()) auth.push_back(options.username);
    auth.push_back(options.password);
    ASSIGN_OR_RETURN(Reply r, conn->Command(auth));
    if (r.IsError()) {
      return absl::PermissionDeniedError(
          absl::StrCat("redis ", ep.ToString(), ": AUTH",
                       options.username.empty() ? "" : " as '" + options.username + "'",
                       " rejected: ", Sv(r.str())));
    }
  }
  conn->io_timeout_ = options.command_timeout;
  return conn;
}

RedisConnection::RedisConnection(const RedisConnectionOptions& options) : options_(options) {}

RedisConnection::~RedisConnection() {
  if (reader_ != nullptr) redisReaderFree(reader_);
}

absl::Status RedisConnection::Fail(std::string_view during, const absl::Status& cause) {
  io_.reset();
  return TransportStatus(options_.endpoint, during, cause.message(), cause.code());
}

absl::StatusOr<Reply> RedisConnection::NextReply(absl::Duration timeout) {
  for (;;) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
      return absl::InternalError(absl::StrCat("protocol error: ", reader_->errstr));
    }
    if (raw != nullptr) return Reply(static_cast<redisReply*>(raw));
    ASSIGN_OR_RETURN(size_t n, io_->ReadSome(ibuf_.get(), kReadChunkBytes, timeout));
    if (redisReaderFeed(reader_, ibuf_.get(), n) != REDIS_OK) {
      return absl::ResourceExhaustedError("cannot buffer the reply");
    }
  }
}

namespace {
// CollectReplies: Pipeline in terms of PipelineStream (every reply kept, in
// order), shared by RedisConnection and RedisNodePool.
template <typename StreamFn>
absl::StatusOr<std::vector<Reply>> CollectReplies(absl::Span<const RedisArgv> commands,
                                                  StreamFn&& stream) {
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  RETURN_IF_ERROR(stream(commands, [&replies](size_t, Reply r) { replies.push_back(std::move(r)); }));
  return replies;
}
}  // namespace

absl::StatusOr<std::vector<Reply>> RedisConnection::Pipeline(absl::Span<const RedisArgv> commands) {
  return CollectReplies(commands, [this](absl::Span<const RedisArgv> c, const ReplyCallback& cb) {
    return PipelineStream(c, cb);
  });
}

absl::Status RedisConnection::PipelineStream(absl::Span<const RedisArgv> commands,
                                             const ReplyCallback& on_reply) {
  if (io_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("redis ", options_.endpoint.ToString(), ": connection is broken"));
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  obuf_.clear();
  for (const RedisArgv& cmd : commands) {
    if (cmd.empty()) return absl::InvalidArgumentError("redis: empty command");
    argv.clear();
    lens.clear();
    for (std::string_view a : cmd) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    char* formatted = nullptr;
    const int n = redisFormatCommandArgv(&formatted, static_cast<int>(argv.size()), argv.data(),
                                         lens.data());
    if (n < 0 || formatted == nullptr) {
      return absl::ResourceExhaustedError("redis: cannot format a command");
    }
    obuf_.append(formatted, static_cast<size_t>(n));
    redisFreeCommand(formatted);
  }
  absl::Status w = io_->WriteAll(obuf_, io_timeout_);
  obuf_.clear();
  if (obuf_.capacity() > kReadChunkBytes) obuf_.shrink_to_fit();
  if (!w.ok()) return Fail(absl::StrCat("sending ", commands.size(), " command(s)"), w);
  for (size_t i = 0; i < commands.size(); ++i) {
    absl::StatusOr<Reply> r = NextReply(io_timeout_);
    if (!r.ok()) {
      return Fail(absl::StrCat(Sv(commands[i][0]), " (", i + 1, "/", commands.size(), ")"),
                  r.status());
    }
    on_reply(i, *std::move(r));
  }
  return absl::OkStatus();
}

absl::StatusOr<Reply> RedisConnection::Command(const RedisArgv& argv) {
  ASSIGN_OR_RETURN(std::vector<Reply> r, Pipeline(absl::MakeConstSpan(&argv, 1)));
  return std::move(r[0]);
}

// --------------------------------------------------------------------- pool --

RedisNodePool::RedisNodePool(RedisNodePoolOptions options) : options_(std::move(options)) {}

RedisNodePool::~RedisNodePool() = default;

int RedisNodePool::open_connections() const {
  MutexLock l(&mu_);
  return open_;
}

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisNodePool::Acquire(bool* fresh) {
  const int cap = std::max(1, options_.max_connections);
  mu_.Lock();
  auto can_proceed = [this, cap]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !idle_.empty() || open_ < cap;
  };
  cv_.Wait(&mu_, can_proceed);
  if (!idle_.empty()) {
    std::unique_ptr<RedisConnection> c = std::move(idle_.back());
    idle_.pop_back();
    mu_.Unlock();
    *fresh = false;
    return c;
  }
  absl::Time now = absl::Now();
  if (now < next_connect_allowed_) {
    std::string msg = absl::StrCat("redis ", endpoint().ToString(),
                                    ": node down, reconnect backoff (last error: ",
                                    last_connect_error_, ")");
    mu_.Unlock();
    return absl::UnavailableError(msg);
  }
  ++open_;
  mu_.Unlock();

  absl::StatusOr<std::unique_ptr<RedisConnection>> c = RedisConnection::Connect(options_.connection);

  MutexLock l(&mu_);
  if (!c.ok()) {
    --open_;
    ++consecutive_connect_failures_;
    absl::Duration backoff = options_.reconnect_backoff_initial;
    for (int i = 1; i < consecutive_connect_failures_ && backoff < options_.reconnect_backoff_max;
         ++i) {
      backoff *= 2;
    }
    backoff = std::min(backoff, options_.reconnect_backoff_max);
    next_connect_allowed_ = absl::Now() + backoff;
    last_connect_error_ = std::string(c.status().message());
    return c.status();
  }
  consecutive_connect_failures_ = 0;
  next_connect_allowed_ = absl::InfinitePast();
  *fresh = true;
  return c;
}

void RedisNodePool::Release(std::unique_ptr<RedisConnection> conn) {
  MutexLock l(&mu_);
  if (conn->broken()) {
    --open_;
  } else {
    idle_.push_back(std::move(conn));
  }
  cv_.SignalAll();
}

absl::StatusOr<std::vector<Reply>> RedisNodePool::Pipeline(absl::Span<const RedisArgv> commands) {
  return CollectReplies(commands, [this](absl::Span<const RedisArgv> c, const ReplyCallback& cb) {
    return PipelineStream(c, cb);
  });
}

absl::Status RedisNodePool::PipelineStream(absl::Span<const RedisArgv> commands,
                                           const ReplyCallback& on_reply) {
  for (int attempt = 0;; ++attempt) {
    bool fresh = false;
    ASSIGN_OR_RETURN(std::unique_ptr<RedisConnection> conn, Acquire(&fresh));
    size_t delivered = 0;
    absl::Status s = conn->PipelineStream(commands, [&](size_t i, Reply r) {
      ++delivered;
      on_reply(i, std::move(r));
    });
    Release(std::move(conn));
    if (s.ok() || fresh || attempt > 0 || delivered > 0 || !absl::IsUnavailable(s)) return s;
    // A reused connection died (server restart, idle kill) before any reply:
    // the other idle ones most likely did too. Drop them and retry once on a
    // fresh one.
    std::vector<std::unique_ptr<RedisConnection>> stale;
    {
      MutexLock l(&mu_);
      stale.swap(idle_);
      open_ -= static_cast<int>(stale.size());
      cv_.SignalAll();
    }
  }
}

absl::StatusOr<Reply> RedisNodePool::Command(const RedisArgv& argv) {
  ASSIGN_OR_RETURN(std::vector<Reply> r, Pipeline(absl::MakeConstSpan(&argv, 1)));
  return std::move(r[0]);
}

absl::StatusOr<Reply> RedisExecutor::Command(std::string_view routing_key, const RedisArgv& argv) {
  ASSIGN_OR_RETURN(std::vector<Reply> r, Pipeline(routing_key, absl::MakeConstSpan(&argv, 1)));
  return std::move(r[0]);
}

absl::Status RedisExecutor::PipelineStream(std::string_view routing_key,
                                           absl::Span<const RedisArgv> commands,
                                           const ReplyCallback& on_reply) {
  ASSIGN_OR_RETURN(std::vector<Reply> r, Pipeline(routing_key, commands));
  for (size_t i = 0; i < r.size(); ++i) on_reply(i, std::move(r[i]));
  return absl::OkStatus();
}

}  // namespace ragkv::kvstore::internal
