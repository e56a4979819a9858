// Forward-pass invariants: batched prefill == token by token, split prefill
// == one call, the layer-level API (100% of rows, any order, or a subset
// against exact KV) == the full forward, KV export layout, and a naive
// scalar reference (interleaved and half-split RoPE, q/k/v bias, GQA).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/convert.h"
#include "model/generate.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "tests/model/test_util.h"

namespace ragkv::model {
namespace {

using kernels::TensorView;
using ::ragkv::model::testing::ModelFile;

TensorView Mat(float* p, int64_t rows, int64_t cols) {
  return TensorView::Contiguous(p, kernels::DType::kF32, {rows, cols});
}

double MaxAbsDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

// Max |difference| of layer l's K and V over tokens [0, n), relative to
// max(1, max |value|) (f32 GEMMs of different shapes sum in different orders).
double KvDiff(const KVCache& a, const KVCache& b, int l, int64_t n) {
  const int64_t e = int64_t(a.kv_heads()) * n * a.head_dim();
  std::vector<float> ak(e), av(e), bk(e), bv(e);
  EXPECT_TRUE(a.ExportLayer(l, 0, n, kernels::DType::kF32, ak.data(), av.data()).ok());
  EXPECT_TRUE(b.ExportLayer(l, 0, n, kernels::DType::kF32, bk.data(), bv.data()).ok());
  double scale = 1.0;
  for (int64_t i = 0; i < e; ++i) scale = std::max({scale, double(std::abs(ak[i])), double(std::abs(av[i]))});
  return std::max(MaxAbsDiff(ak.data(), bk.data(), e), MaxAbsDiff(av.data(), bv.data(), e)) / scale;
}

std::unique_ptr<Model> Synthetic(const std::string& spec) {
  auto s = ParseSyntheticSpec(spec);
  EXPECT_TRUE(s.ok()) << s.status();
  auto m = MakeSyntheticModel(*s);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  t[0] = 1;
  return t;
}

// The models every invariant runs on: the real checkpoint and a GQA
// synthetic with a different head_dim.
class ForwardTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "stories") {
      RAGKV_REQUIRE_MODEL_FILE("stories260K.bin");
      auto m = LoadModel(ModelFile("stories260K.bin"));
      ASSERT_TRUE(m.ok()) << m.status();
      model_ = *std::move(m);
    } else {
      model_ = Synthetic("layers=3,dim=96,heads=6,kv_heads=2,ffn=160,vocab=300,ctx=256,seed=7");
    }
    tokens_ = RandomTokens(48, model_->config().vocab_size, 11);
  }
  std::unique_ptr<Model> model_;
  std::vector<int32_t> tokens_;
};

TEST_P(ForwardTest, BatchedPrefillEqualsTokenByToken) {
  const int vocab = model_->config().vocab_size;
  const int n = static_cast<int>(tokens_.size());
  auto batch = model_->NewCache(n);
  auto step = model_->NewCache(n);
  ASSERT_TRUE(batch.ok() && step.ok());
  Workspace ws;
  std::vector<float> lb(size_t(n) * vocab), ls(size_t(n) * vocab);
  ASSERT_TRUE(model_->Prefill(tokens_, &*batch, &ws, LogitsMode::kAll, lb.data()).ok());
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(model_->DecodeStep(tokens_[i], &*step, &ws, ls.data() + size_t(i) * vocab).ok());
  }
  EXPECT_EQ(batch->num_tokens(), n);
  EXPECT_EQ(step->num_tokens(), n);
  EXPECT_LT(MaxAbsDiff(lb.data(), ls.data(), lb.size()), 1e-4);
  for (int l = 0; l < model_->config().n_layers; ++l) {
    EXPECT_LT(KvDiff(*batch, *step, l, n), 1e-5) << "layer " << l;
  }
}

