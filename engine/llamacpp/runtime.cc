#include "engine/llamacpp/runtime.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"
#include "ggml-backend.h"
#include "llama.h"
#include "model/sampler.h"

#ifndef RAGKV_LLAMACPP_LIB_DIR
#error "RAGKV_LLAMACPP_LIB_DIR must name the pinned llama.cpp library dir"
#endif

namespace ragkv::engine::llamacpp {
namespace {

void QuietLog(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

}  // namespace

std::string LibDir() {
  const char* env = std::getenv("RAGKV_LLAMACPP_LIB_DIR");
  return env != nullptr && *env ? std::string(env) : std::string(RAGKV_LLAMACPP_LIB_DIR);
}

void InitBackends() {
  static const bool done = [] {
    const char* log = std::getenv("RAGKV_LLAMACPP_LOG");
    if (log == nullptr || std::strcmp(log, "1") != 0) llama_log_set(QuietLog, nullptr);
    ggml_backend_load_all_from_path(LibDir().c_str());
    llama_backend_init();
    return true;
  }();
  (void)done;
}

absl::Status DecodeTokens(llama_context* ctx, const std::vector<int32_t>& tokens, size_t begin,
                    int32_t seq, size_t tail, std::vector<float>* logits) {
  const size_t step = std::max<uint32_t>(1, llama_n_batch(ctx));
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
  logits->clear();
  for (size_t at = begin; at < tokens.size(); at += step) {
    const int32_t n = static_cast<int32_t>(std::min(step, tokens.size() - at));
    llama_batch b = llama_batch_init(n, 0, 1);
    for (int32_t i = 0; i < n; ++i) {
      b.token[i] = tokens[at + i];
      b.pos[i] = static_cast<llama_pos>(at + i);
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = seq;
      b.logits[i] = at + i + tail >= tokens.size();
    }
    b.n_tokens = n;
    const int rc = llama_decode(ctx, b);
    llama_batch_free(b);
    if (rc != 0) return absl::InternalError(absl::StrFormat("llama_decode failed (%d)", rc));
    for (int32_t i = 0; i < n; ++i) {
      if (at + i + tail < tokens.size()) continue;
      const float* l = llama_get_logits_ith(ctx, i);
      logits->insert(logits->end(), l, l + vocab);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> BlendRefusal(const std::string& path) {
  InitBackends();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.vocab_only = true;
  llama_model* m = llama_model_load_from_file(path.c_str(), mp);
  if (m == nullptr) return absl::InvalidArgumentError("llama.cpp cannot load " + path);
  const bool recurrent = llama_model_is_recurrent(m), hybrid = llama_model_is_hybrid(m);
  char arch[64] = "?";
  llama_model_meta_val_str(m, "general.architecture", arch, sizeof arch);
  llama_model_free(m);
  if (!recurrent && !hybrid) return std::string();
  return absl::StrFormat(
      "GGUF architecture '%s' keeps per-sequence %s state, which a chunk computed alone cannot "
      "contribute to another prompt: ragkv does not blend it (llama.cpp prefills every prompt)",
      arch, recurrent ? "recurrent" : "recurrent (hybrid linear-attention)");
}

absl::StatusOr<std::unique_ptr<LlamaFile>> LlamaFile::Open(const std::string& path,
                                                           const ContextOptions& o) {
  InitBackends();
  std::unique_ptr<LlamaFile> f(new LlamaFile());
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  f->model_ = llama_model_load_from_file(path.c_str(), mp);
  if (f->model_ == nullptr) return absl::InvalidArgumentError("llama.cpp cannot load " + path);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = o.n_ctx;
  cp.n_batch = std::min(o.n_batch, o.n_ctx);
  cp.n_ubatch = std::min(o.n_ubatch, static_cast<int>(cp.n_batch));
  cp.n_threads = o.threads;
  cp.n_threads_batch = o.threads;
  using FA = ContextOptions::FlashAttn;
  cp.flash_attn_type = o.flash_attn == FA::kOn    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : o.flash_attn == FA::kOff ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                  : LLAMA_FLASH_ATTN_TYPE_AUTO;
  cp.no_perf = true;
  cp.n_seq_max = static_cast<uint32_t>(std::max(1, o.sequences));
  cp.kv_unified = true;
  for (int i = 0; i < std::max(1, o.contexts); ++i) {
    llama_context* c = llama_init_from_model(f->model_, cp);
    if (c == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("llama.cpp cannot create a %d-cell context for %s", o.n_ctx, path));
    }
    f->ctx_.push_back(c);
  }
  return f;
}

LlamaFile::~LlamaFile() {
  for (llama_context* c : ctx_) llama_free(c);
  if (model_ != nullptr) llama_model_free(model_);
}

int LlamaFile::vocab_size() const { return llama_vocab_n_tokens(llama_model_get_vocab(model_)); }

std::string LlamaFile::Text(const std::vector<int32_t>& ids) const {
  std::string out(ids.size() * 16 + 16, '\0');
  int n = llama_detokenize(llama_model_get_vocab(model_), ids.data(), static_cast<int32_t>(ids.size()),
                           out.data(), static_cast<int32_t>(out.size()), /*remove_special=*/true,
                           /*unparse_special=*/false);
  if (n < 0) {
    out.resize(-n);
    n = llama_detokenize(llama_model_get_vocab(model_), ids.data(), static_cast<int32_t>(ids.size()),
                         out.data(), static_cast<int32_t>(out.size()), true, false);
  }
  out.resize(std::max(n, 0));
  return out;
}

absl::StatusOr<std::vector<int32_t>> LlamaFile::GreedyFrom(std::vector<float> logits, int32_t pos,
                                                           int32_t seq, int n) {
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  std::vector<int32_t> out;
  for (int i = 0; i < n && !logits.empty(); ++i) {
    const llama_token best =
        model::Argmax(logits.data(), static_cast<int32_t>(logits.size()));
    out.push_back(best);
    if (llama_vocab_is_eog(vocab, best) || i + 1 == n) break;
    llama_batch b = llama_batch_init(1, 0, 1);
    b.n_tokens = 1;
    b.token[0] = best;
    b.pos[0] = pos + i;
    b.n_seq_id[0] = 1;
    b.seq_id[0][0] = seq;
    b.logits[0] = 1;
    const int rc = llama_decode(ctx_[0], b);
    llama_batch_free(b);
    if (rc != 0) return absl::InternalError(absl::StrFormat("llama_decode failed (%d)", rc));
    const float* l = llama_get_logits_ith(ctx_[0], -1);
    logits.assign(l, l + vocab_size());
  }
  return out;
}

}  // namespace ragkv::engine::llamacpp
