#include "retrieval/retriever.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "retrieval/internal/check_finite.h"
#include "retrieval/internal/meta_keys.h"
#include "retrieval/internal/shingle_cache.h"
#include "retrieval/internal/text.h"

namespace ragkv::retrieval {
namespace {

// Shingle length of the near-duplicate test (RetrieverOptions::near_duplicate_containment).
constexpr int kNearDuplicateShingleWords = 5;
using internal::meta::kMetaEmbedder;
using internal::meta::kMetaGeneration;
using internal::meta::kMetaIndexGeneration;
using internal::meta::kMetaNextChunkId;
using internal::meta::kMetaReembedTarget;

using internal::CheckFinite;

}  // namespace

std::string ChunkIndexText(std::string_view title, std::string_view chunk_text) {
  std::string out(title);
  if (!out.empty()) out += '\n';
  out += chunk_text;
  return out;
}

Retriever::Retriever(RetrieverOptions options)
    : options_(std::move(options)), bm25_(options_.bm25) {
  if (options_.near_duplicate_containment > 0) {  // capacity 0: shingles, keeps none
    shingles_ = std::make_unique<internal::ShingleCache>(options_.shingle_cache_bytes,
                                                         kNearDuplicateShingleWords);
  }
}

Retriever::~Retriever() {
  bool dirty;
  {
    absl::ReaderMutexLock lock(&mu_);
    dirty = index_ != nullptr && generation_ != saved_generation_;
  }
  if (dirty) {
    absl::Status s = Save();
    if (!s.ok()) {
      RAGKV_LOG(WARNING) << "Retriever: saving index on close failed: " << s;
    }
  }
}

std::string Retriever::IndexPath() const { return options_.dir + "/index.rkvidx"; }

absl::StatusOr<std::unique_ptr<Retriever>> Retriever::Create(RetrieverOptions options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("Retriever: dir is empty");
  if (options.rrf_k < 1 || options.rrf_depth < 1) {
    return absl::InvalidArgumentError("Retriever: rrf_k and rrf_depth must be >= 1");
  }
  if (!(options.near_duplicate_containment >= 0 && options.near_duplicate_containment <= 1)) {
    return absl::InvalidArgumentError("Retriever: near_duplicate_containment must be in [0, 1]");
  }
  if (options.bm25_feedback.docs < 0 || options.bm25_feedback.terms < 0 ||
      !std::isfinite(options.bm25_feedback.weight) || options.bm25_feedback.weight < 0) {
    return absl::InvalidArgumentError("Retriever: bm25_feedback needs docs, terms >= 0 and a finite weight >= 0");
  }
  if (!options.tokenizer) options.tokenizer = std::make_shared<ByteTokenizer>();
  if (!options.embedder) {
    ASSIGN_OR_RETURN(auto e, HashedEmbedder::Create(HashedEmbedderOptions{}));
    options.embedder = std::move(e);
  }
  if (options.embedder->dim() <= 0) return absl::InvalidArgumentError("Retriever: embedder dim <= 0");
  options.index.dim = options.embedder->dim();
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("Retriever: cannot create ", options.dir, ": ", ec.message()));
  auto r = std::unique_ptr<Retriever>(new Retriever(std::move(options)));
  if (absl::Status s = r->Open(); !s.ok()) {
    // A half-opened retriever (e.g. an index rebuild that failed after
    // fresh settings were recorded) must not save its index on the way out.
    absl::MutexLock lock(&r->mu_);
    r->index_.reset();
    return s;
  }
  return r;
}