TEST_P(ForwardTest, SplitPrefillEqualsOneCallAtEveryCut) {
  const int vocab = model_->config().vocab_size;
  const int n = static_cast<int>(tokens_.size());
  auto one = model_->NewCache(n);
  ASSERT_TRUE(one.ok());
  Workspace ws;
  std::vector<float> l1(size_t(n) * vocab);
  ASSERT_TRUE(model_->Prefill(tokens_, &*one, &ws, LogitsMode::kAll, l1.data()).ok());
  for (int cut = 1; cut < n; ++cut) {
    auto two = model_->NewCache(n);
    ASSERT_TRUE(two.ok());
    std::vector<float> l2(size_t(n) * vocab);
    ASSERT_TRUE(model_->Prefill(absl::MakeConstSpan(tokens_).subspan(0, cut), &*two, &ws,
                                LogitsMode::kAll, l2.data())
                    .ok());
    ASSERT_TRUE(model_->Prefill(absl::MakeConstSpan(tokens_).subspan(cut), &*two, &ws,
                                LogitsMode::kAll, l2.data() + size_t(cut) * vocab)
                    .ok());
    ASSERT_LT(MaxAbsDiff(l1.data(), l2.data(), l1.size()), 1e-4) << "cut " << cut;
    for (int l = 0; l < model_->config().n_layers; ++l) {
      ASSERT_LT(KvDiff(*one, *two, l, n), 1e-5) << "cut " << cut << " layer " << l;
    }
  }
}

TEST_P(ForwardTest, LayerApiAllRowsShuffledEqualsFullForward) {
  const ModelConfig& c = model_->config();
  const int n = static_cast<int>(tokens_.size());
  auto full = model_->NewCache(n);
  ASSERT_TRUE(full.ok());
  Workspace ws;
  std::vector<float> want(size_t(n) * c.vocab_size);
  ASSERT_TRUE(model_->Prefill(tokens_, &*full, &ws, LogitsMode::kAll, want.data()).ok());

  // Rows in a scrambled order: row r holds token perm[r] at position perm[r].
  std::vector<int32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(3));
  std::vector<int32_t> toks(n);
  for (int r = 0; r < n; ++r) toks[r] = tokens_[perm[r]];
  auto kv = model_->NewCache(n);
  ASSERT_TRUE(kv.ok());
  std::vector<float> hidden(size_t(n) * c.dim);
  ASSERT_TRUE(model_->Embed(toks, Mat(hidden.data(), n, c.dim)).ok());
  std::vector<float> fk(size_t(c.n_kv_heads) * n * c.head_dim), fv(fk.size());
  for (int l = 0; l < c.n_layers; ++l) {
    LayerOptions opt;
    opt.fresh_k = TensorView::Contiguous(fk.data(), kernels::DType::kF32, {c.n_kv_heads, n, c.head_dim});
    opt.fresh_v = TensorView::Contiguous(fv.data(), kernels::DType::kF32, {c.n_kv_heads, n, c.head_dim});
    ASSERT_TRUE(model_->ForwardLayer(l, Mat(hidden.data(), n, c.dim), perm.data(), kv->Layer(l, n),
                                     opt, &ws)
                    .ok());
    // The fresh outputs are the rows' K/V, in row order.
    for (int h = 0; h < c.n_kv_heads; ++h) {
      for (int r = 0; r < n; ++r) {
        const float* cached = kv->k_data(l) + (size_t(h) * n + perm[r]) * c.head_dim;
        ASSERT_EQ(0, std::memcmp(cached, fk.data() + (size_t(h) * n + r) * c.head_dim,
                                 c.head_dim * sizeof(float)));
      }
    }
  }
  ASSERT_TRUE(kv->set_num_tokens(n).ok());
  std::vector<float> got(size_t(n) * c.vocab_size);
  ASSERT_TRUE(model_->FinalNormAndLogits(Mat(hidden.data(), n, c.dim),
                                         Mat(got.data(), n, c.vocab_size), &ws)
                  .ok());
  double err = 0;
  for (int r = 0; r < n; ++r) {
    err = std::max(err, MaxAbsDiff(got.data() + size_t(r) * c.vocab_size,
                                   want.data() + size_t(perm[r]) * c.vocab_size, c.vocab_size));
  }
  EXPECT_LT(err, 1e-4);
  for (int l = 0; l < c.n_layers; ++l) EXPECT_LT(KvDiff(*kv, *full, l, n), 1e-5);
}

