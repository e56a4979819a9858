#include "services/precompute_job.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "blend/kv_source.h"
#include "blend/store_source.h"
#include "kvstore/chunk_key.h"
#include "kvstore/tiered_store.h"
#include "model/model.h"
#include "pipeline/neighbour_records.h"
#include "retrieval/corpus_reader.h"
#include "retrieval/retriever.h"
#include "services/internal/job_progress.h"
#include "services/internal/path_guard.h"
#include "services/internal/validate.h"

namespace ragkv::services {

namespace {

bool IsCorpusFile(const std::filesystem::path& p) {
  static const std::set<std::string> kExt = {".txt", ".md", ".markdown", ".json", ".jsonl"};
  return kExt.count(p.extension().string()) > 0;
}

// ListFiles: the corpus files of `spec`. With `roots` (confined), a file
// that resolves outside them (a symlink leading out) is skipped and logged.
std::vector<std::string> ListFiles(const v1::CorpusSpec& spec,
                                   const std::vector<std::filesystem::path>* roots) {
  std::vector<std::string> files;
  auto keep = [roots](const std::filesystem::path& p) {
    if (roots == nullptr || internal::IsInsideRoots(p, *roots)) return true;
    RAGKV_LOG(WARNING) << "precompute: skipping " << p.string()
                       << ": resolves outside the corpus roots";
    return false;
  };
  for (const std::string& path : spec.paths()) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
           !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_regular_file(ec) && IsCorpusFile(it->path()) && keep(it->path())) {
          found.push_back(it->path());
        }
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (keep(path)) {
      files.push_back(path);
    }
  }
  return files;
}

struct WorkItem {
  kvstore::ChunkKey key;
  std::vector<int32_t> tokens;
  std::string name;  // doc#ordinal
};

}  // namespace

JobManager::JobManager(Options options) : options_(std::move(options)) {
  std::random_device rd;
  boot_id_ = absl::StrFormat("%x%04x", absl::ToUnixSeconds(absl::Now()), rd() & 0xffff);
}

JobManager::~JobManager() { CancelAll(); }

absl::StatusOr<std::string> JobManager::Start(const v1::CorpusSpec& corpus, int workers) {
  if (options_.model == nullptr || options_.store == nullptr || options_.retriever == nullptr) {
    return absl::FailedPreconditionError(
        "precompute needs a model (--model), the KV store and retrieval");
  }
  if (corpus.paths().empty()) return absl::InvalidArgumentError("corpus has no paths");
  const uint32_t n = std::max<uint32_t>(1, corpus.shard_count());
  if (corpus.shard_index() >= n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard %d/%d: index must be < count", corpus.shard_index(), n));
  }
  if (workers < 0 || workers > 64) return absl::InvalidArgumentError("workers must be in [0, 64]");
  if (corpus.neighbours() > kMaxNeighbours) {
    return absl::InvalidArgumentError(absl::StrFormat("neighbours %d: at most %d",
                                                      corpus.neighbours(), kMaxNeighbours));
  }
  v1::CorpusSpec spec = corpus;
  if (options_.confine_corpus) {
    for (std::string& p : *spec.mutable_paths()) {
      RETURN_IF_ERROR(internal::ResolveInRoots(p, options_.corpus_roots).status());
      // Read the path as given (file names are document ids), made absolute.
      if (std::filesystem::path(p).is_relative()) p = (options_.corpus_roots.front() / p).string();
    }
  }
  for (const std::string& p : spec.paths()) {
    std::error_code ec;
    if (!std::filesystem::exists(p, ec)) {
      return absl::NotFoundError("corpus path does not exist: " + p);
    }
  }
  auto job = std::make_unique<JobRec>();
  job->corpus = std::move(spec);
  job->workers = workers > 0 ? workers : std::max(1, options_.default_workers);
  JobRec* raw = job.get();
  {
    absl::MutexLock lock(&mu_);
    job->id = absl::StrFormat("job-%s-%d", boot_id_, next_id_++);
    job->state.set_job_id(job->id);
    job->state.set_state(v1::JOB_STATE_PENDING);
    job->start = Clock::now();
    jobs_[job->id] = std::move(job);
  }
  raw->thread = std::thread([this, raw] { Run(raw); });
  return raw->id;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError("unknown job " + internal::Quoted(job_id));
  return it->second->state;
}

