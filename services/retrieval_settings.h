// retrieval_settings.h: the served retrieval configuration: FAISS factory
// string, metric, embedder, default search mode, rebuild-or-refuse
// (docs/services.md "Served retrieval").
#ifndef RAGKV_SERVICES_RETRIEVAL_SETTINGS_H_
#define RAGKV_SERVICES_RETRIEVAL_SETTINGS_H_

#include <memory>
#include <string>
#include <vector>
#include <string_view>

#include "absl/status/statusor.h"
#include "retrieval/embedder.h"
#include "retrieval/retriever.h"

namespace ragkv::model {
class Model;
class Tokenizer;
}  // namespace ragkv::model

namespace ragkv::services {

// RetrievalSettings: how the served corpus is indexed and searched
// (docs/services.md "Served retrieval"). Stored fingerprints make a data
// directory refuse another setting (both named) unless `rebuild` is set.
struct RetrievalSettings {
  // index_factory: FAISS index_factory string ("Flat", "HNSW32",
  // "IVF256,PQ16", ...; docs/retrieval.md). metric: "ip" or "l2".
  std::string index_factory = "Flat";
  std::string metric = "ip";
  // embedder: "hashed" (hashed TF-IDF, 512 dims) or "hashed:DIM"; "model"
  // (mean-pooled hidden states of the served model); "vectors:DIM[:NAME]"
  // (the caller embeds: IngestDocuments carries one vector per chunk of
  // ChunkDocuments, Search a query vector; text queries are lexical).
  std::string embedder = "hashed";
  // search_mode: default mode of text queries: "hybrid" (dense + BM25 +
  // BM25 with feedback, by RRF), "dense", "bm25" or "lexical" (both BM25
  // lists). A request's own mode wins.
  std::string search_mode = "hybrid";
  // rebuild: a data directory built with another embedder or index is
  // re-embedded / re-indexed from its catalogue (true) or refused (false).
  bool rebuild = false;
};

// SearchModeNames: the names ParseSearchMode takes, in the order listed.
const std::vector<std::string>& SearchModeNames();

// ParseSearchMode: "hybrid" | "dense" | "bm25" | "lexical" (InvalidArgument
// otherwise).
absl::StatusOr<retrieval::SearchMode> ParseSearchMode(const std::string& name);

// MakeEmbedder: the embedder RetrievalSettings::embedder names; `model` and
// `tokenizer` (null without a served model) must outlive it.
// InvalidArgument naming the spec when it is unknown or malformed.
absl::StatusOr<std::shared_ptr<const retrieval::Embedder>> MakeEmbedder(
    const std::string& spec, const model::Model* model, const model::Tokenizer* tokenizer);

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_RETRIEVAL_SETTINGS_H_
