#include "server/scheduler.h"

#include <algorithm>
#include <chrono>
#include <future>

#include "base/clock.h"
#include "base/log.h"
#include "engine/llamacpp/runtime.h"
#include "llama.h"

namespace ragkv::server {

namespace lc = engine::llamacpp;

struct Scheduler::Slot {
  int id = 0;
  std::shared_ptr<Job> job;
  llama_sampler* smpl = nullptr;
  Completion c;
  std::string text;   // everything generated so far (after stop trimming)
  size_t sent = 0;    // bytes of text handed to the job
  int32_t next = -1;  // sampled, not yet decoded
  int n_past = 0;     // cells of the slot's sequence
  // tokens: what the sequence's cells hold (kept after a request ends, so
  // the next request with the same prefix reuses it).
  std::vector<int32_t> tokens;
  std::string salt;  // the cache_salt of the request that left `tokens`
  // feed: prompt tokens llama.cpp decodes in the coming decode steps (a
  // kept prefix's new tail, or a whole local prefill), `fed` of them done;
  // the first token is sampled when the last is decoded.
  std::vector<int32_t> feed;
  size_t fed = 0;
  Clock::time_point feed_t0;
  bool feeding() const { return fed < feed.size(); }
  // fetching: the request's Blend stream runs (fetch's thread).
  bool fetching = false;
  std::future<std::unique_ptr<engine::llamacpp::LlamaCppEngine::Fetched>> fetch;
};

namespace {

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// PrefixReusable: a slot's kept cells serve the prompt's first `lcp` rows
// when they cover at least half of it, in the modes that leave the choice
// of rows to the server ("", auto, prefix; the others name how the rows are
// made), and only for a request with the same cache_salt (another tenant
// could otherwise probe them through cached_tokens or timing).
bool PrefixReusable(const Job& j, const std::string& salt, size_t lcp) {
  const std::string& m = j.ragkv.mode;
  return (m.empty() || m == "auto" || m == "prefix") && lcp > 0 && 2 * lcp >= j.prompt.size() &&
         salt == j.cache_salt;
}

}  // namespace

bool Job::Take(std::string* out, absl::Duration wait) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, absl::ToChronoMilliseconds(wait), [&] { return done_ || !pending_.empty(); });
  out->append(pending_);
  pending_.clear();
  return done_;
}

void Job::Append(const std::string& text) {
  if (text.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  pending_ += text;
  cv_.notify_all();
}

void Job::Finish(Completion c, std::string error) {
  std::lock_guard<std::mutex> l(mu_);
  result_ = std::move(c);
  error_ = std::move(error);
  done_ = true;
  cv_.notify_all();
}

Scheduler::Scheduler(Options o) : o_(std::move(o)) {
  for (int i = 0; i < o_.parallel; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->id = i;
  }
  loop_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() { Drain(absl::ZeroDuration()); }

Scheduler::Admit Scheduler::Submit(std::shared_ptr<Job> job) {
  std::lock_guard<std::mutex> l(mu_);
  if (draining_) return Admit::kDraining;
  // Waiting = queued beyond the free slots.
  const int free_slots = o_.parallel - active_.load();
  if (static_cast<int>(queue_.size()) - free_slots >= o_.max_queue) return Admit::kQueueFull;
  job->submitted = Clock::now();
  queue_.push_back(std::move(job));
  cv_.notify_all();
  return Admit::kQueued;
}

void Scheduler::Drain(absl::Duration grace) {
  {
    std::unique_lock<std::mutex> l(mu_);
    if (stop_) return;
    draining_ = true;
    cv_.wait_for(l, absl::ToChronoMilliseconds(grace),
                 [&] { return queue_.empty() && active_.load() == 0; });
    for (auto& j : queue_) j->Cancel();
    for (auto& s : slots_) {
      if (s->job) s->job->Cancel();
    }
    stop_ = true;
    cv_.notify_all();
  }
  if (loop_.joinable()) loop_.join();
}

Scheduler::Stats Scheduler::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  Stats s;
  s.active = active_.load();
  s.queued = static_cast<int>(queue_.size());
  s.parallel = o_.parallel;
  s.done = done_.load();
  s.cancelled = cancelled_.load();
  s.decode_steps = steps_.load();
  return s;
}

void Scheduler::Loop() {
  while (true) {
    std::vector<Slot*> admitted;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] {
        return stop_ || decoding_ > 0 || fetches_ready_ > 0 ||
               (!queue_.empty() && active_.load() < o_.parallel);
      });
      if (stop_) {
        // Cancelled jobs: queued ones end here, active ones below.
        for (auto& j : queue_) j->Finish(j->info, "the server is shutting down");
        queue_.clear();
        if (active_.load() == 0) break;
        if (decoding_ == 0 && fetches_ready_ == 0) {
          // Only Blend streams in flight: wait for one to end.
          cv_.wait_for(l, std::chrono::milliseconds(50));
        }
      }
      // Jobs past their deadline leave the queue.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (!(*it)->expired()) {
          ++it;
          continue;
        }
        (*it)->Finish((*it)->info, kDeadlineError);
        it = queue_.erase(it);
      }
      // Each queued job (FIFO) takes the free slot whose kept cells share
      // the longest prefix with its prompt.
      while (!queue_.empty()) {
        Slot* best = nullptr;
        size_t best_lcp = 0;
        for (auto& s : slots_) {
          if (s->job) continue;
          const Job& j = *queue_.front();
          const size_t lcp = s->salt == j.cache_salt ? CommonPrefix(s->tokens, j.prompt) : 0;
          if (best == nullptr || lcp > best_lcp) best = s.get(), best_lcp = lcp;
        }
        if (best == nullptr) break;
        best->job = std::move(queue_.front());
        queue_.pop_front();
        active_.fetch_add(1);
        admitted.push_back(best);
      }
    }
    for (Slot* s : admitted) Start(s);
    for (auto& s : slots_) {
      if (s->fetching &&
          s->fetch.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        Arrived(s.get());
      }
    }
    // A cancelled request frees its slot now, unless its Blend stream is
    // still running (then when it ends).
    for (auto& s : slots_) {
      if (s->job && !s->fetching && s->job->cancelled()) Release(s.get(), "", "cancelled");
      if (s->job && !s->fetching && s->job->expired()) Release(s.get(), "", kDeadlineError);
    }
    if (active_.load() > 0) Step();
    decoding_ = 0;
    for (auto& s : slots_) decoding_ += s->job && (s->next >= 0 || s->feeding());
  }
}

