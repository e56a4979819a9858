#include "pipeline/internal/pieces.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "blend/store_source.h"
#include "kvstore/chunk_key.h"
#include "model/tokenizer.h"
#include "retrieval/retriever.h"

namespace ragkv::pipeline::internal {
namespace {

// OpenStored: the store's record of `chunk_tokens` (the chunk's whole
// token list) as p's source, rows [begin, end) of it; a miss leaves p fresh.
absl::Status OpenStored(const Pipeline::Options& o, absl::Span<const int32_t> chunk_tokens,
                        int64_t begin, int64_t end, Piece* p, double* fetch_ms) {
  if (o.store == nullptr || chunk_tokens.empty()) return absl::OkStatus();
  const auto t0 = Clock::now();
  const auto& fp = o.model->fingerprint();
  ASSIGN_OR_RETURN(std::unique_ptr<blend::StoreKvSource> s,
                   blend::StoreKvSource::Open(o.store, kvstore::ChunkKey::Of(fp, chunk_tokens), fp));
  *fetch_ms += MsSince(t0);
  if (s == nullptr) return absl::OkStatus();
  blend::StoreKvSource* stream = s.get();
  if (begin == 0 && end == static_cast<int64_t>(chunk_tokens.size())) {
    p->source = std::move(s);
  } else {
    ASSIGN_OR_RETURN(p->source, blend::SliceKvSource::Create(std::move(s), begin, end));
  }
  p->store = stream;
  p->stored = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> TokensOfText(const Pipeline::Options& o,
                                                  const std::string& text) {
  if (o.tokenizer == nullptr) return absl::FailedPreconditionError("no tokenizer loaded");
  return o.tokenizer->Encode(text, /*add_bos=*/false, /*add_eos=*/false);
}

absl::Status ResolveChunk(const Pipeline::Options& o, uint64_t chunk_id, Piece* p,
                          double* fetch_ms) {
  if (o.retriever == nullptr) {
    return absl::FailedPreconditionError("chunk segments need the retrieval service");
  }
  ASSIGN_OR_RETURN(auto ch, o.retriever->GetChunk(static_cast<int64_t>(chunk_id)));
  if (!ch) return absl::NotFoundError(absl::StrFormat("unknown chunk id %d", chunk_id));
  p->is_chunk = true;
  p->chunk_id = chunk_id;
  p->tokens = std::move(ch->token_ids);
  return OpenStored(o, p->tokens, 0, static_cast<int64_t>(p->tokens.size()), p, fetch_ms);
}

// ResolveSegment: one segment's tokens, and its stored KV when it is a
// catalogue chunk or a document.
absl::Status ResolveSegment(const Pipeline::Options& o, const Segment& s, size_t i, Piece* p,
                            double* fetch_ms) {
  switch (s.source) {
    case Segment::Source::kChunkId:
      RETURN_IF_ERROR(ResolveChunk(o, s.chunk_id, p, fetch_ms));
      break;
    case Segment::Source::kTokens:
      p->tokens = s.tokens;
      break;
    case Segment::Source::kText: {
      ASSIGN_OR_RETURN(p->tokens, TokensOfText(o, s.text));
      break;
    }
  }
  if (p->tokens.empty()) return absl::InvalidArgumentError(absl::StrFormat("segment %d is empty", i));
  if (s.document && s.source != Segment::Source::kChunkId) {
    p->is_chunk = true;
    RETURN_IF_ERROR(OpenStored(o, p->tokens, 0, static_cast<int64_t>(p->tokens.size()), p, fetch_ms));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReopenAll(const Pipeline::Options& o, std::vector<Piece>* pieces, double* fetch_ms) {
  for (Piece& p : *pieces) {
    p.source.reset();
    p.store = nullptr;
    p.covered = false;
    if (!p.stored || p.failed || p.released) continue;
    const std::vector<int32_t>& key_tokens = p.whole.empty() ? p.tokens : p.whole;
    const int64_t begin = p.whole.empty() ? 0 : p.chunk_begin;
    RETURN_IF_ERROR(OpenStored(o, key_tokens, begin,
                               begin + static_cast<int64_t>(p.tokens.size()), &p, fetch_ms));
  }
  return absl::OkStatus();
}

absl::Status ResolveRaw(const Pipeline::Options& o, const Prompt& prompt,
                        std::vector<Piece>* pieces, double* fetch_ms) {
  if (o.retriever == nullptr) {
    return absl::FailedPreconditionError(
        "raw prompts need the retrieval service (its catalogue holds the chunks' tokens)");
  }
  const absl::Span<const int32_t> ids(prompt.raw);
  if (ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  const int64_t context = o.model->config().max_seq_len;
  if (static_cast<int64_t>(ids.size()) > context) {
    return absl::OutOfRangeError(absl::StrFormat(
        "the raw prompt has %d tokens, over the model context of %d", ids.size(), context));
  }
  const size_t query = std::min(ids.size(), std::max<size_t>(1, prompt.raw_query_tokens));
  ASSIGN_OR_RETURN(std::vector<retrieval::ChunkMatch> found,
                   o.retriever->FindChunks(ids.subspan(0, ids.size() - query)));
  if (found.empty()) return absl::NotFoundError("no stored chunk found in the raw prompt");
  if (found.size() > static_cast<size_t>(kMaxSegments / 2)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the raw prompt holds %d chunk matches (max %d)", found.size(), kMaxSegments / 2));
  }
  size_t at = 0;
  auto fresh = [&](size_t end) {
    if (end <= at) return;
    Piece& p = pieces->emplace_back();
    p.tokens.assign(ids.begin() + at, ids.begin() + end);
    at = end;
  };
  for (const retrieval::ChunkMatch& m : found) {
    fresh(m.prompt_begin);
    Piece& p = pieces->emplace_back();
    p.is_chunk = true;
    p.chunk_id = static_cast<uint64_t>(m.chunk_id);
    p.chunk_begin = m.chunk_begin;
    p.tokens.assign(ids.begin() + m.prompt_begin, ids.begin() + m.prompt_end());
    at = m.prompt_end();
    if (m.whole()) {
      RETURN_IF_ERROR(OpenStored(o, p.tokens, 0, m.size(), &p, fetch_ms));
      continue;
    }
    ASSIGN_OR_RETURN(std::optional<retrieval::ChunkRecord> ch, o.retriever->GetChunk(m.chunk_id));
    if (!ch) {  // deleted since it was matched: plain fresh rows
      p.is_chunk = false;
      p.chunk_id = 0;
      p.chunk_begin = 0;
      continue;
    }
    RETURN_IF_ERROR(OpenStored(o, ch->token_ids, m.chunk_begin, m.chunk_end, &p, fetch_ms));
    p.whole = std::move(ch->token_ids);
  }
  fresh(ids.size());
  if (std::none_of(pieces->begin(), pieces->end(), [](const Piece& p) { return p.is_chunk; })) {
    return absl::NotFoundError("the chunks found in the raw prompt were deleted meanwhile");
  }
  return absl::OkStatus();
}

absl::Status ResolveSegments(const Pipeline::Options& o, const std::vector<Segment>& segments,
                             std::vector<Piece>* pieces, double* fetch_ms) {
  const int64_t context = o.model->config().max_seq_len;
  int64_t total = 1;  // a BOS the options may add
  for (size_t i = 0; i < segments.size(); ++i) {
    RETURN_IF_ERROR(ResolveSegment(o, segments[i], i, &(*pieces)[i], fetch_ms));
    total += static_cast<int64_t>((*pieces)[i].tokens.size());
    if (total > context) {
      return absl::OutOfRangeError(absl::StrFormat(
          "the prompt reaches %d tokens at segment %d, over the model context of %d", total, i,
          context));
    }
  }
  if (pieces->back().is_chunk) {
    return absl::InvalidArgumentError("the last segment must be the query (tokens or text)");
  }
  return absl::OkStatus();
}

}  // namespace ragkv::pipeline::internal
