#include "bench/blend/bench_blend.h"

#include <algorithm>
#include <memory>
#include <random>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "blend/cost_model.h"
#include "blend/kv_source.h"
#include "blend/loading_controller.h"
#include "blend/store_source.h"
#include "kvstore/ram_tier.h"
#include "kvstore/tiered_store.h"
#include "model/loader.h"

namespace ragkv::blend {
namespace {

// FlopsOf: FLOPs of the rows a blend actually recomputed (+ the probes).
double FlopsOf(const CostModel& cm, const BlendResult& r, int64_t query) {
  double f = 0;
  for (size_t l = 0; l < r.recomputed.size(); ++l) {
    double visible = 0;
    for (int32_t p : r.recomputed[l]) visible += p + 1.0;
    f += cm.SelectiveLayer(static_cast<int64_t>(r.recomputed[l].size()), r.total_tokens, visible)
             .flops;
  }
  const ModelShape& s = cm.shape();
  for (const CheckLayer& c : r.schedule) {
    if (c.layer < 1) continue;
    const double probe_rows =
        static_cast<double>(r.recomputed[c.layer - 1].size()) - static_cast<double>(query);
    f += 2.0 * probe_rows * s.dim * 2.0 * s.kv_heads * s.head_dim;
  }
  return f;
}

std::string Stages(const StageTimings& t) {
  return absl::StrFormat(
      "load %.1f ms, rerotate %.1f ms, embed %.1f ms, layer0 %.1f ms, selection %.1f ms, "
      "recompute %.1f ms, merge %.1f ms, logits %.1f ms, load-wait %.1f ms",
      t.load_s * 1e3, t.rerotate_s * 1e3, t.embed_s * 1e3, t.layer0_s * 1e3,
      t.selection_s * 1e3, t.recompute_s * 1e3, t.merge_s * 1e3, t.logits_s * 1e3,
      t.load_wait_s * 1e3);
}

}  // namespace

absl::StatusOr<std::vector<BlendBenchRow>> RunBlendBench(const BlendBenchOptions& o,
                                                         std::ostream& out) {
  if (o.chunks <= 0 || o.chunk_tokens <= 0 || o.query_tokens <= 0 || o.repeats <= 0) {
    return absl::InvalidArgumentError("blend bench: counts must be positive");
  }
  model::LoadOptions lo;
  lo.kv_dtype = o.kv_dtype;
  ASSIGN_OR_RETURN(auto model, model::LoadModel(o.model_spec, lo));
  ASSIGN_OR_RETURN(auto blender, Blender::Create({model.get()}));
  const int vocab = model->config().vocab_size;
  std::mt19937 rng(static_cast<uint32_t>(o.seed));
  std::uniform_int_distribution<int> tok(3, vocab - 1);
  std::vector<std::vector<int32_t>> chunks(o.chunks);
  std::vector<ChunkKV> kvs;
  const auto tp = Clock::now();
  for (auto& c : chunks) {
    c.resize(o.chunk_tokens);
    for (auto& t : c) t = tok(rng);
    ASSIGN_OR_RETURN(ChunkKV kv, PrecomputeChunk(*model, c));
    kvs.push_back(std::move(kv));
  }
  const double precompute_s =
      SecondsSince(tp);
  std::vector<int32_t> query(o.query_tokens);
  for (auto& t : query) t = tok(rng);

  // The store: one RAM tier, chunks encoded raw in the model's KV dtype.
  std::unique_ptr<kvstore::TieredStore> store;
  std::vector<kvstore::ChunkKey> keys;
  if (o.from_store) {
    ASSIGN_OR_RETURN(auto tier, kvstore::CreateRamTier({}));
    std::vector<std::shared_ptr<kvstore::Tier>> tiers;
    tiers.push_back(std::move(tier));
    ASSIGN_OR_RETURN(store, kvstore::TieredStore::Create({}, tiers));
    for (const ChunkKV& kv : kvs) {
      ASSIGN_OR_RETURN(StoreChunk sc, EncodeForStore(kv));
      RETURN_IF_ERROR(store->Put(sc.key, sc.chunk));
      keys.push_back(sc.key);
    }
  }

  struct Config {
    std::string name;
    BlendOptions options;
  };
  std::vector<Config> configs;
  {
    BlendOptions full;
    full.strategy = Strategy::kFullPrefill;
    configs.push_back({"full-prefill", full});
    BlendOptions reuse;
    reuse.strategy = Strategy::kFullReuse;
    configs.push_back({"full-reuse", reuse});
  }
  for (double r : o.ratios) {
    for (Filtering f : {Filtering::kGradual, Filtering::kSingleCheck}) {
      BlendOptions b;
      b.ratio = r;
      b.filtering = f;
      configs.push_back({absl::StrFormat("blend-%s r=%.2f",
                                         f == Filtering::kGradual ? "gradual" : "single", r),
                         b});
    }
  }
  const CostModel cm(ShapeOf(*model), HardwareSpec{});
  out << absl::StrFormat(
      "# blend speed: %s, %d chunks x %d tokens + %d query, KV %s from %s, overlap=%d, %d "
      "repeats (median); precompute %.2f s\n",
      o.model_spec, o.chunks, o.chunk_tokens, o.query_tokens, kernels::DTypeName(o.kv_dtype),
      o.from_store ? "RAM tier (TieredStore stream)" : "memory", o.overlap_loading ? 1 : 0,
      o.repeats, precompute_s);
  std::vector<BlendBenchRow> rows;
  double full_s = 0, full_flops = 0;
  for (Config& c : configs) {
    c.options.overlap_loading = o.overlap_loading;
    std::vector<std::pair<double, StageTimings>> runs;
    double flops = 0;
    for (int rep = 0; rep < o.repeats; ++rep) {
      // Fresh sources per run (a source streams once).
      std::vector<std::unique_ptr<KvSource>> sources;
      for (int i = 0; i < o.chunks; ++i) {
        if (o.from_store) {
          ASSIGN_OR_RETURN(auto s, StoreKvSource::Open(store.get(), keys[i], model->fingerprint()));
          if (s == nullptr) return absl::InternalError("blend bench: chunk missing from the store");
          sources.push_back(std::move(s));
        } else {
          sources.push_back(std::make_unique<InMemoryKvSource>(&kvs[i]));
        }
      }
      std::vector<BlendSegment> segs;
      for (int i = 0; i < o.chunks; ++i) {
        segs.push_back({SegmentKind::kChunk, chunks[i], sources[i].get()});
      }
      segs.push_back({SegmentKind::kQuery, query, nullptr});
      const auto t0 = Clock::now();
      ASSIGN_OR_RETURN(BlendResult r, blender->Blend(segs, c.options));
      const double s = SecondsSince(t0);
      runs.push_back({s, r.timings});
      flops = FlopsOf(cm, r, o.query_tokens);
    }
    std::sort(runs.begin(), runs.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    BlendBenchRow row;
    row.name = c.name;
    row.seconds = runs[runs.size() / 2].first;
    row.stages = runs[runs.size() / 2].second;
    if (c.options.strategy == Strategy::kFullPrefill) {
      full_s = row.seconds;
      full_flops = flops;
    }
    row.vs_full = full_s > 0 ? row.seconds / full_s : 0;
    row.bound = full_flops > 0 ? flops / full_flops : 0;
    out << absl::StrFormat("%s: %.3f s  vs_full=%.3f  flop_bound=%.3f\n    %s\n", row.name,
                           row.seconds, row.vs_full, row.bound, Stages(row.stages));
    rows.push_back(row);
  }
  return rows;
}

}  // namespace ragkv::blend