namespace {

v1::BlendMode ModeOf(const std::string& m) {
  if (m == "full") return v1::BLEND_MODE_FULL_PREFILL;
  if (m == "reuse") return v1::BLEND_MODE_FULL_REUSE;
  if (m == "prefix") return v1::BLEND_MODE_PREFIX_CACHING;
  if (m == "auto") return v1::BLEND_MODE_AUTO;
  return v1::BLEND_MODE_CACHEBLEND;
}

void AddTokens(v1::BlendRequest* req, const std::vector<int32_t>& p, size_t b, size_t e, bool doc) {
  if (e <= b) return;
  v1::Segment* s = req->add_segments();
  s->mutable_tokens()->mutable_ids()->Assign(p.begin() + b, p.begin() + e);
  s->set_document(doc);
}

// DocSpan: a document's or passage's rows.
struct DocSpan {
  size_t begin = 0, end = 0;
  bool operator<(const DocSpan& o) const { return begin < o.begin; }
};

// DocumentSpans: the documents, and (learning) the passages no document
// overlaps, sorted.
std::vector<DocSpan> DocumentSpans(const Job& j, bool learn) {
  std::vector<DocSpan> out;
  for (size_t i = 0; i < j.documents.size(); ++i) {
    out.push_back({j.documents[i].first, j.documents[i].second});
  }
  if (learn) {
    for (const auto& [b, e] : j.passages) {
      const bool inside = std::any_of(j.documents.begin(), j.documents.end(),
                                      [&](const auto& d) { return d.first < e && b < d.second; });
      if (!inside) out.push_back({b, e});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// BlendRequestOf: the whole prompt as raw tokens, in which the sidecar
// finds the catalogue's chunks (whole or less a few boundary rows, so a
// document precomputed alone is found although its first token differs in
// place), with the documents and (learning) the pasted passages as spans
// served by content where no catalogue chunk overlaps them and stored back
// on a miss. Full mode sends the context as one document (stored back).
v1::BlendRequest BlendRequestOf(const Job& j, v1::DType dtype, bool learn) {
  v1::BlendRequest req;
  v1::BlendOptions* o = req.mutable_options();
  o->set_mode(ModeOf(j.ragkv.mode));
  o->set_recompute_ratio(static_cast<float>(j.ragkv.ratio));
  o->set_selector(j.ragkv.selector);
  o->set_adaptive_mass(static_cast<float>(j.ragkv.adaptive_mass));
  o->set_adaptive_threshold(static_cast<float>(j.ragkv.adaptive_threshold));
  o->set_adaptive_budget(static_cast<float>(j.ragkv.adaptive_budget));
  o->set_output_dtype(dtype);
  o->set_accept_restart(true);
  o->set_cache_salt(j.cache_salt);
  // Nothing stored: llama.cpp prefills it faster than a blend of nothing
  // would (the misses are stored back all the same). Full mode asks for
  // the sidecar's rows.
  o->set_not_found_when_cold(j.ragkv.mode != "full");
  const std::vector<int32_t>& p = j.prompt;
  const size_t n = p.size();
  if (j.ragkv.mode == "full") {
    // The blend needs a chunk: the context is one document (stored back).
    AddTokens(&req, p, 0, n - 1, true);
    AddTokens(&req, p, n - 1, n, false);
    return req;
  }
  req.mutable_raw()->mutable_ids()->Assign(p.begin(), p.end());
  req.mutable_raw()->set_query_tokens(1);
  for (const DocSpan& d : DocumentSpans(j, learn)) {
    if (d.end >= n) continue;  // spans end before the query
    v1::TokenSpan* t = req.mutable_raw()->add_passages();
    t->set_begin(static_cast<uint32_t>(d.begin));
    t->set_end(static_cast<uint32_t>(d.end));
  }
  return req;
}

llama_sampler* NewSampler(const Sampling& s, int32_t n_vocab) {
  llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  if (!s.logit_bias.empty()) {
    std::vector<llama_logit_bias> bias;
    for (const auto& [id, b] : s.logit_bias) {
      if (id < n_vocab) bias.push_back({id, b});
    }
    llama_sampler_chain_add(
        chain, llama_sampler_init_logit_bias(n_vocab, static_cast<int32_t>(bias.size()), bias.data()));
  }
  if (s.temperature <= 0) {
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    return chain;
  }
  if (s.top_p < 1) llama_sampler_chain_add(chain, llama_sampler_init_top_p(s.top_p, 1));
  llama_sampler_chain_add(chain, llama_sampler_init_temp(s.temperature));
  llama_sampler_chain_add(chain, llama_sampler_init_dist(s.seed ? *s.seed : LLAMA_DEFAULT_SEED));
  return chain;
}

}  // namespace

bool Scheduler::Start(Slot* s) {
  Job& j = *s->job;
  s->c = j.info;
  s->text.clear();
  s->sent = 0;
  s->next = -1;
  s->c.timing.queue_ms = MsSince(j.submitted);
  s->c.timing.blend_refused = o_.blend_refusal;
  if (j.cancelled()) {
    Release(s, "", "cancelled");
    return false;
  }
  const size_t lcp = std::min(CommonPrefix(s->tokens, j.prompt), j.prompt.size() - 1);
  if (PrefixReusable(j, s->salt, lcp) &&
      llama_memory_seq_rm(llama_get_memory(o_.ctx), s->id, static_cast<llama_pos>(lcp), -1)) {
    return StartFromPrefix(s, lcp);
  }
  s->tokens.clear();
  s->salt = j.cache_salt;
  const bool local = !o_.blend_refusal.empty() || j.ragkv.mode == "local" ||
                     (j.ragkv.mode == "full" && j.prompt.size() < 2);
  if (!local) {
    // The Blend stream runs on its own thread while the other slots decode;
    // the loop hands its rows over when it is done (Finished).
    s->fetching = true;
    v1::BlendRequest req = BlendRequestOf(j, o_.wire_dtype, o_.learn);
    std::shared_ptr<Job> job = s->job;  // the stream stops within a layer once it is cancelled
    s->fetch = std::async(std::launch::async, [this, job, req = std::move(req)] {
      auto f = o_.engine->Fetch(req, [job] { return job->cancelled() || job->expired(); });
      std::lock_guard<std::mutex> l(mu_);
      ++fetches_ready_;
      cv_.notify_all();
      return f;
    });
    return true;
  }
  // llama.cpp prefills it all, in the coming decode steps' batches.
  llama_memory_seq_rm(llama_get_memory(o_.ctx), s->id, -1, -1);
  BeginFeed(s, 0);
  return true;
}

void Scheduler::BeginFeed(Slot* s, size_t from) {
  const std::vector<int32_t>& prompt = s->job->prompt;
  s->tokens.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(from));
  s->n_past = static_cast<int>(from);
  s->feed.assign(prompt.begin() + static_cast<std::ptrdiff_t>(from), prompt.end());
  s->fed = 0;
  s->feed_t0 = Clock::now();
}

bool Scheduler::FinishFeed(Slot* s, const float* logits) {
  Job& j = *s->job;
  Timing& t = s->c.timing;
  t.prefill_ms = MsSince(s->feed_t0);
  t.prefilled_tokens = static_cast<int>(s->feed.size());
  s->feed.clear();
  s->fed = 0;
  s->c.usage.prompt_tokens = static_cast<int>(j.prompt.size());
  if (s->c.return_tokens) s->c.prompt_ids = j.prompt;
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(o_.ctx));
  s->smpl = NewSampler(j.sampling, llama_vocab_n_tokens(vocab));
  return Accept(s, Sample(s, logits));
}

bool Scheduler::Arrived(Slot* s) {
  std::unique_ptr<lc::LlamaCppEngine::Fetched> f = s->fetch.get();
  s->fetching = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    --fetches_ready_;
  }
  if (s->job->cancelled()) {
    Release(s, "", "cancelled");
    return false;
  }
  if (s->job->expired()) {
    Release(s, "", kDeadlineError);
    return false;
  }
  // Rows of stored exact prefix blocks (the sidecar's exact-prefix cache),
  // when they were handed over.
  const int prefix = f->status.ok() ? static_cast<int>(f->stats.prefix_tokens) : 0;
  absl::StatusOr<lc::LlamaCppEngine::Result> r = o_.engine->Place(std::move(f), s->job->prompt, s->id);
  if (r.ok()) s->c.timing.stored_prefix_tokens = std::min(prefix, r->handed_over_tokens);
  return Placed(s, std::move(r));
}

