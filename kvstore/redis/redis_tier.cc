#include "kvstore/redis/redis_tier.h"

#include <cctype>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "kvstore/redis/internal/redis_client.h"
#include "kvstore/redis/internal/redis_cluster.h"
#include "kvstore/redis/internal/redis_record.h"
#include "kvstore/redis/internal/redis_tier_internal.h"
#include "base/sync.h"

// RedisTier is defined in three files: this one (options, connection,
// health, layout hint, the header value parser), redis_tier_read.cc (Get*,
// ReadChunk, Contains), redis_tier_write.cc (Put, Delete,
// DeleteByFingerprint) and redis_tier_budget.cc (the byte budget).

namespace ragkv::kvstore {
namespace internal {

// ParseHeaderValue: frame checks of a decoded header value.
absl::StatusOr<HeaderValue> ParseHeaderValue(const DecodedRedisValue& d) {
  if (d.frame.kind != RedisRecordKind::kHeader) {
    return absl::DataLossError("redis header value has a layer-part frame");
  }
  if (d.frame.count == 0 || d.frame.count > kMaxLayers ||
      d.payload.size() != d.frame.total_bytes + 4 * uint64_t{d.frame.count}) {
    return absl::DataLossError("redis header value: inconsistent sizes");
  }
  HeaderValue h;
  h.blob = d.payload.substr(0, d.frame.total_bytes);
  ASSIGN_OR_RETURN(h.part_counts,
                   internal::DecodePartCounts(d.payload.substr(d.frame.total_bytes), d.frame.count));
  return h;
}

}  // namespace internal

namespace {

using internal::RedisArgv;
using internal::Reply;

constexpr uint64_t kMinValueBytes = 4096;
constexpr uint64_t kMaxValueBytes = uint64_t{512} << 20;

absl::Status ValidateOptions(const RedisTierOptions& o) {
  if (o.endpoints.empty()) return absl::InvalidArgumentError("redis tier: no endpoints");
  if (o.mode == RedisMode::kStandalone && o.endpoints.size() != 1) {
    return absl::InvalidArgumentError("redis tier: standalone mode takes exactly one endpoint");
  }
  if (o.max_value_bytes < kMinValueBytes || o.max_value_bytes > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("redis tier: max_value_bytes ", o.max_value_bytes,
                                                   " outside [4 KiB, 512 MiB]"));
  }
  if (o.key_prefix.empty()) return absl::InvalidArgumentError("redis tier: empty key_prefix");
  for (char c : o.key_prefix) {
    if (c == '{' || c == '}' || std::isspace(static_cast<unsigned char>(c)) || c == '\0') {
      return absl::InvalidArgumentError(
          absl::StrCat("redis tier: key_prefix '", o.key_prefix,
                       "' must not contain '{', '}', NUL or whitespace"));
    }
  }
  if (o.pool_size < 1) return absl::InvalidArgumentError("redis tier: pool_size must be >= 1");
  if (o.ttl < absl::ZeroDuration()) return absl::InvalidArgumentError("redis tier: negative ttl");
  if (o.connect_timeout <= absl::ZeroDuration() || o.command_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("redis tier: timeouts must be positive");
  }
  if (o.tls.cert_file.empty() != o.tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "redis tier: a TLS client certificate needs both cert_file and key_file");
  }
  if (!o.username.empty() && o.password.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("redis tier: username '", o.username, "' given without a password"));
  }
  if (o.max_pipeline_bytes == 0 || o.max_chunk_bytes == 0) {
    return absl::InvalidArgumentError("redis tier: max_pipeline_bytes / max_chunk_bytes must be > 0");
  }
  return absl::OkStatus();
}

// HealthTrackingExecutor: forwards every round trip to the real executor and
// records whether it reached its node: OK (replies, even error replies) sets
// `up`; UNAVAILABLE / DEADLINE_EXCEEDED (refused, reset, in reconnect
// backoff, timed out) clears it and counts an outage on a 1 -> 0 transition.
class HealthTrackingExecutor final : public internal::RedisExecutor {
 public:
  HealthTrackingExecutor(std::unique_ptr<internal::RedisExecutor> inner, std::atomic<bool>* up,
                         std::atomic<uint64_t>* outages)
      : inner_(std::move(inner)), up_(up), outages_(outages) {}

  absl::StatusOr<std::vector<Reply>> Pipeline(std::string_view routing_key,
                                              absl::Span<const RedisArgv> commands) override {
    absl::StatusOr<std::vector<Reply>> r = inner_->Pipeline(routing_key, commands);
    Note(r.status());
    return r;
  }
  absl::Status PipelineStream(std::string_view routing_key, absl::Span<const RedisArgv> commands,
                              const internal::ReplyCallback& on_reply) override {
    absl::Status s = inner_->PipelineStream(routing_key, commands, on_reply);
    Note(s);
    return s;
  }
  std::string NodeKeyFor(std::string_view routing_key) const override {
    return inner_->NodeKeyFor(routing_key);
  }
  std::string Describe() const override { return inner_->Describe(); }

 private:
  void Note(const absl::Status& s) {
    if (s.ok()) {
      up_->store(true, std::memory_order_relaxed);
    } else if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
      if (up_->exchange(false, std::memory_order_relaxed)) {
        outages_->fetch_add(1, std::memory_order_relaxed);
      }
    }
  }

  const std::unique_ptr<internal::RedisExecutor> inner_;
  std::atomic<bool>* const up_;
  std::atomic<uint64_t>* const outages_;
};

}  // namespace

// ------------------------------------------------------------------ create --

