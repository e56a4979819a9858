#include "kvstore/redis/internal/redis_cluster.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace ragkv::kvstore::internal {
namespace {

constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> t{};
  for (int i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
    t[i] = crc;
  }
  return t;
}
constexpr std::array<uint16_t, 256> kCrc16Table = MakeCrc16Table();

// ParseRedirect: "MOVED 3999 127.0.0.1:6381" / "ASK ..." -> (slot, endpoint).
// An empty host means "the node that answered".
bool ParseRedirect(std::string_view err, const RedisEndpoint& from, int* slot, RedisEndpoint* to) {
  std::vector<absl::string_view> parts = absl::StrSplit(Sv(err), ' ', absl::SkipEmpty());
  if (parts.size() < 3 || !absl::SimpleAtoi(parts[1], slot) || *slot < 0 ||
      *slot >= kRedisClusterSlots) {
    return false;
  }
  std::string_view addr = StdSv(parts[2]);
  if (!addr.empty() && addr.front() == ':') {
    int port = 0;
    if (!absl::SimpleAtoi(Sv(addr.substr(1)), &port)) return false;
    to->host = from.host;
    to->port = port;
    return true;
  }
  absl::StatusOr<RedisEndpoint> ep = RedisEndpoint::Parse(addr);
  if (!ep.ok()) return false;
  *to = *std::move(ep);
  return true;
}

}  // namespace

