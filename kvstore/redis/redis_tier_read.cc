// redis_tier_read.cc: the read path of RedisTier -- ReadChunk and
// Contains (the rest is in
// redis_tier.cc and redis_tier_write.cc).
#include "kvstore/redis/redis_tier.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "base/status_macros.h"
#include "kvstore/redis/internal/redis_client.h"
#include "kvstore/redis/internal/redis_record.h"
#include "kvstore/redis/internal/redis_tier_internal.h"

namespace ragkv::kvstore {
namespace {

using internal::DecodedRedisValue;
using internal::HeaderValue;
using internal::ParseHeaderValue;
using internal::RedisArgv;
using internal::RedisFrame;
using internal::RedisRecordKind;
using internal::Reply;

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

// LayerFetcher: the pipelines of one RedisTier::ReadChunk. A call sends one
// pipeline: GET of the header (when `header` is not null), then of every
// part of layers [first, first + count) under the part counts `parts`. Each
// layer is decoded (frames, XXH3) as soon as its last part has arrived,
// overlapping the transfer of the next values; the result lands in
// (*ready)[l] and (*have)[l] is set. The reader is not called here (a
// connection is held).
class LayerFetcher {
 public:
  LayerFetcher(internal::RedisExecutor& exec, std::string_view key_prefix, const ChunkKey& key,
               const std::string& hkey, std::vector<LayerDecode>* ready, std::vector<bool>* have)
      : exec_(exec),
        key_prefix_(key_prefix),
        key_(key),
        hkey_(hkey),
        ready_(*ready),
        have_(*have) {}

  absl::Status operator()(Reply* header, uint32_t first, uint32_t count,
                          const std::vector<uint32_t>& parts) {
    std::vector<std::string> keys;
    std::vector<uint32_t> layer_of;  // per key: index into [0, count)
    std::vector<size_t> first_key(count), remaining(count);
    for (uint32_t c = 0; c < count; ++c) {
      first_key[c] = keys.size();
      remaining[c] = parts[first + c];
      for (uint32_t j = 0; j < parts[first + c]; ++j) {
        keys.push_back(internal::RedisLayerKey(key_prefix_, key_, first + c, j));
        layer_of.push_back(c);
      }
    }
    const size_t off = header != nullptr ? 1 : 0;
    std::vector<RedisArgv> cmds;
    cmds.reserve(keys.size() + off);
    if (header != nullptr) cmds.push_back({"GET", hkey_});
    for (const std::string& k : keys) cmds.push_back({"GET", k});
    std::vector<Reply> got(keys.size());
    return exec_.PipelineStream(hkey_, cmds, [&](size_t i, Reply r) {
      if (i < off) {
        *header = std::move(r);
        return;
      }
      const size_t k = i - off;
      const uint32_t c = layer_of[k];
      got[k] = std::move(r);
      if (--remaining[c] > 0) return;
      const uint32_t n = parts[first + c];
      ready_[first + c] = DecodeLayerParts(first + c, absl::MakeSpan(got).subspan(first_key[c], n),
                                           absl::MakeConstSpan(keys).subspan(first_key[c], n));
      have_[first + c] = true;
    });
  }

 private:
  internal::RedisExecutor& exec_;
  const std::string_view key_prefix_;
  const ChunkKey& key_;
  const std::string& hkey_;
  std::vector<LayerDecode>& ready_;
  std::vector<bool>& have_;
};

}  // namespace

// -------------------------------------------------------------------- reads --

absl::Status RedisTier::ReadChunk(const ChunkKey& key, ChunkReader& reader, ReadMode mode) {
  const bool stream = mode == ReadMode::kStream;
  ScopedTimerNs timer(&counters().read_ns);
  const std::string hkey = internal::RedisHeaderKey(options_.key_prefix, key);
  std::vector<LayerDecode> ready;
  std::vector<bool> have;
  LayerFetcher fetch(*exec_, options_.key_prefix, key, hkey, &ready, &have);

  // 1. One pipeline: the header and, speculatively, the layers of the layout
  //    hint (all of them, only layer 0 when streaming, none for the header
  //    alone).
  const std::vector<uint32_t> hint = LayoutHint();
  const uint32_t spec_layers = static_cast<uint32_t>(
      mode == ReadMode::kHeaderOnly ? 0 : stream ? std::min<size_t>(1, hint.size()) : hint.size());
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
  const LayerRange range = reader.OnHeader(PinnedBytes(hv->blob, header_reply));
  // Layers [first, n): the requested ones the header has.
  const uint32_t n = static_cast<uint32_t>(
      std::min<uint64_t>(uint64_t{range.first} + range.count, parts.size()));
  const uint32_t first = std::min(range.first, n);
  // Speculative layers outside the range, or fetched under another part
  // count than the header's, are dropped (and refetched if requested).
  ready.resize(std::max<size_t>(n, spec_layers));
  have.resize(ready.size(), false);
  for (uint32_t l = 0; l < spec_layers; ++l) {
    if (l < first || l >= n || hint[l] != parts[l]) {
      have[l] = false;
      ready[l] = LayerDecode();
    }
  }

  // 2. Layers to the reader, in order; the ones not in hand are fetched in
  //    further pipelines (all at once, or 1, 2, 4, ... layers when streaming).
  std::string corrupt;
  absl::Status error;
  uint32_t window = 1;
  for (uint32_t l = first; l < n; ++l) {
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

}  // namespace ragkv::kvstore
