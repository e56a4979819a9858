// The exact-prefix reorder pass on the HTTP path (server/reorder.h,
// docs/services.md "Exact-prefix reorder"): a chat's resolved documents
// (given, by id, retrieved) are put in the order whose templated prompt
// begins with the longest chain of prefix blocks the sidecar's store holds,
// before the prompt is built, so llama.cpp, the sidecar and the response's
// prompt_token_ids all see the reordered prompt.
#include <utility>

#include "base/log.h"
#include "server/internal/http_impl.h"
#include "server/reorder.h"

namespace ragkv::server {

void HttpServer::Impl::Reorder(GenerationRequest* r, const PromptBuilder& prompts,
                               Timing* timing) {
  // Local mode prefills everything in llama.cpp: no stored prefix is read.
  if (!r->ragkv.reorder.value_or(o.reorder_documents) || r->documents.size() < 2 ||
      !o.prefix_cache || r->ragkv.mode == "local") {
    return;
  }
  DocumentBackend* backend = documents.load();
  if (backend == nullptr) {
    metrics.Reordered("error", 0);
    return;
  }
  ReorderOptions ro;
  ro.key_fp = backend->KeyNamespace(r->cache_salt);
  ro.block_tokens = o.prefix_block_tokens;
  ro.max_tokens = o.prefix_max_tokens;
  const std::vector<Document>& docs = r->documents;
  const TokensOf tokens_of = [&](const std::vector<int>& order) {
    std::vector<Document> d;
    d.reserve(order.size());
    for (int i : order) d.push_back(docs[static_cast<size_t>(i)]);
    return prompts.ChatTokens(r->messages, d);
  };
  const StoredKeys stored = [backend](const std::vector<kvstore::ChunkKey>& keys) {
    return backend->Stored(keys);
  };
  absl::StatusOr<Reordered> got = ReorderForPrefix(docs.size(), tokens_of, stored, ro);
  if (!got.ok()) {
    RAGKV_LOG(WARNING) << "reorder pass: the retriever's order is kept: " << got.status();
    metrics.Reordered("error", 0);
    return;
  }
  std::vector<Document> reordered;
  reordered.reserve(docs.size());
  for (int i : got->order) reordered.push_back(std::move(r->documents[static_cast<size_t>(i)]));
  r->documents = std::move(reordered);
  timing->reorder_ran = true;
  timing->reorder_prefix_before = static_cast<int>(got->prefix_before);
  timing->reorder_prefix_after = static_cast<int>(got->prefix_after);
  timing->document_order = got->order;
  const int64_t gained = got->prefix_after - got->prefix_before;
  metrics.Reordered(gained > 0 ? "gained" : "unchanged", gained);
}

}  // namespace ragkv::server
