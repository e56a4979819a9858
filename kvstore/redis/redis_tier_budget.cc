// redis_tier_budget.cc: RedisTier's byte budget. Every sidecar sharing a key
// prefix shares one account, kept in Redis next to the chunks:
//   <prefix>:{budget}:sizes  HASH  chunk key hex -> accounted value bytes
//   <prefix>:{budget}:lru    ZSET  chunk key hex, scored by last Put (ms)
//   <prefix>:{budget}:bytes  the sum of :sizes
// One hash tag, so one slot: each update is one Lua script (atomic, and
// idempotent, so the pool's single retry cannot double-count). A Put is
// accounted before its first value is written (an aborted Put over-counts
// until its key is evicted, never under-counts); when the total exceeds the
// budget the script names the oldest chunks whose sizes cover the excess,
// and they are deleted like Delete does. Chunks that expired (TTL) or were
// evicted by Redis itself stay accounted until they come up for eviction.
// Decisions: docs/kvstore.md, "Byte budget".
#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "kvstore/redis/internal/redis_client.h"
#include "kvstore/redis/redis_tier.h"

namespace ragkv::kvstore {
namespace {

using internal::RedisArgv;
using internal::Reply;
using internal::Sv;

// Chunks considered for eviction per Put (the next Put goes on).
constexpr int kMaxVictimsPerPut = 64;

// KEYS: sizes, lru, bytes. ARGV: member, bytes, now_ms, budget, max_victims.
// Returns {total, entries, victim...}.
constexpr char kReserveScript[] = R"lua(
local old = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local total = redis.call('INCRBY', KEYS[3], tonumber(ARGV[2]) - old)
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local out = {total, redis.call('ZCARD', KEYS[2])}
local need = total - tonumber(ARGV[4])
if need <= 0 then return out end
for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[5]))) do
  if m ~= ARGV[1] then
    table.insert(out, m)
    need = need - tonumber(redis.call('HGET', KEYS[1], m) or '0')
    if need <= 0 then break end
  end
end
return out
)lua";

// KEYS: sizes, lru, bytes. ARGV: member. Returns {total, entries}.
constexpr char kForgetScript[] = R"lua(
local s = redis.call('HGET', KEYS[1], ARGV[1])
if s then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('DECRBY', KEYS[3], s)
end
return {tonumber(redis.call('GET', KEYS[3]) or '0'), redis.call('ZCARD', KEYS[2])}
)lua";

struct BudgetKeys {
  std::string sizes, lru, bytes;
  explicit BudgetKeys(const std::string& prefix)
      : sizes(prefix + ":{budget}:sizes"), lru(prefix + ":{budget}:lru"),
        bytes(prefix + ":{budget}:bytes") {}
};

// AccountReply: a budget script's reply {total, entries, ...}, with the
// account's state noted in *used / *entries; INTERNAL for an error reply.
absl::StatusOr<Reply> AccountReply(absl::StatusOr<Reply> r, std::atomic<uint64_t>* used,
                                   std::atomic<uint64_t>* entries) {
  if (!r.ok()) return r;
  if (r->IsError() || r->size() < 2) {
    return absl::InternalError(absl::StrCat("redis tier: budget script: ", r->view().DebugString()));
  }
  used->store(static_cast<uint64_t>((*r)[0].integer()), std::memory_order_relaxed);
  entries->store(static_cast<uint64_t>((*r)[1].integer()), std::memory_order_relaxed);
  return r;
}

}  // namespace

absl::Status RedisTier::ReserveBudget(const ChunkKey& key, uint64_t value_bytes) {
  if (options_.budget_bytes == 0) return absl::OkStatus();
  if (value_bytes > options_.budget_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("redis tier: chunk ", key.ToHex(), " needs ", value_bytes,
                     " bytes, above the namespace's budget_bytes ", options_.budget_bytes));
  }
  const BudgetKeys k(options_.key_prefix);
  const std::string member = key.ToHex(), bytes = std::to_string(value_bytes);
  const std::string now = std::to_string(absl::ToUnixMillis(absl::Now()));
  const std::string budget = std::to_string(options_.budget_bytes);
  const std::string victims = std::to_string(kMaxVictimsPerPut);
  absl::StatusOr<Reply> r = AccountReply(
      exec_->Command(k.sizes, {"EVAL", kReserveScript, "3", k.sizes, k.lru, k.bytes, member, bytes,
                               now, budget, victims}),
      &budget_used_, &budget_entries_);
  if (!r.ok()) return CountError(r.status());
  for (size_t i = 2; i < r->size(); ++i) {
    absl::StatusOr<ChunkKey> victim = ChunkKey::FromHex((*r)[i].str());
    if (!victim.ok()) continue;
    bool removed = false;
    // A victim that cannot be deleted now stays accounted: the next Put
    // tries again. The Put itself goes on.
    if (absl::Status s = DeleteImpl(*victim, &removed); !s.ok()) {
      RAGKV_LOG(WARNING) << "redis tier: budget eviction of " << victim->ToHex() << ": " << s;
      break;
    }
    counters().evictions.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::Status RedisTier::ForgetBudget(const ChunkKey& key) {
  if (options_.budget_bytes == 0) return absl::OkStatus();
  const BudgetKeys k(options_.key_prefix);
  return CountError(AccountReply(exec_->Command(k.sizes, {"EVAL", kForgetScript, "3", k.sizes,
                                                          k.lru, k.bytes, key.ToHex()}),
                                  &budget_used_, &budget_entries_)
                        .status());
}

}  // namespace ragkv::kvstore