absl::StatusOr<v1::Job> JobManager::WaitForUpdate(const std::string& job_id, uint64_t* version,
                                                  absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError("unknown job " + internal::Quoted(job_id));
  const JobRec* j = it->second.get();
  const uint64_t seen = *version;
  auto changed = [j, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return j->version > seen; };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  *version = j->version;
  return j->state;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError("unknown job " + internal::Quoted(job_id));
  it->second->cancel = true;
  return it->second->state;
}

absl::StatusOr<v1::Job> JobManager::Wait(const std::string& job_id) const {
  uint64_t version = 0;
  for (;;) {
    ASSIGN_OR_RETURN(v1::Job j, WaitForUpdate(job_id, &version, absl::Seconds(1)));
    if (Terminal(j.state())) return j;
  }
}

void JobManager::CancelAll() {
  std::vector<JobRec*> all;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, j] : jobs_) {
      j->cancel = true;
      all.push_back(j.get());
    }
  }
  for (JobRec* j : all) {
    if (j->thread.joinable()) j->thread.join();
  }
}

// JobManager::Runner: one job's Run, stage by stage, on its coordinator
// thread (and, for the compute stage, its worker threads). The stages that
// can fail the job return false after Fail().
class JobManager::Runner {
 public:
  Runner(JobManager* mgr, JobRec* job) : mgr_(mgr), options_(mgr->options_), job_(job) {}

  // Update: mutate the shared state under the lock, refresh its clocks,
  // rate and ETA (internal::SetJobRates) and bump the version.
  template <typename Fn>
  void Update(Fn&& fn) {
    absl::MutexLock lock(&mgr_->mu_);
    fn(job_->state);
    internal::JobTimes t;
    t.elapsed_seconds = SecondsSince(job_->start);
    if (pass_start_) t.pass_seconds = SecondsSince(*pass_start_);
    job_->state.set_elapsed_seconds(t.elapsed_seconds);
    internal::SetJobRates(t, &job_->state);
    ++job_->version;
  }
  // Fail: logs `s` and marks the job failed with its message.
  void Fail(const absl::Status& s);
  // AddFailure: counts a failed file or chunk in `j` and lists it (up to
  // max_failures_listed). Call inside Update.
  void AddFailure(v1::Job& j, const std::string& what, const absl::Status& s);

  // IngestDocuments: stage 1: reads the corpus files and ingests the new or
  // changed documents; appends every document id read to *doc_ids.
  bool IngestDocuments(std::vector<std::string>* doc_ids);
  // ListChunks: stage 2: this shard's distinct non-empty chunks of
  // `doc_ids`, appended to *items.
  bool ListChunks(const std::vector<std::string>& doc_ids, std::vector<WorkItem>* items);
  // ComputeChunks: stage 3: computes and stores the items not yet stored,
  // `workers` threads pulling from a shared cursor, until done or cancelled.
  void ComputeChunks(const std::vector<WorkItem>& items);
  // StoreChunk: runs the model over one chunk, Puts its KV and counts it as
  // done or failed.
  void StoreChunk(const WorkItem& it);
  // ComputeNeighbourRecords: stage 4 (corpus.neighbours > 0): every
  // catalogue chunk's neighbour-aware record in this shard; progress in
  // Job.neighbour_pass. False (after Fail) when the catalogue cannot be read.
  bool ComputeNeighbourRecords();
  // Finish: flushes the store, saves the retrieval index, sets the final state.
  void Finish();

 private:
  // NeighbourOptions: the pass's options for this job, its callbacks
  // reporting into the Job (RecordPassProgress, RecordPassFailure).
  pipeline::NeighbourPrecomputeOptions NeighbourOptions();
  // RecordPassProgress: the pass's running stats into Job.neighbour_pass.
  void RecordPassProgress(const pipeline::NeighbourPrecomputeStats& st);
  // RecordPassFailure: lists a failed record in Job.failures (up to
  // max_failures_listed) as "chunk <id> (neighbours)".
  void RecordPassFailure(const pipeline::NeighbourFailure& f);

  JobManager* const mgr_;
  const JobManager::Options& options_;
  JobRec* const job_;
  // When stage 4 began (unset before); written and read under mgr_->mu_.
  std::optional<Clock::time_point> pass_start_;
};

