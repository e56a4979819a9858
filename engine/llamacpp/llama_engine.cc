#include "engine/llamacpp/llama_engine.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/llamacpp/adapter.h"
#include "engine/llamacpp/runtime.h"
#include "kernels/convert.h"
#include "llama.h"

namespace ragkv::engine::llamacpp {
namespace {

// SeqSink: keeps the fused stream per layer as [H][T][D] F32 or F16 bytes
// (bf16 on the wire is widened to f32), checking the header against
// llama.cpp's layout and the expected fingerprint.
class SeqSink : public KVSink {
 public:
  // k_buf / v_buf: the caller's buffers, reused (capacity kept across calls).
  SeqSink(const SeqStateLayout& l, const std::string& fp, const std::function<void(int)>& on_layer,
          const std::function<bool()>& cancelled, std::vector<std::string>* k_buf,
          std::vector<std::string>* v_buf)
      : layout_(l), fp_(fp), on_layer_(on_layer), cancelled_(cancelled), k_(*k_buf), v_(*v_buf) {}
  absl::Status OnHeader(const FusedPromptInfo& info) override {
    RETURN_IF_ERROR(Cancelled());
    if (info.model_fingerprint != fp_) {
      return absl::FailedPreconditionError("the sidecar's model fingerprint is not this file's");
    }
    if (static_cast<uint32_t>(info.num_layers) != layout_.n_layer ||
        static_cast<uint32_t>(info.num_kv_heads * info.head_dim) != layout_.n_embd_k) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the sidecar's KV layout (%d layers x %d x %d) is not llama.cpp's (%d layers x %d)",
          info.num_layers, info.num_kv_heads, info.head_dim, layout_.n_layer, layout_.n_embd_k));
    }
    info_ = info;
    return absl::OkStatus();
  }
  absl::Status OnLayer(const FusedLayerView& l) override {
    RETURN_IF_ERROR(Cancelled());
    if (n_ == k_.size()) k_.emplace_back(), v_.emplace_back();
    Keep(l.k, &k_[n_]);
    Keep(l.v, &v_[n_]);
    ++n_;
    if (on_layer_) on_layer_(l.layer);
    return absl::OkStatus();
  }
  absl::Status OnRestart(const FailedLoadInfo&) override {  // layers 0.. come again
    n_ = 0;
    return absl::OkStatus();
  }
  absl::Status OnSummary(const BlendStats& s) override {
    stats_ = s;
    return absl::OkStatus();
  }
  const FusedPromptInfo& info() const { return info_; }
  const BlendStats& stats() const { return stats_; }
  int32_t type() const { return info_.dtype == WireDType::kF16 ? kGgmlF16 : kGgmlF32; }
  // layers: how many arrived; k(l) / v(l) their bytes.
  size_t layers() const { return n_; }
  const std::string& k(size_t l) const { return k_[l]; }
  const std::string& v(size_t l) const { return v_[l]; }

 private:
  // Cancelled: the caller gave up: the stream stops at this message.
  absl::Status Cancelled() const {
    return cancelled_ && cancelled_() ? absl::CancelledError("the request was cancelled")
                                      : absl::OkStatus();
  }
  void Keep(std::string_view bytes, std::string* out) const {
    if (info_.dtype != WireDType::kBF16) {
      out->assign(bytes);
      return;
    }
    const int64_t n = static_cast<int64_t>(bytes.size() / 2);
    out->resize(static_cast<size_t>(n * 4));
    kernels::Convert(kernels::TensorView::Contiguous(static_cast<const void*>(bytes.data()),
                                                     kernels::DType::kBF16, {n}),
                     kernels::TensorView::Contiguous(static_cast<void*>(out->data()),
                                                     kernels::DType::kF32, {n}))
        .IgnoreError();  // shapes and types are right by construction
  }

  const SeqStateLayout& layout_;
  const std::string& fp_;
  const std::function<void(int)>& on_layer_;
  const std::function<bool()>& cancelled_;
  FusedPromptInfo info_;
  BlendStats stats_;
  std::vector<std::string>& k_;
  std::vector<std::string>& v_;
  size_t n_ = 0;
};

// CachedRows: rows among the first `rows` that lie in chunk spans the
// store served.
int CachedRows(const FusedPromptInfo& info, int64_t rows) {
  int64_t n = 0;
  for (const FusedSpan& sp : info.spans) {
    if (sp.is_chunk && sp.cache_hit) n += std::max<int64_t>(0, std::min<int64_t>(sp.end, rows) - sp.begin);
  }
  return static_cast<int>(n);
}

