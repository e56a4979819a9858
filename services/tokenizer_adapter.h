// tokenizer_adapter.h: the model's tokenizer seen through retrieval's
// Tokenizer interface (retrieval/ may not depend on model/), so that chunk
// token ids in the catalogue are exactly what the model is fed.
#ifndef RAGKV_SERVICES_TOKENIZER_ADAPTER_H_
#define RAGKV_SERVICES_TOKENIZER_ADAPTER_H_

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "model/tokenizer.h"
#include "retrieval/tokenizer.h"

namespace ragkv::services {

class ModelTokenizerAdapter final : public retrieval::Tokenizer {
 public:
  // `tok` is not owned and must outlive the adapter.
  explicit ModelTokenizerAdapter(const model::Tokenizer* tok) : tok_(tok) {}
  std::vector<int32_t> Encode(std::string_view text) const override {
    auto ids = tok_->Encode(text, /*add_bos=*/false, /*add_eos=*/false);
    return ids.ok() ? *std::move(ids) : std::vector<int32_t>();
  }
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override {
    for (int32_t id : ids) {
      if (id < 0 || id >= tok_->vocab_size()) {
        return absl::InvalidArgumentError(absl::StrFormat("token id %d outside the vocab", id));
      }
    }
    return tok_->Decode(ids);
  }
  std::string Fingerprint() const override {
    return absl::StrFormat("model:%s:vocab=%d", tok_->Name(), tok_->vocab_size());
  }

 private:
  const model::Tokenizer* tok_;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_TOKENIZER_ADAPTER_H_
