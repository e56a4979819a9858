// precompute_job.h: JobManager, the precompute batch runner behind both
// PrecomputeService and `ragkv precompute --data-dir`.
//
// A job: walk the corpus paths (files .txt/.md/.markdown/.json/.jsonl, or
// directories, recursively, in sorted order), read documents, ingest the
// new or changed ones into the retriever, list every chunk, keep this
// shard's chunks (ChunkKey.Lo64() mod shard_count == shard_index: stable
// across processes and machines), and for each chunk not already stored run
// the model over it alone (blend::PrecomputeChunk, the model's KV dtype) and
// Put it into the tiered store. With CorpusSpec.neighbours = k > 0, a last
// stage writes every catalogue chunk's neighbour-aware record of this shard
// (pipeline::PrecomputeNeighbourRecords; Job.neighbour_pass). Resumable: stored chunks are skipped (the
// SSD tier commits a chunk atomically, header last, so a job killed with
// kill -9 leaves only whole chunks behind). Per-chunk failures (e.g. a chunk
// longer than the context) are counted with their reason; the job still
// succeeds. Cancellation stops between chunks.
//
// Thread safety: all methods are thread-safe. Each job runs on its own
// coordinator thread plus `workers` worker threads (not the gRPC executor).
#ifndef RAGKV_SERVICES_PRECOMPUTE_JOB_H_
#define RAGKV_SERVICES_PRECOMPUTE_JOB_H_

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "kvstore/kv_chunk.h"
#include "ragkv/v1/precompute.pb.h"
#include "services/limits.h"

namespace ragkv::kvstore {
class TieredStore;
}
namespace ragkv::model {
class Model;
class Tokenizer;
}  // namespace ragkv::model
namespace ragkv::retrieval {
class Retriever;
}

namespace ragkv::services {

class JobManager {
 public:
  struct Options {
    const model::Model* model = nullptr;          // required for jobs to start
    // The BOS rule of neighbour-aware contexts (null: no BOS).
    const model::Tokenizer* tokenizer = nullptr;
    retrieval::Retriever* retriever = nullptr;    // required
    kvstore::TieredStore* store = nullptr;        // required
    kvstore::Codec kv_codec = kvstore::Codec::kRaw;  // codec of the stored records
    int default_workers = 1;
    int max_failures_listed = 100;
    // Testing seam: sleep this long before each computed chunk (lets tests
    // kill a job midway). Default 0.
    absl::Duration chunk_delay = absl::ZeroDuration();
    // confine_corpus: corpus paths must resolve inside one of corpus_roots
    // (canonical directories; services/internal/path_guard.h), and files
    // met while walking a directory that resolve outside them (symlinks)
    // are skipped. With no roots every corpus path is refused. Default off
    // (`ragkv precompute --data-dir`: the operator's own files); the
    // sidecar always confines (`ragkv serve --corpus-root`).
    bool confine_corpus = false;
    std::vector<std::filesystem::path> corpus_roots;
  };
  explicit JobManager(Options options);
  ~JobManager();  // CancelAll + join

  // Start: validates and starts a job; returns its id. NotFound: a corpus
  // path does not exist; InvalidArgument: no paths, shard_index >=
  // shard_count, workers > 64, neighbours > kMaxNeighbours; FailedPrecondition: no model/store/retriever,
  // or confine_corpus with no roots; PermissionDenied: confine_corpus and a
  // path outside the roots (whether or not it exists). Relative paths are
  // taken against the first root when confined.
  absl::StatusOr<std::string> Start(const v1::CorpusSpec& corpus, int workers);
  // Get: the job's current state; NotFound for an unknown id.
  absl::StatusOr<v1::Job> Get(const std::string& job_id) const;
  // WaitForUpdate: blocks until the job's version exceeds `*version` or
  // `timeout` passes; returns the state and updates *version.
  absl::StatusOr<v1::Job> WaitForUpdate(const std::string& job_id, uint64_t* version,
                                        absl::Duration timeout) const;
  // Cancel: requests cancellation (no-op on a finished job).
  absl::StatusOr<v1::Job> Cancel(const std::string& job_id);
  // CancelAll: cancels every running job and joins them (shutdown).
  void CancelAll();
  // Wait: blocks until the job is in a terminal state.
  absl::StatusOr<v1::Job> Wait(const std::string& job_id) const;

  static constexpr uint32_t kMaxNeighbours = kMaxJobNeighbours;

  static bool Terminal(v1::JobState s) {
    return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
           s == v1::JOB_STATE_CANCELLED;
  }

 private:
  struct JobRec {
    std::string id;
    v1::CorpusSpec corpus;
    int workers = 1;
    std::thread thread;
    std::atomic<bool> cancel{false};
    // Guarded by JobManager::mu_.
    v1::Job state;
    uint64_t version = 0;
    Clock::time_point start;
  };
  // Runner: one job's Run, stage by stage (defined in precompute_job.cc).
  class Runner;
  void Run(JobRec* job);

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<JobRec>> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // boot_id_: this process's start time and random bits (hex), in every job
  // id ("job-<boot>-<n>"), so that an id is never reused after a restart.
  std::string boot_id_;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_PRECOMPUTE_JOB_H_
