#include "model/generate.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "model/loader.h"

namespace ragkv::model {

absl::StatusOr<std::vector<int32_t>> Decode(const Model& model, KVCache* cache, Workspace* ws,
                                            float* logits, int max_new, TokenPicker pick,
                                            absl::Span<const int32_t> stop_ids) {
  const int32_t vocab = model.config().vocab_size;
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < max_new) {
    const int32_t next = pick(logits, vocab);
    out.push_back(next);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
    if (static_cast<int>(out.size()) >= max_new ||
        cache->num_tokens() >= cache->capacity_tokens()) {
      break;
    }
    RETURN_IF_ERROR(model.DecodeStep(next, cache, ws, logits));
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> Generate(const Model& model, absl::Span<const int32_t> prompt,
                                              int max_new, TokenPicker pick,
                                              absl::Span<const int32_t> stop_ids) {
  const ModelConfig& c = model.config();
  if (prompt.empty()) return absl::InvalidArgumentError("generate: empty prompt");
  if (static_cast<int64_t>(prompt.size()) > c.max_seq_len) {
    return absl::OutOfRangeError(absl::StrCat("generate: prompt of ", prompt.size(),
                                              " tokens exceeds the model context of ",
                                              c.max_seq_len, " tokens"));
  }
  const int64_t capacity = std::min<int64_t>(c.max_seq_len, int64_t(prompt.size()) + std::max(max_new, 0));
  ASSIGN_OR_RETURN(KVCache cache, model.NewCache(capacity));
  if (max_new <= 0) return std::vector<int32_t>{};
  Workspace ws;
  std::vector<float> logits(c.vocab_size);
  RETURN_IF_ERROR(model.Prefill(prompt, &cache, &ws, LogitsMode::kLast, logits.data()));
  return Decode(model, &cache, &ws, logits.data(), max_new, pick, stop_ids);
}

absl::StatusOr<std::vector<int32_t>> Generate(const Model& model, absl::Span<const int32_t> prompt,
                                              int max_new, const SamplerOptions& sampler_options,
                                              absl::Span<const int32_t> stop_ids) {
  Sampler sampler(sampler_options);
  return Generate(
      model, prompt, max_new,
      [&sampler](float* logits, int32_t vocab) { return sampler.Sample(logits, vocab); },
      stop_ids);
}

absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& s) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &id)) {
      return absl::InvalidArgumentError(absl::StrCat("bad token id '", part, "' in '", s, "'"));
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat("empty id list '", s, "'"));
  return ids;
}

absl::Status RunGenerate(const GenerateOptions& o, std::ostream& out) {
  if (o.model_path.empty()) return absl::InvalidArgumentError("generate: --model is required");
  if (o.prompt_ids.empty() && o.prompt.empty()) {
    return absl::InvalidArgumentError("generate: give --prompt TEXT or --prompt-ids 1,2,3");
  }
  LoadOptions lo;
  lo.max_seq_len = o.max_seq_len;
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(o.model_path, lo));
  std::unique_ptr<Tokenizer> tok;
  std::string tok_path = o.tokenizer_path;
  if (tok_path.empty()) {
    auto def = DefaultTokenizerPath(o.model_path);
    if (def.ok()) {
      tok_path = *def;
    } else if (!(o.print_ids && !o.prompt_ids.empty())) {
      return def.status();
    }
  }
  if (!tok_path.empty()) {
    ASSIGN_OR_RETURN(tok, LoadTokenizer(tok_path));
    if (tok->vocab_size() > model->config().vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          tok_path, ": tokenizer has ", tok->vocab_size(), " tokens but the model's vocabulary is ",
          model->config().vocab_size));
    }
  }
  std::vector<int32_t> prompt = o.prompt_ids;
  if (prompt.empty()) {
    ASSIGN_OR_RETURN(prompt, tok->Encode(o.prompt, /*add_bos=*/true, /*add_eos=*/false));
  }
  std::vector<int32_t> stops;
  if (o.stop_at_eos) {
    if (tok) {
      if (tok->eos_id() >= 0) stops.push_back(tok->eos_id());
      if (tok->add_bos()) stops.push_back(tok->bos_id());  // a new sequence would start here
    } else {
      stops = {1, 2};
    }
  }
  auto gen = Generate(*model, prompt, o.max_new, o.sampler, stops);
  if (!gen.ok()) {
    return absl::Status(gen.status().code(),
                        absl::StrCat(o.model_path, ": ", gen.status().message()));
  }
  // A trailing stop token is not printed.
  std::vector<int32_t> ids = *std::move(gen);
  if (!ids.empty() && std::find(stops.begin(), stops.end(), ids.back()) != stops.end()) {
    ids.pop_back();
  }
  if (o.print_ids) {
    out << absl::StrJoin(ids, ",") << "\n";
    return absl::OkStatus();
  }
  std::string text;
  int32_t prev = prompt.back();
  for (int32_t id : ids) {
    text += tok->DecodePiece(prev, id);
    prev = id;
  }
  out << text << "\n";
  return absl::OkStatus();
}

}  // namespace ragkv::model
