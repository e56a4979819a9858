// generate.h: text generation (prefill + decode loop) and the logic of the
// `ragkv generate` command, as library functions (the ragkv binary lives in
// services/; model/ also builds a standalone `ragkv_generate`).
// Thread-safe (no shared state); the model is used read-only.
#ifndef RAGKV_MODEL_GENERATE_H_
#define RAGKV_MODEL_GENERATE_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/model.h"
#include "model/sampler.h"

namespace ragkv::model {

// TokenPicker: chooses the next id from the last position's logits [vocab]
// (it may overwrite them), e.g. Sampler::Sample or Argmax.
using TokenPicker = absl::FunctionRef<int32_t(float* logits, int32_t vocab)>;

// Decode: the decode loop after a prefill. `logits` [vocab] hold the
// logits of the last token in `cache`. Repeats: pick a token and append it
// to the result; stop after a token in `stop_ids` (it is included), after
// `max_new` tokens, or when the cache is full (num_tokens == capacity);
// else DecodeStep it (its logits overwrite `logits`). Returns the new ids
// (none when max_new <= 0); errors are DecodeStep's.
absl::StatusOr<std::vector<int32_t>> Decode(const Model& model, KVCache* cache, Workspace* ws,
                                            float* logits, int max_new, TokenPicker pick,
                                            absl::Span<const int32_t> stop_ids = {});

// Generate: prefills `prompt` (in one batch) into a cache of
// min(context, prompt + max_new) tokens and runs Decode: up to `max_new`
// tokens, stopping early after a token in `stop_ids` (it is included in the
// result) or when the model context is full. Returns the new ids (prompt
// excluded). Errors: InvalidArgument (empty prompt, bad id), OutOfRange
// (prompt longer than the context).
absl::StatusOr<std::vector<int32_t>> Generate(const Model& model, absl::Span<const int32_t> prompt,
                                              int max_new, TokenPicker pick,
                                              absl::Span<const int32_t> stop_ids = {});
// Generate with a Sampler of `sampler` options (one per call).
absl::StatusOr<std::vector<int32_t>> Generate(const Model& model, absl::Span<const int32_t> prompt,
                                              int max_new, const SamplerOptions& sampler,
                                              absl::Span<const int32_t> stop_ids = {});

struct GenerateOptions {
  std::string model_path;      // .bin, .gguf, HF dir/.safetensors, or "synthetic:<spec>"
  std::string tokenizer_path;  // empty: DefaultTokenizerPath(model_path)
  std::string prompt;          // text; BOS prepended where the vocabulary adds one (add_bos)
  std::vector<int32_t> prompt_ids;  // used instead of `prompt` when non-empty
  int max_new = 256;
  SamplerOptions sampler;      // temperature 0 = greedy
  bool print_ids = false;      // print ids "a,b,c" instead of text
  int max_seq_len = 0;         // > 0 overrides the model's context length
  // Stop after the tokenizer's EOS, or its BOS when prompts start with it
  // (Tokenizer::add_bos; llama2.c's sequence delimiter).
  bool stop_at_eos = true;
};

// RunGenerate: loads model and tokenizer, generates, and writes to `out`
// the generated text (or, with print_ids, the generated ids comma-separated)
// followed by a newline. Without a tokenizer (e.g. a .bin and no
// tokenizer_path) only print_ids with prompt_ids works. Errors name the
// file / problem; nothing is written to `out` on error.
absl::Status RunGenerate(const GenerateOptions& options, std::ostream& out);

// ParseIdList: "1,2,3" -> {1,2,3}; InvalidArgument on a malformed list.
absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& s);

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_GENERATE_H_