TEST_P(ForwardTest, LayerApiSubsetAgainstExactKvEqualsFullRows) {
  // With every other token's K/V exact, recomputing any 15% of the rows
  // layer by layer reproduces the full forward for those rows.
  const ModelConfig& c = model_->config();
  const int n = static_cast<int>(tokens_.size());
  Workspace ws;
  // Full forward through the layer API, recording each layer's input.
  auto full = model_->NewCache(n);
  ASSERT_TRUE(full.ok());
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<std::vector<float>> layer_in(c.n_layers + 1, std::vector<float>(size_t(n) * c.dim));
  ASSERT_TRUE(model_->Embed(tokens_, Mat(layer_in[0].data(), n, c.dim)).ok());
  for (int l = 0; l < c.n_layers; ++l) {
    layer_in[l + 1] = layer_in[l];
    ASSERT_TRUE(model_->ForwardLayer(l, Mat(layer_in[l + 1].data(), n, c.dim), pos.data(),
                                     full->Layer(l, n), {}, &ws)
                    .ok());
  }
  // Subset: ~15% of rows, scattered, including the last.
  std::vector<int32_t> sel = {3, 17, 29, 30, 41, n - 1, 0};
  const int rows = static_cast<int>(sel.size());
  std::vector<float> h(size_t(rows) * c.dim);
  for (int r = 0; r < rows; ++r) {
    std::copy_n(layer_in[0].data() + size_t(sel[r]) * c.dim, c.dim, h.data() + size_t(r) * c.dim);
  }
  auto kv = model_->NewCache(n);
  ASSERT_TRUE(kv.ok());
  for (int l = 0; l < c.n_layers; ++l) {
    // Start from the exact KV, zero the selected rows' slots (they must be
    // recomputed, not read).
    std::vector<float> k(size_t(c.n_kv_heads) * n * c.head_dim), v(k.size());
    ASSERT_TRUE(full->ExportLayer(l, 0, n, kernels::DType::kF32, k.data(), v.data()).ok());
    ASSERT_TRUE(kv->ImportLayer(l, 0, n, kernels::DType::kF32, k.data(), v.data()).ok());
    for (int32_t p : sel) {
      for (int hh = 0; hh < c.n_kv_heads; ++hh) {
        std::fill_n(kv->k_data(l) + (size_t(hh) * n + p) * c.head_dim, c.head_dim, 0.0f);
      }
    }
    ASSERT_TRUE(model_->ForwardLayer(l, Mat(h.data(), rows, c.dim), sel.data(), kv->Layer(l, n),
                                     {}, &ws)
                    .ok());
    for (int r = 0; r < rows; ++r) {
      ASSERT_LT(MaxAbsDiff(h.data() + size_t(r) * c.dim,
                           layer_in[l + 1].data() + size_t(sel[r]) * c.dim, c.dim),
                1e-4)
          << "layer " << l << " row " << r;
    }
    EXPECT_LT(KvDiff(*kv, *full, l, n), 1e-5);
  }
  // The bottom-right shortcut mask is *not* exact for scattered rows.
  auto kv2 = model_->NewCache(n);
  ASSERT_TRUE(kv2.ok());
  std::vector<float> k(size_t(c.n_kv_heads) * n * c.head_dim), v(k.size());
  ASSERT_TRUE(full->ExportLayer(0, 0, n, kernels::DType::kF32, k.data(), v.data()).ok());
  ASSERT_TRUE(kv2->ImportLayer(0, 0, n, kernels::DType::kF32, k.data(), v.data()).ok());
  std::vector<float> h2(size_t(rows) * c.dim);
  for (int r = 0; r < rows; ++r) {
    std::copy_n(layer_in[0].data() + size_t(sel[r]) * c.dim, c.dim, h2.data() + size_t(r) * c.dim);
  }
  LayerOptions br;
  br.causal = kernels::CausalMode::kBottomRight;
  ASSERT_TRUE(model_->ForwardLayer(0, Mat(h2.data(), rows, c.dim), sel.data(), kv2->Layer(0, n), br, &ws).ok());
  EXPECT_GT(MaxAbsDiff(h2.data(), layer_in[1].data() + size_t(sel[0]) * c.dim, c.dim), 1e-4);
}

