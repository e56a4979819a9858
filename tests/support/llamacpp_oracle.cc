#include "tests/support/llamacpp_oracle.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

#ifndef RAGKV_LLAMACPP_LIB_DIR
#error "RAGKV_LLAMACPP_LIB_DIR must name the pinned llama.cpp library dir"
#endif

namespace ragkv::testing {
namespace {

void QuietLog(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

}  // namespace

const std::string& InitLlamaCpp() {
  static const std::string dir = [] {
    const char* env = std::getenv("RAGKV_LLAMACPP_LOG");
    if (env == nullptr || std::strcmp(env, "1") != 0) llama_log_set(QuietLog, nullptr);
    ggml_backend_load_all_from_path(RAGKV_LLAMACPP_LIB_DIR);
    llama_backend_init();
    return std::string(RAGKV_LLAMACPP_LIB_DIR);
  }();
  return dir;
}

absl::StatusOr<std::unique_ptr<LlamaCppModel>> LlamaCppModel::Load(const std::string& path,
                                                                    const Options& o) {
  InitLlamaCpp();
  std::unique_ptr<LlamaCppModel> m(new LlamaCppModel());
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.vocab_only = o.vocab_only;
  m->model_ = llama_model_load_from_file(path.c_str(), mp);
  if (m->model_ == nullptr) return absl::InvalidArgumentError("llama.cpp cannot load " + path);
  if (o.vocab_only) return m;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = o.n_ctx;
  cp.n_batch = o.n_ctx;
  cp.n_ubatch = o.n_ctx;
  cp.n_threads = o.threads;
  cp.n_threads_batch = o.threads;
  cp.flash_attn_type = o.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.no_perf = true;
  if (o.kv_f32) {
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
  }
  m->ctx_ = llama_init_from_model(m->model_, cp);
  if (m->ctx_ == nullptr) return absl::InternalError("llama.cpp cannot create a context for " + path);
  return m;
}

LlamaCppModel::~LlamaCppModel() {
  if (ctx_ != nullptr) llama_free(ctx_);
  if (model_ != nullptr) llama_model_free(model_);
}

int LlamaCppModel::vocab_size() const {
  return llama_vocab_n_tokens(llama_model_get_vocab(model_));
}

absl::Status LlamaCppModel::Decode(const std::vector<int32_t>& tokens, int32_t pos0, bool all) {
  llama_batch b = llama_batch_init(static_cast<int32_t>(tokens.size()), 0, 1);
  b.n_tokens = static_cast<int32_t>(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.token[i] = tokens[i];
    b.pos[i] = pos0 + static_cast<int32_t>(i);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = all || i + 1 == tokens.size();
  }
  const int32_t rc = llama_decode(ctx_, b);
  llama_batch_free(b);
  if (rc != 0) return absl::InternalError(absl::StrCat("llama_decode returned ", rc));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> LlamaCppModel::Logits(const std::vector<int32_t>& tokens,
                                                         bool all) {
  if (tokens.empty()) return absl::InvalidArgumentError("Logits: no tokens");
  llama_memory_clear(llama_get_memory(ctx_), true);
  if (absl::Status s = Decode(tokens, 0, all); !s.ok()) return s;
  const int v = vocab_size();
  std::vector<float> out;
  const int first = all ? 0 : static_cast<int>(tokens.size()) - 1;
  for (int i = first; i < static_cast<int>(tokens.size()); ++i) {
    const float* l = llama_get_logits_ith(ctx_, i);
    if (l == nullptr) return absl::InternalError(absl::StrCat("no logits for position ", i));
    out.insert(out.end(), l, l + v);
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> LlamaCppModel::Greedy(const std::vector<int32_t>& prompt,
                                                           int n) {
  llama_memory_clear(llama_get_memory(ctx_), true);
  if (absl::Status s = Decode(prompt, 0, false); !s.ok()) return s;
  const int v = vocab_size();
  std::vector<int32_t> out;
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (int step = 0; step < n; ++step) {
    const float* l = llama_get_logits_ith(ctx_, -1);
    int32_t best = 0;
    for (int j = 1; j < v; ++j) best = l[j] > l[best] ? j : best;
    out.push_back(best);
    if (absl::Status s = Decode({best}, pos++, false); !s.ok()) return s;
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> LlamaCppModel::Tokenize(const std::string& text,
                                                             bool add_special,
                                                             bool parse_special) const {
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  std::vector<int32_t> ids(text.size() + 8);
  int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                             static_cast<int32_t>(ids.size()), add_special, parse_special);
  if (n < 0) {
    ids.resize(-n);
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                       static_cast<int32_t>(ids.size()), add_special, parse_special);
  }
  if (n < 0) return absl::InternalError("llama_tokenize failed");
  ids.resize(n);
  return ids;
}

absl::Status LlamaCppQuantize(const std::string& in, const std::string& out, int ftype) {
  InitLlamaCpp();
  llama_model_quantize_params p = llama_model_quantize_default_params();
  p.ftype = static_cast<llama_ftype>(ftype);
  p.nthread = 1;
  if (llama_model_quantize(in.c_str(), out.c_str(), &p) != 0) {
    return absl::InternalError(absl::StrCat("llama_model_quantize(", in, " -> ", out, ", ftype ",
                                            ftype, ") failed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> GgmlDequantize(int type, const void* data, int64_t n) {
  InitLlamaCpp();
  const ggml_type_traits* t = ggml_get_type_traits(static_cast<ggml_type>(type));
  if (t == nullptr || t->to_float == nullptr || n % t->blck_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ggml type ", type, ": no to_float for ", n));
  }
  std::vector<float> out(n);
  t->to_float(data, out.data(), n);
  return out;
}

absl::StatusOr<std::string> GgmlQuantizeRef(int type, const float* x, int64_t n) {
  InitLlamaCpp();
  const ggml_type_traits* t = ggml_get_type_traits(static_cast<ggml_type>(type));
  if (t == nullptr || t->from_float_ref == nullptr || n % t->blck_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ggml type ", type, ": no from_float_ref"));
  }
  std::string out(n / t->blck_size * t->type_size, '\0');
  t->from_float_ref(x, out.data(), n);
  return out;
}

}  // namespace ragkv::testing
