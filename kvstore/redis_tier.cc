#include "kvstore/redis_tier.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "kvstore/internal/redis_client.h"
#include "kvstore/internal/redis_cluster.h"
#include "kvstore/internal/redis_record.h"
#include "kvstore/internal/sync.h"

namespace ragkv::kvstore {
namespace internal {
// RedisLayoutHint: the part counts per layer of the last chunk the tier read
// or wrote (RedisTier::ReadChunk fetches that layout speculatively).
struct RedisLayoutHint {
  mutable Mutex mu;
  std::vector<uint32_t> parts ABSL_GUARDED_BY(mu);
};
}  // namespace internal

namespace {

using internal::DecodedRedisValue;
using internal::RedisArgv;
using internal::RedisFrame;
using internal::RedisRecordKind;
using internal::Reply;
using internal::Sv;

constexpr uint64_t kMinValueBytes = 4096;
constexpr uint64_t kMaxValueBytes = uint64_t{512} << 20;
// Keys per UNLINK command when deleting a chunk.
constexpr size_t kUnlinkBatch = 256;

uint64_t NewWriteId() {
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }());
  return rng();
}

// WriteReplyStatus: OK for +OK / integers, the Redis error otherwise
// (-OOM becomes RESOURCE_EXHAUSTED).
absl::Status WriteReplyStatus(const Reply& r, std::string_view what) {
  if (!r.IsError()) return absl::OkStatus();
  if (absl::StartsWith(Sv(r.str()), "OOM")) {
    return absl::ResourceExhaustedError(
        absl::StrCat("redis tier: ", Sv(what), ": Redis is out of memory: ", Sv(r.str())));
  }
  return internal::ReplyToStatus(r.view(), absl::StrCat("redis tier: ", Sv(what)));
}

struct HeaderValue {
  std::string_view blob;
  std::vector<uint32_t> part_counts;
};

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

// LayerDecode: one layer record rebuilt from the replies of its parts.
struct LayerDecode {
  std::optional<PinnedBytes> blob;  // nullopt: absent, torn or corrupt
  std::string corrupt;              // non-empty: corrupt (detail)
  absl::Status error;               // a Redis error reply
};

