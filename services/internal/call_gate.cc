#include "services/internal/call_gate.h"

#include <thread>

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/constant_time.h"

namespace ragkv::services::internal {
namespace {

double BurstFor(const CallGate::Options& o, double rate) {
  return o.burst > 0 ? o.burst : std::max(1.0, rate);
}

}  // namespace

CallGate::CallGate(Options options, Metrics* metrics)
    : options_(std::move(options)), metrics_(metrics) {
  global_.tokens = BurstFor(options_, options_.max_rps);
  global_.last = Clock::now();
  if (metrics_ != nullptr) {
    // The gauge reads the shared counter; the metrics registry may be
    // rendered after the gate is gone only if it outlives the sidecar,
    // which it does not (both are members of Sidecar::Impl).
    std::shared_ptr<std::atomic<int>> inflight = inflight_;
    metrics_->AddCollector([inflight](std::string* out) {
      absl::StrAppendFormat(out, "# TYPE ragkv_rpc_inflight gauge\nragkv_rpc_inflight %d\n",
                            inflight->load(std::memory_order_relaxed));
    });
  }
}

std::string CallGate::PeerAddress(std::string_view peer) {
  if (peer.rfind("ipv4:", 0) == 0 || peer.rfind("ipv6:", 0) == 0) {
    const size_t colon = peer.rfind(':');
    if (colon != std::string_view::npos && colon > 4) return std::string(peer.substr(0, colon));
  }
  return std::string(peer);
}

void CallGate::Refill(Bucket* b, double rate, Clock::time_point now) const {
  const double elapsed_s = std::chrono::duration<double>(now - b->last).count();
  b->tokens = std::min(BurstFor(options_, rate), b->tokens + std::max(0.0, elapsed_s) * rate);
  b->last = now;
}

void CallGate::CountRejection(std::string_view reason) {
  if (metrics_ != nullptr) {
    metrics_->Add("ragkv_rpc_rejected_total", absl::StrFormat("reason=\"%s\"", reason));
  }
}

absl::Status CallGate::CheckRate(const grpc::ServerContextBase& ctx) {
  if (options_.max_rps <= 0 && options_.max_rps_per_peer <= 0) return absl::OkStatus();
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  Bucket* peer = nullptr;
  if (options_.max_rps_per_peer > 0) {
    const std::string key = PeerAddress(ctx.peer());
    auto it = peers_.find(key);
    if (it == peers_.end()) {
      if (peers_.size() >= options_.max_peers) {
        // Drop the buckets that are full again (idle peers): forgetting them
        // changes nothing. If none is full, a new peer still gets a bucket.
        const double burst = BurstFor(options_, options_.max_rps_per_peer);
        for (auto p = peers_.begin(); p != peers_.end();) {
          Refill(&p->second, options_.max_rps_per_peer, now);
          p = p->second.tokens >= burst ? peers_.erase(p) : std::next(p);
        }
      }
      it = peers_.emplace(key, Bucket{BurstFor(options_, options_.max_rps_per_peer), now}).first;
    }
    peer = &it->second;
    Refill(peer, options_.max_rps_per_peer, now);
    if (peer->tokens < 1) {
      CountRejection("peer_rate_limit");
      return absl::ResourceExhaustedError(absl::StrFormat(
          "rate limit: more than %g requests/s (burst %g) from this client "
          "(ragkv serve --max-rps-per-peer); retry later",
          options_.max_rps_per_peer, BurstFor(options_, options_.max_rps_per_peer)));
    }
  }
  if (options_.max_rps > 0) {
    Refill(&global_, options_.max_rps, now);
    if (global_.tokens < 1) {
      CountRejection("rate_limit");
      return absl::ResourceExhaustedError(
          absl::StrFormat("rate limit: more than %g requests/s (burst %g) on this sidecar "
                          "(ragkv serve --max-rps); retry later",
                          options_.max_rps, BurstFor(options_, options_.max_rps)));
    }
    global_.tokens -= 1;
  }
  if (peer != nullptr) peer->tokens -= 1;
  return absl::OkStatus();
}

absl::StatusOr<CallGate::Ticket> CallGate::Admit(const grpc::ServerContextBase& ctx) {
  absl::Status auth = CheckBearer(ctx, options_.auth_token);
  if (!auth.ok()) {
    CountRejection("unauthenticated");
    return auth;
  }
  if (!options_.internal_secret.empty()) {
    const auto& md = ctx.client_metadata();
    auto it = md.find(kInternalMetadataKey);
    if (it != md.end() && ConstantTimeEquals(std::string_view(it->second.data(), it->second.size()),
                                             options_.internal_secret)) {
      inflight_->fetch_add(1, std::memory_order_relaxed);
      return Ticket(inflight_);
    }
  }
  if (draining_.load()) {
    CountRejection("draining");
    return absl::UnavailableError("ragkv serve is shutting down; retry on another replica");
  }
  if (absl::Status s = CheckRate(ctx); !s.ok()) return s;
  const int now = inflight_->fetch_add(1, std::memory_order_relaxed) + 1;
  Ticket ticket(inflight_);  // releases the slot on every return below
  if (options_.max_inflight > 0 && now > options_.max_inflight) {
    CountRejection("inflight");
    return absl::ResourceExhaustedError(
        absl::StrFormat("too many requests in flight (ragkv serve --max-inflight %d); retry later",
                        options_.max_inflight));
  }
  return ticket;
}

bool CallGate::WaitIdle(std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  while (inflight() > 0) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

absl::Status CheckBearer(const grpc::ServerContextBase& ctx, const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  const std::string_view got(it->second.data(), it->second.size());
  const std::string_view prefix = "Bearer ";
  if (got.size() != prefix.size() + token.size() || got.substr(0, prefix.size()) != prefix ||
      !ConstantTimeEquals(got.substr(prefix.size()), token)) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return absl::OkStatus();
}

}  // namespace ragkv::services::internal
