// DecideSpecialTokens: the pinned llama.cpp's BOS/EOS rule (docs/model.md,
// "BOS and EOS"), restated as tables.
#include "model/special_tokens.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ragkv::model {
namespace {

// How a tokenizer model adds special tokens when no key says otherwise.
enum class AddRule {
  kBos,        // SentencePiece (llama): BOS, keys may change it
  kAlwaysBos,  // WordPiece (bert): BOS (and SEP, not EOS), keys ignored
  kEos,        // Unigram (t5): EOS, keys may change it
  kByPre,      // BPE: by pre-tokenizer, keys may change it
  kNever,      // rwkv, plamo2: neither, keys ignored
  kNothing,    // no_vocab / none: no tokenizer at all
};

struct ModelRow {
  std::string_view model;
  AddRule rule;
  int32_t bos, eos;  // default ids, -1 none
};

constexpr ModelRow kModels[] = {
    {"llama", AddRule::kBos, 1, 2},          {"bert", AddRule::kAlwaysBos, 101, -1},
    {"gpt2", AddRule::kByPre, 11, 11},       {"hybriddna", AddRule::kByPre, 11, 11},
    {"whitespace", AddRule::kByPre, 11, 11}, {"gemma4", AddRule::kByPre, -1, -1},
    {"t5", AddRule::kEos, -1, 1},            {"rwkv", AddRule::kNever, -1, -1},
    {"plamo2", AddRule::kNever, 1, 2},       {"no_vocab", AddRule::kNothing, -1, -1},
    {"none", AddRule::kNothing, -1, -1},
};

// BPE pre-tokenizers whose default is to add BOS.
constexpr std::string_view kBosPres[] = {
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
    "midm-2.0", "lfm2", "jina-v5-nano", "tekken", "chameleon",
};
// BPE pre-tokenizers that always add BOS (llama.cpp's Gemma 4 override).
constexpr std::string_view kForcedBosPres[] = {"gemma4", "granite-embed-multi-311m"};
// BPE pre-tokenizers without a BOS token whatever the default id.
constexpr std::string_view kNoBosPres[] = {"glm4", "chatglm-bpe"};

template <size_t N>
bool In(const std::string_view (&set)[N], std::string_view x) {
  return std::find(std::begin(set), std::end(set), x) != std::end(set);
}

// Id: the default when inside the vocabulary (else none), replaced by the
// key when the key is inside it.
int32_t Id(int32_t def, const std::optional<int64_t>& key, int64_t n_tokens) {
  int32_t id = (def >= 0 && def < n_tokens) ? def : -1;
  if (key.has_value() && *key >= 0 && *key < n_tokens) id = static_cast<int32_t>(*key);
  return id;
}

}  // namespace

absl::StatusOr<SpecialTokens> DecideSpecialTokens(const GgufTokenizerKeys& keys) {
  const ModelRow* row = nullptr;
  for (const ModelRow& r : kModels) {
    if (r.model == keys.model) row = &r;
  }
  if (row == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.ggml.model '", keys.model, "' is not one llama.cpp knows"));
  }
  SpecialTokens s;
  if (row->rule == AddRule::kNothing) return s;
  // gemma4's tokenizer model always runs the gemma4 pre-tokenizer.
  const std::string pre = keys.model == "gemma4" ? "gemma4" : keys.pre.value_or("");
  const bool bpe = row->rule == AddRule::kByPre;
  s.bos_id = (bpe && In(kNoBosPres, pre)) ? -1 : Id(row->bos, keys.bos_token_id, keys.n_tokens);
  s.eos_id = Id(row->eos, keys.eos_token_id, keys.n_tokens);
  switch (row->rule) {
    case AddRule::kBos: s.add_bos = true; break;
    case AddRule::kAlwaysBos: s.add_bos = true; break;
    case AddRule::kEos: s.add_eos = true; break;
    case AddRule::kByPre: s.add_bos = In(kBosPres, pre); break;
    case AddRule::kNever:
    case AddRule::kNothing: break;
  }
  // llama.cpp reads the flags for every model, but its WordPiece, rwkv and
  // plamo2 paths never look at them.
  if (row->rule == AddRule::kBos || row->rule == AddRule::kEos || bpe) {
    if (keys.add_bos_token.has_value()) s.add_bos = *keys.add_bos_token;
    if (keys.add_eos_token.has_value()) s.add_eos = *keys.add_eos_token;
  }
  if (bpe && In(kForcedBosPres, pre)) s.add_bos = true;
  if ((s.add_bos && s.bos_id < 0) || (s.add_eos && s.eos_id < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.ggml.model '", keys.model, "' (pre '", pre, "') adds a ",
        s.add_bos && s.bos_id < 0 ? "BOS" : "EOS", " token the vocabulary does not have"));
  }
  return s;
}

absl::StatusOr<SpecialTokens> GgufSpecialTokens(const std::string& path) {
  ASSIGN_OR_RETURN(GgufTokenizerKeys keys, ReadGgufTokenizerKeys(path));
  absl::StatusOr<SpecialTokens> s = DecideSpecialTokens(keys);
  if (!s.ok()) return absl::Status(s.status().code(), absl::StrCat(path, ": ", s.status().message()));
  return s;
}

}  // namespace ragkv::model