// DecodeLayerParts: layer `layer` from `replies` (part 0..n-1, n = the part
// count the header announced; `keys` are their Redis keys). Zero-copy for a
// one-part layer; split layers are reassembled in a pooled buffer. Parts
// from another Put (write id, count or size differ) read as absent.
LayerDecode DecodeLayerParts(uint32_t layer, absl::Span<Reply> replies,
                             absl::Span<const std::string> keys) {
  LayerDecode out;
  const uint32_t n = static_cast<uint32_t>(replies.size());
  std::vector<std::shared_ptr<Reply>> owners;
  std::vector<std::string_view> payloads;
  RedisFrame first;
  for (uint32_t j = 0; j < n; ++j) {
    Reply& rep = replies[j];
    if (rep.IsNil()) return out;  // absent (evicted, expired, deleted, torn)
    if (!rep.IsString()) {
      out.error = rep.IsError() ? internal::ReplyToStatus(rep.view(), "redis tier: GET layer")
                                : absl::InternalError("redis tier: GET layer: unexpected reply");
      return out;
    }
    auto owner = std::make_shared<Reply>(std::move(rep));
    absl::StatusOr<DecodedRedisValue> d = internal::DecodeRedisValue(keys[j], owner->str());
    if (!d.ok()) {
      out.corrupt = std::string(d.status().message());
      return out;
    }
    const RedisFrame& f = d->frame;
    if (f.kind != RedisRecordKind::kLayerPart || f.layer != layer || f.part != j ||
        d->payload.size() > f.total_bytes) {
      out.corrupt = absl::StrCat("redis value '", keys[j], "': inconsistent frame");
      return out;
    }
    if (j == 0) first = f;
    // A part of another Put (a concurrent or torn overwrite): absent.
    if (f.count != n || f.write_id != first.write_id || f.total_bytes != first.total_bytes) {
      return out;
    }
    payloads.push_back(d->payload);
    owners.push_back(std::move(owner));
  }
  uint64_t sum = 0;
  for (std::string_view p : payloads) sum += p.size();
  if (sum != first.total_bytes) {
    out.corrupt = absl::StrCat("redis layer ", layer, ": parts sum to ", sum, " bytes, frame says ",
                               first.total_bytes);
    return out;
  }
  if (n == 1) {
    out.blob = PinnedBytes(payloads[0], std::move(owners[0]));
    return out;
  }
  internal::LargeBuffer lb = internal::AcquireLargeBuffer(sum);
  size_t filled = 0;
  for (std::string_view p : payloads) {
    std::memcpy(lb.get() + filled, p.data(), p.size());
    filled += p.size();
  }
  const internal::LargeBufferDeleter deleter = lb.get_deleter();
  std::shared_ptr<char> owner(lb.release(), deleter);
  std::string_view view(owner.get(), filled);
  out.blob = PinnedBytes(view, std::move(owner));
  return out;
}

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
  if (o.max_pipeline_bytes == 0 || o.max_chunk_bytes == 0) {
    return absl::InvalidArgumentError("redis tier: max_pipeline_bytes / max_chunk_bytes must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

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
  node.connection.password = options.password;
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
  internal::MutexLock l(&hint_->mu);
  return hint_->parts;
}

void RedisTier::SetLayoutHint(const std::vector<uint32_t>& parts) {
  internal::MutexLock l(&hint_->mu);
  if (hint_->parts != parts) hint_->parts = parts;
}

RedisTier::~RedisTier() = default;

std::string RedisTier::Describe() const { return exec_->Describe(); }

TierStats RedisTier::Stats() const {
  TierStats s = Tier::Stats();
  s.up = health_.up.load(std::memory_order_relaxed) ? 1 : 0;
  s.outages = health_.outages.load(std::memory_order_relaxed);
  return s;
}

absl::Status RedisTier::CountError(absl::Status s) {
  if (!s.ok()) counters().errors.fetch_add(1, std::memory_order_relaxed);
  return s;
}

// -------------------------------------------------------------------- reads --

absl::StatusOr<Tier::Blob> RedisTier::GetHeader(const ChunkKey& key) {
  std::vector<absl::StatusOr<Blob>> r = MultiGetHeaders(absl::MakeConstSpan(&key, 1));
  return std::move(r[0]);
}

std::vector<absl::StatusOr<Tier::Blob>> RedisTier::MultiGetHeaders(
    absl::Span<const ChunkKey> keys) {
  ScopedTimerNs timer(&counters().read_ns);
  std::vector<absl::StatusOr<Blob>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out.emplace_back(std::nullopt);
  std::vector<std::string> hkeys(keys.size());
  // Group by node so that each node gets one pipeline.
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t i = 0; i < keys.size(); ++i) {
    hkeys[i] = internal::RedisHeaderKey(options_.key_prefix, keys[i]);
    groups[exec_->NodeKeyFor(hkeys[i])].push_back(i);
  }
  for (const auto& [node, idx] : groups) {
    std::vector<RedisArgv> cmds;
    cmds.reserve(idx.size());
    for (size_t i : idx) cmds.push_back({"GET", hkeys[i]});
    absl::StatusOr<std::vector<Reply>> r = exec_->Pipeline(hkeys[idx[0]], cmds);
    for (size_t k = 0; k < idx.size(); ++k) {
      const size_t i = idx[k];
      if (!r.ok()) {
        out[i] = CountError(r.status());
        continue;
      }
      auto owner = std::make_shared<Reply>(std::move((*r)[k]));
      if (owner->IsNil()) {
        counters().misses.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (owner->IsError() || !owner->IsString()) {
        out[i] = CountError(owner->IsError()
                                ? internal::ReplyToStatus(owner->view(), "redis tier: GET header")
                                : absl::InternalError("redis tier: GET header: unexpected reply"));
        continue;
      }
      absl::StatusOr<DecodedRedisValue> d = internal::DecodeRedisValue(hkeys[i], owner->str());
      absl::StatusOr<HeaderValue> h =
          d.ok() ? ParseHeaderValue(*d) : absl::StatusOr<HeaderValue>(d.status());
      if (!h.ok()) {
        counters().misses.fetch_add(1, std::memory_order_relaxed);
        ReportCorruption(keys[i], internal::StdSv(h.status().message()));
        continue;
      }
      counters().hits.fetch_add(1, std::memory_order_relaxed);
      counters().bytes_read.fetch_add(h->blob.size(), std::memory_order_relaxed);
      out[i] = std::optional<PinnedBytes>(PinnedBytes(h->blob, std::move(owner)));
    }
  }
  return out;
}

absl::StatusOr<Tier::Blob> RedisTier::GetLayer(const ChunkKey& key, uint32_t layer) {
  ASSIGN_OR_RETURN(std::vector<Blob> r, GetLayers(key, layer, 1));
  return std::move(r[0]);
}

absl::StatusOr<std::vector<Tier::Blob>> RedisTier::GetLayers(const ChunkKey& key,
                                                             uint32_t first_layer,
                                                             uint32_t count) {
  ScopedTimerNs timer(&counters().read_ns);
  if (count == 0) return std::vector<Blob>();
  if (uint64_t{first_layer} + count > kMaxLayers) {
    return absl::InvalidArgumentError(absl::StrCat("redis tier: layers ", first_layer, "+", count,
                                                   " beyond the limit of ", kMaxLayers));
  }
  const std::string hkey = internal::RedisHeaderKey(options_.key_prefix, key);
  std::vector<std::string> keys(count);
  std::vector<RedisArgv> cmds;
  cmds.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    keys[i] = internal::RedisLayerKey(options_.key_prefix, key, first_layer + i, 0);
    cmds.push_back({"GET", keys[i]});
  }
  absl::StatusOr<std::vector<Reply>> r = exec_->Pipeline(hkey, cmds);
  if (!r.ok()) return CountError(r.status());

  std::vector<Blob> out(count);
  std::string corrupt;  // first corruption detail, reported once
  auto note_corrupt = [&corrupt](absl::string_view detail) {
    if (corrupt.empty()) corrupt = std::string(detail);
  };
  struct Split {
    uint32_t i;
    RedisFrame frame;
    std::string_view part0;
    std::shared_ptr<Reply> owner;
  };
  std::vector<Split> splits;
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < count; ++i) {
    Reply& rep = (*r)[i];
    if (rep.IsNil()) continue;
    if (!rep.IsString()) {
      return CountError(rep.IsError() ? internal::ReplyToStatus(rep.view(), "redis tier: GET layer")
                                      : absl::InternalError("redis tier: GET layer: unexpected reply"));
    }
    auto owner = std::make_shared<Reply>(std::move(rep));
    absl::StatusOr<DecodedRedisValue> d = internal::DecodeRedisValue(keys[i], owner->str());
    if (!d.ok()) {
      note_corrupt(d.status().message());
      continue;
    }
    const RedisFrame& f = d->frame;
    if (f.kind != RedisRecordKind::kLayerPart || f.layer != first_layer + i || f.part != 0 ||
        f.count == 0 || d->payload.size() > f.total_bytes ||
        (f.count == 1 && d->payload.size() != f.total_bytes)) {
      note_corrupt(absl::StrCat("redis value '", keys[i], "': inconsistent frame"));
      continue;
    }
    if (f.count == 1) {
      bytes += d->payload.size();
      out[i] = PinnedBytes(d->payload, std::move(owner));
    } else {
      splits.push_back(Split{i, f, d->payload, std::move(owner)});
    }
  }

  // Second round: the other parts of split layers, in pipelines of about
  // max_pipeline_bytes.
  for (size_t s0 = 0; s0 < splits.size();) {
    size_t s1 = s0;
    uint64_t batch_bytes = 0;
    std::vector<std::string> pkeys;
    while (s1 < splits.size() && (s1 == s0 || batch_bytes < options_.max_pipeline_bytes)) {
      const Split& sp = splits[s1];
      for (uint32_t j = 1; j < sp.frame.count; ++j) {
        pkeys.push_back(internal::RedisLayerKey(options_.key_prefix, key, first_layer + sp.i, j));
      }
      batch_bytes += sp.frame.total_bytes;
      ++s1;
    }
    std::vector<RedisArgv> pcmds;
    pcmds.reserve(pkeys.size());
    for (const std::string& k : pkeys) pcmds.push_back({"GET", k});
    absl::StatusOr<std::vector<Reply>> pr = exec_->Pipeline(hkey, pcmds);
    if (!pr.ok()) return CountError(pr.status());
    size_t next = 0;
    for (size_t s = s0; s < s1; ++s) {
      const Split& sp = splits[s];
      const size_t base = next;
      next += sp.frame.count - 1;
      // Reassembly buffer from the large-buffer pool (warm memory).
      internal::LargeBuffer lb = internal::AcquireLargeBuffer(sp.frame.total_bytes);
      size_t filled = sp.part0.size();
      std::memcpy(lb.get(), sp.part0.data(), filled);
      bool ok = true;
      for (uint32_t j = 1; j < sp.frame.count && ok; ++j) {
        const Reply& pj = (*pr)[base + j - 1];
        const std::string& pk = pkeys[base + j - 1];
        if (pj.IsNil()) {  // torn: expired, evicted or deleted concurrently
          ok = false;
          break;
        }
        if (!pj.IsString()) {
          return CountError(pj.IsError() ? internal::ReplyToStatus(pj.view(), "redis tier: GET part")
                                         : absl::InternalError("redis tier: GET part: bad reply"));
        }
        absl::StatusOr<DecodedRedisValue> d = internal::DecodeRedisValue(pk, pj.str());
        if (!d.ok()) {
          note_corrupt(d.status().message());
          ok = false;
          break;
        }
        const RedisFrame& f = d->frame;
        if (f.write_id != sp.frame.write_id) {  // parts of two different Puts
          ok = false;
          break;
        }
        if (f.kind != RedisRecordKind::kLayerPart || f.layer != sp.frame.layer || f.part != j ||
            f.count != sp.frame.count || f.total_bytes != sp.frame.total_bytes ||
            filled + d->payload.size() > sp.frame.total_bytes) {
          note_corrupt(absl::StrCat("redis value '", pk, "': inconsistent frame"));
          ok = false;
          break;
        }
        std::memcpy(lb.get() + filled, d->payload.data(), d->payload.size());
        filled += d->payload.size();
      }
      if (ok && filled != sp.frame.total_bytes) {
        note_corrupt(absl::StrCat("redis layer ", sp.frame.layer, ": parts sum to ", filled,
                                  " bytes, frame says ", sp.frame.total_bytes));
        ok = false;
      }
      if (ok) {
        bytes += filled;
        const internal::LargeBufferDeleter deleter = lb.get_deleter();
        std::shared_ptr<char> owner(lb.release(), deleter);
        std::string_view view(owner.get(), filled);
        out[sp.i] = PinnedBytes(view, std::move(owner));
      }
    }
    s0 = s1;
  }
  counters().bytes_read.fetch_add(bytes, std::memory_order_relaxed);
  if (!corrupt.empty()) ReportCorruption(key, corrupt);
  return out;
}

