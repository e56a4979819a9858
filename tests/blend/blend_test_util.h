// blend_test_util.h: shared fixtures for the blend tests (small synthetic
// model, real stories260K when present, random prompts, naive references).
#ifndef RAGKV_TESTS_BLEND_BLEND_TEST_UTIL_H_
#define RAGKV_TESTS_BLEND_BLEND_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "blend/blender.h"
#include "blend/kv_source.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "tests/support/source_dir.h"

namespace ragkv::blend::testing {

// SmallModel: 4 layers (or `layers`), dim 64, GQA 4/2 heads, f32 KV (so
// cached and fresh values are comparable bit for bit).
inline std::unique_ptr<model::Model> SmallModel(kernels::DType kv_dtype = kernels::DType::kF32,
                                                uint64_t seed = 7, int layers = 4) {
  auto spec = model::ParseSyntheticSpec(
      "layers=" + std::to_string(layers) +
      ",dim=64,heads=4,kv_heads=2,ffn=128,vocab=300,ctx=512,seed=" + std::to_string(seed));
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->config.kv_dtype = kv_dtype;
  auto m = model::MakeSyntheticModel(*spec);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(m).value();
}

// ModelsDir: RAGKV_TEST_MODELS or ../shared/models.
inline std::string ModelsDir() {
  const char* env = std::getenv("RAGKV_TEST_MODELS");
  return env != nullptr ? std::string(env) : std::string(RAGKV_SOURCE_DIR) + "/../shared/models";
}

inline std::vector<int32_t> RandomTokens(std::mt19937* rng, int n, int vocab) {
  std::uniform_int_distribution<int> d(3, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(*rng);
  return t;
}

// Prompt: token lists of the segments and their cached KV (null = miss).
struct Prompt {
  std::vector<SegmentKind> kinds;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::shared_ptr<ChunkKV>> kv;
  std::vector<std::unique_ptr<InMemoryKvSource>> sources;

  void Add(const model::Model& m, SegmentKind kind, std::vector<int32_t> toks, bool cached) {
    kinds.push_back(kind);
    if (cached) {
      auto c = PrecomputeChunk(m, toks);
      EXPECT_TRUE(c.ok()) << c.status();
      kv.push_back(std::make_shared<ChunkKV>(std::move(c).value()));
      sources.push_back(std::make_unique<InMemoryKvSource>(kv.back().get()));
    } else {
      kv.push_back(nullptr);
      sources.push_back(nullptr);
    }
    tokens.push_back(std::move(toks));
  }
  std::vector<BlendSegment> Segments() const {
    std::vector<BlendSegment> s;
    for (size_t i = 0; i < kinds.size(); ++i) {
      s.push_back({kinds[i], tokens[i], sources[i].get()});
    }
    return s;
  }
  std::vector<int32_t> AllTokens() const {
    std::vector<int32_t> all;
    for (const auto& t : tokens) all.insert(all.end(), t.begin(), t.end());
    return all;
  }
  int64_t Offset(size_t seg) const {
    int64_t o = 0;
    for (size_t i = 0; i < seg; ++i) o += static_cast<int64_t>(tokens[i].size());
    return o;
  }
};

// ModelBlenderTest: a fixture with SmallModel() and its Blender.
class ModelBlenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = SmallModel();
    auto b = Blender::Create({model_.get()});
    ASSERT_TRUE(b.ok()) << b.status();
    blender_ = std::move(b).value();
  }
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<Blender> blender_;
};

// RandomPrompt: an 8-token cached system prefix (when `prefix`), `chunks`
// cached chunks of `chunk_tokens` random tokens (chunk `missed`, if >= 0,
// without a cache) and a 6-token query.
inline Prompt RandomPrompt(const model::Model& m, uint32_t seed, int chunks = 3,
                           int chunk_tokens = 24, int missed = -1, bool prefix = true) {
  std::mt19937 rng(seed);
  Prompt p;
  const int vocab = m.config().vocab_size;
  if (prefix) p.Add(m, SegmentKind::kPrefix, RandomTokens(&rng, 8, vocab), true);
  for (int c = 0; c < chunks; ++c) {
    p.Add(m, SegmentKind::kChunk, RandomTokens(&rng, chunk_tokens, vocab), c != missed);
  }
  p.Add(m, SegmentKind::kQuery, RandomTokens(&rng, 6, vocab), false);
  return p;
}

// MaxAbsDiff over n floats.
inline double MaxAbsDiff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

// NaiveRerotate: rotates one interleaved-RoPE key vector by delta positions,
// in double precision (the reference for the kernel used by Blend).
inline void NaiveRerotate(float* x, int head_dim, int64_t delta, double theta) {
  for (int j = 0; j < head_dim / 2; ++j) {
    const double freq = std::pow(theta, -2.0 * j / head_dim);
    const double a = static_cast<double>(delta) * freq;
    const double c = std::cos(a), s = std::sin(a);
    const double x0 = x[2 * j], x1 = x[2 * j + 1];
    x[2 * j] = static_cast<float>(x0 * c - x1 * s);
    x[2 * j + 1] = static_cast<float>(x0 * s + x1 * c);
  }
}

}  // namespace ragkv::blend::testing

#endif  // RAGKV_TESTS_BLEND_BLEND_TEST_UTIL_H_
