// engine_wire_test.cc: the numerics of the reference engine's Blend path
// (services/engine.cc), in process: the fused cache of a CacheBlend goes
// through the same export (BlendService: KVCache::ExportLayer in the wire
// dtype) and import (engine CacheSink: KVCache::ImportLayer) as over gRPC,
// then the first logits come from
//   old  — query rows dropped, the whole query prefilled on the context;
//   new  — the sidecar's query rows kept, DecodeStep of the last token only;
// with the fused KV on the wire as f32, f16 or bf16.
//
// Stated tolerances (max |logit difference| over the vocabulary, divided by
// the f32 logits' max |logit|):
//   new vs old, f32 wire: <= 1e-4 (same math, other float summation order);
//   f16 wire vs f32 wire: <= 5e-3 (f16 keeps 11 significant bits: relative
//     rounding 2^-12 per element);
//   bf16 wire vs f32 wire: <= 5e-2 (8 significant bits).
// Greedy first token: new == old exactly on every prompt here, f16 == f32
// too; the measured differences are printed (docs/services.md quotes them).
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "blend/blender.h"
#include "blend/kv_source.h"
#include "gtest/gtest.h"
#include "kernels/tensor.h"
#include "model/kv_cache.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/sampler.h"
#include "tests/support/require.h"
#include "tests/support/source_dir.h"