TEST_P(ForwardTest, ProjectKvMatchesFreshKv) {
  const ModelConfig& c = model_->config();
  const int n = 9;
  Workspace ws;
  std::vector<int32_t> pos = {0, 5, 2, 8, 1, 7, 3, 6, 4};
  std::vector<float> h(size_t(n) * c.dim);
  ASSERT_TRUE(model_->Embed(absl::MakeConstSpan(tokens_).subspan(0, n), Mat(h.data(), n, c.dim)).ok());
  std::vector<float> pk(size_t(c.n_kv_heads) * n * c.head_dim), pv(pk.size()), fk(pk.size()), fv(pk.size());
  auto kview = [&](std::vector<float>& b) {
    return TensorView::Contiguous(b.data(), kernels::DType::kF32, {c.n_kv_heads, n, c.head_dim});
  };
  ASSERT_TRUE(model_->ProjectKV(1, Mat(h.data(), n, c.dim), pos.data(), kview(pk), kview(pv), &ws).ok());
  auto kv = model_->NewCache(n);
  ASSERT_TRUE(kv.ok());
  LayerOptions opt;
  opt.fresh_k = kview(fk);
  opt.fresh_v = kview(fv);
  ASSERT_TRUE(model_->ForwardLayer(1, Mat(h.data(), n, c.dim), pos.data(), kv->Layer(1, n), opt, &ws).ok());
  // Same math, different GEMM shapes (K/V alone vs fused QKV): OpenBLAS may
  // block and sum them differently (AVX-512 kernels do), so the last ulp can
  // differ. Values are O(1): 1e-5 absolute is ~100 ulp of headroom.
  EXPECT_LE(MaxAbsDiff(pk.data(), fk.data(), pk.size()), 1e-5f);
  EXPECT_LE(MaxAbsDiff(pv.data(), fv.data(), pv.size()), 1e-5f);
}

