// workload.h: the request mix of `ragkv bench serve` (docs/benchmarks.md
// "Serving under load"): RAG chat requests over a MuSiQue-style file. The
// pool is every distinct passage of the file, each cut to at most
// `passage_tokens` tokens of the served model's tokenizer (at a word
// boundary); a request draws k distinct passages by Zipf popularity
// (s = 1.0 over a seeded ranking of the pool), orders them as a retriever
// would (by a per-(question, passage) score, so a question always sees its
// passages in one order and another question another), and asks a question
// of the file. A share of the requests sends the passages as `documents`;
// the rest pastes them into the user message. Both produce the same
// templated text: ragkv's documents layout (server/prompt.h), passages
// separated by blank lines, then the question.
//
// Thread safety: a Workload is immutable after Load; Draw* and Body are
// pure given their arguments.
#ifndef RAGKV_BENCH_SERVE_WORKLOAD_H_
#define RAGKV_BENCH_SERVE_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ragkv::bench_serve {

struct WorkloadOptions {
  std::string corpus;            // MuSiQue-style JSON: [{question, passages: [{title, text}]}]
  std::string tokenizer_model;   // the GGUF whose tokenizer cuts the passages
  int passage_tokens = 250;      // each passage cut to at most this many tokens
  int k = 6;                     // passages per request
  double zipf_s = 1.0;           // popularity exponent
  double documents_share = 0.5;  // share of requests sending `documents` (rest: pasted)
  uint64_t seed = 1;
};

// ServeRequest: one chat request: a question of the file and the pool
// indices of its passages in prompt order.
struct ServeRequest {
  int question = 0;
  std::vector<int> passages;
  bool documents = false;  // ragkv gets `documents`; false: pasted
};

class Workload {
 public:
  // Load: reads the corpus and cuts the pool. Errors: unreadable or
  // malformed file, tokenizer load, fewer than k passages.
  static absl::StatusOr<Workload> Load(const WorkloadOptions& o);

  // Draw: n requests of the recombining mix; `stream` separates the
  // sequences drawn from one seed (warm-up, each cell, each case).
  std::vector<ServeRequest> Draw(int n, uint64_t stream) const;
  // NewQuestion: `r` with another question (same passages, same order).
  ServeRequest NewQuestion(const ServeRequest& r, uint64_t stream) const;

  // UserMessage: the passages in the documents layout, then the question.
  std::string UserMessage(const ServeRequest& r) const;
  // PassageTexts: the request's passages in prompt order.
  std::vector<std::string> PassageTexts(const ServeRequest& r) const;
  const std::string& Question(const ServeRequest& r) const { return questions_[r.question]; }

  const std::vector<std::string>& pool() const { return pool_; }
  const WorkloadOptions& options() const { return o_; }
  // mean_passage_tokens: the pool's mean passage length in tokens.
  double mean_passage_tokens() const { return mean_passage_tokens_; }

 private:
  std::vector<int> Order(int question, std::vector<int> passages) const;

  WorkloadOptions o_;
  std::vector<std::string> questions_;
  std::vector<std::string> pool_;
  std::vector<int> rank_;  // rank_[r]: the pool index of popularity rank r
  std::vector<double> cdf_;
  double mean_passage_tokens_ = 0;
};

// BodyOptions: how one server is asked.
struct BodyOptions {
  std::string model;           // "model" field
  bool send_documents = true;  // false: `documents` pasted (llama-server)
  std::string ragkv_mode;      // "" : no `ragkv` object; "local", ...
  bool reorder = false;        // ragkv.reorder true (the exact-prefix reorder pass)
  int max_tokens = 32;
  std::vector<int32_t> banned;  // logit_bias -100 for each (byte tokens, EOS)
};

// ChatBody: the streaming /v1/chat/completions JSON body of `r` (temperature
// 0, stream_options.include_usage).
std::string ChatBody(const Workload& w, const ServeRequest& r, const BodyOptions& o);

// BannedTokens: the ids `ragkv bench serve` bans in every request: those
// whose text alone is not valid UTF-8 (byte-fallback tokens, on which the
// pinned llama-server answers 500), the end-of-generation token (so every
// answer has max_tokens tokens) and the other control tokens (no text, so
// every token streams content). Errors: tokenizer load.
absl::StatusOr<std::vector<int32_t>> BannedTokens(const std::string& gguf);

}  // namespace ragkv::bench_serve

#endif  // RAGKV_BENCH_SERVE_WORKLOAD_H_
