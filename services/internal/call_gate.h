// call_gate.h: CallGate, the admission check every ragkv RPC passes before
// any work runs: (1) bearer-token auth, (2) rate limits (token buckets: one
// global, one per peer IP), (3) the bound on requests in flight. Rejections
// are counted in Metrics as ragkv_rpc_rejected_total{reason=...}; the number
// of calls in flight is the gauge ragkv_rpc_inflight.
//
// Auth comes first so that unauthenticated callers cannot drain the buckets
// of authenticated ones. Calls carrying the process-internal secret (the
// engine's loopback client, see Options::internal_secret) are authenticated
// as usual but skip (2) and (3): one admitted Generate must not be rejected
// half way by its own sub-calls.
//
// An admitted call holds a Ticket for its whole life (until its last status
// is sent); the ticket releases the in-flight slot when destroyed. Tickets
// share ownership of the counter, so one may outlive the gate.
//
// Thread safety: Admit is thread-safe; a Ticket is move-only and not shared.
// Private to services/.
#ifndef RAGKV_SERVICES_INTERNAL_CALL_GATE_H_
#define RAGKV_SERVICES_INTERNAL_CALL_GATE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "services/metrics.h"

namespace ragkv::services::internal {

// kInternalMetadataKey: metadata key of the process-internal secret.
inline constexpr char kInternalMetadataKey[] = "x-ragkv-internal";

class CallGate {
 public:
  struct Options {
    // auth_token: when non-empty, calls must carry
    // "authorization: Bearer <auth_token>" (Unauthenticated otherwise).
    std::string auth_token;
    // internal_secret: calls carrying "x-ragkv-internal: <secret>" skip the
    // rate and in-flight limits (still authenticated). Empty = no bypass.
    std::string internal_secret;
    // max_rps: global token bucket, requests per second (fractions allowed);
    // 0 = off (default).
    double max_rps = 0;
    // max_rps_per_peer: one bucket per peer IP address; 0 = off (default).
    double max_rps_per_peer = 0;
    // burst: bucket capacity (requests admitted at once after idling);
    // 0 = default max(1, rate) (one second's worth).
    double burst = 0;
    // max_inflight: calls admitted and not yet finished; 0 = off (default).
    int max_inflight = 0;
    // max_peers: per-peer buckets kept; full (idle) buckets are dropped
    // when this many exist. Default 10000.
    size_t max_peers = 10000;
  };

  // Ticket: an admitted call's in-flight slot; released when destroyed.
  class Ticket {
   public:
    Ticket() = default;
    explicit Ticket(std::shared_ptr<std::atomic<int>> counter) : counter_(std::move(counter)) {}
    Ticket(Ticket&&) = default;
    Ticket& operator=(Ticket&& other) {
      Release();
      counter_ = std::move(other.counter_);
      return *this;
    }
    ~Ticket() { Release(); }

   private:
    void Release() {
      if (counter_) counter_->fetch_sub(1, std::memory_order_relaxed);
      counter_.reset();
    }
    std::shared_ptr<std::atomic<int>> counter_;
  };

  // `metrics` is not owned and must outlive the gate (null = no counting).
  CallGate(Options options, Metrics* metrics);

  // Admit: the checks above, in order. Unauthenticated (missing/invalid
  // token), ResourceExhausted (rate or in-flight limit; the message says
  // which and how to retry). The messages never contain a token.
  absl::StatusOr<Ticket> Admit(const grpc::ServerContextBase& ctx);

  // StartDrain: from now on, calls from outside the process are refused
  // with UNAVAILABLE ("shutting down"); the process's own calls (the
  // engine's, carrying the internal secret) are still admitted, so that a
  // Generate in flight can finish.
  void StartDrain() { draining_.store(true); }
  // WaitIdle: waits until no call holds a ticket or `timeout` passes;
  // whether it became idle.
  bool WaitIdle(std::chrono::milliseconds timeout) const;

  // inflight: calls holding a ticket now.
  int inflight() const { return inflight_->load(std::memory_order_relaxed); }
  const Options& options() const { return options_; }

  // PeerAddress: "ipv4:1.2.3.4:5678" -> "ipv4:1.2.3.4" (the port dropped,
  // so all connections of one host share a bucket).
  static std::string PeerAddress(std::string_view peer);

 private:
  using Clock = std::chrono::steady_clock;
  struct Bucket {
    double tokens = 0;
    Clock::time_point last;
  };
  // Refill: adds the tokens earned since b->last (capped at the burst).
  void Refill(Bucket* b, double rate, Clock::time_point now) const;
  absl::Status CheckRate(const grpc::ServerContextBase& ctx);
  void CountRejection(std::string_view reason);

  const Options options_;
  Metrics* const metrics_;
  const std::shared_ptr<std::atomic<int>> inflight_ = std::make_shared<std::atomic<int>>(0);
  std::atomic<bool> draining_{false};
  std::mutex mu_;
  Bucket global_;                                  // guarded by mu_
  std::unordered_map<std::string, Bucket> peers_;  // guarded by mu_
};

// CheckBearer: OK when `token` is empty (auth off) or the call carries
// metadata "authorization: Bearer <token>"; else Unauthenticated. The
// comparison is constant-time in the token length.
absl::Status CheckBearer(const grpc::ServerContextBase& ctx, const std::string& token);

}  // namespace ragkv::services::internal

#endif  // RAGKV_SERVICES_INTERNAL_CALL_GATE_H_
