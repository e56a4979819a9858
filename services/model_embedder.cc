#include "services/model_embedder.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace ragkv::services {

using kernels::DType;
using kernels::TensorView;

absl::StatusOr<std::unique_ptr<ModelEmbedder>> ModelEmbedder::Create(
    const model::Model* model, const model::Tokenizer* tokenizer) {
  if (model == nullptr || tokenizer == nullptr) {
    return absl::InvalidArgumentError("ModelEmbedder: model and tokenizer are required");
  }
  return std::unique_ptr<ModelEmbedder>(new ModelEmbedder(model, tokenizer));
}

int ModelEmbedder::dim() const { return model_->config().dim; }

std::string ModelEmbedder::Fingerprint() const {
  return absl::StrCat("model:", model_->fingerprint_hex());
}

absl::Status ModelEmbedder::EmbedOne(std::string_view text, float* out) const {
  if (text.empty()) return absl::InvalidArgumentError("ModelEmbedder: empty text");
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer_->Encode(text, /*add_bos=*/true, false));
  const auto& cfg = model_->config();
  const int64_t max_tokens = std::max<int64_t>(1, cfg.max_seq_len);
  if (static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(max_tokens);
  const int64_t t = static_cast<int64_t>(ids.size());
  const int64_t d = cfg.dim;
  ASSIGN_OR_RETURN(model::KVCache cache, model_->NewCache(t));
  model::Workspace ws;
  std::vector<float> hidden(static_cast<size_t>(t * d));
  TensorView h = TensorView::Contiguous(hidden.data(), DType::kF32, {t, d});
  RETURN_IF_ERROR(model_->Embed(ids, h));
  std::vector<int32_t> positions(static_cast<size_t>(t));
  std::iota(positions.begin(), positions.end(), 0);
  for (int l = 0; l < cfg.n_layers; ++l) {
    RETURN_IF_ERROR(
        model_->ForwardLayer(l, h, positions.data(), cache.Layer(l, t), model::LayerOptions{}, &ws));
  }
  // Mean over the tokens after BOS (the BOS row is the same for every text),
  // then L2 normalization.
  const int64_t first = t > 1 ? 1 : 0;
  std::fill(out, out + d, 0.0f);
  for (int64_t r = first; r < t; ++r) {
    for (int64_t j = 0; j < d; ++j) out[j] += hidden[static_cast<size_t>(r * d + j)];
  }
  double norm = 0;
  for (int64_t j = 0; j < d; ++j) norm += static_cast<double>(out[j]) * out[j];
  const float inv = norm > 0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.0f;
  for (int64_t j = 0; j < d; ++j) out[j] *= inv;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ModelEmbedder::EmbedDocuments(
    absl::Span<const std::string> texts) const {
  const int d = dim();
  std::vector<float> out(texts.size() * static_cast<size_t>(d));
  for (size_t i = 0; i < texts.size(); ++i) {
    RETURN_IF_ERROR(EmbedOne(texts[i], out.data() + i * static_cast<size_t>(d)));
  }
  return out;
}

absl::StatusOr<std::vector<float>> ModelEmbedder::EmbedQuery(
    std::string_view text, const retrieval::TermStatistics* /*stats*/) const {
  std::vector<float> out(static_cast<size_t>(dim()));
  RETURN_IF_ERROR(EmbedOne(text, out.data()));
  return out;
}

}  // namespace ragkv::services