absl::StatusOr<std::unique_ptr<RedisTier>> RedisTier::Create(RedisTierOptions options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  std::vector<internal::RedisEndpoint> eps;
  for (const std::string& s : options.endpoints) {
    ASSIGN_OR_RETURN(internal::RedisEndpoint ep, internal::RedisEndpoint::Parse(s));
    eps.push_back(std::move(ep));
  }
  const std::string all = absl::StrJoin(options.endpoints, ",");
  internal::RedisNodePoolOptions node;
  node.connection.connect_timeout = options.connect_timeout;
  node.connection.command_timeout = options.command_timeout;
  node.connection.username = options.username;
  node.connection.password = options.password;
  node.connection.tls = options.tls;
  // Keep a read buffer of one full value per connection (see the option).
  node.connection.reader_buffer_keep_bytes = options.max_value_bytes + (64 << 10);
  node.max_connections = options.pool_size;
  node.reconnect_backoff_initial = options.reconnect_backoff_initial;
  node.reconnect_backoff_max = options.reconnect_backoff_max;

  if (options.mode != RedisMode::kStandalone) {
    internal::RedisClusterOptions co;
    co.seeds = eps;
    co.node = node;
    absl::StatusOr<std::unique_ptr<internal::RedisCluster>> cluster =
        internal::RedisCluster::Create(std::move(co));
    if (cluster.ok()) {
      RAGKV_LOG(INFO) << "redis tier: " << (*cluster)->Describe() << " via " << all;
      return std::unique_ptr<RedisTier>(
          new RedisTier(std::move(options), *std::move(cluster), /*cluster_mode=*/true));
    }
    if (options.mode == RedisMode::kCluster || !absl::IsFailedPrecondition(cluster.status())) {
      return absl::Status(cluster.status().code(),
                          absl::StrCat("redis tier (", all, "): ", cluster.status().message()));
    }
    if (eps.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "redis tier: several endpoints given (", all, ") but they are not cluster nodes"));
    }
  }
  node.connection.endpoint = eps[0];
  auto single = std::make_unique<internal::RedisSingleNode>(node);
  absl::StatusOr<Reply> pong = single->pool().Command({"PING"});
  if (!pong.ok()) {
    return absl::Status(pong.status().code(),
                        absl::StrCat("redis tier: ", pong.status().message()));
  }
  if (pong->str() != "PONG") {
    return absl::UnavailableError(absl::StrCat("redis tier: ", all, " answered PING with ",
                                               pong->view().DebugString()));
  }
  return std::unique_ptr<RedisTier>(
      new RedisTier(std::move(options), std::move(single), /*cluster_mode=*/false));
}

absl::Status ParseRedisAddress(std::string_view address, RedisTierOptions* options) {
  absl::string_view a = internal::Sv(address);
  if (absl::ConsumePrefix(&a, "rediss://")) {
    options->tls.enabled = true;
  } else {
    absl::ConsumePrefix(&a, "redis://");
  }
  if (absl::StrContains(a, "@")) {
    return absl::InvalidArgumentError(
        "redis address: credentials do not belong in the address (they would show in argv and "
        "logs); give the user with --redis-user and the password with --redis-password-file or "
        "the RAGKV_REDIS_PASSWORD environment variable");
  }
  const bool database_zero = absl::ConsumeSuffix(&a, "/") || absl::ConsumeSuffix(&a, "/0");
  if (!database_zero && absl::StrContains(a, "/")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "redis address '", internal::Sv(address),
        "': database numbers are not supported (Redis Cluster has none); use a key prefix "
        "(--redis-prefix) as the namespace"));
  }
  options->endpoints.clear();
  for (absl::string_view ep : absl::StrSplit(a, ',', absl::SkipEmpty())) {
    ASSIGN_OR_RETURN(internal::RedisEndpoint parsed, internal::RedisEndpoint::Parse(internal::StdSv(ep)));
    options->endpoints.push_back(parsed.ToString());
  }
  if (options->endpoints.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("redis address '", internal::Sv(address), "' names no host:port"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tier>> CreateRedisTier(const RedisTierOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<RedisTier> t, RedisTier::Create(options));
  return std::unique_ptr<Tier>(std::move(t));
}

RedisTier::RedisTier(RedisTierOptions options, std::unique_ptr<internal::RedisExecutor> exec,
                     bool cluster_mode)
    : options_(std::move(options)),
      exec_(std::make_unique<HealthTrackingExecutor>(std::move(exec), &health_.up,
                                                     &health_.outages)),
      cluster_mode_(cluster_mode),
      hint_(std::make_unique<internal::RedisLayoutHint>()) {}

std::vector<uint32_t> RedisTier::LayoutHint() const {
  MutexLock l(&hint_->mu);
  return hint_->parts;
}

void RedisTier::SetLayoutHint(const std::vector<uint32_t>& parts) {
  MutexLock l(&hint_->mu);
  if (hint_->parts != parts) hint_->parts = parts;
}

RedisTier::~RedisTier() = default;

std::string RedisTier::Describe() const { return exec_->Describe(); }

TierStats RedisTier::Stats() const {
  TierStats s = Tier::Stats();
  s.up = health_.up.load(std::memory_order_relaxed) ? 1 : 0;
  s.outages = health_.outages.load(std::memory_order_relaxed);
  if (options_.budget_bytes > 0) {
    s.capacity_bytes = options_.budget_bytes;
    s.bytes_used = budget_used_.load(std::memory_order_relaxed);
    s.entries = budget_entries_.load(std::memory_order_relaxed);
  }
  return s;
}

absl::Status RedisTier::CountError(absl::Status s) {
  if (!s.ok()) counters().errors.fetch_add(1, std::memory_order_relaxed);
  return s;
}

}  // namespace ragkv::kvstore