// kv_in_cache: flagged rows take K/V from the cache and project only Q. With
// the exact K/V in the cache the layer output equals a full recompute; with
// other values there, they are used and kept (never overwritten).
TEST_P(ForwardTest, KvInCacheRowsUseTheCachedKv) {
  const ModelConfig& c = model_->config();
  const int n = 9, layer = 1;
  Workspace ws;
  std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> h0(size_t(n) * c.dim);
  ASSERT_TRUE(model_->Embed(absl::MakeConstSpan(tokens_).subspan(0, n), Mat(h0.data(), n, c.dim)).ok());
  // Reference: every row projects Q, K, V.
  auto ref_kv = model_->NewCache(n);
  ASSERT_TRUE(ref_kv.ok());
  std::vector<float> ref = h0;
  ASSERT_TRUE(model_->ForwardLayer(layer, Mat(ref.data(), n, c.dim), pos.data(), ref_kv->Layer(layer, n), {}, &ws).ok());
  const size_t e = size_t(c.n_kv_heads) * n * c.head_dim;
  std::vector<float> k(e), v(e);
  ASSERT_TRUE(ref_kv->ExportLayer(layer, 0, n, kernels::DType::kF32, k.data(), v.data()).ok());

  const std::vector<uint8_t> flags = {0, 1, 1, 0, 1, 1, 1, 0, 1};  // rows 0, 3, 7 project K/V
  auto kview = [&](std::vector<float>& b) {
    return TensorView::Contiguous(b.data(), kernels::DType::kF32, {c.n_kv_heads, n, c.head_dim});
  };
  {
    auto kv = model_->NewCache(n);
    ASSERT_TRUE(kv.ok());
    ASSERT_TRUE(kv->ImportLayer(layer, 0, n, kernels::DType::kF32, k.data(), v.data()).ok());
    std::vector<float> h = h0, fk(e), fv(e);
    LayerOptions opt;
    opt.kv_in_cache = flags.data();
    opt.fresh_k = kview(fk);
    opt.fresh_v = kview(fv);
    ASSERT_TRUE(model_->ForwardLayer(layer, Mat(h.data(), n, c.dim), pos.data(), kv->Layer(layer, n), opt, &ws).ok());
    // Separate q and k|v GEMMs may round differently from the fused one:
    // 1e-5 relative to max(1, max |value|).
    auto scale = [](const std::vector<float>& x) {
      double m = 1.0;
      for (float f : x) m = std::max(m, double(std::abs(f)));
      return m;
    };
    EXPECT_LT(MaxAbsDiff(h.data(), ref.data(), h.size()), 1e-5 * scale(ref));
    EXPECT_LT(MaxAbsDiff(fk.data(), k.data(), e), 1e-5 * scale(k));
    EXPECT_LT(MaxAbsDiff(fv.data(), v.data(), e), 1e-5 * scale(v));
  }
  {
    // Perturbed K/V in the cache for the flagged rows: kept as they are and
    // used (the output moves); the unflagged rows are recomputed.
    std::vector<float> k2 = k, v2 = v;
    for (int hh = 0; hh < c.n_kv_heads; ++hh) {
      for (int t = 0; t < n; ++t) {
        for (int d = 0; d < c.head_dim; ++d) {
          const size_t i = (size_t(hh) * n + t) * c.head_dim + d;
          k2[i] += flags[t] ? 0.25f : 7.0f;  // unflagged garbage must be overwritten
          v2[i] += flags[t] ? 0.25f : 7.0f;
        }
      }
    }
    auto kv = model_->NewCache(n);
    ASSERT_TRUE(kv.ok());
    ASSERT_TRUE(kv->ImportLayer(layer, 0, n, kernels::DType::kF32, k2.data(), v2.data()).ok());
    std::vector<float> h = h0;
    LayerOptions opt;
    opt.kv_in_cache = flags.data();
    ASSERT_TRUE(model_->ForwardLayer(layer, Mat(h.data(), n, c.dim), pos.data(), kv->Layer(layer, n), opt, &ws).ok());
    EXPECT_GT(MaxAbsDiff(h.data(), ref.data(), h.size()), 1e-4);
    std::vector<float> k3(e), v3(e);
    ASSERT_TRUE(kv->ExportLayer(layer, 0, n, kernels::DType::kF32, k3.data(), v3.data()).ok());
    for (int hh = 0; hh < c.n_kv_heads; ++hh) {
      for (int t = 0; t < n; ++t) {
        const size_t i = (size_t(hh) * n + t) * c.head_dim;
        const std::vector<float>& want_k = flags[t] ? k2 : k;
        const std::vector<float>& want_v = flags[t] ? v2 : v;
        EXPECT_LT(MaxAbsDiff(k3.data() + i, want_k.data() + i, c.head_dim), 1e-5) << "row " << t;
        EXPECT_LT(MaxAbsDiff(v3.data() + i, want_v.data() + i, c.head_dim), 1e-5) << "row " << t;
      }
    }
  }
}

