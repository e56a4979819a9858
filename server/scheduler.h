// scheduler.h: Scheduler, --parallel N slots sharing ONE llama_context
// (sequence i = slot i, a unified KV cache of --ctx-size cells of which a
// slot may use ctx-size / N, as llama-server splits it), fed from a bounded
// queue (docs/engines.md "The HTTP server").
//
// One thread runs the loop: it admits queued jobs into free slots, each
// into the free slot whose kept cells share the longest prefix with its
// prompt. A slot keeps its last request's cells (prompt and output): when
// they cover at least half of the new prompt (the mode is the server's
// choice: none, auto or prefix; and the cache_salt is the same), llama.cpp
// decodes only the rest; in mode local it decodes the whole prompt; either
// way those prompt tokens join the decode steps' batches. Otherwise the
// prompt's KV comes from the sidecar through LlamaCppEngine, with its
// fallbacks: its Blend stream (LlamaCppEngine::Fetch) runs on a thread of
// its own while the other slots keep decoding, and the loop hands the rows
// over (Place) when it ends; the rest of the prompt (its last token, or
// all of it on a fallback) is then fed like a local prompt. Each decode step is one llama_decode over every
// active slot's next token plus as many feeding slots' prompt tokens as
// the context's n_batch leaves room for; each slot samples from its own
// row with llama.cpp's sampler chain (seeded; temperature 0 is greedy). A
// job ends at an end-of-generation token, a stop string, max_tokens, the
// slot's context (finish "length") or its deadline; a cancelled job (its
// client gone) frees its slot before the next step.
//
// Thread safety: Submit, Cancel (through the Job), Stats and Drain are
// thread-safe; the llama_context is touched only by the loop thread.
#ifndef RAGKV_SERVER_SCHEDULER_H_
#define RAGKV_SERVER_SCHEDULER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "connector/client.h"
#include "engine/llamacpp/llama_engine.h"
#include "server/api.h"

struct llama_context;
struct llama_sampler;

namespace ragkv::server {

// Job: one request between an HTTP thread and the loop. The loop appends
// text pieces and finishes it; the HTTP thread takes pieces and may cancel.
class Job {
 public:
  std::vector<int32_t> prompt;                          // the canonical tokens
  std::vector<std::pair<size_t, size_t>> documents;     // token spans of documents
  std::vector<std::pair<size_t, size_t>> passages;      // token spans of pasted paragraphs
  std::string cache_salt;                               // the tenant's key namespace
  Sampling sampling;
  RagkvOptions ragkv;
  Completion info;  // id, created, model, return_tokens: copied into the result
  std::chrono::steady_clock::time_point submitted = std::chrono::steady_clock::now();
  // deadline: past it the job ends with kDeadlineError (max(): none).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  bool expired() const { return std::chrono::steady_clock::now() > deadline; }

  // Take: waits up to `wait` for text or the end; appends new text to *out.
  // True once the job has finished and everything was taken.
  bool Take(std::string* out, absl::Duration wait);
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  // Result (after Take returned true): finish_reason "" and error set when
  // the engine failed.
  const Completion& result() const { return result_; }
  const std::string& error() const { return error_; }

  // Loop side.
  void Append(const std::string& text);
  void Finish(Completion c, std::string error = "");

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;
  bool done_ = false;
  Completion result_;
  std::string error_;
  std::atomic<bool> cancelled_{false};
};

// kDeadlineError: the error of a job that passed its deadline.
inline constexpr char kDeadlineError[] = "the request exceeded its deadline (--request-timeout)";

class Scheduler {
 public:
  struct Options {
    llama_context* ctx = nullptr;                       // not owned; n_seq_max >= parallel
    engine::llamacpp::LlamaCppEngine* engine = nullptr;  // through the sidecar; not owned
    int parallel = 1;
    int slot_ctx = 4096;   // cells one slot may use (prompt + output)
    int max_queue = 64;    // jobs waiting for a slot; more -> Submit refuses
    v1::DType wire_dtype = v1::DTYPE_F16;
    // blend_refusal: why this model is never blended (engine::llamacpp::
    // BlendRefusal); set, every prompt is llama.cpp's own prefill (engine may
    // be null) and every response names the reason (ragkv.blend_refused).
    std::string blend_refusal;
    // learn: pasted paragraphs (Job::passages) are sent as passages, stored
    // back on a miss (--learn-from-traffic); off: only documents and
    // ingested chunks are served from stored KV.
    bool learn = true;
  };
  explicit Scheduler(Options o);
  ~Scheduler();  // Drain(0) then stop

  enum class Admit { kQueued, kQueueFull, kDraining };
  Admit Submit(std::shared_ptr<Job> job);
  // Drain: refuse new jobs; wait up to `grace` for the queued and active ones,
  // then cancel the rest; the loop stops.
  void Drain(absl::Duration grace);

  struct Stats {
    int active = 0, queued = 0, parallel = 0;
    int64_t done = 0, cancelled = 0, decode_steps = 0;
  };
  Stats stats() const;
  int slot_ctx() const { return o_.slot_ctx; }

 private:
  struct Slot;
  void Loop();
  bool Start(Slot* s);
  bool StartFromPrefix(Slot* s, size_t lcp);
  // BeginFeed: the prompt from row `from` on is decoded in the coming
  // steps' batches (the cells hold rows 0..from-1); FinishFeed: its last
  // token's logits are in: sample the first token.
  void BeginFeed(Slot* s, size_t from);
  bool FinishFeed(Slot* s, const float* logits);
  // Arrived: a slot's Blend stream ended: its rows into the slot (Place).
  bool Arrived(Slot* s);
  // Placed: the handed-over rows are in the slot's cells: the rest is fed.
  bool Placed(Slot* s, absl::StatusOr<engine::llamacpp::LlamaCppEngine::Result> r);
  void Step();
  // Accept: handles a sampled token; false when the job ended.
  bool Accept(Slot* s, int32_t token);
  void Release(Slot* s, const std::string& finish, const std::string& error = "");
  int32_t Sample(Slot* s, const float* logits);

  Options o_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool draining_ = false, stop_ = false;
  int fetches_ready_ = 0;  // Blend streams ended, not yet handed over (under mu_)
  int decoding_ = 0;       // slots with a token to decode (the loop's own)
  std::atomic<int> active_{0};
  std::atomic<int64_t> done_{0}, cancelled_{0}, steps_{0};
  std::thread loop_;
};

}  // namespace ragkv::server

#endif  // RAGKV_SERVER_SCHEDULER_H_
