#include "pipeline/internal/pieces.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "blend/store_source.h"
#include "kvstore/chunk_key.h"
#include "model/tokenizer.h"
#include "pipeline/internal/steps.h"
#include "pipeline/neighbour_records.h"
#include "retrieval/retriever.h"

namespace ragkv::pipeline::internal {
namespace {

// OpenStored: the record under p->key (a chunk of `chunk_tokens` tokens)
// as p's source, rows [begin, end) of it; a miss leaves p fresh.
absl::Status OpenStored(const Pipeline::Options& o, int64_t chunk_tokens, int64_t begin,
                        int64_t end, Piece* p, double* fetch_ms) {
  if (o.store == nullptr || chunk_tokens == 0) return absl::OkStatus();
  const auto t0 = Clock::now();
  const bool nbr = p->context == kvstore::RecordContext::kNeighbours;
  ASSIGN_OR_RETURN(std::unique_ptr<blend::StoreKvSource> s,
                   blend::StoreKvSource::Open(o.store, nbr ? p->record_key : p->key,
                                              o.model->fingerprint(), 2, p->context));
  *fetch_ms += MsSince(t0);
  if (s == nullptr) return absl::OkStatus();
  blend::StoreKvSource* stream = s.get();
  if (begin == 0 && end == chunk_tokens) {
    p->source = std::move(s);
  } else {
    ASSIGN_OR_RETURN(p->source, blend::SliceKvSource::Create(std::move(s), begin, end));
  }
  p->store = stream;
  p->stored = true;
  return absl::OkStatus();
}

// OpenWhole: p (its tokens a whole chunk or document) keyed under `fp`.
absl::Status OpenWhole(const Pipeline::Options& o, const kvstore::Fingerprint& fp, Piece* p,
                       double* fetch_ms) {
  p->is_chunk = true;
  p->key = kvstore::ChunkKey::Of(fp, p->tokens);
  const int64_t n = static_cast<int64_t>(p->tokens.size());
  return OpenStored(o, n, 0, n, p, fetch_ms);
}

// OpenNeighbour: with Options::neighbour_records, catalogue chunk
// `chunk_id`'s neighbour-aware record as p's source when stored (p->tokens
// the whole chunk); otherwise p is left as it was, with neighbour_fallback
// set (no recorded neighbour list, a neighbour deleted since, or no such
// record). Failing to read the list is a fallback too, never the
// request's error.
absl::Status OpenNeighbour(const Pipeline::Options& o, int64_t chunk_id, Piece* p,
                           double* fetch_ms) {
  if (o.neighbour_records <= 0 || o.retriever == nullptr || o.store == nullptr) {
    return absl::OkStatus();
  }
  p->neighbour_fallback = true;
  absl::StatusOr<std::optional<blend::NeighbourContext>> ctx =
      NeighbourContextOf(*o.retriever, o.tokenizer, chunk_id, o.neighbour_records);
  if (!ctx.ok() || !*ctx) return absl::OkStatus();
  p->is_chunk = true;
  p->key = kvstore::ChunkKey::Of(o.model->fingerprint(), p->tokens);
  p->record_key = blend::NeighbourKeyOf(o.model->fingerprint(), **ctx, p->tokens);
  p->context = kvstore::RecordContext::kNeighbours;
  const int64_t n = static_cast<int64_t>(p->tokens.size());
  if (absl::Status s = OpenStored(o, n, 0, n, p, fetch_ms); !s.ok()) {
    // The plain record is the fallback for any failure of this one.
    RAGKV_LOG(WARNING) << "neighbour record of chunk " << chunk_id << ": " << s
                       << "; using the plain record";
    p->source.reset();
    p->store = nullptr;
    p->stored = false;
  }
  if (p->stored) {
    p->neighbour_fallback = false;
  } else {
    p->context = kvstore::RecordContext::kChunkLocal;
  }
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
  p->chunk_id = chunk_id;
  p->tokens = std::move(ch->token_ids);
  RETURN_IF_ERROR(OpenNeighbour(o, static_cast<int64_t>(chunk_id), p, fetch_ms));
  if (p->stored) return absl::OkStatus();
  return OpenWhole(o, o.model->fingerprint(), p, fetch_ms);
}

// ResolveSegment: one segment's tokens, and its stored KV when it is a
// catalogue chunk or a document.
absl::Status ResolveSegment(const Pipeline::Options& o, const kvstore::Fingerprint& traffic,
                            const Segment& s, size_t i, Piece* p, double* fetch_ms) {
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
    RETURN_IF_ERROR(OpenWhole(o, traffic, p, fetch_ms));
  }
  return absl::OkStatus();
}

// Island: a stored-KV candidate in a raw prompt: a catalogue match, or a
// passage (match null) that no match overlaps.
struct Island {
  size_t begin = 0, end = 0;
  const retrieval::ChunkMatch* match = nullptr;
};

std::vector<Island> Islands(const std::vector<retrieval::ChunkMatch>& found,
                            const std::vector<std::pair<uint32_t, uint32_t>>& passages) {
  std::vector<Island> out;
  for (const retrieval::ChunkMatch& m : found) {
    out.push_back({static_cast<size_t>(m.prompt_begin), static_cast<size_t>(m.prompt_end()), &m});
  }
  const size_t matches = out.size();
  for (const auto& [b, e] : passages) {
    const bool overlaps = std::any_of(out.begin(), out.begin() + matches, [&](const Island& m) {
      return m.begin < e && b < m.end;
    });
    if (!overlaps) out.push_back({b, e, nullptr});
  }
  std::sort(out.begin(), out.end(),
            [](const Island& x, const Island& y) { return x.begin < y.begin; });
  return out;
}

// OpenMatch: a catalogue chunk found in a raw prompt (whole, or the rows of
// it the prompt holds); deleted since it was matched: plain fresh rows.
absl::Status OpenMatch(const Pipeline::Options& o, const retrieval::ChunkMatch& m, Piece* p,
                       double* fetch_ms) {
  p->chunk_id = static_cast<uint64_t>(m.chunk_id);
  p->chunk_begin = m.chunk_begin;
  if (m.whole()) {
    RETURN_IF_ERROR(OpenNeighbour(o, m.chunk_id, p, fetch_ms));
    if (p->stored) return absl::OkStatus();
    return OpenWhole(o, o.model->fingerprint(), p, fetch_ms);
  }
  ASSIGN_OR_RETURN(std::optional<retrieval::ChunkRecord> ch, o.retriever->GetChunk(m.chunk_id));
  if (!ch) {
    p->chunk_id = 0;
    p->chunk_begin = 0;
    return absl::OkStatus();
  }
  p->is_chunk = true;
  p->key = kvstore::ChunkKey::Of(o.model->fingerprint(), ch->token_ids);
  RETURN_IF_ERROR(OpenStored(o, static_cast<int64_t>(ch->token_ids.size()), m.chunk_begin,
                             m.chunk_end, p, fetch_ms));
  p->whole = std::move(ch->token_ids);
  return absl::OkStatus();
}

}  // namespace

