// job_watch_hub.h: JobWatchHub, the one thread that serves every WatchJob
// stream. A watch used to own an OS thread (200 watchers: 224 threads, and
// a failed thread creation ended in std::terminate) and pushed every ~50 ms
// whatever interval it asked for. Here each watch is a record polled by
// one thread: a job's new state is sent at most once per the watch's
// interval (the latest state wins when the client reads slowly), the
// terminal state is always sent, then the stream ends. At most
// `max_watches` streams at once; more get RESOURCE_EXHAUSTED.
// Thread-safe. Private to services/.
#ifndef RAGKV_SERVICES_INTERNAL_JOB_WATCH_HUB_H_
#define RAGKV_SERVICES_INTERNAL_JOB_WATCH_HUB_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ragkv/v1/precompute.pb.h"
#include "services/internal/call_gate.h"
#include "services/internal/grpc_util.h"

namespace ragkv::services {
class JobManager;
}

namespace ragkv::services::internal {

class JobWatchHub {
 public:
  JobWatchHub(const JobManager* jobs, int max_watches);
  ~JobWatchHub();  // Stop()

  // Stop: ends every watch with UNAVAILABLE (server shutting down) and
  // refuses later ones the same way; returns once the hub thread is gone.
  void Stop();
  JobWatchHub(const JobWatchHub&) = delete;
  JobWatchHub& operator=(const JobWatchHub&) = delete;

  // Watch: serves `job_id` on `w` (which the hub closes, exactly once).
  void Watch(StreamWriter<v1::Job>* w, std::string job_id, absl::Duration interval,
             CallGate::Ticket ticket);

 private:
  struct Entry {
    StreamWriter<v1::Job>* w;
    std::string job_id;
    absl::Duration interval;
    absl::Time next_due;
    uint64_t version = 0;
    CallGate::Ticket ticket;
  };
  void Run();
  // Serve: sends e's job when it changed and is due; true (with *end) when
  // the stream is to be closed.
  bool Serve(Entry* e, absl::Time now, grpc::Status* end) const;

  const JobManager* jobs_;
  const int max_watches_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ragkv::services::internal

#endif  // RAGKV_SERVICES_INTERNAL_JOB_WATCH_HUB_H_
