#include "bench/kvstore/bench_redis.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "kvstore/redis/internal/redis_client.h"
#include "kvstore/redis/internal/redis_record.h"
#include "kvstore/kv_chunk.h"
#include "kvstore/redis/redis_tier.h"

namespace ragkv::kvstore {
namespace {

absl::StatusOr<EncodedChunk> MakeBenchChunk(const KvBenchShape& s) {
  KvChunkHeader h;
  for (size_t i = 0; i < h.fingerprint.size(); ++i) h.fingerprint[i] = static_cast<uint8_t>(0xb0 + i);
  h.tokens.resize(s.tokens);
  for (uint32_t i = 0; i < s.tokens; ++i) h.tokens[i] = static_cast<int32_t>(i * 7 % 32000);
  h.key = ChunkKey::Of(h.fingerprint, h.tokens);
  h.dtype = kernels::DType::kF16;
  h.codec = Codec::kRaw;
  h.compression = Compression::kNone;
  h.num_layers = s.layers;
  h.num_kv_heads = s.kv_heads;
  h.head_dim = s.head_dim;
  EncodedChunk chunk;
  ASSIGN_OR_RETURN(chunk.header, EncodeHeader(&h));
  std::vector<float> k(h.LayerElements()), v(h.LayerElements());
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  for (uint32_t l = 0; l < s.layers; ++l) {
    auto kv = kernels::TensorView::Contiguous(k.data(), kernels::DType::kF32,
                                              {s.kv_heads, s.tokens, s.head_dim});
    auto vv = kernels::TensorView::Contiguous(v.data(), kernels::DType::kF32,
                                              {s.kv_heads, s.tokens, s.head_dim});
    ASSIGN_OR_RETURN(std::string rec, EncodeLayer(h, l, kv, vv));
    chunk.layers.push_back(std::move(rec));
  }
  return chunk;
}

struct RawContext {
  redisContext* c = nullptr;
  ~RawContext() {
    if (c != nullptr) redisFree(c);
  }
};

// BenchTimes: the best seconds of each measurement of one chunk.
struct BenchTimes {
  double put_s = std::numeric_limits<double>::max();       // RedisTier::Put
  double tier_s = std::numeric_limits<double>::max();      // RedisTier::ReadChunk
  double two_rt_s = std::numeric_limits<double>::max();    // GetHeader + ReadChunk
  double raw_s = std::numeric_limits<double>::max();       // raw GET, replies freed
  double raw_hold_s = std::numeric_limits<double>::max();  // raw GET, replies kept
  double raw_set_s = std::numeric_limits<double>::max();   // raw SET
};

// PutSeconds: the best of `repeats` Puts of `chunk` under `key`.
absl::StatusOr<double> PutSeconds(RedisTier& tier, const ChunkKey& key,
                                  const std::shared_ptr<const EncodedChunk>& chunk, int repeats) {
  double put_s = std::numeric_limits<double>::max();
  for (int r = 0; r < repeats; ++r) {
    Clock::time_point t0 = Clock::now();
    RETURN_IF_ERROR(tier.Put(key, chunk));
    put_s = std::min(put_s, SecondsSince(t0));
  }
  return put_s;
}

// ChunkRedisKeys: the Redis keys of `chunk`: header + every part of every
// layer.
std::vector<std::string> ChunkRedisKeys(const KvBenchShape& shape, const EncodedChunk& chunk,
                                        const ChunkKey& key, const RedisBenchOptions& options) {
  std::vector<std::string> keys = {internal::RedisHeaderKey(options.key_prefix, key)};
  for (uint32_t l = 0; l < shape.layers; ++l) {
    uint32_t parts = internal::PartsFor(chunk.layers[l].size(), options.max_value_bytes);
    for (uint32_t j = 0; j < parts; ++j) {
      keys.push_back(internal::RedisLayerKey(options.key_prefix, key, l, j));
    }
  }
  return keys;
}

// Collect: a ChunkReader that keeps the header and the first `n` layers.
struct Collect final : public ChunkReader {
  uint32_t n = 0;
  std::vector<PinnedBytes> blobs;
  LayerRange OnHeader(PinnedBytes h) override {
    blobs.clear();
    blobs.push_back(std::move(h));
    return LayerRange{0, n};
  }
  bool OnLayer(uint32_t, Tier::Blob b) override {
    if (!b.has_value()) return false;
    blobs.push_back(std::move(*b));
    return true;
  }
};

// ConnectRaw: one raw hiredis connection to `endpoint` (30 s timeouts).
absl::Status ConnectRaw(const std::string& endpoint, RawContext* raw) {
  ASSIGN_OR_RETURN(internal::RedisEndpoint ep, internal::RedisEndpoint::Parse(endpoint));
  timeval tv{30, 0};
  raw->c = redisConnectWithTimeout(ep.host.c_str(), ep.port, tv);
  if (raw->c == nullptr || raw->c->err != 0) {
    return absl::UnavailableError(absl::StrCat("redis bench: raw connect to ", endpoint,
                                               " failed"));
  }
  redisSetTimeout(raw->c, tv);
  return absl::OkStatus();
}

// ReadChunkSeconds: one tier read as TieredStore::Get does it: ReadChunk
// (header + layers in one pipeline when the layout hint matches), every
// value's frame and XXH3 checked, split layers reassembled.
absl::StatusOr<double> ReadChunkSeconds(RedisTier& tier, const ChunkKey& key, uint32_t layers) {
  Collect c;
  c.n = layers;
  Clock::time_point t0 = Clock::now();
  RETURN_IF_ERROR(tier.ReadChunk(key, c, ReadMode::kWhole));
  const double t = SecondsSince(t0);
  if (c.blobs.size() != layers + 1) return absl::InternalError("redis bench: chunk miss");
  return t;
}

// RawGetHoldSeconds: one raw pipeline of GET of `keys` in which every reply
// is kept until the whole chunk is in, as a caller that needs the bytes
// would (the tier returns all layers).
absl::StatusOr<double> RawGetHoldSeconds(redisContext* c, const std::vector<std::string>& keys) {
  Clock::time_point t0 = Clock::now();
  for (const std::string& k : keys) {
    const char* argv[2] = {"GET", k.data()};
    size_t lens[2] = {3, k.size()};
    redisAppendCommandArgv(c, 2, argv, lens);
  }
  std::vector<redisReply*> held;
  bool failed = false;
  for (size_t i = 0; i < keys.size(); ++i) {
    void* rep = nullptr;
    if (redisGetReply(c, &rep) != REDIS_OK || rep == nullptr) {
      failed = true;
      break;
    }
    held.push_back(static_cast<redisReply*>(rep));
  }
  const double t = SecondsSince(t0);
  for (redisReply* h : held) freeReplyObject(h);
  if (failed) return absl::UnavailableError("redis bench: raw GET failed");
  return t;
}

// TwoRoundTripSeconds: the same read as ReadChunkSeconds after a header
// lookup (GetHeader, then ReadChunk: two round trips, as a caller that
// checks the header before fetching the layers would pay).
absl::StatusOr<double> TwoRoundTripSeconds(RedisTier& tier, const ChunkKey& key,
                                           uint32_t layers) {
  Collect c;
  c.n = layers;
  Clock::time_point t0 = Clock::now();
  absl::StatusOr<Tier::Blob> h = tier.GetHeader(key);
  absl::Status got = h.ok() ? tier.ReadChunk(key, c, ReadMode::kWhole) : h.status();
  const double t = SecondsSince(t0);
  RETURN_IF_ERROR(got);
  if (!h->has_value()) return absl::InternalError("redis bench: header miss");
  if (c.blobs.size() != layers + 1) return absl::InternalError("redis bench: layer miss");
  return t;
}

// RawGetFreeSeconds: one raw pipeline of GET of `keys` in which each reply
// is freed before the next is read (the cheapest possible client; memory is
// recycled). Copies the values into `values` unless it is null.
absl::StatusOr<double> RawGetFreeSeconds(redisContext* c, const std::vector<std::string>& keys,
                                         uint64_t chunk_bytes, std::vector<std::string>* values) {
  Clock::time_point t0 = Clock::now();
  for (const std::string& k : keys) {
    const char* argv[2] = {"GET", k.data()};
    size_t lens[2] = {3, k.size()};
    redisAppendCommandArgv(c, 2, argv, lens);
  }
  size_t got = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    void* rep = nullptr;
    if (redisGetReply(c, &rep) != REDIS_OK || rep == nullptr) {
      return absl::UnavailableError("redis bench: raw GET failed");
    }
    auto* rr = static_cast<redisReply*>(rep);
    got += rr->type == REDIS_REPLY_STRING ? rr->len : 0;
    if (values != nullptr && rr->type == REDIS_REPLY_STRING) (*values)[i].assign(rr->str, rr->len);
    freeReplyObject(rr);
  }
  const double t = SecondsSince(t0);
  if (got < chunk_bytes) return absl::InternalError("redis bench: raw GET short");
  return t;
}

// RawSetSeconds: the best of `repeats` raw pipelined SETs of `values` under
// `keys` (baseline for Put).
absl::StatusOr<double> RawSetSeconds(redisContext* c, const std::vector<std::string>& keys,
                                     const std::vector<std::string>& values, int repeats) {
  double raw_set_s = std::numeric_limits<double>::max();
  for (int r = 0; r < repeats; ++r) {
    Clock::time_point t0 = Clock::now();
    for (size_t i = 0; i < keys.size(); ++i) {
      const char* argv[3] = {"SET", keys[i].data(), values[i].data()};
      size_t lens[3] = {3, keys[i].size(), values[i].size()};
      redisAppendCommandArgv(c, 3, argv, lens);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      void* rep = nullptr;
      if (redisGetReply(c, &rep) != REDIS_OK || rep == nullptr) {
        return absl::UnavailableError("redis bench: raw SET failed");
      }
      freeReplyObject(rep);
    }
    raw_set_s = std::min(raw_set_s, SecondsSince(t0));
  }
  return raw_set_s;
}

// BenchRows: the rows of `shape` from the times `t` of a chunk of `bytes`
// bytes in `values` Redis values.
std::vector<KvBenchRow> BenchRows(const KvBenchShape& shape, const RedisBenchOptions& options,
                                  size_t values, double bytes, const BenchTimes& t) {
  const std::string split = absl::StrCat(values - 1, " values, max_value ",
                                         options.max_value_bytes >> 20, " MiB");
  std::vector<KvBenchRow> rows;
  KvBenchRow get;
  get.shape = shape.name;
  get.what = absl::StrCat("redis tier ReadChunk (", split, ")");
  get.unit = "GB/s";
  get.value = bytes / t.tier_s / 1e9;
  get.baseline = bytes / t.raw_hold_s / 1e9;
  get.baseline_what = "raw hiredis pipelined GET, replies kept";
  get.target_ratio = 0.8;
  rows.push_back(get);
  KvBenchRow get_free = get;
  get_free.baseline = bytes / t.raw_s / 1e9;
  get_free.baseline_what = "raw hiredis pipelined GET, each reply freed at once";
  rows.push_back(get_free);
  KvBenchRow two_rt = get;
  two_rt.what = absl::StrCat("redis tier GetHeader+ReadChunk (", split, ")");
  two_rt.value = bytes / t.two_rt_s / 1e9;
  two_rt.target_ratio = 0;
  rows.push_back(two_rt);
  KvBenchRow put;
  put.shape = shape.name;
  put.what = absl::StrCat("redis tier put (", split, ")");
  put.unit = "GB/s";
  put.value = bytes / t.put_s / 1e9;
  put.baseline = bytes / t.raw_set_s / 1e9;
  put.baseline_what = "raw hiredis pipelined SET";
  rows.push_back(put);
  return rows;
}

}  // namespace

