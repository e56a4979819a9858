// llama2.c formats: the legacy v0 checkpoint and tokenizer.bin.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "model/internal/loaders.h"

namespace ragkv::model::internal {

absl::StatusOr<ModelParts> LoadLlama2c(const std::string& path, const LoadOptions& options) {
  ASSIGN_OR_RETURN(MappedFile f, MappedFile::Open(path));
  Reader r(f);
  int32_t h[7];
  for (int i = 0; i < 7; ++i) RETURN_IF_ERROR(r.Read(&h[i], "llama2.c header (7 int32)"));
  ModelParts parts;
  parts.format = ModelFormat::kLlama2c;
  ModelConfig& c = parts.config;
  c.arch = "llama";
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;
  c.vocab_size = h[5] < 0 ? -int64_t{h[5]} : h[5];
  if (h[5] == INT32_MIN) c.vocab_size = 0;
  c.max_seq_len = h[6];
  c.rope_layout = kernels::RopeLayout::kInterleaved;
  c.kv_dtype = options.kv_dtype;
  if (h[0] > (1 << 20) || h[1] > (1 << 22) || h[2] > 4096 || h[3] > 4096 || h[6] > (1 << 24)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: implausible llama2.c header (dim=%d hidden=%d layers=%d heads=%d "
                        "seq_len=%d): not a llama2.c checkpoint?",
                        path, h[0], h[1], h[2], h[3], h[6]));
  }
  absl::Status v = c.Validate();
  if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", v.message()));
  if (options.max_seq_len > 0) c.max_seq_len = options.max_seq_len;

  const uint64_t dim = c.dim, hd = c.head_dim, L = c.n_layers, ffn = c.hidden_dim;
  const uint64_t qd = c.q_dim(), kvd = c.kv_dim(), vocab = c.vocab_size;
  if (qd != dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": llama2.c requires n_heads * head_dim == dim"));
  }
  const uint64_t seq = h[6];
  uint64_t floats = vocab * dim + L * dim + L * dim * qd + 2 * L * dim * kvd + L * qd * dim +
                    L * dim + 3 * L * dim * ffn + dim + seq * hd;  // freq_cis real+imag
  if (!c.shared_classifier) floats += vocab * dim;
  const uint64_t want = 28 + floats * 4;
  if (f.size() != want) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: file has %d bytes but its header (dim=%d hidden=%d layers=%d heads=%d kv_heads=%d "
        "vocab=%d seq_len=%d%s) implies %d: truncated file or inconsistent dims",
        path, f.size(), h[0], h[1], h[2], h[3], h[4], c.vocab_size, h[6],
        c.shared_classifier ? "" : ", unshared classifier", want));
  }
  uint64_t off = 28;
  auto take = [&](uint64_t n, const std::string& what, std::vector<float>* out) -> absl::Status {
    RETURN_IF_ERROR(ReadTensorF32(f, off, kernels::DType::kF32, n, what, out));
    off += n * 4;
    return absl::OkStatus();
  };
  ModelWeights& w = parts.weights;
  w.layers.resize(L);
  RETURN_IF_ERROR(take(vocab * dim, "token_embedding_table", &w.tok_embeddings));
  // Each per-layer array is stored for all layers consecutively.
  auto per_layer = [&](uint64_t n, const char* name,
                       std::vector<float> LayerWeights::*member) -> absl::Status {
    for (uint64_t l = 0; l < L; ++l) {
      RETURN_IF_ERROR(take(n, absl::StrCat(name, "[", l, "]"), &(w.layers[l].*member)));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(per_layer(dim, "rms_att_weight", &LayerWeights::attn_norm));
  RETURN_IF_ERROR(per_layer(qd * dim, "wq", &LayerWeights::wq));
  RETURN_IF_ERROR(per_layer(kvd * dim, "wk", &LayerWeights::wk));
  RETURN_IF_ERROR(per_layer(kvd * dim, "wv", &LayerWeights::wv));
  RETURN_IF_ERROR(per_layer(dim * qd, "wo", &LayerWeights::wo));
  RETURN_IF_ERROR(per_layer(dim, "rms_ffn_weight", &LayerWeights::ffn_norm));
  RETURN_IF_ERROR(per_layer(ffn * dim, "w1", &LayerWeights::w_gate));
  RETURN_IF_ERROR(per_layer(dim * ffn, "w2", &LayerWeights::w_down));
  RETURN_IF_ERROR(per_layer(ffn * dim, "w3", &LayerWeights::w_up));
  RETURN_IF_ERROR(take(dim, "rms_final_weight", &w.final_norm));
  off += seq * hd * 4;  // freq_cis_real, freq_cis_imag (unused: RoPE is computed)
  if (!c.shared_classifier) RETURN_IF_ERROR(take(vocab * dim, "wcls", &w.classifier));
  return parts;
}

absl::StatusOr<LlamaVocab> LoadLlama2cVocab(const std::string& path) {
  ASSIGN_OR_RETURN(MappedFile f, MappedFile::Open(path));
  Reader r(f);
  int32_t max_len = 0;
  RETURN_IF_ERROR(r.Read(&max_len, "llama2.c tokenizer header (max_token_length)"));
  if (max_len <= 0 || max_len > 4096) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: max_token_length %d is implausible: not a llama2.c tokenizer.bin?", path, max_len));
  }
  LlamaVocab v;
  while (r.offset() < f.size()) {
    float score = 0;
    int32_t len = 0;
    const std::string what = absl::StrCat("token ", v.pieces.size());
    RETURN_IF_ERROR(r.Read(&score, what));
    RETURN_IF_ERROR(r.Read(&len, what));
    if (len < 0 || len > max_len) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: token %d has length %d outside [0, max_token_length=%d]", path, v.pieces.size(),
          len, max_len));
    }
    std::string piece;
    RETURN_IF_ERROR(r.ReadBytes(len, &piece, what));
    v.pieces.push_back(std::move(piece));
    v.scores.push_back(score);
  }
  if (v.pieces.size() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tokenizer has fewer than 3 tokens"));
  }
  // llama2.c writes BOS/EOS as "\n<s>\n" / "\n</s>\n"; ids are 1 and 2.
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return v;
}

}  // namespace ragkv::model::internal
