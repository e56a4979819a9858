#include "services/retrieval_settings.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "services/model_embedder.h"

namespace ragkv::services {

namespace {

constexpr std::pair<const char*, retrieval::SearchMode> kSearchModes[] = {
    {"hybrid", retrieval::SearchMode::kHybrid},
    {"dense", retrieval::SearchMode::kDense},
    {"bm25", retrieval::SearchMode::kBm25},
    {"lexical", retrieval::SearchMode::kLexical},
};

}  // namespace

const std::vector<std::string>& SearchModeNames() {
  static const std::vector<std::string>* names = [] {
    auto* v = new std::vector<std::string>;
    for (const auto& [name, mode] : kSearchModes) v->push_back(name);
    return v;
  }();
  return *names;
}

absl::StatusOr<retrieval::SearchMode> ParseSearchMode(const std::string& name) {
  for (const auto& [known, mode] : kSearchModes) {
    if (name == known) return mode;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown search mode '", name, "' (known: ",
                                                 absl::StrJoin(SearchModeNames(), ", "), ")"));
}

namespace {

absl::StatusOr<int> ParseDim(const std::string& s, const std::string& spec) {
  int dim = 0;
  if (!absl::SimpleAtoi(s, &dim) || dim < 1 || dim > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedder '", spec, "': dimension '", s, "' is not in 1..65536"));
  }
  return dim;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const retrieval::Embedder>> MakeEmbedder(
    const std::string& spec, const model::Model* model, const model::Tokenizer* tokenizer) {
  std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits(':', 2));
  if (parts[0] == "hashed" && parts.size() <= 2) {
    retrieval::HashedEmbedderOptions ho;
    if (parts.size() == 2) {
      ASSIGN_OR_RETURN(ho.dim, ParseDim(parts[1], spec));
    }
    ASSIGN_OR_RETURN(auto e, retrieval::HashedEmbedder::Create(ho));
    return std::shared_ptr<const retrieval::Embedder>(std::move(e));
  }
  if (parts[0] == "model" && parts.size() == 1) {
    if (!model) return absl::InvalidArgumentError("embedder 'model' needs a served model (--model)");
    ASSIGN_OR_RETURN(auto e, ModelEmbedder::Create(model, tokenizer));
    return std::shared_ptr<const retrieval::Embedder>(std::move(e));
  }
  if (parts[0] == "vectors" && parts.size() >= 2) {
    ASSIGN_OR_RETURN(int dim, ParseDim(parts[1], spec));
    const std::string name = parts.size() == 3 ? parts[2] : "caller";
    return std::shared_ptr<const retrieval::Embedder>(
        std::make_shared<retrieval::ExternalEmbedder>(dim, name));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown embedder '", spec, "' (known: hashed, hashed:DIM, model, vectors:DIM[:NAME])"));
}

}  // namespace ragkv::services