absl::Status RedisTier::ReadChunk(const ChunkKey& key, ChunkReader& reader, bool stream) {
  ScopedTimerNs timer(&counters().read_ns);
  const std::string hkey = internal::RedisHeaderKey(options_.key_prefix, key);
  std::vector<LayerDecode> ready;
  std::vector<bool> have;
  // Fetch: one pipeline: GET of the header (when `header` is not null), then
  // of every part of layers [first, first + count) under the part counts
  // `parts`. Each layer is decoded (frames, XXH3) as soon as its last part
  // has arrived, overlapping the transfer of the next values; the result
  // lands in ready[l]. The reader is not called here (a connection is held).
  auto fetch = [&](Reply* header, uint32_t first, uint32_t count,
                   const std::vector<uint32_t>& parts) -> absl::Status {
    std::vector<std::string> keys;
    std::vector<uint32_t> layer_of;  // per key: index into [0, count)
    std::vector<size_t> first_key(count), remaining(count);
    for (uint32_t c = 0; c < count; ++c) {
      first_key[c] = keys.size();
      remaining[c] = parts[first + c];
      for (uint32_t j = 0; j < parts[first + c]; ++j) {
        keys.push_back(internal::RedisLayerKey(options_.key_prefix, key, first + c, j));
        layer_of.push_back(c);
      }
    }
    const size_t off = header != nullptr ? 1 : 0;
    std::vector<RedisArgv> cmds;
    cmds.reserve(keys.size() + off);
    if (header != nullptr) cmds.push_back({"GET", hkey});
    for (const std::string& k : keys) cmds.push_back({"GET", k});
    std::vector<Reply> got(keys.size());
    return exec_->PipelineStream(hkey, cmds, [&](size_t i, Reply r) {
      if (i < off) {
        *header = std::move(r);
        return;
      }
      const size_t k = i - off;
      const uint32_t c = layer_of[k];
      got[k] = std::move(r);
      if (--remaining[c] > 0) return;
      const uint32_t n = parts[first + c];
      ready[first + c] = DecodeLayerParts(first + c, absl::MakeSpan(got).subspan(first_key[c], n),
                                          absl::MakeConstSpan(keys).subspan(first_key[c], n));
      have[first + c] = true;
    });
  };

  // 1. One pipeline: the header and, speculatively, the layers of the layout
  //    hint (all of them, or only layer 0 when streaming).
  const std::vector<uint32_t> hint = LayoutHint();
  const uint32_t spec_layers =
      static_cast<uint32_t>(stream ? std::min<size_t>(1, hint.size()) : hint.size());
  ready.resize(spec_layers);
  have.assign(spec_layers, false);
  auto header_reply = std::make_shared<Reply>();
  absl::Status fs = fetch(header_reply.get(), 0, spec_layers, hint);
  if (!fs.ok()) return CountError(fs);
  if (header_reply->IsNil()) {
    counters().misses.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  if (!header_reply->IsString()) {
    return CountError(header_reply->IsError()
                          ? internal::ReplyToStatus(header_reply->view(), "redis tier: GET header")
                          : absl::InternalError("redis tier: GET header: unexpected reply"));
  }
  absl::StatusOr<DecodedRedisValue> hd = internal::DecodeRedisValue(hkey, header_reply->str());
  absl::StatusOr<HeaderValue> hv =
      hd.ok() ? ParseHeaderValue(*hd) : absl::StatusOr<HeaderValue>(hd.status());
  if (!hv.ok()) {
    counters().misses.fetch_add(1, std::memory_order_relaxed);
    ReportCorruption(key, internal::StdSv(hv.status().message()));
    return absl::OkStatus();
  }
  counters().hits.fetch_add(1, std::memory_order_relaxed);
  const std::vector<uint32_t> parts = std::move(hv->part_counts);
  SetLayoutHint(parts);
  uint64_t bytes = hv->blob.size();
  const uint32_t n = std::min<uint32_t>(reader.OnHeader(PinnedBytes(hv->blob, header_reply)),
                                        static_cast<uint32_t>(parts.size()));
  // Speculative layers fetched under another part count than the header's
  // are refetched.
  ready.resize(std::max<size_t>(n, spec_layers));
  have.resize(ready.size(), false);
  for (uint32_t l = 0; l < spec_layers; ++l) {
    if (l >= n || hint[l] != parts[l]) {
      have[l] = false;
      ready[l] = LayerDecode();
    }
  }

  // 2. Layers to the reader, in order; the ones not in hand are fetched in
  //    further pipelines (all at once, or 1, 2, 4, ... layers when streaming).
  std::string corrupt;
  absl::Status error;
  uint32_t window = 1;
  for (uint32_t l = 0; l < n; ++l) {
    if (!have[l]) {
      uint32_t count = stream ? std::min(window, n - l) : n - l;
      window *= 2;
      for (uint32_t c = 1; c < count; ++c) {  // stop at the next layer in hand
        if (have[l + c]) {
          count = c;
          break;
        }
      }
      absl::Status ws = fetch(nullptr, l, count, parts);
      if (!ws.ok()) {
        error = CountError(ws);
        break;
      }
      if (!have[l]) {  // cannot happen after an OK pipeline; be safe
        error = CountError(absl::InternalError("redis tier: short pipeline"));
        break;
      }
    }
    LayerDecode& d = ready[l];
    if (!d.error.ok()) {
      error = CountError(d.error);
      break;
    }
    if (!d.corrupt.empty()) corrupt = d.corrupt;
    const bool present = d.blob.has_value();
    if (present) bytes += d.blob->size();
    if (!reader.OnLayer(l, std::move(d.blob)) || !present) break;
  }
  counters().bytes_read.fetch_add(bytes, std::memory_order_relaxed);
  if (!corrupt.empty()) ReportCorruption(key, corrupt);
  return error;
}

absl::StatusOr<bool> RedisTier::Contains(const ChunkKey& key) {
  const std::string hkey = internal::RedisHeaderKey(options_.key_prefix, key);
  absl::StatusOr<Reply> r = exec_->Command(hkey, {"EXISTS", hkey});
  if (!r.ok()) return CountError(r.status());
  if (r->IsError()) return CountError(internal::ReplyToStatus(r->view(), "redis tier: EXISTS"));
  return r->integer() > 0;
}

// ------------------------------------------------------------------- writes --

absl::Status RedisTier::Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk) {
  ScopedTimerNs timer(&counters().write_ns);
  if (chunk == nullptr) return absl::InvalidArgumentError("redis tier: Put of a null chunk");
  absl::StatusOr<uint32_t> num_layers = PeekNumLayers(chunk->header);
  absl::StatusOr<Fingerprint> fp = PeekFingerprint(chunk->header);
  if (!num_layers.ok() || !fp.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "redis tier: Put ", key.ToHex(), ": malformed header blob: ",
        (!num_layers.ok() ? num_layers.status() : fp.status()).message()));
  }
  if (*num_layers != chunk->layers.size() || *num_layers == 0 || *num_layers > kMaxLayers) {
    return absl::InvalidArgumentError(absl::StrCat("redis tier: Put ", key.ToHex(), ": header says ",
                                                   *num_layers, " layers, chunk has ",
                                                   chunk->layers.size()));
  }
  const uint64_t total = chunk->TotalBytes();
  if (total > options_.max_chunk_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("redis tier: chunk ", key.ToHex(), " is ",
                                                     total, " bytes, above max_chunk_bytes ",
                                                     options_.max_chunk_bytes));
  }
  const uint64_t per_part = options_.max_value_bytes - internal::kRedisFrameBytes;
  std::vector<uint32_t> parts(*num_layers);
  for (uint32_t i = 0; i < *num_layers; ++i) {
    parts[i] = internal::PartsFor(chunk->layers[i].size(), options_.max_value_bytes);
  }
  const uint64_t header_value_bytes =
      internal::kRedisFrameBytes + chunk->header.size() + 4 * uint64_t{*num_layers};
  if (header_value_bytes > options_.max_value_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "redis tier: header of chunk ", key.ToHex(), " needs a ", header_value_bytes,
        "-byte value, above max_value_bytes ", options_.max_value_bytes));
  }

  const std::string hkey = internal::RedisHeaderKey(options_.key_prefix, key);
  const std::string keyhex = key.ToHex();
  const std::string ttl_ms =
      options_.ttl > absl::ZeroDuration() ? std::to_string(absl::ToInt64Milliseconds(options_.ttl))
                                          : std::string();
  auto set_cmd = [&ttl_ms](const std::string& k, const std::string& v) {
    RedisArgv a = {"SET", k, v};
    if (!ttl_ms.empty()) {
      a.push_back("PX");
      a.push_back(ttl_ms);
    }
    return a;
  };
  auto run = [this, &hkey](const std::vector<RedisArgv>& cmds, std::string_view what) {
    absl::StatusOr<std::vector<Reply>> r = exec_->Pipeline(hkey, cmds);
    if (!r.ok()) return CountError(r.status());
    for (const Reply& rep : *r) {
      absl::Status s = WriteReplyStatus(rep, what);
      if (!s.ok()) return CountError(s);
    }
    return absl::OkStatus();
  };

  // The previous layout of this key (if any), to remove parts it no longer has.
  std::vector<uint32_t> old_parts;
  {
    absl::StatusOr<Reply> old = exec_->Command(hkey, {"GET", hkey});
    if (!old.ok()) return CountError(old.status());
    if (old->IsString()) {
      absl::StatusOr<DecodedRedisValue> d = internal::DecodeRedisValue(hkey, old->str());
      if (d.ok()) {
        absl::StatusOr<HeaderValue> h = ParseHeaderValue(*d);
        if (h.ok()) old_parts = std::move(h->part_counts);
      }
    }
  }

  // 1. Index first: an index entry without a chunk is harmless, a chunk that
  //    DeleteByFingerprint cannot find is not.
  {
    const std::string idx = internal::RedisFingerprintIndexKey(options_.key_prefix, *fp);
    std::vector<RedisArgv> cmds = {{"SADD", idx, keyhex}};
    if (!ttl_ms.empty()) cmds.push_back({"PEXPIRE", idx, ttl_ms});
    absl::StatusOr<std::vector<Reply>> r = exec_->Pipeline(idx, cmds);
    if (!r.ok()) return CountError(r.status());
    for (const Reply& rep : *r) RETURN_IF_ERROR(CountError(WriteReplyStatus(rep, "SADD index")));
  }

  // 2. Layers, in pipelines of about max_pipeline_bytes.
  const uint64_t write_id = NewWriteId();
  std::vector<std::string> batch_keys, batch_values;
  uint64_t batch_bytes = 0;
  auto flush = [&](std::vector<RedisArgv> tail) -> absl::Status {
    std::vector<RedisArgv> cmds;
    cmds.reserve(batch_keys.size() + tail.size());
    for (size_t k = 0; k < batch_keys.size(); ++k) cmds.push_back(set_cmd(batch_keys[k], batch_values[k]));
    for (RedisArgv& t : tail) cmds.push_back(std::move(t));
    absl::Status s = cmds.empty() ? absl::OkStatus() : run(cmds, "SET");
    batch_keys.clear();
    batch_values.clear();
    batch_bytes = 0;
    return s;
  };
  for (uint32_t i = 0; i < *num_layers; ++i) {
    std::string_view rec = chunk->layers[i];
    for (uint32_t j = 0; j < parts[i]; ++j) {
      RedisFrame f;
      f.kind = RedisRecordKind::kLayerPart;
      f.layer = i;
      f.part = j;
      f.count = parts[i];
      f.write_id = write_id;
      f.total_bytes = rec.size();
      std::string_view slice = rec.substr(std::min<uint64_t>(rec.size(), j * per_part), per_part);
      batch_keys.push_back(internal::RedisLayerKey(options_.key_prefix, key, i, j));
      batch_values.push_back(internal::EncodeRedisValue(batch_keys.back(), f, slice));
      batch_bytes += batch_values.back().size();
      if (batch_bytes >= options_.max_pipeline_bytes) RETURN_IF_ERROR(flush({}));
    }
  }

  // 3. Header last (the commit marker), then drop parts the old layout had
  //    beyond the new one.
  RedisFrame hf;
  hf.kind = RedisRecordKind::kHeader;
  hf.count = *num_layers;
  hf.write_id = write_id;
  hf.total_bytes = chunk->header.size();
  batch_keys.push_back(hkey);
  batch_values.push_back(
      internal::EncodeRedisValue(hkey, hf, chunk->header, internal::EncodePartCounts(parts)));
  std::vector<std::string> surplus;
  for (uint32_t i = 0; i < old_parts.size(); ++i) {
    for (uint32_t j = i < *num_layers ? parts[i] : 0; j < old_parts[i]; ++j) {
      surplus.push_back(internal::RedisLayerKey(options_.key_prefix, key, i, j));
    }
  }
  std::vector<RedisArgv> tail;
  for (size_t s = 0; s < surplus.size(); s += kUnlinkBatch) {
    RedisArgv a = {"UNLINK"};
    for (size_t k = s; k < std::min(surplus.size(), s + kUnlinkBatch); ++k) a.push_back(surplus[k]);
    tail.push_back(std::move(a));
  }
  RETURN_IF_ERROR(flush(std::move(tail)));
  counters().puts.fetch_add(1, std::memory_order_relaxed);
  counters().bytes_written.fetch_add(total, std::memory_order_relaxed);
  SetLayoutHint(parts);
  return absl::OkStatus();
}