bool Scheduler::Placed(Slot* s, absl::StatusOr<lc::LlamaCppEngine::Result> r) {
  if (!r.ok()) {
    RAGKV_LOG(WARNING) << "llama.cpp handover failed: " << r.status();
    Release(s, "", "prefill failed: " + r.status().ToString());
    return false;
  }
  Timing& t = s->c.timing;
  t.blend_ms = r->blend_ms;
  t.handover_ms = r->handover_ms;
  t.handed_over_tokens = r->handed_over_tokens;
  t.recomputed_tokens = r->recomputed_tokens;
  t.fallback = r->fallback;
  s->c.usage.cached_tokens = r->reused_tokens;
  // The rest (the last token; the whole prompt on a fallback) joins the
  // decode steps' batches.
  BeginFeed(s, static_cast<size_t>(r->handed_over_tokens));
  return true;
}

bool Scheduler::StartFromPrefix(Slot* s, size_t lcp) {
  // The kept cells hold rows 0..lcp-1; the new tail joins the decode steps.
  s->c.timing.slot_prefix_tokens = static_cast<int>(lcp);
  s->c.usage.cached_tokens = static_cast<int>(lcp);
  BeginFeed(s, lcp);
  return true;
}

int32_t Scheduler::Sample(Slot* s, const float* logits) {
  const int32_t n = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(o_.ctx)));
  std::vector<llama_token_data> cur(n);
  for (int32_t i = 0; i < n; ++i) cur[i] = {i, logits[i], 0.0f};
  llama_token_data_array arr{cur.data(), cur.size(), -1, false};
  llama_sampler_apply(s->smpl, &arr);
  const int32_t tok = arr.selected >= 0 ? arr.data[arr.selected].id : arr.data[0].id;
  llama_sampler_accept(s->smpl, tok);
  return tok;
}

