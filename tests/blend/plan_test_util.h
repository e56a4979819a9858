// plan_test_util.h: shared helpers of the planner tests (plan_*_test.cc):
// presets that must exist, and operators looked up by name.
#ifndef RAGKV_TESTS_BLEND_PLAN_TEST_UTIL_H_
#define RAGKV_TESTS_BLEND_PLAN_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blend/cost_model.h"
#include "blend/plan_arch.h"
#include "blend/plan_ops.h"

namespace ragkv::blend::testing {

// Preset: ArchPreset(name); a missing preset fails the test (and the value
// access then aborts it).
inline ModelArch Preset(const std::string& name) {
  absl::StatusOr<ModelArch> a = ArchPreset(name);
  EXPECT_TRUE(a.ok()) << a.status();
  return *a;
}

// Hw: HardwarePreset(name), failing the test as Preset does.
inline HardwareSpec Hw(const std::string& name) {
  absl::StatusOr<HardwareSpec> h = HardwarePreset(name);
  EXPECT_TRUE(h.ok()) << h.status();
  return *h;
}

// ByName: the operators keyed by OpCost::op (a later duplicate wins).
inline std::map<std::string, OpCost> ByName(const std::vector<OpCost>& ops) {
  std::map<std::string, OpCost> m;
  for (const OpCost& c : ops) m[c.op] = c;
  return m;
}

}  // namespace ragkv::blend::testing

#endif  // RAGKV_TESTS_BLEND_PLAN_TEST_UTIL_H_