namespace ragkv {
namespace {

struct Logits {
  std::vector<float> old_f32, new_f32, new_f16, new_bf16;
};

// FirstLogits: blends `chunks` + `query` (cached chunks, CacheBlend r), then
// computes the first logits on every path.
Logits FirstLogits(const model::Model& m, const std::vector<std::vector<int32_t>>& chunks,
                   const std::vector<int32_t>& query, double ratio) {
  Logits out;
  std::vector<blend::ChunkKV> kvs;
  for (const auto& c : chunks) {
    auto kv = blend::PrecomputeChunk(m, c, kernels::DType::kF16);
    EXPECT_TRUE(kv.ok()) << kv.status();
    if (!kv.ok()) return out;
    kvs.push_back(std::move(*kv));
  }
  std::vector<std::unique_ptr<blend::InMemoryKvSource>> srcs;
  std::vector<blend::BlendSegment> segs;
  for (size_t i = 0; i < chunks.size(); ++i) {
    srcs.push_back(std::make_unique<blend::InMemoryKvSource>(&kvs[i]));
    segs.push_back({blend::SegmentKind::kChunk, absl::MakeConstSpan(chunks[i]), srcs[i].get()});
  }
  segs.push_back({blend::SegmentKind::kQuery, absl::MakeConstSpan(query), nullptr});
  auto blender = blend::Blender::Create({&m});
  EXPECT_TRUE(blender.ok());
  blend::BlendOptions bo;
  bo.ratio = ratio;
  bo.logits = blend::QueryLogits::kNone;  // as BlendService
  auto r = (*blender)->Blend(segs, bo);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return out;
  const auto& c = m.config();
  const int64_t T = r->total_tokens;
  const int64_t qb = T - static_cast<int64_t>(query.size());
  const int64_t extra = 4;
  auto run = [&](kernels::DType wire, bool reuse, std::vector<float>* logits) {
    const size_t n = static_cast<size_t>(c.n_kv_heads) * T * c.head_dim;
    std::vector<char> k(n * kernels::DTypeSize(wire)), v(k.size());
    auto cache = model::KVCache::Create(c, T + extra);
    ASSERT_TRUE(cache.ok());
    for (int l = 0; l < c.n_layers; ++l) {
      ASSERT_TRUE(r->cache.ExportLayer(l, 0, T, wire, k.data(), v.data()).ok());
      ASSERT_TRUE(cache->ImportLayer(l, 0, T, wire, k.data(), v.data()).ok());
    }
    model::Workspace ws;
    logits->assign(c.vocab_size, 0.f);
    if (reuse) {
      ASSERT_TRUE(cache->set_num_tokens(T - 1).ok());
      ASSERT_TRUE(m.DecodeStep(query.back(), &*cache, &ws, logits->data()).ok());
    } else {
      ASSERT_TRUE(cache->set_num_tokens(qb).ok());
      ASSERT_TRUE(
          m.Prefill(query, &*cache, &ws, model::LogitsMode::kLast, logits->data()).ok());
    }
  };
  run(kernels::DType::kF32, false, &out.old_f32);
  run(kernels::DType::kF32, true, &out.new_f32);
  run(kernels::DType::kF16, true, &out.new_f16);
  run(kernels::DType::kBF16, true, &out.new_bf16);
  return out;
}

double MaxAbs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}
double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

void CheckModel(const model::Model& m, const std::string& name) {
  const int vocab = m.config().vocab_size;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(3, vocab - 1);
  double worst_path = 0, worst_f16 = 0, worst_bf16 = 0;
  for (int p = 0; p < 4; ++p) {
    std::vector<std::vector<int32_t>> chunks(3);
    for (auto& c : chunks) {
      c.resize(48);
      for (auto& t : c) t = tok(rng);
    }
    std::vector<int32_t> query(12);
    for (auto& t : query) t = tok(rng);
    for (double ratio : {0.0, 0.15}) {
      Logits l = FirstLogits(m, chunks, query, ratio);
      ASSERT_EQ(l.new_bf16.size(), static_cast<size_t>(vocab));
      const double scale = std::max(1e-6, MaxAbs(l.new_f32));
      const double d_path = MaxDiff(l.old_f32, l.new_f32) / scale;
      const double d_f16 = MaxDiff(l.new_f16, l.new_f32) / scale;
      const double d_bf16 = MaxDiff(l.new_bf16, l.new_f32) / scale;
      worst_path = std::max(worst_path, d_path);
      worst_f16 = std::max(worst_f16, d_f16);
      worst_bf16 = std::max(worst_bf16, d_bf16);
      EXPECT_LE(d_path, 1e-4) << name << " prompt " << p << " r " << ratio;
      EXPECT_LE(d_f16, 5e-3) << name << " prompt " << p << " r " << ratio;
      EXPECT_LE(d_bf16, 5e-2) << name << " prompt " << p << " r " << ratio;
      EXPECT_EQ(model::Argmax(l.new_f32.data(), vocab), model::Argmax(l.old_f32.data(), vocab))
          << name << " prompt " << p;
      // The f16 wire picks the f32 choice whenever the f32 logits separate it
      // from the runner-up by more than the f16 error measured here; a
      // closer near-tie (random tokens make some) may go either way.
      const int a16 = model::Argmax(l.new_f16.data(), vocab);
      const int a32 = model::Argmax(l.new_f32.data(), vocab);
      std::vector<float> rest = l.new_f32;
      rest[a32] = -std::numeric_limits<float>::infinity();
      const double gap = l.new_f32[a32] - rest[model::Argmax(rest.data(), vocab)];
      if (gap > 2 * d_f16 * scale) {
        EXPECT_EQ(a16, a32) << name << " prompt " << p << " gap " << gap;
      }
      // The f16 difference is real (the test can fail): f16 != f32 bytes.
      EXPECT_GT(d_f16, 0) << name;
    }
  }
  std::printf(
      "[engine wire] %s: max |dlogit| / max |logit|: new-vs-old path (f32) %.2e, "
      "f16 wire %.2e, bf16 wire %.2e\n",
      name.c_str(), worst_path, worst_f16, worst_bf16);
}

TEST(EngineWireTest, SyntheticModel) {
  auto m = model::LoadModel(
      "synthetic:layers=4,dim=256,heads=4,kv_heads=2,ffn=512,vocab=4096,ctx=512",
      model::LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.status();
  CheckModel(**m, "synthetic 4x256");
}

TEST(EngineWireTest, Stories260K) {
  const char* env = std::getenv("RAGKV_TEST_MODELS");
  const std::string path = (env != nullptr && *env ? std::string(env)
                                                   : (RAGKV_SOURCE_DIR + "/../shared/models")) +
                           "/stories260K.bin";
  RAGKV_REQUIRE_OR_SKIP(std::filesystem::exists(path)) << "no " << path;
  model::LoadOptions lo;
  lo.max_seq_len = 512;
  auto m = model::LoadModel(path, lo);
  ASSERT_TRUE(m.ok()) << m.status();
  CheckModel(**m, "stories260K");
}

}  // namespace
}  // namespace ragkv