void Scheduler::Step() {
  // One llama_decode: each decoding slot's next token, then as many of the
  // feeding slots' prompt tokens as the context's n_batch leaves room for.
  struct Part {
    Slot* s;
    int first, n;  // batch rows [first, first + n)
  };
  std::vector<Part> parts;
  int used = 0;
  for (auto& s : slots_) {
    if (s->job && s->next >= 0) parts.push_back({s.get(), used++, 1});
  }
  const int budget = static_cast<int>(llama_n_batch(o_.ctx));
  for (auto& s : slots_) {
    if (!s->job || !s->feeding() || used >= budget) continue;
    const int n = std::min<int>(budget - used, static_cast<int>(s->feed.size() - s->fed));
    parts.push_back({s.get(), used, n});
    used += n;
  }
  if (parts.empty()) return;
  llama_batch b = llama_batch_init(used, 0, 1);
  for (const Part& p : parts) {
    Slot* s = p.s;
    const bool feeding = s->feeding();
    for (int k = 0; k < p.n; ++k) {
      const int row = p.first + k;
      b.token[row] = feeding ? s->feed[s->fed + k] : s->next;
      b.pos[row] = s->n_past + k;
      b.n_seq_id[row] = 1;
      b.seq_id[row][0] = s->id;
      b.logits[row] = !feeding || s->fed + k + 1 == s->feed.size();
    }
  }
  b.n_tokens = used;
  const int rc = llama_decode(o_.ctx, b);
  llama_batch_free(b);
  steps_.fetch_add(1);
  if (rc != 0) {
    for (const Part& p : parts) Release(p.s, "", "llama_decode failed (" + std::to_string(rc) + ")");
    return;
  }
  for (const Part& p : parts) {
    Slot* s = p.s;
    // The part's last row has logits when it ends a feed or is a next token.
    auto logits = [&] { return llama_get_logits_ith(o_.ctx, p.first + p.n - 1); };
    s->n_past += p.n;
    if (!s->feeding()) {
      s->tokens.push_back(s->next);
      Accept(s, Sample(s, logits()));
      continue;
    }
    s->tokens.insert(s->tokens.end(), s->feed.begin() + static_cast<std::ptrdiff_t>(s->fed),
                     s->feed.begin() + static_cast<std::ptrdiff_t>(s->fed + p.n));
    s->fed += p.n;
    if (!s->feeding()) FinishFeed(s, logits());
  }
}