TEST_P(ForwardTest, ExportLayoutAndDtypes) {
  const ModelConfig& c = model_->config();
  const int n = 20;
  auto kv = model_->NewCache(64);  // capacity > tokens: export must compact
  ASSERT_TRUE(kv.ok());
  Workspace ws;
  ASSERT_TRUE(model_->Prefill(absl::MakeConstSpan(tokens_).subspan(0, n), &*kv, &ws, LogitsMode::kNone, nullptr).ok());
  const size_t e = size_t(c.n_kv_heads) * n * c.head_dim;
  std::vector<float> k32(e), v32(e);
  std::vector<uint16_t> k16(e), v16(e);
  ASSERT_TRUE(kv->ExportLayer(2, 0, n, kernels::DType::kF32, k32.data(), v32.data()).ok());
  ASSERT_TRUE(kv->ExportLayer(2, 0, n, kernels::DType::kF16, k16.data(), v16.data()).ok());
  for (int h = 0; h < c.n_kv_heads; ++h) {
    for (int t = 0; t < n; ++t) {
      for (int d = 0; d < c.head_dim; ++d) {
        const size_t i = (size_t(h) * n + t) * c.head_dim + d;
        const float cached = kv->k_data(2)[(size_t(h) * 64 + t) * c.head_dim + d];
        ASSERT_EQ(k32[i], cached);
        ASSERT_NEAR(kernels::HalfToFloat(k16[i]), cached, std::abs(cached) * 1e-3 + 1e-4);
      }
    }
  }
  // Sub-range export == slice of the full export.
  std::vector<float> ks(size_t(c.n_kv_heads) * 5 * c.head_dim), vs(ks.size());
  ASSERT_TRUE(kv->ExportLayer(2, 10, 5, kernels::DType::kF32, ks.data(), vs.data()).ok());
  EXPECT_EQ(ks[0], k32[size_t(10) * c.head_dim]);
  EXPECT_FALSE(kv->ExportLayer(2, 60, 5, kernels::DType::kF32, ks.data(), vs.data()).ok());
  EXPECT_FALSE(kv->ExportLayer(9, 0, 1, kernels::DType::kF32, ks.data(), vs.data()).ok());
}

