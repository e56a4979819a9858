// RMSNorm, SwiGLU, softmax vs double references. Tolerance: 1e-5 relative
// (+1e-6 absolute) for every ISA.
#include "kernels/elementwise.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/test_util.h"

namespace ragkv::kernels {
namespace {

using testing::IsaScope;
using testing::Isas;
using testing::RandomVec;

void ExpectClose(float got, double want, const char* what, int i) {
  ASSERT_NEAR(got, want, 1e-6 + 1e-5 * std::abs(want)) << what << " @" << i;
}

TEST(ElementwiseTest, RmsNorm) {
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (int dim : {1, 7, 64, 288, 1001}) {
      const int rows = 37;
      auto x = RandomVec(rows * dim, dim, -3, 3);
      auto w = RandomVec(dim, dim + 1);
      std::vector<float> out(rows * dim);
      ASSERT_TRUE(RmsNorm(TensorView::Contiguous(x.data(), DType::kF32, {rows, dim}),
                          TensorView::Contiguous(w.data(), DType::kF32, {dim}), 1e-5f,
                          TensorView::Contiguous(out.data(), DType::kF32, {rows, dim}))
                      .ok());
      for (int r = 0; r < rows; ++r) {
        double ss = 0;
        for (int i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
        const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
        for (int i = 0; i < dim; ++i)
          ExpectClose(out[r * dim + i], x[r * dim + i] * inv * w[i], "rmsnorm", i);
      }
      // In place (out aliases x) gives the same result.
      auto xi = x;
      ASSERT_TRUE(RmsNorm(TensorView::Contiguous(xi.data(), DType::kF32, {rows, dim}),
                          TensorView::Contiguous(w.data(), DType::kF32, {dim}), 1e-5f,
                          TensorView::Contiguous(xi.data(), DType::kF32, {rows, dim}))
                      .ok());
      EXPECT_EQ(xi, out);
    }
  }
  std::vector<float> x(8), w(7), o(8);
  EXPECT_FALSE(RmsNorm(TensorView::Contiguous(x.data(), DType::kF32, {1, 8}),
                       TensorView::Contiguous(w.data(), DType::kF32, {7}), 1e-5f,
                       TensorView::Contiguous(o.data(), DType::kF32, {1, 8}))
                   .ok());
  EXPECT_FALSE(RmsNorm(TensorView::Contiguous(x.data(), DType::kF32, {1, 8}),
                       TensorView::Contiguous(x.data(), DType::kF32, {8}), 1e-5f,
                       TensorView::Contiguous(o.data(), DType::kF32, {2, 4}))
                   .ok());
}

TEST(ElementwiseTest, SwiGlu) {
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (int n : {1, 5, 16, 173, 768}) {
      const int rows = 9;
      auto g = RandomVec(rows * n, n, -30, 30);
      auto u = RandomVec(rows * n, n + 1, -2, 2);
      g[0] = -100.0f;  // exp overflow side
      g[rows * n - 1] = 90.0f;
      std::vector<float> out(rows * n);
      ASSERT_TRUE(SwiGlu(TensorView::Contiguous(g.data(), DType::kF32, {rows, n}),
                         TensorView::Contiguous(u.data(), DType::kF32, {rows, n}),
                         TensorView::Contiguous(out.data(), DType::kF32, {rows, n}))
                      .ok());
      for (int i = 0; i < rows * n; ++i) {
        const double z = g[i];
        ExpectClose(out[i], z / (1.0 + std::exp(-z)) * u[i], "swiglu", i);
      }
    }
  }
  std::vector<float> a(8);
  EXPECT_FALSE(SwiGlu(TensorView::Contiguous(a.data(), DType::kF32, {2, 4}),
                      TensorView::Contiguous(a.data(), DType::kF32, {4, 2}),
                      TensorView::Contiguous(a.data(), DType::kF32, {2, 4}))
                   .ok());
}

TEST(ElementwiseTest, Softmax) {
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (int n : {1, 3, 8, 100, 4099}) {
      const int rows = 5;
      auto x = RandomVec(rows * n, n, -40, 40);
      x[0] = -INFINITY;  // a masked logit
      auto y = x;
      ASSERT_TRUE(Softmax(TensorView::Contiguous(y.data(), DType::kF32, {rows, n})).ok());
      for (int r = 0; r < rows; ++r) {
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[r * n + i]));
        for (int i = 0; i < n; ++i) sum += std::exp(x[r * n + i] - mx);
        for (int i = 0; i < n; ++i) {
          if (std::isinf(mx)) {
            EXPECT_EQ(y[r * n + i], 0.0f);
          } else {
            ExpectClose(y[r * n + i], std::exp(x[r * n + i] - mx) / sum, "softmax", i);
          }
        }
      }
    }
  }
  EXPECT_FALSE(Softmax(TensorView::Contiguous(nullptr, DType::kF32, {2, 3})).ok());
}

}  // namespace
}  // namespace ragkv::kernels
