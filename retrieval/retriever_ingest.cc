// retriever_ingest.cc: the write path of Retriever (Ingest, Upsert,
// IngestWithVectors, Update): chunk, embed and commit documents.
//
// Memory: Commit embeds a document (or takes the caller's vectors, not
// copied) in batches of kIngestBatchChunks chunks, writes each batch to the
// catalogue under the fresh chunk ids and adds it to the index (room for
// all reserved at once), then drops it, before the one atomic catalogue
// write of the chunk and document records (and the next-id meta). So an
// ingest holds the index's copy plus one batch, not the embedder output, a
// write batch and a memtable of the whole document on top
// (docs/retrieval.md "Ingest memory"). Embedding therefore runs under the
// retriever's write lock (it used to run before it, in Prepare): searches
// wait for a large document's embedding as they wait for its writes. Until that
// atomic write no record references those ids, and they are at or above
// the stored next id: a failed ingest deletes them; one cut by a dead
// process leaves them for Open to drop (Catalogue::DeleteVectorsFrom).
#include <algorithm>

#include <xxhash.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "retrieval/internal/check_finite.h"
#include "retrieval/internal/meta_keys.h"
#include "retrieval/retriever.h"

namespace ragkv::retrieval {
namespace {

using internal::CheckFinite;
using internal::meta::kMetaGeneration;
using internal::meta::kMetaNextChunkId;

// kIngestBatchChunks: chunks per embedding / staging batch (256 x 4096-d
// f32 = 4 MiB).
constexpr size_t kIngestBatchChunks = 256;

}  // namespace

struct Retriever::Prepared {
  Document doc;
  std::vector<ChunkSpan> chunks;
  absl::Span<const float> caller_vectors;  // chunks * dim, alive until Commit returns; empty: embed
  std::vector<std::string> index_texts;
};

absl::StatusOr<Retriever::Prepared> Retriever::Prepare(const Document& doc,
                                                       absl::Span<const float> vectors) const {
  Prepared p;
  p.doc = doc;
  ASSIGN_OR_RETURN(p.chunks, ChunkDocument(doc));
  for (const ChunkSpan& c : p.chunks) p.index_texts.push_back(ChunkIndexText(doc.title, c.text));
  const size_t dim = static_cast<size_t>(options_.embedder->dim());
  if (!vectors.empty()) {
    if (vectors.size() != p.chunks.size() * dim) {
      return absl::InvalidArgumentError(absl::StrCat("document '", doc.id, "' has ", p.chunks.size(),
                                                     " chunks of dim ", dim, ", got ", vectors.size(),
                                                     " floats"));
    }
    RETURN_IF_ERROR(CheckFinite(vectors, absl::StrCat("document '", doc.id, "'")));
    p.caller_vectors = vectors;
    return p;
  }
  if (!options_.embedder->embeds_text()) {
    return absl::FailedPreconditionError(
        "Retriever: the embedder takes caller-supplied vectors; use IngestWithVectors");
  }
  return p;
}

absl::StatusOr<IngestStats> Retriever::Ingest(absl::Span<const Document> docs) {
  return PrepareAndCommit(docs, {}, CommitMode::kInsert);
}

absl::StatusOr<IngestStats> Retriever::Upsert(absl::Span<const Document> docs,
                                              absl::Span<const std::vector<float>> vectors) {
  return PrepareAndCommit(docs, vectors, CommitMode::kUpsert);
}

absl::StatusOr<IngestStats> Retriever::PrepareAndCommit(absl::Span<const Document> docs,
                                                        absl::Span<const std::vector<float>> vectors,
                                                        CommitMode mode) {
  if (!vectors.empty() && vectors.size() != docs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Ingest: ", vectors.size(), " vector sets for ",
                                                   docs.size(), " documents"));
  }
  absl::flat_hash_set<std::string_view> ids;
  for (const Document& d : docs) {
    if (!ids.insert(d.id).second) {
      return absl::InvalidArgumentError(absl::StrCat("Ingest: document id '", d.id, "' repeated in batch"));
    }
  }
  std::vector<Prepared> prepared;
  prepared.reserve(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    if (!vectors.empty() && vectors[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("Ingest: document '", docs[i].id, "' has no vectors"));
    }
    ASSIGN_OR_RETURN(Prepared p, Prepare(docs[i], vectors.empty() ? absl::Span<const float>() : vectors[i]));
    prepared.push_back(std::move(p));
  }
  return Commit(std::move(prepared), mode);
}

