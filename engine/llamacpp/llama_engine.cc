#include "engine/llamacpp/llama_engine.h"

#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/llamacpp/adapter.h"
#include "kernels/convert.h"
#include "llama.h"

namespace ragkv::engine::llamacpp {
namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// SeqSink: collects the fused stream as f32 [H][T][D] per layer, checking
// the header against llama.cpp's layout and the expected fingerprint.
class SeqSink : public KVSink {
 public:
  SeqSink(const SeqStateLayout& l, const std::string& fp) : layout_(l), fp_(fp) {}
  absl::Status OnHeader(const FusedPromptInfo& info) override {
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
    const size_t n = size_t(info_.num_kv_heads) * info_.num_tokens * info_.head_dim;
    k_.push_back(Decode(l.k, n));
    v_.push_back(Decode(l.v, n));
    for (int t = 0; t < info_.num_tokens && l.layer == 0; ++t) recomputed_ += l.Recomputed(t);
    return absl::OkStatus();
  }
  const FusedPromptInfo& info() const { return info_; }
  int recomputed() const { return recomputed_; }
  // View: the first `tokens` cells (the layers keep their full T stride).
  std::vector<std::vector<float>> TakeK() { return std::move(k_); }
  std::vector<std::vector<float>> TakeV() { return std::move(v_); }

 private:
  std::vector<float> Decode(std::string_view bytes, size_t n) const {
    std::vector<float> out(n);
    if (info_.dtype == WireDType::kF32) {
      std::memcpy(out.data(), bytes.data(), n * 4);
    } else if (info_.dtype == WireDType::kF16) {
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = kernels::HalfToFloat(h);
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, bytes.data() + 2 * i, 2);
        const uint32_t u = uint32_t{b} << 16;
        std::memcpy(&out[i], &u, 4);
      }
    }
    return out;
  }

  const SeqStateLayout& layout_;
  const std::string& fp_;
  FusedPromptInfo info_;
  std::vector<std::vector<float>> k_, v_;
  int recomputed_ = 0;
};

// Decode: llama.cpp decodes tokens[begin..) of `seq` at positions begin..,
// logits of the last one into *logits.
absl::Status Decode(llama_context* ctx, const std::vector<int32_t>& tokens, size_t begin,
                    int32_t seq, std::vector<float>* logits) {
  const int32_t n = static_cast<int32_t>(tokens.size() - begin);
  llama_batch b = llama_batch_init(n, 0, 1);
  for (int32_t i = 0; i < n; ++i) {
    b.token[i] = tokens[begin + i];
    b.pos[i] = static_cast<llama_pos>(begin + i);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = seq;
    b.logits[i] = i + 1 == n;
  }
  b.n_tokens = n;
  const int rc = llama_decode(ctx, b);
  llama_batch_free(b);
  if (rc != 0) return absl::InternalError(absl::StrFormat("llama_decode failed (%d)", rc));
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
  const float* l = llama_get_logits_ith(ctx, -1);
  logits->assign(l, l + vocab);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaCppEngine>> LlamaCppEngine::Create(Options o) {
  if (o.ctx == nullptr) return absl::InvalidArgumentError("LlamaCppEngine: no llama_context");
  if (o.model_fingerprint.size() != 16) {
    return absl::InvalidArgumentError("LlamaCppEngine: model_fingerprint must be 16 bytes");
  }
  ASSIGN_OR_RETURN(SeqStateLayout l, ProbeLayout(o.ctx));
  return std::unique_ptr<LlamaCppEngine>(new LlamaCppEngine(std::move(o), l));
}

absl::Status LlamaCppEngine::FromSidecar(const v1::BlendRequest& request,
                                         const std::vector<int32_t>& prompt, int32_t seq,
                                         Result* r) {
  if (o_.sidecar == nullptr) return absl::UnavailableError("no sidecar");
  SeqSink sink(layout_, o_.model_fingerprint);
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(o_.sidecar->Blend(request, &sink, o_.deadline));
  r->blend_ms = MsSince(t0);
  const FusedPromptInfo& info = sink.info();
  if (info.token_ids != prompt) {
    return absl::FailedPreconditionError("the sidecar's fused prompt is not the engine's prompt");
  }
  // Rows 0..T-2 from the sidecar; llama.cpp decodes the last token itself.
  const auto t1 = Clock::now();
  std::vector<std::vector<float>> k = sink.TakeK(), v = sink.TakeV();
  const int64_t T = info.num_tokens, H = info.num_kv_heads, D = info.head_dim;
  SeqKv kv;
  kv.num_tokens = T - 1;
  kv.n_kv_heads = info.num_kv_heads;
  kv.head_dim = info.head_dim;
  for (size_t l = 0; l < k.size(); ++l) {  // drop the last token's row, keep [H][T-1][D]
    for (int64_t h = 1; h < H; ++h) {
      std::memmove(k[l].data() + h * (T - 1) * D, k[l].data() + h * T * D, (T - 1) * D * 4);
      std::memmove(v[l].data() + h * (T - 1) * D, v[l].data() + h * T * D, (T - 1) * D * 4);
    }
    kv.k.push_back(k[l].data());
    kv.v.push_back(v[l].data());
  }
  if (T >= 2) RETURN_IF_ERROR(LoadSeqKv(o_.ctx, seq, layout_, kv));
  r->handover_ms = MsSince(t1);
  r->reused_tokens = static_cast<int>(T - 1);
  r->recomputed_tokens = sink.recomputed();
  return absl::OkStatus();
}

absl::Status LlamaCppEngine::LocalPrefill(const std::vector<int32_t>& prompt, int32_t seq,
                                          Result* r) {
  llama_memory_seq_rm(llama_get_memory(o_.ctx), seq, -1, -1);
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(Decode(o_.ctx, prompt, 0, seq, &r->logits));
  r->decode_ms = MsSince(t0);
  r->prefilled_tokens = static_cast<int>(prompt.size());
  return absl::OkStatus();
}

absl::StatusOr<LlamaCppEngine::Result> LlamaCppEngine::Prefill(const v1::BlendRequest& request,
                                                              const std::vector<int32_t>& prompt,
                                                              int32_t seq) {
  if (prompt.empty()) return absl::InvalidArgumentError("LlamaCppEngine: empty prompt");
  Result r;
  r.prompt = prompt;
  absl::Status s = FromSidecar(request, prompt, seq, &r);
  if (!s.ok()) {
    ++fallbacks_;
    r.fallback = s.ToString();
    r.reused_tokens = r.recomputed_tokens = 0;
    RAGKV_LOG(WARNING) << "llama.cpp engine: prefilling locally: " << s;
    RETURN_IF_ERROR(LocalPrefill(prompt, seq, &r));
    return r;
  }
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(Decode(o_.ctx, prompt, prompt.size() - 1, seq, &r.logits));
  r.decode_ms = MsSince(t0);
  r.prefilled_tokens = 1;
  return r;
}

}  // namespace ragkv::engine::llamacpp
