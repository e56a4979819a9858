#include "pipeline/internal/budgets.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace ragkv::pipeline::internal {

absl::StatusOr<blend::RecomputeBudget*> Budgets::For(double budget) {
  if (!(budget > 0 && budget <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("adaptive_budget %g outside (0, 1]", budget));
  }
  const auto milli = static_cast<int64_t>(std::llround(budget * 1000));
  if (milli < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("adaptive_budget %g below 0.001", budget));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_milli_.find(milli);
  if (it != by_milli_.end()) return it->second.get();
  if (static_cast<int>(by_milli_.size()) >= kMaxBudgets) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "adaptive_budget %g: this server already keeps %d distinct budgets", budget, kMaxBudgets));
  }
  blend::RecomputeBudget::Options o;
  o.budget = static_cast<double>(milli) / 1000;
  ASSIGN_OR_RETURN(auto b, blend::RecomputeBudget::Create(o));
  blend::RecomputeBudget* raw = b.get();
  by_milli_.emplace(milli, std::move(b));
  return raw;
}

}  // namespace ragkv::pipeline::internal
