// byte_budget.h: ByteBudget, a server-wide cap on bytes held by requests in
// flight (PutChunk streams buffer one chunk each until it is stored whole).
// A request reserves what it declares before it allocates any of it and
// gets RESOURCE_EXHAUSTED when the budget cannot cover it; the reservation
// is returned when the request ends. Thread-safe.
// Private to services/.
#ifndef RAGKV_SERVICES_INTERNAL_BYTE_BUDGET_H_
#define RAGKV_SERVICES_INTERNAL_BYTE_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace ragkv::services::internal {

class ByteBudget {
 public:
  // limit 0: unbounded.
  explicit ByteBudget(uint64_t limit) : limit_(limit) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Reservation: returns its bytes on destruction (movable).
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& o) noexcept
        : budget_(std::exchange(o.budget_, nullptr)), bytes_(o.bytes_) {}
    Reservation& operator=(Reservation&& o) noexcept {
      Release();
      budget_ = std::exchange(o.budget_, nullptr);
      bytes_ = o.bytes_;
      return *this;
    }
    ~Reservation() { Release(); }
    uint64_t bytes() const { return budget_ != nullptr ? bytes_ : 0; }

   private:
    friend class ByteBudget;
    Reservation(ByteBudget* b, uint64_t n) : budget_(b), bytes_(n) {}
    void Release() {
      if (budget_ != nullptr) budget_->used_.fetch_sub(bytes_, std::memory_order_acq_rel);
      budget_ = nullptr;
    }
    ByteBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // TryReserve: `n` bytes for `what`, or RESOURCE_EXHAUSTED naming both figures.
  absl::StatusOr<Reservation> TryReserve(uint64_t n, std::string_view what) {
    uint64_t cur = used_.load(std::memory_order_relaxed);
    do {
      if (limit_ > 0 && (n > limit_ || cur > limit_ - n)) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "%s needs %d bytes but requests in flight already hold %d of the server's %d "
            "(--max-inflight-bytes); retry later",
            what, n, cur, limit_));
      }
    } while (!used_.compare_exchange_weak(cur, cur + n, std::memory_order_acq_rel));
    return Reservation(this, n);
  }

  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace ragkv::services::internal

#endif  // RAGKV_SERVICES_INTERNAL_BYTE_BUDGET_H_