uint16_t Crc16(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char c : data) {
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

int KeySlot(std::string_view key) {
  size_t open = key.find('{');
  if (open != std::string_view::npos) {
    size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close != open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) & (kRedisClusterSlots - 1);
}

RedisCluster::RedisCluster(RedisClusterOptions options) : options_(std::move(options)) {
  slot_owner_.fill(-1);
}

absl::StatusOr<std::unique_ptr<RedisCluster>> RedisCluster::Create(RedisClusterOptions options) {
  if (options.seeds.empty()) {
    return absl::InvalidArgumentError("redis cluster: no seed endpoints");
  }
  std::unique_ptr<RedisCluster> cluster(new RedisCluster(std::move(options)));
  RETURN_IF_ERROR(cluster->RefreshSlotMap());
  return cluster;
}

RedisNodePool* RedisCluster::PoolFor(const RedisEndpoint& node) {
  absl::MutexLock l(&mu_);
  std::unique_ptr<RedisNodePool>& pool = pools_[node.ToString()];
  if (pool == nullptr) {
    RedisNodePoolOptions o = options_.node;
    o.connection.endpoint = node;
    pool = std::make_unique<RedisNodePool>(std::move(o));
  }
  return pool.get();
}

absl::Status RedisCluster::RefreshFrom(RedisNodePool* pool) {
  const RedisEndpoint& from = pool->endpoint();
  ASSIGN_OR_RETURN(Reply r, pool->Command({"CLUSTER", "SLOTS"}));
  if (r.IsError()) {
    if (absl::StrContains(Sv(r.str()), "cluster support disabled")) {
      return absl::FailedPreconditionError(
          absl::StrCat("redis ", from.ToString(), " is not a cluster node: ", Sv(r.str())));
    }
    return ReplyToStatus(r.view(), absl::StrCat("redis ", from.ToString(), ": CLUSTER SLOTS"));
  }
  if (r.type() != ReplyType::kArray) {
    return absl::InternalError(absl::StrCat("redis ", from.ToString(),
                                            ": unexpected CLUSTER SLOTS reply ",
                                            r.view().DebugString()));
  }
  std::vector<RedisEndpoint> nodes;
  std::array<int16_t, kRedisClusterSlots> owner;
  owner.fill(-1);
  for (size_t i = 0; i < r.size(); ++i) {
    ReplyView range = r[i];
    if (range.size() < 3 || range[0].type() != ReplyType::kInteger ||
        range[1].type() != ReplyType::kInteger || range[2].size() < 2) {
      return absl::InternalError(absl::StrCat("redis ", from.ToString(),
                                              ": malformed CLUSTER SLOTS entry ",
                                              range.DebugString()));
    }
    int64_t lo = range[0].integer(), hi = range[1].integer();
    ReplyView master = range[2];
    RedisEndpoint ep{std::string(master[0].str()), static_cast<int>(master[1].integer())};
    if (ep.host.empty()) ep.host = from.host;  // "" means "the node you asked"
    if (ep.host == "?" || ep.port <= 0 || lo < 0 || hi >= kRedisClusterSlots || lo > hi) continue;
    auto it = std::find(nodes.begin(), nodes.end(), ep);
    int16_t idx = static_cast<int16_t>(it - nodes.begin());
    if (it == nodes.end()) nodes.push_back(ep);
    for (int64_t s = lo; s <= hi; ++s) owner[s] = idx;
  }
  if (nodes.empty()) {
    return absl::UnavailableError(
        absl::StrCat("redis ", from.ToString(), ": cluster has no slots assigned"));
  }
  {
    absl::MutexLock l(&mu_);
    nodes_ = std::move(nodes);
    slot_owner_ = owner;
  }
  refreshes_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status RedisCluster::RefreshSlotMap() {
  std::vector<RedisEndpoint> candidates;
  {
    absl::MutexLock l(&mu_);
    candidates = nodes_;
  }
  for (const RedisEndpoint& s : options_.seeds) {
    if (std::find(candidates.begin(), candidates.end(), s) == candidates.end()) {
      candidates.push_back(s);
    }
  }
  absl::Status last = absl::UnavailableError("redis cluster: no node to ask");
  for (const RedisEndpoint& ep : candidates) {
    last = RefreshFrom(PoolFor(ep));
    // Not a cluster, bad credentials or bad TLS files: every node would say the same.
    if (last.ok() || absl::IsFailedPrecondition(last) || absl::IsPermissionDenied(last) ||
        absl::IsInvalidArgument(last)) {
      return last;
    }
  }
  return absl::UnavailableError(
      absl::StrCat("redis cluster: no node answered CLUSTER SLOTS (last: ", last.message(), ")"));
}

void RedisCluster::MaybeRefresh() {
  if (!refresh_mu_.TryLock()) return;  // someone else is refreshing right now
  absl::Time now = absl::Now();
  if (now - last_refresh_ >= options_.min_refresh_interval) {
    last_refresh_ = now;
    absl::Status s = RefreshSlotMap();
    if (!s.ok()) {
      RAGKV_LOG(WARNING) << "redis cluster slot refresh failed: " << s;
    }
  }
  refresh_mu_.Unlock();
}

std::optional<RedisEndpoint> RedisCluster::NodeForSlot(int slot) const {
  absl::MutexLock l(&mu_);
  if (slot < 0 || slot >= kRedisClusterSlots || slot_owner_[slot] < 0) return std::nullopt;
  return nodes_[slot_owner_[slot]];
}

std::vector<RedisEndpoint> RedisCluster::Masters() const {
  absl::MutexLock l(&mu_);
  return nodes_;
}

void RedisCluster::SetSlotOwnerForTesting(int slot, const RedisEndpoint& node) {
  SetSlotOwner(slot, node);
}

void RedisCluster::SetSlotOwner(int slot, const RedisEndpoint& node) {
  absl::MutexLock l(&mu_);
  auto it = std::find(nodes_.begin(), nodes_.end(), node);
  int16_t idx = static_cast<int16_t>(it - nodes_.begin());
  if (it == nodes_.end()) nodes_.push_back(node);
  slot_owner_[slot] = idx;
}

std::string RedisCluster::NodeKeyFor(std::string_view routing_key) const {
  std::optional<RedisEndpoint> n = NodeForSlot(KeySlot(routing_key));
  return n.has_value() ? n->ToString() : std::string();
}

std::string RedisCluster::Describe() const {
  absl::MutexLock l(&mu_);
  return absl::StrCat("redis-cluster(", nodes_.size(), " masters)");
}

absl::StatusOr<std::vector<Reply>> RedisCluster::Pipeline(std::string_view routing_key,
                                                          absl::Span<const RedisArgv> commands) {
  const int slot = KeySlot(routing_key);
  std::optional<RedisEndpoint> owner = NodeForSlot(slot);
  if (!owner.has_value()) {
    MaybeRefresh();
    owner = NodeForSlot(slot);
    if (!owner.has_value()) {
      return absl::UnavailableError(
          absl::StrCat("redis cluster: slot ", slot, " is not served by any node"));
    }
  }
  struct Work {
    RedisEndpoint node;
    bool asking = false;
    std::vector<size_t> idx;  // indices into `commands`, ascending
  };
  std::deque<Work> work;
  work.push_back(Work{*owner, false, {}});
  for (size_t i = 0; i < commands.size(); ++i) work.front().idx.push_back(i);

  std::vector<Reply> results(commands.size());
  static const RedisArgv kAsking = {"ASKING"};
  int hops = 0;
  bool need_refresh = false;
  while (!work.empty()) {
    Work w = std::move(work.front());
    work.pop_front();
    std::vector<RedisArgv> cmds;
    cmds.reserve(w.idx.size() * (w.asking ? 2 : 1));
    for (size_t i : w.idx) {
      if (w.asking) cmds.push_back(kAsking);
      cmds.push_back(commands[i]);
    }
    absl::StatusOr<std::vector<Reply>> r = PoolFor(w.node)->Pipeline(cmds);
    if (!r.ok()) {
      // The node may have failed over; learn the new map for the next call.
      MaybeRefresh();
      return r.status();
    }
    std::vector<Work> redirected;
    bool tryagain = false;
    auto add_redirect = [&redirected](const RedisEndpoint& to, bool asking, size_t i) {
      for (Work& g : redirected) {
        if (g.node == to && g.asking == asking) {
          g.idx.push_back(i);
          return;
        }
      }
      redirected.push_back(Work{to, asking, {i}});
    };
    for (size_t k = 0; k < w.idx.size(); ++k) {
      const size_t i = w.idx[k];
      Reply& rep = (*r)[w.asking ? 2 * k + 1 : k];
      if (rep.IsError()) {
        std::string_view e = rep.str();
        int moved_slot = 0;
        RedisEndpoint to;
        if (absl::StartsWith(Sv(e), "MOVED ") && ParseRedirect(e, w.node, &moved_slot, &to)) {
          moved_.fetch_add(1, std::memory_order_relaxed);
          SetSlotOwner(moved_slot, to);  // the spec's "update this slot now"
          need_refresh = true;
          add_redirect(to, false, i);
          continue;
        }
        if (absl::StartsWith(Sv(e), "ASK ") && ParseRedirect(e, w.node, &moved_slot, &to)) {
          ask_.fetch_add(1, std::memory_order_relaxed);
          add_redirect(to, true, i);
          continue;
        }
        if (absl::StartsWith(Sv(e), "TRYAGAIN")) {
          tryagain = true;
          add_redirect(w.node, w.asking, i);
          continue;
        }
      }
      results[i] = std::move(rep);
    }
    if (!redirected.empty()) {
      if (++hops > options_.max_redirects) {
        return absl::UnavailableError(absl::StrCat("redis cluster: slot ", slot, ": more than ",
                                                   options_.max_redirects, " redirects"));
      }
      if (tryagain) absl::SleepFor(absl::Milliseconds(10));
      for (Work& g : redirected) work.push_back(std::move(g));
    }
  }
  if (need_refresh) MaybeRefresh();
  return results;
}

}  // namespace ragkv::kvstore::internal