void JobManager::Runner::Fail(const absl::Status& s) {
  RAGKV_LOG(ERROR) << "precompute " << job_->id << " failed: " << s;
  Update([&](v1::Job& j) {
    j.set_state(v1::JOB_STATE_FAILED);
    j.set_error(std::string(s.message()));
  });
}

void JobManager::Runner::AddFailure(v1::Job& j, const std::string& what, const absl::Status& s) {
  j.set_chunks_failed(j.chunks_failed() + 1);
  if (j.failures_size() < options_.max_failures_listed) {
    v1::ChunkFailure* f = j.add_failures();
    f->set_chunk(what);
    f->set_reason(s.ToString());
  }
}

bool JobManager::Runner::IngestDocuments(std::vector<std::string>* doc_ids) {
  const std::vector<std::filesystem::path>* roots =
      options_.confine_corpus ? &options_.corpus_roots : nullptr;
  for (const std::string& file : ListFiles(job_->corpus, roots)) {
    if (job_->cancel) break;
    auto corpus = retrieval::ReadCorpusFile(file);
    if (!corpus.ok()) {
      Update([&](v1::Job& j) { AddFailure(j, file, corpus.status()); });
      continue;
    }
    std::vector<retrieval::Document> fresh;
    for (auto& d : corpus->documents) {
      doc_ids->push_back(d.id);
      auto existing = options_.retriever->GetDocument(d.id);
      if (!existing.ok()) {
        Fail(existing.status());
        return false;
      }
      const uint64_t h = XXH64(d.text.data(), d.text.size(), 0);
      if (*existing && (*existing)->text_hash == h) continue;
      fresh.push_back(std::move(d));
    }
    if (!fresh.empty()) {
      // Changed documents are replaced atomically with the new ones: a
      // concurrent search sees the old version or the new, never neither.
      auto st = options_.retriever->Upsert(absl::MakeConstSpan(fresh));
      if (!st.ok()) {
        Update([&](v1::Job& j) { AddFailure(j, file, st.status()); });
        continue;
      }
    }
  }
  return true;
}

bool JobManager::Runner::ListChunks(const std::vector<std::string>& doc_ids,
                                    std::vector<WorkItem>* items) {
  const kvstore::Fingerprint fp = options_.model->fingerprint();
  const uint32_t n = std::max<uint32_t>(1, job_->corpus.shard_count());
  std::set<kvstore::ChunkKey> seen;
  for (const std::string& id : doc_ids) {
    if (job_->cancel) break;
    auto doc = options_.retriever->GetDocument(id);
    if (!doc.ok()) {
      Fail(doc.status());
      return false;
    }
    if (!*doc) continue;
    for (int64_t cid : (*doc)->chunk_ids) {
      auto ch = options_.retriever->GetChunk(cid);
      if (!ch.ok()) {
        Fail(ch.status());
        return false;
      }
      if (!*ch || (*ch)->token_ids.empty()) continue;
      kvstore::ChunkKey key = kvstore::ChunkKey::Of(fp, (*ch)->token_ids);
      if (key.Lo64() % n != job_->corpus.shard_index()) continue;
      if (!seen.insert(key).second) continue;  // identical passage elsewhere
      items->push_back({key, std::move((*ch)->token_ids), absl::StrFormat("%s#%d", id, (*ch)->ordinal)});
    }
  }
  return true;
}

