// Runs every model test with one kernel thread: the shapes here are tiny,
// and on a loaded 2-core machine OpenMP/OpenBLAS spin-waits between
// parallel regions dominate (a 255-token greedy run went from ~1 s to ~25 s).
#include <gtest/gtest.h>

#include "kernels/cpu.h"

namespace {
class SingleThreadKernels : public ::testing::Environment {
 public:
  void SetUp() override { ragkv::kernels::SetMaxThreads(1); }
};
[[maybe_unused]] ::testing::Environment* const kEnv =
    ::testing::AddGlobalTestEnvironment(new SingleThreadKernels);
}  // namespace