absl::StatusOr<IngestStats> Retriever::IngestWithVectors(const Document& doc, absl::Span<const float> vectors) {
  if (vectors.empty()) return absl::InvalidArgumentError("IngestWithVectors: no vectors");
  std::vector<Prepared> prepared;
  ASSIGN_OR_RETURN(Prepared p, Prepare(doc, vectors));
  prepared.push_back(std::move(p));
  return Commit(std::move(prepared), CommitMode::kInsert);
}

absl::StatusOr<IngestStats> Retriever::Update(const Document& doc, absl::Span<const float> vectors) {
  std::vector<Prepared> prepared;
  ASSIGN_OR_RETURN(Prepared p, Prepare(doc, vectors));
  prepared.push_back(std::move(p));
  return Commit(std::move(prepared), CommitMode::kReplace);
}

absl::StatusOr<IngestStats> Retriever::Commit(std::vector<Prepared> docs, CommitMode mode) {
  IngestStats stats;
  if (docs.empty()) return stats;
  absl::MutexLock lock(&mu_);
  CatalogueMutation m;
  std::vector<int64_t> old_chunks;
  for (const Prepared& p : docs) {
    ASSIGN_OR_RETURN(std::optional<DocumentRecord> existing, catalogue_->GetDocument(p.doc.id));
    if (mode == CommitMode::kReplace && !existing) return absl::NotFoundError(absl::StrCat("Update: no document '", p.doc.id, "'"));
    if (mode == CommitMode::kInsert && existing) {
      return absl::AlreadyExistsError(absl::StrCat("Ingest: document '", p.doc.id, "' already exists"));
    }
    if (existing) {
      m.delete_documents.push_back(existing->doc_id);
      for (int64_t id : existing->chunk_ids) {
        m.delete_chunks.push_back(id);
        old_chunks.push_back(id);
      }
    }
  }
  std::vector<int64_t> new_ids;
  int64_t next = next_chunk_id_;
  for (Prepared& p : docs) {
    DocumentRecord d;
    d.doc_id = p.doc.id;
    d.title = p.doc.title;
    d.text_bytes = p.doc.text.size();
    d.text_hash = XXH64(p.doc.text.data(), p.doc.text.size(), 0);
    for (size_t i = 0; i < p.chunks.size(); ++i) {
      ChunkSpan& c = p.chunks[i];
      ChunkRecord r;
      r.chunk_id = next++;
      r.doc_id = p.doc.id;
      r.ordinal = c.ordinal;
      r.byte_begin = c.byte_begin;
      r.byte_end = c.byte_end;
      r.token_begin = c.token_begin;
      r.token_ids = std::move(c.token_ids);
      r.text = c.text;
      d.chunk_ids.push_back(r.chunk_id);
      new_ids.push_back(r.chunk_id);
      m.put_chunks.push_back(std::move(r));
    }
    m.put_documents.push_back(std::move(d));
    ++stats.documents;
  }
  stats.chunks = static_cast<int64_t>(new_ids.size());
  m.put_meta.emplace_back(kMetaNextChunkId, absl::StrCat(next));
  m.put_meta.emplace_back(kMetaGeneration, absl::StrCat(generation_ + 1));

  // Vectors first, batch by batch (catalogue + index, each batch freed once
  // stored), then the one atomic write that makes the chunks exist. The ids
  // are spent either way (never reused in this process: an index that only
  // tombstones removed ids still knows them).
  RetryOrphanCleanupLocked();
  size_t staged = 0;
  absl::Status s = StageVectorsLocked(docs, new_ids, &staged);
  if (s.ok()) s = catalogue_->Apply(m);
  if (!s.ok()) {
    UnstageVectorsLocked(absl::MakeConstSpan(new_ids).subspan(0, staged), next_chunk_id_, next);
    next_chunk_id_ = next;
    return s;
  }
  next_chunk_id_ = next;
  ++generation_;
  if (!old_chunks.empty()) {
    auto removed = index_->Remove(old_chunks);
    if (!removed.ok()) {
      RAGKV_LOG(WARNING) << "Retriever: index removal failed: " << removed.status();
    }
    for (int64_t id : old_chunks) {
      bm25_.Remove(id);
      matcher_.Remove(id);
    }
    num_chunks_ -= static_cast<int64_t>(old_chunks.size());
    num_documents_ -= static_cast<int64_t>(m.delete_documents.size());
  }
  size_t k = 0;
  for (const Prepared& p : docs) {
    for (size_t i = 0; i < p.chunks.size(); ++i, ++k) {
      bm25_.Add(new_ids[k], p.index_texts[i]).IgnoreError();  // ids are fresh: cannot collide
    }
  }
  for (const ChunkRecord& r : m.put_chunks) matcher_.Add(r.chunk_id, r.token_ids);
  num_chunks_ += stats.chunks;
  num_documents_ += stats.documents;
  RETURN_IF_ERROR(MaybeTrainOrCompactLocked());
  return stats;
}