void JobManager::Runner::ComputeChunks(const std::vector<WorkItem>& items) {
  std::atomic<size_t> next{0};
  auto work = [&]() {
    for (;;) {
      if (job_->cancel) return;
      const size_t i = next.fetch_add(1);
      if (i >= items.size()) return;
      const WorkItem& it = items[i];
      if (!job_->corpus.replace() && options_.store->Contains(it.key)) {
        Update([](v1::Job& j) { j.set_chunks_skipped(j.chunks_skipped() + 1); });
        continue;
      }
      if (options_.chunk_delay > absl::ZeroDuration()) absl::SleepFor(options_.chunk_delay);
      StoreChunk(it);
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < job_->workers; ++w) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
}

void JobManager::Runner::StoreChunk(const WorkItem& it) {
  absl::StatusOr<uint64_t> stored = blend::PrecomputeAndStore(*options_.model, options_.store, it.tokens,
                                                                options_.kv_codec);
  const absl::Status s = stored.status();
  const uint64_t bytes = stored.ok() ? *stored : 0;
  if (s.ok()) {
    Update([&](v1::Job& j) {
      j.set_chunks_done(j.chunks_done() + 1);
      j.set_tokens_done(j.tokens_done() + it.tokens.size());
      j.set_bytes_stored(j.bytes_stored() + bytes);
    });
  } else {
    Update([&](v1::Job& j) { AddFailure(j, it.name, s); });
  }
}

pipeline::NeighbourPrecomputeOptions JobManager::Runner::NeighbourOptions() {
  const v1::CorpusSpec& c = job_->corpus;
  pipeline::NeighbourPrecomputeOptions no;
  no.model = options_.model;
  no.tokenizer = options_.tokenizer;
  no.retriever = options_.retriever;
  no.store = options_.store;
  no.neighbours = static_cast<int>(c.neighbours());
  no.codec = options_.kv_codec;
  no.shard_index = c.shard_index();
  no.shard_count = std::max<uint32_t>(1, c.shard_count());
  no.replace = c.replace();
  no.workers = job_->workers;
  no.max_failures_listed = 0;  // listed in Job.failures as they come
  no.cancelled = [this] { return job_->cancel.load(); };
  no.on_progress = [this](const pipeline::NeighbourPrecomputeStats& st) { RecordPassProgress(st); };
  no.on_failure = [this](const pipeline::NeighbourFailure& f) { RecordPassFailure(f); };
  return no;
}

void JobManager::Runner::RecordPassProgress(const pipeline::NeighbourPrecomputeStats& st) {
  Update([&](v1::Job& j) {
    v1::NeighbourPass* p = j.mutable_neighbour_pass();
    p->set_k(job_->corpus.neighbours());
    p->set_chunks_total(st.chunks);
    p->set_chunks_done(st.computed);
    p->set_chunks_skipped(st.skipped);
    p->set_chunks_failed(st.failed);
    p->set_bytes_stored(st.bytes);
    p->set_context_tokens(st.context_tokens);
    p->set_chunk_tokens(st.chunk_tokens);
  });
}

void JobManager::Runner::RecordPassFailure(const pipeline::NeighbourFailure& f) {
  Update([&](v1::Job& j) {
    if (j.failures_size() >= options_.max_failures_listed) return;
    v1::ChunkFailure* cf = j.add_failures();
    cf->set_chunk(absl::StrFormat("chunk %d (neighbours)", f.chunk_id));
    cf->set_reason(f.reason);
  });
}

bool JobManager::Runner::ComputeNeighbourRecords() {
  Update([this](v1::Job&) { pass_start_ = Clock::now(); });  // the ETA counts the pass from here
  absl::StatusOr<pipeline::NeighbourPrecomputeStats> st =
      pipeline::PrecomputeNeighbourRecords(NeighbourOptions());
  if (!st.ok()) {
    Fail(st.status());
    return false;
  }
  return true;
}

void JobManager::Runner::Finish() {
  absl::Status flushed = options_.store->Flush();
  absl::Status saved = options_.retriever->Save();
  if (!flushed.ok()) {
    Fail(flushed);
    return;
  }
  if (!saved.ok()) {
    RAGKV_LOG(WARNING) << "retrieval index save failed: " << saved;
  }
  Update([&](v1::Job& j) {
    j.set_state(job_->cancel ? v1::JOB_STATE_CANCELLED : v1::JOB_STATE_SUCCEEDED);
  });
}

void JobManager::Run(JobRec* job) {
  Runner r(this, job);
  r.Update([](v1::Job& j) { j.set_state(v1::JOB_STATE_RUNNING); });

  // 1. Read and ingest documents (skip unchanged ones: resumable).
  std::vector<std::string> doc_ids;
  if (!r.IngestDocuments(&doc_ids)) return;
  r.Update([&](v1::Job& j) { j.set_documents(doc_ids.size()); });

  // 2. List this shard's chunks.
  std::vector<WorkItem> items;
  if (!r.ListChunks(doc_ids, &items)) return;
  r.Update([&](v1::Job& j) { j.set_chunks_total(items.size()); });

  // 3. Compute and store, `workers` threads pulling from a shared cursor.
  r.ComputeChunks(items);

  // 4. The neighbour-aware records (catalogue chunks of this shard).
  if (job->corpus.neighbours() > 0 && !job->cancel && !r.ComputeNeighbourRecords()) return;
  r.Finish();
}

}  // namespace ragkv::services
