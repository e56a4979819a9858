#include "services/backends.h"

#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "kvstore/ram_tier.h"
#include "kvstore/redis_tier.h"
#include "kvstore/ssd_tier.h"
#include "model/loader.h"
#include "services/internal/tokenizer_adapter.h"

namespace ragkv::services {

Backends::~Backends() {
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
    RAGKV_LOG(INFO) << "model " << o.model_path << " fingerprint " << b->model->fingerprint_hex();
  }
  std::error_code ec;
  if (o.want_store) {
    std::filesystem::create_directories(o.data_dir + "/kv", ec);
    if (ec) return absl::InternalError("cannot create " + o.data_dir + "/kv: " + ec.message());
    std::vector<std::shared_ptr<kvstore::Tier>> tiers;
    kvstore::RamTierOptions ram;
    ram.capacity_bytes = o.ram_budget_bytes;
    ASSIGN_OR_RETURN(auto ram_tier, kvstore::CreateRamTier(ram));
    tiers.push_back(std::move(ram_tier));
    kvstore::SsdTierOptions ssd;
    ssd.path = o.data_dir + "/kv";
    ssd.capacity_bytes = o.ssd_budget_bytes;
    ssd.sync_writes = o.sync_writes;
    ASSIGN_OR_RETURN(auto ssd_tier, kvstore::CreateSsdTier(ssd));
    tiers.push_back(std::move(ssd_tier));
    if (!o.redis_url.empty()) {
      kvstore::RedisTierOptions ro;
      std::string ep = o.redis_url;
      if (absl::StartsWith(ep, "redis://")) ep = ep.substr(8);
      ro.endpoints.push_back(ep);
      ASSIGN_OR_RETURN(auto redis_tier, kvstore::CreateRedisTier(ro));
      tiers.push_back(std::move(redis_tier));
    }
    kvstore::TieredStoreOptions so;
    // A Redis outage degrades the shared tier, it does not fail writes that
    // RAM and SSD already hold (docs/reliability.md, fault injection).
    so.best_effort_tiers = o.redis_url.empty() ? 0 : 1;
    ASSIGN_OR_RETURN(b->store, kvstore::TieredStore::Create(so, std::move(tiers)));
  }
  if (o.want_retrieval) {
    std::filesystem::create_directories(o.data_dir + "/retrieval", ec);
    if (ec) return absl::InternalError("cannot create " + o.data_dir + "/retrieval: " + ec.message());
    retrieval::RetrieverOptions ro;
    ro.dir = o.data_dir + "/retrieval";
    if (b->tokenizer) {
      ro.tokenizer = std::make_shared<internal::ModelTokenizerAdapter>(b->tokenizer.get());
    }
    ro.chunker.target_tokens = o.chunk_tokens;
    ro.sync_writes = o.sync_writes;
    ASSIGN_OR_RETURN(b->retriever, retrieval::Retriever::Create(ro));
  }
  return b;
}

}  // namespace ragkv::services