absl::StatusOr<std::vector<KvBenchRow>> RedisTierBenchRows(const KvBenchShape& shape,
                                                           const RedisBenchOptions& options) {
  ASSIGN_OR_RETURN(EncodedChunk encoded, MakeBenchChunk(shape));
  auto chunk = std::make_shared<const EncodedChunk>(std::move(encoded));
  ASSIGN_OR_RETURN(KvChunkHeader header, DecodeHeader(chunk->header));
  const ChunkKey key = header.key;
  const double bytes = static_cast<double>(chunk->TotalBytes());
  const int repeats = std::max(1, options.repeats);

  RedisTierOptions to;
  to.endpoints = {options.endpoint};
  to.key_prefix = options.key_prefix;
  to.max_value_bytes = options.max_value_bytes;
  to.command_timeout = absl::Seconds(30);
  ASSIGN_OR_RETURN(std::unique_ptr<RedisTier> tier, RedisTier::Create(to));

  BenchTimes t;
  ASSIGN_OR_RETURN(t.put_s, PutSeconds(*tier, key, chunk, repeats));
  const std::vector<std::string> keys = ChunkRedisKeys(shape, *chunk, key, options);

  // Raw hiredis: one connection, one pipeline of GETs of the same values.
  RawContext raw;
  RETURN_IF_ERROR(ConnectRaw(options.endpoint, &raw));
  std::vector<std::string> values(keys.size());

  // The four read variants alternate within each repetition, so that load
  // drift on a shared machine (and any server-side warm-up after the Put)
  // hits them alike; the best of `repeats` is kept for each.
  for (int r = 0; r < repeats; ++r) {
    ASSIGN_OR_RETURN(const double tier_s, ReadChunkSeconds(*tier, key, shape.layers));
    t.tier_s = std::min(t.tier_s, tier_s);
    ASSIGN_OR_RETURN(const double raw_hold_s, RawGetHoldSeconds(raw.c, keys));
    t.raw_hold_s = std::min(t.raw_hold_s, raw_hold_s);
    ASSIGN_OR_RETURN(const double two_rt_s, TwoRoundTripSeconds(*tier, key, shape.layers));
    t.two_rt_s = std::min(t.two_rt_s, two_rt_s);
    ASSIGN_OR_RETURN(const double raw_s, RawGetFreeSeconds(raw.c, keys, chunk->TotalBytes(),
                                                           r == 0 ? &values : nullptr));
    t.raw_s = std::min(t.raw_s, raw_s);
  }

  ASSIGN_OR_RETURN(t.raw_set_s, RawSetSeconds(raw.c, keys, values, repeats));
  RETURN_IF_ERROR(tier->Delete(key));
  return BenchRows(shape, options, keys.size(), bytes, t);
}

}  // namespace ragkv::kvstore
