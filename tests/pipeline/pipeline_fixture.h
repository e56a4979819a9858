// pipeline_fixture.h: the pipeline tests' small synthetic model (f32 KV),
// a real RAM-tier TieredStore, six random documents and a query, and a
// sink that captures every delivered layer in f32.
#ifndef RAGKV_TESTS_PIPELINE_PIPELINE_FIXTURE_H_
#define RAGKV_TESTS_PIPELINE_PIPELINE_FIXTURE_H_

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "blend/blender.h"
#include "blend/quality_gate.h"
#include "blend/store_source.h"
#include "kvstore/ram_tier.h"
#include "kvstore/tiered_store.h"
#include "model/kv_cache_pool.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "pipeline/pipeline.h"

namespace ragkv::pipeline {

constexpr int kVocab = 300;

inline std::unique_ptr<model::Model> SmallModel() {
  auto spec = model::ParseSyntheticSpec(
      "layers=4,dim=64,heads=4,kv_heads=2,ffn=128,vocab=300,ctx=512,seed=11");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->config.kv_dtype = kernels::DType::kF32;
  auto m = model::MakeSyntheticModel(*spec);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(m).value();
}

inline std::vector<int32_t> RandomTokens(std::mt19937* rng, int n) {
  std::uniform_int_distribution<int> d(3, kVocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(*rng);
  return t;
}

// CaptureSink: every layer's K and V in f32, as delivered.
class CaptureSink : public LayerSink {
 public:
  absl::Status OnPrompt(const PromptInfo& p) override {
    prompt = p;
    return absl::OkStatus();
  }
  absl::Status OnLayer(int l, const model::KVCache& cache,
                       absl::Span<const int32_t> rows) override {
    const int64_t T = cache.num_tokens();
    const size_t n = static_cast<size_t>(cache.kv_heads()) * T * cache.head_dim();
    k.emplace_back(n);
    v.emplace_back(n);
    recomputed.emplace_back(rows.begin(), rows.end());
    return cache.ExportLayer(l, 0, T, kernels::DType::kF32, k.back().data(), v.back().data());
  }
  absl::Status OnRestart(const FailedLoad&) override {
    k.clear();
    v.clear();
    recomputed.clear();
    ++restarts;
    return absl::OkStatus();
  }
  PromptInfo prompt;
  std::vector<std::vector<float>> k, v;
  std::vector<std::vector<int32_t>> recomputed;
  int restarts = 0;
};

inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = SmallModel();
    auto b = blend::Blender::Create({model_.get()});
    ASSERT_TRUE(b.ok()) << b.status();
    blender_ = std::move(b).value();
    auto tier = kvstore::CreateRamTier({});
    ASSERT_TRUE(tier.ok()) << tier.status();
    std::vector<std::shared_ptr<kvstore::Tier>> tiers;
    tiers.push_back(std::move(tier).value());
    auto store = kvstore::TieredStore::Create({}, tiers);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(store).value();
    std::mt19937 rng(5);
    for (int i = 0; i < 6; ++i) docs_.push_back(RandomTokens(&rng, 20 + 4 * i));
    query_ = RandomTokens(&rng, 7);
  }

  std::unique_ptr<Pipeline> Make(const blend::GateDecision* gate = nullptr) {
    Pipeline::Options o;
    o.model = model_.get();
    o.blender = blender_.get();
    o.store = store_.get();
    o.quality_gate = gate;
    o.cache_pool = &pool_;
    auto p = Pipeline::Create(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return std::move(p).value();
  }

  void StoreDocs(int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(blend::PrecomputeAndStore(*model_, store_.get(), docs_[i]).ok());
    }
  }

  Prompt DocsPrompt(std::vector<int> which) const {
    Prompt p;
    for (int i : which) {
      Segment& s = p.segments.emplace_back();
      s.tokens = docs_[i];
      s.document = true;
    }
    p.segments.emplace_back().tokens = query_;
    return p;
  }

  std::vector<int32_t> AllTokens(std::vector<int> which) const {
    std::vector<int32_t> t;
    for (int i : which) t.insert(t.end(), docs_[i].begin(), docs_[i].end());
    t.insert(t.end(), query_.begin(), query_.end());
    return t;
  }

  std::unique_ptr<model::Model> model_;
  std::unique_ptr<blend::Blender> blender_;
  std::unique_ptr<kvstore::TieredStore> store_;
  model::KVCachePool pool_{uint64_t{64} << 20};
  std::vector<std::vector<int32_t>> docs_;
  std::vector<int32_t> query_;
};

}  // namespace ragkv::pipeline

#endif  // RAGKV_TESTS_PIPELINE_PIPELINE_FIXTURE_H_
