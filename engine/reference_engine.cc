#include "engine/reference_engine.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "kernels/tensor.h"
#include "model/generate.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/tokenizer.h"
#include "connector/wire.h"

namespace ragkv::engine {
namespace {

constexpr uint32_t kMaxNewTokens = 1024;

absl::StatusOr<kernels::DType> KernelDType(v1::DType t) {
  absl::StatusOr<kernels::DType> d = wire::KernelDTypeFromProto(t);
  if (!d.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("engine: unsupported KV wire dtype %s", v1::DType_Name(t)));
  }
  return d;
}

// CacheSink: imports fused layers (of the requested wire dtype) straight
// into an f32 KVCache; f16/bf16 are converted by kernels::Convert inside
// KVCache::ImportLayer.
class CacheSink : public KVSink {
 public:
  CacheSink(const model::Model* m, int64_t extra, v1::DType wire, kernels::DType dtype)
      : model_(m), extra_(extra), wire_(wire), dtype_(dtype) {}

  absl::Status OnHeader(const FusedPromptInfo& info) override {
    const auto& c = model_->config();
    if (static_cast<int>(info.dtype) != static_cast<int>(wire_)) {
      return absl::InternalError(
          absl::StrFormat("engine asked for %s KV, the sidecar sent dtype %d",
                          v1::DType_Name(wire_), static_cast<int>(info.dtype)));
    }
    if (info.num_layers != c.n_layers || info.num_kv_heads != c.n_kv_heads ||
        info.head_dim != c.head_dim) {
      return absl::FailedPreconditionError("fused KV layout does not match the engine's model");
    }
    if (info.model_fingerprint.size() != model_->fingerprint().size() ||
        std::memcmp(info.model_fingerprint.data(), model_->fingerprint().data(),
                    info.model_fingerprint.size()) != 0) {
      return absl::FailedPreconditionError("sidecar model fingerprint differs from the engine's");
    }
    if (info.num_tokens + extra_ > c.max_seq_len) {  // before allocating from it
      return absl::OutOfRangeError(absl::StrFormat(
          "fused prompt of %d tokens + %d new tokens exceeds the model context of %d",
          info.num_tokens, extra_, c.max_seq_len));
    }
    info_ = info;
    ASSIGN_OR_RETURN(auto cache, model::KVCache::Create(c, info.num_tokens + extra_));
    cache_ = std::make_unique<model::KVCache>(std::move(cache));
    return absl::OkStatus();
  }
  absl::Status OnLayer(const FusedLayerView& l) override {
    return cache_->ImportLayer(l.layer, 0, info_.num_tokens, dtype_, l.k.data(), l.v.data());
  }
  // Layers 0.. come again and overwrite theirs in place.
  absl::Status OnRestart(const FailedLoadInfo&) override { return absl::OkStatus(); }
  absl::Status OnSummary(const BlendStats& s) override {
    stats_ = s;
    return cache_->set_num_tokens(info_.num_tokens);
  }

