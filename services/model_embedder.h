// model_embedder.h: ModelEmbedder, the retrieval embedder (issue 5, item c)
// over any checkpoint model/ loads: the text is tokenized with the model's
// tokenizer (BOS added), run through every transformer block, and the last
// block's hidden states (the residual stream) are mean-pooled over the tokens
// after BOS and L2-normalized into a vector of the model's hidden size.
//
// It lives in services/ because retrieval/ may not depend on model/
// (docs/architecture.md). Thread-safe: each call has its own cache and
// workspace; the model and tokenizer are shared, immutable and not owned.
#ifndef RAGKV_SERVICES_MODEL_EMBEDDER_H_
#define RAGKV_SERVICES_MODEL_EMBEDDER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "retrieval/embedder.h"

namespace ragkv::model {
class Model;
class Tokenizer;
}  // namespace ragkv::model

namespace ragkv::services {

class ModelEmbedder final : public retrieval::Embedder {
 public:
  // Create: `model` and `tokenizer` must outlive the embedder.
  // InvalidArgument if either is null.
  static absl::StatusOr<std::unique_ptr<ModelEmbedder>> Create(const model::Model* model,
                                                               const model::Tokenizer* tokenizer);

  int dim() const override;
  // Fingerprint: "model:<model fingerprint hex>" (vectors change with weights).
  std::string Fingerprint() const override;
  // EmbedDocuments: texts.size() x dim() floats. Texts longer than the
  // model's context are truncated to it. InvalidArgument for an empty text.
  absl::StatusOr<std::vector<float>> EmbedDocuments(
      absl::Span<const std::string> texts) const override;
  // EmbedQuery: the same map as documents (stats unused).
  absl::StatusOr<std::vector<float>> EmbedQuery(std::string_view text,
                                                const retrieval::TermStatistics* stats) const override;

 private:
  ModelEmbedder(const model::Model* m, const model::Tokenizer* t) : model_(m), tokenizer_(t) {}
  absl::Status EmbedOne(std::string_view text, float* out) const;

  const model::Model* model_;
  const model::Tokenizer* tokenizer_;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_MODEL_EMBEDDER_H_