absl::Status Retriever::Open() {
  ASSIGN_OR_RETURN(chunker_, Chunker::Create(options_.chunker, options_.tokenizer));
  // Validate the index options early (unknown factory -> InvalidArgument).
  ASSIGN_OR_RETURN(auto fresh_index, VectorIndex::Create(options_.index));
  ASSIGN_OR_RETURN(catalogue_, Catalogue::Open(CatalogueOptions{options_.dir + "/catalogue", true,
                                                                 options_.sync_writes}));

  SettingsPlan plan;
  RETURN_IF_ERROR(CheckSettings(&plan));

  absl::MutexLock lock(&mu_);
  auto read_int = [&](const char* key, uint64_t* out) -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<std::string> v, catalogue_->GetMeta(key));
    *out = 0;
    if (v && !absl::SimpleAtoi(*v, out)) return absl::DataLossError(absl::StrCat("catalogue meta ", key, " corrupt"));
    return absl::OkStatus();
  };
  uint64_t next_id = 0, index_gen = 0;
  RETURN_IF_ERROR(read_int(kMetaNextChunkId, &next_id));
  RETURN_IF_ERROR(read_int(kMetaGeneration, &generation_));
  RETURN_IF_ERROR(read_int(kMetaIndexGeneration, &index_gen));
  next_chunk_id_ = static_cast<int64_t>(next_id);

  // BM25 + counters from the chunk records.
  RETURN_IF_ERROR(catalogue_->ForEachChunk([&](const ChunkRecord& c) -> absl::Status {
    ++num_chunks_;
    matcher_.Add(c.chunk_id, c.token_ids);
    next_chunk_id_ = std::max(next_chunk_id_, c.chunk_id + 1);  // a lost meta never reuses an id
    return absl::OkStatus();
  }));
  // Vectors of an ingest that a dead process cut before its atomic write
  // (retriever_ingest.cc): never referenced, dropped before any index build.
  ASSIGN_OR_RETURN(int64_t orphans, catalogue_->DeleteVectors(next_chunk_id_, -1));
  if (orphans > 0) {
    RAGKV_LOG(WARNING) << "Retriever: dropped " << orphans
                       << " vector records of an ingest that did not finish";
  }
  RETURN_IF_ERROR(catalogue_->ForEachDocument([&](const DocumentRecord& d) -> absl::Status {
    ++num_documents_;
    return absl::OkStatus();
  }));
  {
    // Index text needs the title: scan documents for titles, then chunks.
    absl::flat_hash_map<std::string, std::string> titles;
    RETURN_IF_ERROR(catalogue_->ForEachDocument([&](const DocumentRecord& d) -> absl::Status {
      if (!d.title.empty()) titles[d.doc_id] = d.title;
      return absl::OkStatus();
    }));
    RETURN_IF_ERROR(catalogue_->ForEachChunk([&](const ChunkRecord& c) -> absl::Status {
      auto it = titles.find(c.doc_id);
      return bm25_.Add(c.chunk_id, ChunkIndexText(it == titles.end() ? "" : it->second, c.text));
    }));
    if (plan.reembed_from) RETURN_IF_ERROR(ReembedAllLocked(titles, plan));
  }

  // The saved index if current, else a rebuild from the stored vectors.
  index_ = std::move(fresh_index);
  if (num_chunks_ > 0 || std::filesystem::exists(IndexPath())) {
    bool loaded = false;
    if (index_gen == generation_ && std::filesystem::exists(IndexPath())) {
      auto l = VectorIndex::Load(IndexPath(), options_.index);
      if (l.ok()) {
        index_ = std::move(*l);
        loaded = true;
        saved_generation_ = generation_;
      } else {
        RAGKV_LOG(WARNING) << "Retriever: saved index unusable, rebuilding from catalogue: " << l.status();
      }
    }
    if (!loaded) {
      RETURN_IF_ERROR(RebuildIndexLocked());
      saved_generation_ = ~generation_;  // differs: save on close
    }
  }
  if (index_->size() != num_chunks_ && index_->is_trained()) {
    RAGKV_LOG(WARNING) << "Retriever: index holds " << index_->size() << " vectors, catalogue "
                       << num_chunks_ << " chunks; rebuilding";
    RETURN_IF_ERROR(RebuildIndexLocked());
  }
  return absl::OkStatus();
}