TEST_P(ForwardTest, ContextAndIdErrors) {
  const ModelConfig& c = model_->config();
  auto kv = model_->NewCache(8);
  ASSERT_TRUE(kv.ok());
  Workspace ws;
  std::vector<int32_t> nine(9, 1);
  absl::Status s = model_->Prefill(nine, &*kv, &ws, LogitsMode::kNone, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_EQ(kv->num_tokens(), 0);
  std::vector<int32_t> bad = {1, c.vocab_size};
  s = model_->Prefill(bad, &*kv, &ws, LogitsMode::kNone, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s;
  // Prompt longer than the model context.
  std::vector<int32_t> longp(c.max_seq_len + 1, 1);
  auto g = Generate(*model_, longp, 1, SamplerOptions{});
  EXPECT_EQ(g.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(g.status().message().find("exceeds the model context"), std::string::npos);
  // Layer API argument checks.
  std::vector<float> h(c.dim);
  int32_t p = 8;
  EXPECT_FALSE(model_->ForwardLayer(0, Mat(h.data(), 1, c.dim), &p, kv->Layer(0, 8), {}, &ws).ok());
  EXPECT_FALSE(model_->ForwardLayer(c.n_layers, Mat(h.data(), 1, c.dim), &p, kv->Layer(0, 8), {}, &ws).ok());
}

INSTANTIATE_TEST_SUITE_P(Models, ForwardTest, ::testing::Values("stories", "synthetic_gqa"));

// ---- naive scalar reference ------------------------------------------------

// NaiveForward: logits of every position, computed with plain loops from
// the unfused weights (llama2.c's algorithm), for either RoPE layout.
std::vector<float> NaiveForward(const ModelConfig& c, const ModelWeights& w,
                                const std::vector<int32_t>& tokens) {
  const int n = static_cast<int>(tokens.size()), dim = c.dim, hd = c.head_dim,
            qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.hidden_dim;
  auto rms = [&](const float* x, const std::vector<float>& g, float* out) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(x[i]) * x[i];
    const double s = 1.0 / std::sqrt(ss / dim + c.norm_eps);
    for (int i = 0; i < dim; ++i) out[i] = float(x[i] * s * g[i]);
  };
  auto matvec = [](const std::vector<float>& W, const float* x, int out, int in, float* y,
                   const std::vector<float>* b) {
    for (int o = 0; o < out; ++o) {
      double acc = b && !b->empty() ? (*b)[o] : 0.0;
      for (int i = 0; i < in; ++i) acc += double(W[size_t(o) * in + i]) * x[i];
      y[o] = float(acc);
    }
  };
  auto rope = [&](float* v, int heads, int pos) {
    for (int h = 0; h < heads; ++h) {
      for (int j = 0; j < hd / 2; ++j) {
        const double freq = std::pow(double(c.rope_theta), -2.0 * j / hd);
        const double a = pos * freq, co = std::cos(a), si = std::sin(a);
        const int i0 = c.rope_layout == kernels::RopeLayout::kInterleaved ? 2 * j : j;
        const int i1 = c.rope_layout == kernels::RopeLayout::kInterleaved ? 2 * j + 1 : j + hd / 2;
        float* x = v + h * hd;
        const double x0 = x[i0], x1 = x[i1];
        x[i0] = float(x0 * co - x1 * si);
        x[i1] = float(x0 * si + x1 * co);
      }
    }
  };
  std::vector<std::vector<float>> K(c.n_layers, std::vector<float>(size_t(n) * kvd)),
      V(c.n_layers, std::vector<float>(size_t(n) * kvd));
  std::vector<float> logits(size_t(n) * c.vocab_size);
  std::vector<float> x(dim), xb(dim), q(qd), att(qd), o(dim), g(ffn), u(ffn);
  for (int t = 0; t < n; ++t) {
    std::copy_n(w.tok_embeddings.data() + size_t(tokens[t]) * dim, dim, x.data());
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerWeights& L = w.layers[l];
      rms(x.data(), L.attn_norm, xb.data());
      matvec(L.wq, xb.data(), qd, dim, q.data(), &L.bq);
      matvec(L.wk, xb.data(), kvd, dim, K[l].data() + size_t(t) * kvd, &L.bk);
      matvec(L.wv, xb.data(), kvd, dim, V[l].data() + size_t(t) * kvd, &L.bv);
      rope(q.data(), c.n_heads, t);
      rope(K[l].data() + size_t(t) * kvd, c.n_kv_heads, t);
      const int group = c.n_heads / c.n_kv_heads;
      for (int h = 0; h < c.n_heads; ++h) {
        const int kh = h / group;
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int i = 0; i < hd; ++i) d += double(q[h * hd + i]) * K[l][size_t(j) * kvd + kh * hd + i];
          s[j] = d / std::sqrt(double(hd));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int i = 0; i < hd; ++i) {
          double acc = 0;
          for (int j = 0; j <= t; ++j) acc += s[j] / sum * V[l][size_t(j) * kvd + kh * hd + i];
          att[h * hd + i] = float(acc);
        }
      }
      matvec(L.wo, att.data(), dim, qd, o.data(), nullptr);
      for (int i = 0; i < dim; ++i) x[i] += o[i];
      rms(x.data(), L.ffn_norm, xb.data());
      matvec(L.w_gate, xb.data(), ffn, dim, g.data(), nullptr);
      matvec(L.w_up, xb.data(), ffn, dim, u.data(), nullptr);
      for (int i = 0; i < ffn; ++i) g[i] = float(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
      matvec(L.w_down, g.data(), dim, ffn, o.data(), nullptr);
      for (int i = 0; i < dim; ++i) x[i] += o[i];
    }
    rms(x.data(), w.final_norm, xb.data());
    matvec(c.shared_classifier ? w.tok_embeddings : w.classifier, xb.data(), c.vocab_size, dim,
           logits.data() + size_t(t) * c.vocab_size, nullptr);
  }
  return logits;
}

