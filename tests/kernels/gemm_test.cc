// Gemm vs a naive double reference, on 1, 2 and 3 threads. Tolerance:
// 1e-5 * (1 + k) absolute on inputs in [-1, 1].
#include "kernels/gemm.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/blas_core.h"
#include "kernels/cpu.h"
#include "tests/kernels/test_util.h"

namespace ragkv::kernels {
namespace {

using testing::RandomVec;

TensorView Mat(float* p, int64_t rows, int64_t cols, int64_t ld) {
  TensorView v = TensorView::Contiguous(p, DType::kF32, {rows, cols});
  v.stride[0] = ld;
  return v;
}

TEST(GemmTest, MatchesNaive) {
  struct Case {
    int m, n, k;
    bool tb;
    float alpha, beta;
  };
  const Case cases[] = {{1, 1, 1, false, 1, 0},      {7, 13, 5, true, 1, 0},
                        {64, 288, 288, true, 1, 0},  {33, 17, 129, false, 0.5f, 2},
                        {5, 512, 64, true, 1, 1},    {100, 3, 300, false, -1, 0.25f},
                        {1, 300, 129, true, 1, 0},   {1, 77, 64, false, 0.5f, 1},
                        // >= 2^20 multiply-adds: sliced over threads (by columns, or
                        // by rows when c is narrow), GEMV included
                        {1, 4000, 300, true, 1, 0.5f}, {1, 3001, 400, false, 1, 0},
                        {300, 40, 100, true, 1, 1},    {64, 1000, 64, false, 0.5f, 1}};
  struct RestoreThreads {
    int prev = MaxThreads();
    ~RestoreThreads() { SetMaxThreads(prev); }
  } restore;
  for (int threads : {1, 2, 3})
  for (const Case& c : cases) {
    SetMaxThreads(threads);
    SCOPED_TRACE(::testing::Message() << c.m << "x" << c.n << "x" << c.k << " tb=" << c.tb
                                      << " threads=" << threads);
    const int lda = c.k + 3, ldb = (c.tb ? c.k : c.n) + 1, ldc = c.n + 2;
    auto a = RandomVec(static_cast<size_t>(c.m) * lda, 1);
    auto b = RandomVec(static_cast<size_t>(c.tb ? c.n : c.k) * ldb, 2);
    auto cm = RandomVec(static_cast<size_t>(c.m) * ldc, 3);
    auto c0 = cm;
    ASSERT_TRUE(Gemm(Mat(a.data(), c.m, c.k, lda),
                     c.tb ? Mat(b.data(), c.n, c.k, ldb) : Mat(b.data(), c.k, c.n, ldb), c.tb,
                     Mat(cm.data(), c.m, c.n, ldc), c.alpha, c.beta)
                    .ok());
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) {
        double s = 0;
        for (int p = 0; p < c.k; ++p)
          s += static_cast<double>(a[i * lda + p]) * (c.tb ? b[j * ldb + p] : b[p * ldb + j]);
        const double want = c.alpha * s + c.beta * c0[i * ldc + j];
        ASSERT_NEAR(cm[i * ldc + j], want, 1e-5 * (1 + c.k)) << i << "," << j;
      }
      for (int j = c.n; j < ldc; ++j) ASSERT_EQ(cm[i * ldc + j], c0[i * ldc + j]);
    }
  }
}

// The OpenBLAS core a process asks for follows the ISA cap (the avx2 stage
// must run OpenBLAS's AVX2 kernels), and a core the user set is kept.
TEST(BlasCoreTest, FollowsTheIsaCapAndKeepsTheUsersChoice) {
  const Isa saved = IsaCap();
  SetIsaOverride(Isa::kScalar);
  EXPECT_EQ(PreferredBlasCore(), "");
  SetIsaOverride(Isa::kAvx2);
  if (DetectedIsa() >= Isa::kAvx2) {
    EXPECT_EQ(PreferredBlasCore(), "Haswell");
  }
  SetIsaOverride(Isa::kAvx512);
  if (DetectedIsa() == Isa::kAvx512) {
    const std::string core = PreferredBlasCore();
    EXPECT_TRUE(core == "SkylakeX" || core == "Cooperlake") << core;
  }
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const std::string before = env != nullptr ? env : "";
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  EXPECT_EQ(BlasCoreUpgrade(), "");
  if (before.empty()) {
    unsetenv("OPENBLAS_CORETYPE");
  } else {
    setenv("OPENBLAS_CORETYPE", before.c_str(), 1);
  }
  // Whatever OpenBLAS chose, an upgrade is only ever the preferred core.
  const std::string up = BlasCoreUpgrade();
  EXPECT_TRUE(up.empty() || up == PreferredBlasCore()) << up;
  SetIsaOverride(saved);
}

TEST(GemmTest, BadInputs) {
  std::vector<float> a(64), b(64), c(64);
  auto ok = Gemm(TensorView::Contiguous(a.data(), DType::kF32, {4, 8}),
                 TensorView::Contiguous(b.data(), DType::kF32, {8, 4}), false,
                 TensorView::Contiguous(c.data(), DType::kF32, {4, 4}));
  EXPECT_TRUE(ok.ok()) << ok;
  EXPECT_FALSE(Gemm(TensorView::Contiguous(a.data(), DType::kF32, {4, 8}),
                    TensorView::Contiguous(b.data(), DType::kF32, {8, 4}), true,
                    TensorView::Contiguous(c.data(), DType::kF32, {4, 4}))
                   .ok());
  EXPECT_FALSE(Gemm(TensorView::Contiguous(a.data(), DType::kF32, {4, 8}),
                    TensorView::Contiguous(b.data(), DType::kF32, {8, 4}), false,
                    TensorView::Contiguous(c.data(), DType::kF32, {4, 5}))
                   .ok());
  EXPECT_FALSE(Gemm(TensorView::Contiguous(nullptr, DType::kF32, {4, 8}),
                    TensorView::Contiguous(b.data(), DType::kF32, {8, 4}), false,
                    TensorView::Contiguous(c.data(), DType::kF32, {4, 4}))
                   .ok());
  EXPECT_FALSE(Gemm(TensorView::Contiguous(a.data(), DType::kF16, {4, 8}),
                    TensorView::Contiguous(b.data(), DType::kF32, {8, 4}), false,
                    TensorView::Contiguous(c.data(), DType::kF32, {4, 4}))
                   .ok());
  EXPECT_FALSE(Gemm(Mat(a.data(), 4, 8, 4), TensorView::Contiguous(b.data(), DType::kF32, {8, 4}),
                    false, TensorView::Contiguous(c.data(), DType::kF32, {4, 4}))
                   .ok());
}

}  // namespace
}  // namespace ragkv::kernels