absl::Status Retriever::ReembedAllLocked(const absl::flat_hash_map<std::string, std::string>& titles,
                                         const SettingsPlan& plan) {
  const std::string to = options_.embedder->Fingerprint();
  RAGKV_LOG(INFO) << "Retriever: " << options_.dir << ": embedder changed from '" << *plan.reembed_from
                  << "' to '" << to << "'; re-embedding " << num_chunks_ << " chunks from the catalogue";
  std::vector<int64_t> ids;
  RETURN_IF_ERROR(catalogue_->ForEachChunk([&](const ChunkRecord& c) -> absl::Status {
    ids.push_back(c.chunk_id);
    return absl::OkStatus();
  }));
  const size_t dim = static_cast<size_t>(options_.embedder->dim());
  constexpr size_t kBatch = 256;
  bool marked = false;  // the re-embed under way is recorded
  for (size_t b = 0; b < ids.size(); b += kBatch) {
    std::vector<std::string> texts;
    std::vector<int64_t> batch;
    for (size_t i = b; i < std::min(ids.size(), b + kBatch); ++i) {
      ASSIGN_OR_RETURN(std::optional<ChunkRecord> c, catalogue_->GetChunk(ids[i]));
      if (!c) continue;
      auto it = titles.find(c->doc_id);
      texts.push_back(ChunkIndexText(it == titles.end() ? "" : it->second, c->text));
      batch.push_back(ids[i]);
    }
    if (batch.empty()) continue;
    ASSIGN_OR_RETURN(std::vector<float> v, options_.embedder->EmbedDocuments(texts));
    if (v.size() != batch.size() * dim) {
      return absl::InternalError("Retriever: embedder returned a wrong-sized batch");
    }
    RETURN_IF_ERROR(CheckFinite(v, "embedder output"));
    CatalogueMutation m;
    if (!marked) m.put_meta.emplace_back(kMetaReembedTarget, to);  // vectors are mixed from here on
    marked = true;
    for (size_t i = 0; i < batch.size(); ++i) {
      m.put_vectors.emplace_back(batch[i], absl::MakeConstSpan(v).subspan(i * dim, dim));
    }
    RETURN_IF_ERROR(catalogue_->Apply(m));
  }
  // Last: the new settings, and a new generation so the saved index (built
  // from the old vectors) is not loaded.
  CatalogueMutation done;
  done.put_meta = plan.settle;
  done.put_meta.emplace_back(kMetaReembedTarget, "");
  done.put_meta.emplace_back(kMetaGeneration, absl::StrCat(generation_ + 1));
  RETURN_IF_ERROR(catalogue_->Apply(done));
  ++generation_;
  return absl::OkStatus();
}

absl::Status Retriever::RebuildIndexLocked() {
  ASSIGN_OR_RETURN(auto index, VectorIndex::Create(options_.index));
  std::vector<int64_t> ids;
  std::vector<float> vectors;
  const size_t dim = static_cast<size_t>(options_.index.dim);
  RETURN_IF_ERROR(catalogue_->ForEachVector([&](int64_t id, absl::Span<const float> v) -> absl::Status {
    if (IsOrphanLocked(id)) return absl::OkStatus();  // a failed ingest's, not yet deleted
    if (v.size() != dim) return absl::DataLossError(absl::StrCat("catalogue vector ", id, " has wrong dim"));
    ids.push_back(id);
    vectors.insert(vectors.end(), v.begin(), v.end());
    return absl::OkStatus();
  }));
  if (!index->is_trained()) {
    if (static_cast<int64_t>(ids.size()) < options_.min_train_vectors || ids.empty()) {
      index_ = std::move(index);  // stays untrained until enough vectors are stored
      return absl::OkStatus();
    }
    absl::Status s = index->Train(vectors);
    if (!s.ok()) {
      RAGKV_LOG(WARNING) << "Retriever: training on " << ids.size() << " vectors failed: " << s;
      index_ = std::move(index);
      return absl::OkStatus();
    }
  }
  RETURN_IF_ERROR(index->Add(ids, vectors));
  index_ = std::move(index);
  return absl::OkStatus();
}