bool OpenFirstPosition(const Pipeline::Options& o, const BlendLayout& layout,
                       std::vector<Piece>* pieces, double* fetch_ms) {
  if (!o.first_position_records || o.store == nullptr || layout.prefix.empty() ||
      layout.first + 1 >= pieces->size()) {
    return false;
  }
  Piece& p = (*pieces)[layout.first];
  // Only beside its plain record: deleting or forgetting that one (the
  // chunk's content key) retires this one too. A raw prompt's match may
  // hold only some of the chunk's rows (its first token tokenized with the
  // text before it): the record holds exactly the rows the piece holds.
  if (!p.is_chunk || !p.stored) return false;
  blend::NeighbourContext context;
  context.lead = layout.prefix;
  const kvstore::ChunkKey key = blend::NeighbourKeyOf(layout.traffic, context, p.tokens);
  const auto t0 = Clock::now();
  absl::StatusOr<std::unique_ptr<blend::StoreKvSource>> s = blend::StoreKvSource::Open(
      o.store, key, o.model->fingerprint(), 2, kvstore::RecordContext::kNeighbours);
  *fetch_ms += MsSince(t0);
  if (!s.ok()) {
    RAGKV_LOG(WARNING) << "first-position record " << key.ToHex() << ": " << s.status()
                       << "; using the plain record";
    DropBadRecord(o, key, s.status());
  }
  if (!s.ok() || *s == nullptr) {
    p.first_position_miss = true;
    return false;
  }
  p.store = s->get();
  p.source = std::move(*s);
  p.stored = true;
  p.context = kvstore::RecordContext::kNeighbours;
  p.record_key = key;
  p.first_position = true;
  p.neighbour_fallback = false;
  return true;
}