bool NothingStoredOk(const v1::BlendRequest& request) {
  return request.has_raw() || request.options().not_found_when_cold();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaCppEngine>> LlamaCppEngine::Create(Options o) {
  if (o.ctx == nullptr) return absl::InvalidArgumentError("LlamaCppEngine: no llama_context");
  if (o.local_tail < 1) return absl::InvalidArgumentError("LlamaCppEngine: local_tail must be >= 1");
  if (o.model_fingerprint.size() != 16) {
    return absl::InvalidArgumentError("LlamaCppEngine: model_fingerprint must be 16 bytes");
  }
  ASSIGN_OR_RETURN(SeqStateLayout l,
                   o.config != nullptr ? ProbeLayout(o.ctx, *o.config) : ProbeLayout(o.ctx));
  return std::unique_ptr<LlamaCppEngine>(new LlamaCppEngine(std::move(o), l));
}

void LlamaCppEngine::FetchInto(const v1::BlendRequest& request, Fetched* f,
                               const std::function<bool()>& cancelled) const {
  f->nothing_stored_ok = NothingStoredOk(request);
  SeqSink sink(layout_, o_.model_fingerprint, o_.on_layer, cancelled, &f->k, &f->v);
  const auto t0 = Clock::now();
  f->status = o_.sidecar->Blend(request, &sink, o_.deadline);
  f->blend_ms = MsSince(t0);
  f->info = sink.info();
  f->stats = sink.stats();
  f->layers = sink.layers();
  f->type = sink.type();
}

std::unique_ptr<LlamaCppEngine::Fetched> LlamaCppEngine::Fetch(
    const v1::BlendRequest& request, const std::function<bool()>& cancelled) const {
  auto f = std::make_unique<Fetched>();
  f->nothing_stored_ok = NothingStoredOk(request);
  if (o_.sidecar == nullptr) {
    f->status = absl::FailedPreconditionError("LlamaCppEngine: no sidecar to fetch from");
    return f;
  }
  FetchInto(request, f.get(), cancelled);
  return f;
}

absl::StatusOr<int64_t> LlamaCppEngine::Handover(const Fetched& f,
                                                 const std::vector<int32_t>& prompt, int32_t seq,
                                                 Result* r) {
  RETURN_IF_ERROR(f.status);
  r->blend_ms = f.blend_ms;
  const FusedPromptInfo& info = f.info;
  // Rows agree with the engine's prompt up to the first differing token;
  // llama.cpp always decodes at least the last token itself.
  const int64_t T = info.num_tokens, P = static_cast<int64_t>(prompt.size());
  if (static_cast<int64_t>(info.token_ids.size()) != T) {
    return absl::DataLossError("the sidecar's header names another number of tokens than it lists");
  }
  int64_t same = 0;
  while (same < std::min(T, P) && info.token_ids[same] == prompt[same]) ++same;
  const int64_t rows = std::max<int64_t>(0, std::min(same, P - o_.local_tail));
  if (rows == 0 && P > o_.local_tail) {
    return absl::FailedPreconditionError("the sidecar's fused prompt differs from the engine's at token 0");
  }
  if (same < P - o_.local_tail) {
    r->fallback = absl::StrFormat(
        "the sidecar's fused prompt agrees with the engine's for %d of %d tokens", same, P);
  }
  if (rows == 0) return 0;
  const auto t1 = Clock::now();
  SeqKv kv;
  kv.num_tokens = rows;
  kv.n_kv_heads = info.num_kv_heads;
  kv.head_dim = info.head_dim;
  kv.head_stride = T * info.head_dim;
  kv.type = f.type;
  for (size_t l = 0; l < f.layers; ++l) {
    kv.k.push_back(f.k[l].data());
    kv.v.push_back(f.v[l].data());
  }
  RETURN_IF_ERROR(LoadSeqKv(o_.ctx, seq, layout_, kv, &blob_));
  r->handover_ms = MsSince(t1);
  r->handed_over_tokens = static_cast<int>(rows);
  r->reused_tokens = CachedRows(info, rows);
  r->recomputed_tokens = static_cast<int>(f.stats.recomputed_tokens);
  r->applied_ratio = f.stats.ratio;
  return rows;
}

absl::Status LlamaCppEngine::CheckPrompt(const std::vector<int32_t>& prompt) const {
  if (static_cast<int64_t>(prompt.size()) < o_.local_tail) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "LlamaCppEngine: a prompt of %d tokens is shorter than local_tail %d", prompt.size(),
        o_.local_tail));
  }
  return absl::OkStatus();
}