absl::Status Retriever::MaybeTrainOrCompactLocked() {
  if (!index_->is_trained()) {
    if (num_chunks_ >= options_.min_train_vectors) return RebuildIndexLocked();
    return absl::OkStatus();
  }
  const int64_t tomb = index_->tombstones();
  if (tomb > 0 && static_cast<double>(tomb) >
                      options_.rebuild_tombstone_fraction * static_cast<double>(index_->size() + tomb)) {
    return RebuildIndexLocked();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ChunkSpan>> Retriever::ChunkDocument(const Document& doc) const {
  RETURN_IF_ERROR(ValidateDocument(doc));
  return chunker_->Chunk(doc.text);
}

absl::Status Retriever::Delete(const std::string& doc_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::optional<DocumentRecord> doc, catalogue_->GetDocument(doc_id));
  if (!doc) return absl::NotFoundError(absl::StrCat("Delete: no document '", doc_id, "'"));
  CatalogueMutation m;
  m.delete_documents.push_back(doc_id);
  m.delete_chunks = doc->chunk_ids;
  m.put_meta.emplace_back(kMetaGeneration, absl::StrCat(generation_ + 1));
  RETURN_IF_ERROR(catalogue_->Apply(m));
  ++generation_;
  auto removed = index_->Remove(doc->chunk_ids);
  if (!removed.ok()) {
      RAGKV_LOG(WARNING) << "Retriever: index removal failed: " << removed.status();
    }
  for (int64_t id : doc->chunk_ids) {
    bm25_.Remove(id);
    matcher_.Remove(id);
  }
  num_chunks_ -= static_cast<int64_t>(doc->chunk_ids.size());
  --num_documents_;
  return MaybeTrainOrCompactLocked();
}

absl::StatusOr<std::vector<SearchResult>> Retriever::Search(std::string_view query,
                                                            const SearchOptions& options) const {
  SearchMode mode = options.mode;
  if (mode == SearchMode::kDefault) mode = options_.hybrid ? SearchMode::kHybrid : SearchMode::kDense;
  std::vector<float> vec;
  const bool dense = mode == SearchMode::kDense || mode == SearchMode::kHybrid;
  if (options.k <= 0 || options.k > VectorIndex::kMaxK) {
    return absl::InvalidArgumentError(absl::StrCat("Search: k must be in [1, ", VectorIndex::kMaxK, "], got ",
                                                   options.k));
  }
  if (dense) {
    if (!options_.embedder->embeds_text()) {
      return absl::FailedPreconditionError(
          "Search: the embedder takes caller-supplied vectors; use SearchByVector or mode kBm25");
    }
    ASSIGN_OR_RETURN(vec, options_.embedder->EmbedQuery(query, &bm25_));
  }
  absl::ReaderMutexLock lock(&mu_);
  return SearchLocked(dense ? &vec : nullptr, query, mode, options);
}

absl::StatusOr<std::vector<SearchResult>> Retriever::SearchByVector(absl::Span<const float> query,
                                                                    const SearchOptions& options) const {
  if (query.size() != static_cast<size_t>(options_.index.dim)) {
    return absl::InvalidArgumentError(absl::StrCat("SearchByVector: vector has ", query.size(),
                                                   " floats, index dim is ", options_.index.dim));
  }
  if (options.k <= 0 || options.k > VectorIndex::kMaxK) {
    return absl::InvalidArgumentError(absl::StrCat("Search: k must be in [1, ", VectorIndex::kMaxK, "], got ",
                                                   options.k));
  }
  RETURN_IF_ERROR(CheckFinite(query, "SearchByVector"));
  std::vector<float> vec(query.begin(), query.end());
  absl::ReaderMutexLock lock(&mu_);
  return SearchLocked(&vec, "", SearchMode::kDense, options);
}

absl::StatusOr<std::vector<SearchResult>> Retriever::SearchLocked(const std::vector<float>* vector,
                                                                  std::string_view text, SearchMode mode,
                                                                  const SearchOptions& options) const {
  const int k = options.k;
  std::optional<absl::flat_hash_set<int64_t>> allowed;
  if (options.doc_filter != nullptr) {
    allowed.emplace();
    for (const std::string& doc_id : *options.doc_filter) {
      ASSIGN_OR_RETURN(std::optional<DocumentRecord> d, catalogue_->GetDocument(doc_id));
      if (d) allowed->insert(d->chunk_ids.begin(), d->chunk_ids.end());
    }
  }
  const absl::flat_hash_set<int64_t>* allowed_ptr = allowed ? &*allowed : nullptr;
  const bool fuse = mode == SearchMode::kHybrid || mode == SearchMode::kLexical;
  const double near_dup = options_.near_duplicate_containment;
  // Demoting near-duplicates needs candidates beyond k in every mode.
  const int depth = fuse || near_dup > 0 ? std::max(k, options_.rrf_depth) : k;

  std::vector<SearchHit> dense_hits, bm25_hits, feedback_hits;
  if (vector != nullptr) {
    if (!index_->is_trained()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Search: vector index '", options_.index.factory, "' is not trained yet (", num_chunks_, " of ",
          options_.min_train_vectors, " vectors needed)"));
    }
    ASSIGN_OR_RETURN(auto hits, index_->Search(*vector, std::min(depth, VectorIndex::kMaxK), allowed_ptr));
    dense_hits = std::move(hits[0]);
  }
  if (mode == SearchMode::kBm25 || fuse) {
    bm25_hits = bm25_.Search(text, depth, allowed_ptr);
  }
  const Bm25Feedback& fb = options_.bm25_feedback;
  if (fuse && fb.docs > 0 && fb.terms > 0 && fb.weight > 0) {
    feedback_hits = bm25_.SearchWithFeedback(text, depth, fb, allowed_ptr);
  }
  std::vector<SearchHit> fused;
  if (fuse) {
    absl::flat_hash_map<int64_t, double> rrf;
    for (const auto* list : {&dense_hits, &bm25_hits, &feedback_hits}) {
      for (size_t r = 0; r < list->size(); ++r) rrf[(*list)[r].id] += 1.0 / (options_.rrf_k + r + 1.0);
    }
    for (const auto& [id, s] : rrf) fused.push_back(SearchHit{id, static_cast<float>(s)});
    std::sort(fused.begin(), fused.end(), [](const SearchHit& a, const SearchHit& b) {
      return a.score != b.score ? a.score > b.score : a.id < b.id;
    });
  } else {
    fused = mode == SearchMode::kBm25 ? std::move(bm25_hits) : std::move(dense_hits);
  }

  std::vector<SearchResult> results, set_aside;
  std::vector<internal::Shingles> kept_shingles;
  for (const SearchHit& h : fused) {
    if (static_cast<int>(results.size()) >= k) break;
    ASSIGN_OR_RETURN(std::optional<ChunkRecord> c, catalogue_->GetChunk(h.id));
    if (!c) continue;  // not (or no longer) in the catalogue: never returned
    bool duplicate = false;
    if (near_dup > 0) {
      internal::Shingles shingles = shingles_->Get(h.id, c->text);
      for (const auto& kept : kept_shingles) {
        if (internal::ContainmentExceeds(*shingles, *kept, near_dup)) {
          duplicate = true;
          break;
        }
      }
      if (!duplicate) kept_shingles.push_back(std::move(shingles));
      if (duplicate && static_cast<int>(set_aside.size()) >= k) continue;
    }
    SearchResult r;
    r.chunk_id = h.id;
    r.doc_id = std::move(c->doc_id);
    r.ordinal = c->ordinal;
    r.score = h.score;
    if (options.with_tokens) r.token_ids = std::move(c->token_ids);
    if (options.with_text) r.text = std::move(c->text);
    r.kv_key = std::move(c->kv_key);
    (duplicate ? set_aside : results).push_back(std::move(r));
  }
  for (SearchResult& r : set_aside) {
    if (static_cast<int>(results.size()) >= k) break;
    results.push_back(std::move(r));
  }
  return results;
}