absl::Status RedisTier::Delete(const ChunkKey& key) {
  bool removed = false;
  RETURN_IF_ERROR(DeleteImpl(key, &removed));
  if (removed) counters().deletes.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status RedisTier::DeleteImpl(const ChunkKey& key, bool* removed) {
  *removed = false;
  const std::string hkey = internal::RedisHeaderKey(options_.key_prefix, key);
  absl::StatusOr<Reply> cur = exec_->Command(hkey, {"GET", hkey});
  if (!cur.ok()) return CountError(cur.status());
  if (cur->IsNil()) return absl::OkStatus();
  if (cur->IsError()) return CountError(internal::ReplyToStatus(cur->view(), "redis tier: GET"));
  std::vector<uint32_t> parts;
  std::optional<Fingerprint> fp;
  absl::StatusOr<DecodedRedisValue> d = internal::DecodeRedisValue(hkey, cur->str());
  if (d.ok()) {
    absl::StatusOr<HeaderValue> h = ParseHeaderValue(*d);
    if (h.ok()) {
      parts = std::move(h->part_counts);
      absl::StatusOr<Fingerprint> f = PeekFingerprint(h->blob);
      if (f.ok()) fp = *f;
    }
  }
  // A corrupt header: only the header itself can be found and removed (its
  // layers expire with the TTL, or are overwritten by the next Put).
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < parts.size(); ++i) {
    for (uint32_t j = 0; j < parts[i]; ++j) {
      keys.push_back(internal::RedisLayerKey(options_.key_prefix, key, i, j));
    }
  }
  std::vector<RedisArgv> cmds = {{"UNLINK", hkey}};  // header first: the chunk disappears at once
  for (size_t s = 0; s < keys.size(); s += kUnlinkBatch) {
    RedisArgv a = {"UNLINK"};
    for (size_t k = s; k < std::min(keys.size(), s + kUnlinkBatch); ++k) a.push_back(keys[k]);
    cmds.push_back(std::move(a));
  }
  absl::StatusOr<std::vector<Reply>> r = exec_->Pipeline(hkey, cmds);
  if (!r.ok()) return CountError(r.status());
  for (const Reply& rep : *r) RETURN_IF_ERROR(CountError(WriteReplyStatus(rep, "UNLINK")));
  *removed = (*r)[0].integer() > 0;
  if (fp.has_value()) {
    const std::string idx = internal::RedisFingerprintIndexKey(options_.key_prefix, *fp);
    const std::string keyhex = key.ToHex();
    absl::StatusOr<Reply> s = exec_->Command(idx, {"SREM", idx, keyhex});
    if (!s.ok()) return CountError(s.status());
    RETURN_IF_ERROR(CountError(WriteReplyStatus(*s, "SREM index")));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RedisTier::DeleteByFingerprint(const Fingerprint& fp) {
  const std::string idx = internal::RedisFingerprintIndexKey(options_.key_prefix, fp);
  uint64_t removed_total = 0;
  std::string cursor = "0";
  do {
    absl::StatusOr<Reply> r = exec_->Command(idx, {"SSCAN", idx, cursor, "COUNT", "256"});
    if (!r.ok()) return CountError(r.status());
    if (r->IsError()) return CountError(internal::ReplyToStatus(r->view(), "redis tier: SSCAN"));
    if (r->size() != 2) return CountError(absl::InternalError("redis tier: bad SSCAN reply"));
    cursor = std::string((*r)[0].str());
    internal::ReplyView members = (*r)[1];
    for (size_t m = 0; m < members.size(); ++m) {
      std::string member(members[m].str());
      absl::StatusOr<ChunkKey> key = ChunkKey::FromHex(member);
      if (key.ok()) {
        bool removed = false;
        RETURN_IF_ERROR(DeleteImpl(*key, &removed));
        if (removed) ++removed_total;
      }
      absl::StatusOr<Reply> s = exec_->Command(idx, {"SREM", idx, member});
      if (!s.ok()) return CountError(s.status());
    }
  } while (cursor != "0");
  counters().deletes.fetch_add(removed_total, std::memory_order_relaxed);
  return removed_total;
}

}  // namespace ragkv::kvstore