absl::Status Retriever::StageVectorsLocked(const std::vector<Prepared>& docs, absl::Span<const int64_t> ids,
                                           size_t* staged) {
  const size_t dim = static_cast<size_t>(options_.index.dim);
  const bool trained = index_->is_trained();
  if (trained) index_->Reserve(static_cast<int64_t>(ids.size()));
  for (const Prepared& p : docs) {
    for (size_t b = 0; b < p.chunks.size(); b += kIngestBatchChunks) {
      const size_t n = std::min(kIngestBatchChunks, p.chunks.size() - b);
      std::vector<float> embedded;
      absl::Span<const float> batch;
      if (!p.caller_vectors.empty()) {
        batch = p.caller_vectors.subspan(b * dim, n * dim);
      } else {
        ASSIGN_OR_RETURN(embedded, EmbedBatch(absl::MakeConstSpan(p.index_texts).subspan(b, n)));
        batch = embedded;
      }
      absl::Span<const int64_t> batch_ids = ids.subspan(*staged, n);
      CatalogueMutation vm;
      for (size_t i = 0; i < n; ++i) {
        vm.put_vectors.emplace_back(batch_ids[i], absl::MakeConstSpan(batch).subspan(i * dim, dim));
      }
      *staged += n;  // counted before the writes: a failed batch is unstaged too
      RETURN_IF_ERROR(catalogue_->Apply(vm));
      if (trained) RETURN_IF_ERROR(index_->Add(batch_ids, batch));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Retriever::EmbedBatch(absl::Span<const std::string> texts) const {
  ASSIGN_OR_RETURN(std::vector<float> v, options_.embedder->EmbedDocuments(texts));
  if (v.size() != texts.size() * static_cast<size_t>(options_.embedder->dim())) {
    return absl::InternalError("Retriever: embedder returned the wrong number of floats");
  }
  RETURN_IF_ERROR(CheckFinite(v, "embedder output"));
  return v;
}

void Retriever::UnstageVectorsLocked(absl::Span<const int64_t> ids, int64_t begin, int64_t end) {
  if (index_->is_trained()) {
    if (!ids.empty()) index_->Remove(ids).status().IgnoreError();
    index_->ReleaseSpare();  // the room Reserve took for the whole ingest
  }
  if (ids.empty()) return;
  // A failed cleanup (the disk that failed the ingest) is retried before
  // the next ingest and kept out of index rebuilds meanwhile; Open drops
  // what is left above the stored next id.
  absl::Status s = catalogue_->DeleteVectors(begin, end).status();
  if (!s.ok()) {
    RAGKV_LOG(WARNING) << "Retriever: dropping the vectors of a failed ingest: " << s
                       << " (retried before the next ingest)";
    orphan_ranges_.emplace_back(begin, end);
  }
}

void Retriever::RetryOrphanCleanupLocked() {
  for (auto it = orphan_ranges_.begin(); it != orphan_ranges_.end();) {
    it = catalogue_->DeleteVectors(it->first, it->second).ok() ? orphan_ranges_.erase(it) : it + 1;
  }
}

bool Retriever::IsOrphanLocked(int64_t id) const {
  for (const auto& [b, e] : orphan_ranges_) {
    if (id >= b && id < e) return true;
  }
  return id >= next_chunk_id_;
}

}  // namespace ragkv::retrieval