LlamaCppEngine::Result LlamaCppEngine::Settle(absl::StatusOr<int64_t> got, bool nothing_stored_ok,
                                              const std::vector<int32_t>& prompt, int32_t seq,
                                              Result r) {
  int64_t rows = 0;
  if (got.ok()) {
    rows = *got;
  } else if (absl::IsNotFound(got.status()) && nothing_stored_ok) {
    // Nothing of the prompt is stored (a raw prompt without a stored chunk,
    // or a cold prompt that asked for NOT_FOUND): llama.cpp's own prefill
    // by design (nothing to reuse), not a fallback.
    r = Result{};
    r.prompt = prompt;
  } else {
    r = Result{};
    r.prompt = prompt;
    r.fallback = got.status().ToString();
  }
  if (!r.fallback.empty()) {
    ++fallbacks_;
    RAGKV_LOG(WARNING) << "llama.cpp engine: prefilling " << prompt.size() - rows
                       << " tokens locally: " << r.fallback;
  }
  if (rows == 0) llama_memory_seq_rm(llama_get_memory(o_.ctx), seq, -1, -1);
  r.prefilled_tokens = static_cast<int>(prompt.size() - rows);
  return r;
}

absl::StatusOr<LlamaCppEngine::Result> LlamaCppEngine::Complete(absl::StatusOr<int64_t> got,
                                                               bool nothing_stored_ok,
                                                               const std::vector<int32_t>& prompt,
                                                               int32_t seq, Result r) {
  return DecodeRest(prompt, seq, Settle(std::move(got), nothing_stored_ok, prompt, seq, std::move(r)));
}

absl::StatusOr<LlamaCppEngine::Result> LlamaCppEngine::DecodeRest(const std::vector<int32_t>& prompt,
                                                                 int32_t seq, Result r) {
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(DecodeTokens(o_.ctx, prompt, prompt.size() - r.prefilled_tokens, seq,
                         static_cast<size_t>(o_.local_tail), &r.logits));
  r.decode_ms = MsSince(t0);
  return r;
}

absl::StatusOr<LlamaCppEngine::Result> LlamaCppEngine::Prefill(const v1::BlendRequest& request,
                                                              const std::vector<int32_t>& prompt,
                                                              int32_t seq) {
  RETURN_IF_ERROR(CheckPrompt(prompt));
  Result r;
  r.prompt = prompt;
  // No sidecar configured: llama.cpp's own prefill by design, not a fallback.
  absl::StatusOr<int64_t> got = int64_t{0};
  if (o_.sidecar != nullptr) {
    // The engine's buffers lend their capacity to this fetch.
    Fetched f;
    f.k.swap(k_buf_);
    f.v.swap(v_buf_);
    FetchInto(request, &f, nullptr);
    got = Handover(f, prompt, seq, &r);
    k_buf_.swap(f.k);
    v_buf_.swap(f.v);
  }
  return Complete(std::move(got), NothingStoredOk(request), prompt, seq, std::move(r));
}

absl::StatusOr<LlamaCppEngine::Result> LlamaCppEngine::Apply(std::unique_ptr<Fetched> fetched,
                                                            const std::vector<int32_t>& prompt,
                                                            int32_t seq) {
  ASSIGN_OR_RETURN(Result r, Place(std::move(fetched), prompt, seq));
  return DecodeRest(prompt, seq, std::move(r));
}

absl::StatusOr<LlamaCppEngine::Result> LlamaCppEngine::Place(std::unique_ptr<Fetched> fetched,
                                                            const std::vector<int32_t>& prompt,
                                                            int32_t seq) {
  RETURN_IF_ERROR(CheckPrompt(prompt));
  Result r;
  r.prompt = prompt;
  absl::StatusOr<int64_t> got = Handover(*fetched, prompt, seq, &r);
  return Settle(std::move(got), fetched->nothing_stored_ok, prompt, seq, std::move(r));
}

absl::StatusOr<LlamaCppEngine::Result> LlamaCppEngine::PrefillRaw(
    const std::vector<int32_t>& prompt, uint32_t query_tokens, const v1::BlendOptions& options,
    int32_t seq) {
  v1::BlendRequest req;
  req.mutable_raw()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  req.mutable_raw()->set_query_tokens(query_tokens);
  *req.mutable_options() = options;
  return Prefill(req, prompt, seq);
}

}  // namespace ragkv::engine::llamacpp