  const model::Model* model_;
  int64_t extra_;
  v1::DType wire_;
  kernels::DType dtype_;
  FusedPromptInfo info_;
  BlendStats stats_;
  std::unique_ptr<model::KVCache> cache_;
};

// ValidUtf8: `s` with every invalid UTF-8 sequence replaced by U+FFFD
// (proto3 strings must be UTF-8; a model may emit partial byte tokens).
std::string ValidUtf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (int j = 1; ok && j < len; ++j) {
      ok = (static_cast<unsigned char>(s[i + j]) & 0xC0) == 0x80;
    }
    if (ok && len == 2) ok = c >= 0xC2;
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReferenceEngine>> ReferenceEngine::Create(Options o) {
  if (o.model == nullptr || o.tokenizer == nullptr || o.sidecar == nullptr) {
    return absl::InvalidArgumentError("engine needs a model, a tokenizer and a sidecar client");
  }
  RETURN_IF_ERROR(KernelDType(o.kv_wire_dtype).status());
  return std::unique_ptr<ReferenceEngine>(new ReferenceEngine(o));
}

int ReferenceEngine::Context() const { return o_.model->config().max_seq_len; }

absl::StatusOr<v1::GenerateResponse> ReferenceEngine::Generate(
    const v1::GenerateRequest& req, const std::string& request_id) const {
  const model::Model& m = *o_.model;
  const model::Tokenizer& tok = *o_.tokenizer;
  if (req.question().empty() && req.question_tokens().empty()) {
    return absl::InvalidArgumentError("empty question");
  }
  if (req.k() > wire::kMaxRetrieveTopK) {
    return absl::InvalidArgumentError(
        absl::StrFormat("k = %d out of range [0, %d]", req.k(), wire::kMaxRetrieveTopK));
  }
  if (req.max_new_tokens() > kMaxNewTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_new_tokens %d > %d", req.max_new_tokens(), kMaxNewTokens));
  }
  const int max_new = req.max_new_tokens() > 0 ? static_cast<int>(req.max_new_tokens()) : 32;
  std::vector<int32_t> query;
  if (!req.question_tokens().empty()) {
    query.assign(req.question_tokens().begin(), req.question_tokens().end());
  } else {
    ASSIGN_OR_RETURN(query, tok.Encode(req.question(), false, false));
  }
  if (query.empty()) return absl::InvalidArgumentError("question has no tokens");
  // Every allocation below is sized from the prompt: bound it by the model
  // context first (a 30M-token question must not reach the allocator).
  const int64_t ctx = m.config().max_seq_len;
  if (static_cast<int64_t>(query.size()) + max_new > ctx) {
    return absl::OutOfRangeError(absl::StrFormat(
        "question of %d tokens + %d new tokens exceeds the model context of %d", query.size(),
        max_new, ctx));
  }
  const auto t_start = Clock::now();
  v1::GenerateResponse resp;
  v1::TtftBreakdown* tt = resp.mutable_ttft();

  // 1. Retrieve.
  std::vector<uint64_t> ids(req.chunk_ids().begin(), req.chunk_ids().end());
  if (ids.empty() && req.k() > 0) {
    if (req.question().empty()) {
      return absl::InvalidArgumentError("retrieval needs question text (or pass chunk_ids)");
    }
    const auto t0 = Clock::now();
    v1::SearchRequest sr;
    sr.set_text(req.question());
    sr.set_k(req.k());
    ASSIGN_OR_RETURN(v1::SearchResponse hits, o_.sidecar->Search(sr));
    for (const auto& h : hits.hits()) ids.push_back(h.chunk().chunk_id());
    tt->set_retrieve_ms(MsSince(t0));
  }
  for (uint64_t id : ids) resp.add_chunk_ids(id);
  const v1::BlendOptions& bo = req.blend();
  const bool add_bos = bo.add_bos() && tok.add_bos();

  std::unique_ptr<model::KVCache> cache;
  model::Workspace ws;
  std::vector<float> logits(m.config().vocab_size);
  std::vector<int32_t> prompt;
  if (bo.mode() == v1::BLEND_MODE_FULL_PREFILL || ids.empty()) {
    // Baseline: fetch chunk tokens, prefill everything locally.
    const auto t0 = Clock::now();
    if (add_bos) prompt.push_back(tok.bos_id());
    if (!req.system_prompt().empty()) {
      ASSIGN_OR_RETURN(auto sys, tok.Encode(req.system_prompt(), false, false));
      prompt.insert(prompt.end(), sys.begin(), sys.end());
    }
    if (!ids.empty()) {
      ASSIGN_OR_RETURN(v1::GetChunksResponse chunks, o_.sidecar->GetChunks(ids));
      for (const auto& c : chunks.chunks()) {
        prompt.insert(prompt.end(), c.token_ids().begin(), c.token_ids().end());
      }
    }
    tt->set_fetch_ms(MsSince(t0));
    resp.set_context_tokens(static_cast<uint32_t>(prompt.size()));
    prompt.insert(prompt.end(), query.begin(), query.end());
    if (static_cast<int64_t>(prompt.size()) + max_new > ctx) {
      return absl::OutOfRangeError(absl::StrFormat(
          "prompt of %d tokens + %d new tokens exceeds the model context of %d", prompt.size(),
          max_new, ctx));
    }
    ASSIGN_OR_RETURN(auto c, m.NewCache(static_cast<int64_t>(prompt.size()) + max_new));
    cache = std::make_unique<model::KVCache>(std::move(c));
    const auto t1 = Clock::now();
    RETURN_IF_ERROR(m.Prefill(prompt, cache.get(), &ws, model::LogitsMode::kLast, logits.data()));
    tt->set_query_prefill_ms(MsSince(t1));
    resp.set_recomputed_tokens(static_cast<uint32_t>(prompt.size()));
  } else {
    // Blend through the sidecar; the fused cache holds the query rows too.
    v1::BlendRequest br;
    if (!req.system_prompt().empty()) br.add_segments()->set_text(req.system_prompt());
    for (uint64_t id : ids) br.add_segments()->set_chunk_id(id);
    br.add_segments()->mutable_tokens()->mutable_ids()->Assign(query.begin(), query.end());
    *br.mutable_options() = bo;
    br.mutable_options()->set_output_dtype(o_.kv_wire_dtype);
    ASSIGN_OR_RETURN(const kernels::DType import_dtype, KernelDType(o_.kv_wire_dtype));
    CacheSink sink(&m, max_new, o_.kv_wire_dtype, import_dtype);
    const auto t0 = Clock::now();
    CallOptions call;
    call.request_id = request_id;
    RETURN_IF_ERROR(o_.sidecar->Blend(br, &sink, call));
    const double rpc_ms = MsSince(t0);
    const double fetch_ms = sink.stats_.TimingMs("fetch");
    tt->set_fetch_ms(fetch_ms);
    tt->set_blend_ms(std::max(0.0, rpc_ms - fetch_ms));
    const int64_t total = sink.info_.num_tokens;
    const int64_t query_begin = total - static_cast<int64_t>(query.size());
    if (query_begin < 0 || sink.cache_ == nullptr ||
        sink.info_.token_ids.size() != static_cast<size_t>(total) ||
        !std::equal(query.begin(), query.end(), sink.info_.token_ids.begin() + query_begin)) {
      return absl::InternalError("the fused prompt does not end with the query");
    }
    prompt.assign(sink.info_.token_ids.begin(), sink.info_.token_ids.end());
    resp.set_context_tokens(static_cast<uint32_t>(query_begin));
    resp.set_recomputed_tokens(sink.stats_.recomputed_tokens);
    resp.set_blend_ratio(sink.stats_.ratio);
    resp.set_controller_reason(sink.stats_.controller_reason);
    resp.set_quality_gate(sink.stats_.quality_gate);
    for (const FailedLoadInfo& f : sink.stats_.failed_loads) wire::ToProto(f, resp.add_failed_loads());
    cache = std::move(sink.cache_);
    const auto t1 = Clock::now();
    if (o_.reuse_query_kv) {
      // Keep the sidecar's query rows but the last; forward that one token.
      RETURN_IF_ERROR(cache->set_num_tokens(total - 1));
      RETURN_IF_ERROR(m.DecodeStep(query.back(), cache.get(), &ws, logits.data()));
    } else {
      // Former path: drop the query rows, prefill the whole query here.
      RETURN_IF_ERROR(cache->set_num_tokens(query_begin));
      RETURN_IF_ERROR(
          m.Prefill(query, cache.get(), &ws, model::LogitsMode::kLast, logits.data()));
    }
    tt->set_query_prefill_ms(MsSince(t1));
  }
  tt->set_ttft_ms(MsSince(t_start));
  resp.mutable_prompt_tokens()->Assign(prompt.begin(), prompt.end());

  // Greedy decode, stopping after EOS.
  const auto t_dec = Clock::now();
  std::vector<int32_t> stops;
  if (tok.eos_id() >= 0) stops.push_back(tok.eos_id());
  ASSIGN_OR_RETURN(std::vector<int32_t> out,
                   model::Decode(m, cache.get(), &ws, logits.data(), max_new, model::Argmax, stops));
  tt->set_decode_ms(MsSince(t_dec));
  resp.mutable_answer_tokens()->Assign(out.begin(), out.end());
  resp.set_answer(ValidUtf8(tok.Decode(out)));
  return resp;
}

}  // namespace ragkv::engine