absl::Status Retriever::SetChunkKey(int64_t chunk_id, std::string kv_key) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::optional<ChunkRecord> c, catalogue_->GetChunk(chunk_id));
  if (!c) return absl::NotFoundError(absl::StrCat("SetChunkKey: no chunk ", chunk_id));
  c->kv_key = std::move(kv_key);
  CatalogueMutation m;
  m.put_chunks.push_back(std::move(*c));
  return catalogue_->Apply(m);
}

absl::Status Retriever::ForEachChunk(
    const std::function<absl::Status(const ChunkRecord&)>& fn) const {
  return catalogue_->ForEachChunk(fn);
}

absl::StatusOr<std::optional<ChunkRecord>> Retriever::GetChunk(int64_t chunk_id) const {
  return catalogue_->GetChunk(chunk_id);
}

absl::StatusOr<std::vector<ChunkMatch>> Retriever::FindChunks(
    absl::Span<const int32_t> prompt) const {
  absl::ReaderMutexLock lock(&mu_);
  return matcher_.Find(prompt, [&](int64_t id) -> absl::StatusOr<std::optional<std::vector<int32_t>>> {
    ASSIGN_OR_RETURN(std::optional<ChunkRecord> c, catalogue_->GetChunk(id));
    if (!c) return std::nullopt;
    return std::move(c->token_ids);
  });
}

absl::StatusOr<std::optional<DocumentRecord>> Retriever::GetDocument(const std::string& doc_id) const {
  return catalogue_->GetDocument(doc_id);
}

absl::Status Retriever::Save() {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(index_->Save(IndexPath()));
  CatalogueMutation m;
  m.put_meta.emplace_back(kMetaIndexGeneration, absl::StrCat(generation_));
  RETURN_IF_ERROR(catalogue_->Apply(m));
  saved_generation_ = generation_;
  return absl::OkStatus();
}

RetrieverStats Retriever::stats() const {
  absl::ReaderMutexLock lock(&mu_);
  RetrieverStats s;
  s.documents = num_documents_;
  s.chunks = num_chunks_;
  s.indexed_vectors = index_->size();
  s.tombstones = index_->tombstones();
  s.index_trained = index_->is_trained();
  s.generation = generation_;
  return s;
}

const VectorIndex& Retriever::index() const {
  absl::ReaderMutexLock lock(&mu_);
  return *index_;
}

}  // namespace ragkv::retrieval