bool Scheduler::Accept(Slot* s, int32_t token) {
  Job& j = *s->job;
  if (j.cancelled()) {
    Release(s, "", "cancelled");
    return false;
  }
  if (s->c.usage.completion_tokens == 0) s->c.timing.ttft_ms = MsSince(j.submitted);
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(o_.ctx));
  if (llama_vocab_is_eog(vocab, token)) {
    Release(s, "stop");
    return false;
  }
  ++s->c.usage.completion_tokens;
  if (s->c.return_tokens) s->c.output_ids.push_back(token);
  char buf[256];
  const int n = llama_token_to_piece(vocab, token, buf, sizeof buf, 0, false);
  const size_t before = s->text.size();
  if (n > 0) s->text.append(buf, n);
  // Stop strings: the text ends before the first; text that may begin one
  // is held back until it cannot.
  size_t hold = 0;
  for (const std::string& st : j.sampling.stop) {
    const size_t from = before >= st.size() ? before - st.size() + 1 : 0;
    const size_t at = s->text.find(st, from);
    if (at != std::string::npos) {
      s->text.resize(at);
      Release(s, "stop");
      return false;
    }
    for (size_t k = std::min(st.size() - 1, s->text.size()); k > hold; --k) {
      if (s->text.compare(s->text.size() - k, k, st, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  if (j.sampling.max_tokens > 0 && s->c.usage.completion_tokens >= j.sampling.max_tokens) {
    Release(s, "length");
    return false;
  }
  if (s->n_past + 1 > o_.slot_ctx) {
    Release(s, "length");
    return false;
  }
  const size_t ready = Utf8CompleteLength(s->text.substr(0, s->text.size() - hold));
  if (ready > s->sent) {
    j.Append(s->text.substr(s->sent, ready - s->sent));
    s->sent = ready;
  }
  s->next = token;
  return true;
}

void Scheduler::Release(Slot* s, const std::string& finish, const std::string& error) {
  // The cells stay for the next request sharing their prefix, unless the
  // request failed (they may be partial).
  if (!error.empty() && error != "cancelled" && error != std::string(kDeadlineError)) {
    llama_memory_seq_rm(llama_get_memory(o_.ctx), s->id, -1, -1);
    s->tokens.clear();
  }
  if (s->smpl != nullptr) llama_sampler_free(s->smpl);
  s->smpl = nullptr;
  s->next = -1;
  s->feed.clear();
  s->fed = 0;
  if (s->text.size() > s->sent) s->job->Append(s->text.substr(s->sent));
  s->c.text = s->text;
  s->c.finish_reason = finish;
  s->c.timing.e2e_ms = MsSince(s->job->submitted);
  if (error == "cancelled") cancelled_.fetch_add(1);
  s->job->Finish(std::move(s->c), error);
  s->c = Completion{};
  {
    std::lock_guard<std::mutex> l(mu_);
    s->job.reset();
    active_.fetch_sub(1);
    done_.fetch_add(1);
    cv_.notify_all();
  }
}

}  // namespace ragkv::server