TEST(NaiveReferenceTest, MatchesForBothRopeLayoutsWithBias) {
  for (auto layout : {kernels::RopeLayout::kInterleaved, kernels::RopeLayout::kHalfSplit}) {
    auto spec = ParseSyntheticSpec("layers=2,dim=64,heads=4,kv_heads=2,ffn=96,vocab=280,ctx=64,seed=5,theta=500000");
    ASSERT_TRUE(spec.ok());
    auto parts = MakeSyntheticParts(*spec);
    ASSERT_TRUE(parts.ok());
    parts->config.rope_layout = layout;
    parts->config.qkv_bias = true;
    parts->config.arch = "qwen2";
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.0f, 0.5f);
    for (auto& L : parts->weights.layers) {
      for (auto* b : {&L.bq, &L.bk, &L.bv}) {
        b->resize(b == &L.bq ? parts->config.q_dim() : parts->config.kv_dim());
        for (auto& x : *b) x = nd(rng);
      }
      for (auto& x : L.attn_norm) x = 1.0f + 0.1f * nd(rng);
    }
    const ModelConfig cfg = parts->config;
    const ModelWeights weights = parts->weights;
    auto model = Model::Create(parts->config, std::move(parts->weights));
    ASSERT_TRUE(model.ok()) << model.status();
    const auto tokens = RandomTokens(33, cfg.vocab_size, 4);
    const auto want = NaiveForward(cfg, weights, tokens);
    auto kv = (*model)->NewCache();
    ASSERT_TRUE(kv.ok());
    Workspace ws;
    std::vector<float> got(want.size());
    ASSERT_TRUE((*model)->Prefill(tokens, &*kv, &ws, LogitsMode::kAll, got.data()).ok());
    EXPECT_LT(MaxAbsDiff(got.data(), want.data(), got.size()), 2e-4)
        << (layout == kernels::RopeLayout::kInterleaved ? "interleaved" : "half-split");
  }
}

TEST(SyntheticTest, SpecParsingAndDeterminism) {
  auto s = ParseSyntheticSpec("layers=8,dim=512,heads=8,kv_heads=4,ffn=1408,vocab=32000");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->config.n_layers, 8);
  EXPECT_EQ(s->config.head_dim, 64);
  EXPECT_EQ(s->config.n_kv_heads, 4);
  EXPECT_EQ(s->config.vocab_size, 32000);
  EXPECT_FALSE(ParseSyntheticSpec("layers=8,dim=512,heads=7,ffn=10,vocab=300").ok());
  EXPECT_FALSE(ParseSyntheticSpec("layers=2,dim=64,heads=4,ffn=10,vocab=300,bogus=1").ok());
  EXPECT_FALSE(ParseSyntheticSpec("layers=x,dim=64,heads=4,ffn=10,vocab=300").ok());
  EXPECT_FALSE(ParseSyntheticSpec("dim=64,heads=4,ffn=10,vocab=300").ok());  // no layers
  auto a = Synthetic("layers=2,dim=64,heads=4,ffn=96,vocab=300,seed=1");
  auto b = Synthetic("layers=2,dim=64,heads=4,ffn=96,vocab=300,seed=1");
  auto c = Synthetic("layers=2,dim=64,heads=4,ffn=96,vocab=300,seed=2");
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_NE(a->fingerprint(), c->fingerprint());
  // Activations stay sane: logits finite and O(1..10).
  auto kv = a->NewCache(64);
  Workspace ws;
  std::vector<float> logits(300);
  ASSERT_TRUE(a->Prefill(RandomTokens(64, 300, 1), &*kv, &ws, LogitsMode::kLast, logits.data()).ok());
  for (float x : logits) ASSERT_TRUE(std::isfinite(x) && std::abs(x) < 100) << x;
}

}  // namespace
}  // namespace ragkv::model
