// budgets.h: the pipeline's recompute budgets (blend::RecomputeBudget), one
// per distinct RequestOptions::adaptive_budget, shared by every request that
// asks for it (docs/blend.md "Adaptive ratio": the budget rule).
//
// Thread safety: For is thread-safe; the budgets outlive the registry's
// users (they live as long as the Pipeline).
#ifndef RAGKV_PIPELINE_INTERNAL_BUDGETS_H_
#define RAGKV_PIPELINE_INTERNAL_BUDGETS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "blend/recompute_budget.h"

namespace ragkv::pipeline::internal {

class Budgets {
 public:
  // kMaxBudgets: distinct budgets one pipeline keeps (budgets are told
  // apart to 0.001).
  static constexpr int kMaxBudgets = 16;
  // For: the budget for `budget` in (0, 1], created on first use.
  // InvalidArgument outside (0, 1]; ResourceExhausted past kMaxBudgets.
  absl::StatusOr<blend::RecomputeBudget*> For(double budget);

 private:
  std::mutex mu_;
  std::map<int64_t, std::unique_ptr<blend::RecomputeBudget>> by_milli_;
};

}  // namespace ragkv::pipeline::internal

#endif  // RAGKV_PIPELINE_INTERNAL_BUDGETS_H_
