// redis_tier_write.cc: the write path of RedisTier -- Put, Delete,
// DeleteByFingerprint (the rest is in redis_tier.cc and redis_tier_read.cc).
#include "kvstore/redis/redis_tier.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
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
using internal::Sv;

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

// AppendUnlinks: UNLINK commands for `keys`, kUnlinkBatch keys each,
// appended to `cmds` (they point into `keys`).
void AppendUnlinks(const std::vector<std::string>& keys, std::vector<RedisArgv>* cmds) {
  for (size_t s = 0; s < keys.size(); s += kUnlinkBatch) {
    RedisArgv a = {"UNLINK"};
    for (size_t k = s; k < std::min(keys.size(), s + kUnlinkBatch); ++k) a.push_back(keys[k]);
    cmds->push_back(std::move(a));
  }
}

// PutPlan: a chunk that passed Put's checks, and its layout in Redis.
struct PutPlan {
  uint32_t num_layers = 0;
  Fingerprint fp{};
  uint64_t total = 0;           // chunk.TotalBytes()
  std::vector<uint32_t> parts;  // values per layer record
};

// PlanPut: Put's checks of `chunk` under `o` (InvalidArgument for a
// malformed header blob or a layer count mismatch, ResourceExhausted beyond
// max_chunk_bytes or for a header value above max_value_bytes) and the part
// count of every layer.
absl::StatusOr<PutPlan> PlanPut(const RedisTierOptions& o, const ChunkKey& key,
                                const EncodedChunk& chunk) {
  absl::StatusOr<uint32_t> num_layers = PeekNumLayers(chunk.header);
  absl::StatusOr<Fingerprint> fp = PeekFingerprint(chunk.header);
  if (!num_layers.ok() || !fp.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "redis tier: Put ", key.ToHex(), ": malformed header blob: ",
        (!num_layers.ok() ? num_layers.status() : fp.status()).message()));
  }
  if (*num_layers != chunk.layers.size() || *num_layers == 0 || *num_layers > kMaxLayers) {
    return absl::InvalidArgumentError(absl::StrCat("redis tier: Put ", key.ToHex(), ": header says ",
                                                   *num_layers, " layers, chunk has ",
                                                   chunk.layers.size()));
  }
  PutPlan plan;
  plan.num_layers = *num_layers;
  plan.fp = *fp;
  plan.total = chunk.TotalBytes();
  if (plan.total > o.max_chunk_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("redis tier: chunk ", key.ToHex(), " is ",
                                                     plan.total, " bytes, above max_chunk_bytes ",
                                                     o.max_chunk_bytes));
  }
  plan.parts.resize(plan.num_layers);
  for (uint32_t i = 0; i < plan.num_layers; ++i) {
    plan.parts[i] = internal::PartsFor(chunk.layers[i].size(), o.max_value_bytes);
  }
  const uint64_t header_value_bytes =
      internal::kRedisFrameBytes + chunk.header.size() + 4 * uint64_t{plan.num_layers};
  if (header_value_bytes > o.max_value_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "redis tier: header of chunk ", key.ToHex(), " needs a ", header_value_bytes,
        "-byte value, above max_value_bytes ", o.max_value_bytes));
  }
  return plan;
}

// StoredPartCounts: the part counts per layer of the chunk whose header is
// stored under `hkey`; empty if there is none or it does not parse.
absl::StatusOr<std::vector<uint32_t>> StoredPartCounts(internal::RedisExecutor& exec,
                                                       const std::string& hkey) {
  std::vector<uint32_t> parts;
  absl::StatusOr<Reply> old = exec.Command(hkey, {"GET", hkey});
  if (!old.ok()) return old.status();
  if (old->IsString()) {
    absl::StatusOr<DecodedRedisValue> d = internal::DecodeRedisValue(hkey, old->str());
    if (d.ok()) {
      absl::StatusOr<HeaderValue> h = ParseHeaderValue(*d);
      if (h.ok()) parts = std::move(h->part_counts);
    }
  }
  return parts;
}

}  // namespace

// ------------------------------------------------------------------- writes --

absl::StatusOr<std::unique_ptr<ChunkWriter>> RedisTier::BeginPut(const ChunkKey&, std::string,
                                                                 uint64_t total_bytes) {
  if (total_bytes > options_.max_chunk_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("redis tier: a chunk of ", total_bytes,
                                                     " bytes is above max_chunk_bytes ",
                                                     options_.max_chunk_bytes));
  }
  return std::unique_ptr<ChunkWriter>();  // gathered, then Put
}

absl::Status RedisTier::Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk) {
  ScopedTimerNs timer(&counters().write_ns);
  if (chunk == nullptr) return absl::InvalidArgumentError("redis tier: Put of a null chunk");
  ASSIGN_OR_RETURN(const PutPlan plan, PlanPut(options_, key, *chunk));
  const uint32_t num_layers = plan.num_layers;
  const std::vector<uint32_t>& parts = plan.parts;
  const uint64_t per_part = options_.max_value_bytes - internal::kRedisFrameBytes;

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
  absl::StatusOr<std::vector<uint32_t>> stored = StoredPartCounts(*exec_, hkey);
  if (!stored.ok()) return CountError(stored.status());
  const std::vector<uint32_t> old_parts = *std::move(stored);

  // 0. Budget: accounted before anything is written (see redis_tier_budget.cc).
  uint64_t value_bytes = internal::kRedisFrameBytes + chunk->header.size() + 4 * uint64_t{num_layers};
  for (uint32_t i = 0; i < num_layers; ++i) {
    value_bytes += chunk->layers[i].size() + uint64_t{parts[i]} * internal::kRedisFrameBytes;
  }
  RETURN_IF_ERROR(ReserveBudget(key, value_bytes));

  // 1. Index first: an index entry without a chunk is harmless, a chunk that
  //    DeleteByFingerprint cannot find is not.
  {
    const std::string idx = internal::RedisFingerprintIndexKey(options_.key_prefix, plan.fp);
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
  for (uint32_t i = 0; i < num_layers; ++i) {
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
  hf.count = num_layers;
  hf.write_id = write_id;
  hf.total_bytes = chunk->header.size();
  batch_keys.push_back(hkey);
  batch_values.push_back(
      internal::EncodeRedisValue(hkey, hf, chunk->header, internal::EncodePartCounts(parts)));
  std::vector<std::string> surplus;
  for (uint32_t i = 0; i < old_parts.size(); ++i) {
    for (uint32_t j = i < num_layers ? parts[i] : 0; j < old_parts[i]; ++j) {
      surplus.push_back(internal::RedisLayerKey(options_.key_prefix, key, i, j));
    }
  }
  std::vector<RedisArgv> tail;
  AppendUnlinks(surplus, &tail);
  RETURN_IF_ERROR(flush(std::move(tail)));
  counters().puts.fetch_add(1, std::memory_order_relaxed);
  counters().bytes_written.fetch_add(plan.total, std::memory_order_relaxed);
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
  if (cur->IsNil()) return ForgetBudget(key);  // expired or evicted: only the account is left
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
  AppendUnlinks(keys, &cmds);
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
  return ForgetBudget(key);
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
