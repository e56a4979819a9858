#include "services/backends.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "kvstore/ram_tier.h"
#include "kvstore/redis/redis_tier.h"
#include "kvstore/ssd/ssd_tier.h"
#include "model/loader.h"
#include "services/tokenizer_adapter.h"

namespace ragkv::services {

Backends::~Backends() {
  controller.reset();
  blender.reset();
  if (retriever) {
    absl::Status s = retriever->Save();
    if (!s.ok()) {
      RAGKV_LOG(ERROR) << "saving the retrieval index failed: " << s;
    }
    retriever.reset();
  }
  if (store) {
    absl::Status s = store->Flush();
    if (!s.ok()) {
      RAGKV_LOG(ERROR) << "store flush failed: " << s;
    }
    store.reset();
  }
}

namespace {

// OpenRetriever: the retriever under data_dir/retrieval with the served
// settings; a setting the directory was not built with is named with the
// way out.
absl::Status OpenRetriever(const BackendOptions& o, Backends* b) {
  std::error_code ec;
  std::filesystem::create_directories(o.data_dir + "/retrieval", ec);
  if (ec) return absl::InternalError("cannot create " + o.data_dir + "/retrieval: " + ec.message());
  const RetrievalSettings& rs = o.retrieval;
  retrieval::RetrieverOptions ro;
  ro.dir = o.data_dir + "/retrieval";
  if (b->tokenizer) {
    ro.tokenizer = std::make_shared<ModelTokenizerAdapter>(b->tokenizer.get());
  }
  ro.chunker.target_tokens = o.chunk_tokens;
  ro.sync_writes = o.sync_writes;
  ro.index.factory = rs.index_factory;
  if (rs.metric != "ip" && rs.metric != "l2") {
    return absl::InvalidArgumentError(absl::StrCat("unknown index metric '", rs.metric, "' (known: ip, l2)"));
  }
  ro.index.metric = rs.metric == "l2" ? retrieval::Metric::kL2 : retrieval::Metric::kInnerProduct;
  ASSIGN_OR_RETURN(ro.embedder, MakeEmbedder(rs.embedder, b->model.get(), b->tokenizer.get()));
  ASSIGN_OR_RETURN(b->search_mode, ParseSearchMode(rs.search_mode));
  if (!ro.embedder->embeds_text()) {
    if (b->search_mode == retrieval::SearchMode::kDense) {
      return absl::InvalidArgumentError(absl::StrCat(
          "search mode 'dense' needs an embedder that embeds text; '", rs.embedder,
          "' takes the caller's vectors (text queries: hybrid, bm25 or lexical)"));
    }
    // Text queries cannot be embedded here: hybrid means both BM25 lists.
    if (b->search_mode == retrieval::SearchMode::kHybrid) b->search_mode = retrieval::SearchMode::kLexical;
  }
  ro.on_setting_change = rs.rebuild ? retrieval::RetrieverOptions::SettingChange::kRebuild
                                    : retrieval::RetrieverOptions::SettingChange::kUpgrade;
  absl::StatusOr<std::unique_ptr<retrieval::Retriever>> r = retrieval::Retriever::Create(ro);
  // A settings refusal (retriever.h: kSettingsRefused) gets the way out.
  const auto refused = r.status().GetPayload(retrieval::kSettingsRefused);
  if (refused && *refused == "reembed") {
    return absl::FailedPreconditionError(absl::StrCat(
        r.status().message(), rs.rebuild ? "" : " (--retrieval-rebuild re-embeds everything with this "
                                                "--embedder)"));
  }
  if (refused) {
    return absl::FailedPreconditionError(absl::StrCat(
        r.status().message(), "; serve the setting it was built with",
        rs.rebuild ? "" : ", or pass --retrieval-rebuild to re-embed / re-index it from its catalogue",
        " (tokenizer and chunker changes, and caller-supplied vectors, cannot be re-derived: "
        "use a new --data-dir and re-ingest)"));
  }
  if (!r.ok()) return r.status();
  b->retriever = std::move(*r);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveKvTiers(const BackendOptions& o) {
  std::vector<std::string> names = o.kv_tiers;
  if (names.empty()) {
    names = {"ram", "ssd"};
    if (!o.redis_url.empty()) names.push_back("redis");
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    if (n != "ram" && n != "ssd" && n != "redis") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown KV tier '", n, "' (known: ram, ssd, redis)"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (names[j] == n) return absl::InvalidArgumentError(absl::StrCat("KV tier '", n, "' listed twice"));
    }
  }
  const bool has_redis = std::find(names.begin(), names.end(), "redis") != names.end();
  if (has_redis && o.redis_url.empty()) {
    return absl::InvalidArgumentError("KV tier 'redis' needs a Redis address (--redis)");
  }
  if (!has_redis && !o.redis_url.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a Redis address is set but the KV tiers (", absl::StrJoin(names, ","),
        ") do not list 'redis'"));
  }
  return names;
}

absl::StatusOr<std::unique_ptr<Backends>> BuildBackends(const BackendOptions& o) {
  auto b = std::make_unique<Backends>();
  if (!o.model_path.empty()) {
    model::LoadOptions lo;
    lo.max_seq_len = o.max_seq_len;
    ASSIGN_OR_RETURN(b->model, model::LoadModel(o.model_path, lo));
    std::string tok_path = o.tokenizer_path;
    if (tok_path.empty()) {
      ASSIGN_OR_RETURN(tok_path, model::DefaultTokenizerPath(o.model_path));
    }
    ASSIGN_OR_RETURN(b->tokenizer, model::LoadTokenizer(tok_path));
    ASSIGN_OR_RETURN(b->blender, blend::Blender::Create({b->model.get()}));
    blend::ControllerOptions co;
    co.model = b->model.get();
    co.r_min = o.controller_r_min;
    co.r_max = o.controller_r_max;
    co.blend.logits = blend::QueryLogits::kNone;  // BlendService streams KV, no logits
    // A small start-up calibration (one layer, 16 rows against 256 keys,
    // twice: ~0.3 s on an 8B model's f32 layer); every AUTO blend then
    // refines the rate (LoadingController::ObserveBlend).
    co.calibration_rows = 16;
    co.calibration_kv_tokens = 256;
    co.calibration_runs = 2;
    ASSIGN_OR_RETURN(b->controller, blend::LoadingController::Create(co));
    RAGKV_LOG(INFO) << "model " << o.model_path << " fingerprint " << b->model->fingerprint_hex();
  }
  std::error_code ec;
  if (o.want_store) {
    std::filesystem::create_directories(o.data_dir + "/kv", ec);
    if (ec) return absl::InternalError("cannot create " + o.data_dir + "/kv: " + ec.message());
    ASSIGN_OR_RETURN(const std::vector<std::string> names, ResolveKvTiers(o));
    std::vector<std::shared_ptr<kvstore::Tier>> tiers;
    for (const std::string& name : names) {
      if (name == "ram") {
        kvstore::RamTierOptions ram;
        ram.capacity_bytes = o.ram_budget_bytes;
        ASSIGN_OR_RETURN(auto ram_tier, kvstore::CreateRamTier(ram));
        tiers.push_back(std::move(ram_tier));
      } else if (name == "ssd") {
        kvstore::SsdTierOptions ssd;
        ssd.path = o.data_dir + "/kv";
        ssd.capacity_bytes = o.ssd_budget_bytes;
        ssd.sync_writes = o.sync_writes;
        ASSIGN_OR_RETURN(auto ssd_tier, kvstore::CreateSsdTier(ssd));
        tiers.push_back(std::move(ssd_tier));
      } else {
        kvstore::RedisTierOptions ro = o.redis;
        RETURN_IF_ERROR(kvstore::ParseRedisAddress(o.redis_url, &ro));
        ASSIGN_OR_RETURN(auto redis_tier, kvstore::CreateRedisTier(ro));
        tiers.push_back(std::move(redis_tier));
      }
    }
    if (o.wrap_tier) {
      for (auto& t : tiers) t = o.wrap_tier(std::move(t));
    }
    kvstore::TieredStoreOptions so;
    // A Redis outage degrades the shared tier, it does not fail writes that
    // RAM and SSD already hold (docs/reliability.md, fault injection). When
    // Redis is the only tier, its writes must succeed.
    so.best_effort_tiers = names.back() == "redis" && names.size() > 1 ? 1 : 0;
    ASSIGN_OR_RETURN(b->store, kvstore::TieredStore::Create(so, std::move(tiers)));
  }
  if (o.want_retrieval) RETURN_IF_ERROR(OpenRetriever(o, b.get()));
  return b;
}

}  // namespace ragkv::services