absl::Status ReopenAll(const Pipeline::Options& o, std::vector<Piece>* pieces, double* fetch_ms) {
  for (Piece& p : *pieces) {
    p.source.reset();
    p.store = nullptr;
    p.covered = false;
    if (!p.stored || p.failed || p.released) continue;
    // A first-position record holds exactly the piece's rows.
    const bool own = p.whole.empty() || p.first_position;
    const int64_t whole = static_cast<int64_t>(own ? p.tokens.size() : p.whole.size());
    const int64_t begin = own ? 0 : p.chunk_begin;
    RETURN_IF_ERROR(OpenStored(o, whole, begin, begin + static_cast<int64_t>(p.tokens.size()), &p,
                               fetch_ms));
  }
  return absl::OkStatus();
}

absl::Status ResolveRaw(const Pipeline::Options& o, const kvstore::Fingerprint& traffic,
                        const Prompt& prompt, std::vector<Piece>* pieces, double* fetch_ms) {
  if (o.retriever == nullptr && prompt.passages.empty()) {
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
  std::vector<retrieval::ChunkMatch> found;
  if (o.retriever != nullptr) {
    ASSIGN_OR_RETURN(found, o.retriever->FindChunks(ids.subspan(0, ids.size() - query)));
  }
  if (found.size() > static_cast<size_t>(kMaxSegments / 2)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the raw prompt holds %d chunk matches (max %d)", found.size(), kMaxSegments / 2));
  }
  const std::vector<Island> islands = Islands(found, prompt.passages);
  if (islands.empty()) return absl::NotFoundError("no stored chunk found in the raw prompt");
  size_t at = 0;
  auto fresh = [&](size_t end) {
    if (end <= at) return;
    Piece& p = pieces->emplace_back();
    p.tokens.assign(ids.begin() + at, ids.begin() + end);
    at = end;
  };
  for (const Island& is : islands) {
    fresh(is.begin);
    Piece& p = pieces->emplace_back();
    p.tokens.assign(ids.begin() + is.begin, ids.begin() + is.end);
    at = is.end;
    if (is.match == nullptr) {
      RETURN_IF_ERROR(OpenWhole(o, traffic, &p, fetch_ms));  // a passage: a document
    } else {
      RETURN_IF_ERROR(OpenMatch(o, *is.match, &p, fetch_ms));
    }
  }
  fresh(ids.size());
  if (std::none_of(pieces->begin(), pieces->end(), [](const Piece& p) { return p.is_chunk; })) {
    return absl::NotFoundError("the chunks found in the raw prompt were deleted meanwhile");
  }
  return absl::OkStatus();
}

absl::Status ResolveSegments(const Pipeline::Options& o, const kvstore::Fingerprint& traffic,
                             const std::vector<Segment>& segments, std::vector<Piece>* pieces,
                             double* fetch_ms) {
  const int64_t context = o.model->config().max_seq_len;
  int64_t total = 1;  // a BOS the options may add
  for (size_t i = 0; i < segments.size(); ++i) {
    RETURN_IF_ERROR(ResolveSegment(o, traffic, segments[i], i, &(*pieces)[i], fetch_ms));
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
