#include "services/internal/job_watch_hub.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "services/precompute_job.h"

namespace ragkv::services::internal {
namespace {

constexpr absl::Duration kTick = absl::Milliseconds(10);

}  // namespace

JobWatchHub::JobWatchHub(const JobManager* jobs, int max_watches)
    : jobs_(jobs), max_watches_(max_watches), thread_([this] { Run(); }) {}

JobWatchHub::~JobWatchHub() { Stop(); }

void JobWatchHub::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void JobWatchHub::Watch(StreamWriter<v1::Job>* w, std::string job_id, absl::Duration interval,
                        CallGate::Ticket ticket) {
  absl::MutexLock lock(&mu_);
  if (stop_) {
    ticket = CallGate::Ticket();
    w->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
    return;
  }
  if (static_cast<int>(entries_.size()) >= max_watches_) {
    ticket = CallGate::Ticket();
    w->Close(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrFormat("%d WatchJob streams already open (the server's limit)",
                                          max_watches_)));
    return;
  }
  auto e = std::make_unique<Entry>();
  e->w = w;
  e->job_id = std::move(job_id);
  e->interval = interval;
  e->next_due = absl::InfinitePast();
  e->ticket = std::move(ticket);
  entries_.push_back(std::move(e));
}

// Serve: sends `e`'s job when it changed and is due; true (with *end set)
// when the stream is to be closed.
bool JobWatchHub::Serve(Entry* e, absl::Time now, grpc::Status* end) const {
  if (e->w->Cancelled()) {
    *end = grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    return true;
  }
  if (now < e->next_due) return false;
  uint64_t version = e->version;
  absl::StatusOr<v1::Job> job = jobs_->WaitForUpdate(e->job_id, &version, absl::ZeroDuration());
  if (!job.ok()) {
    *end = ToGrpc(job.status());
    return true;
  }
  if (version == e->version && e->version != 0) return false;  // nothing new
  e->version = version;
  e->next_due = now + e->interval;
  const bool terminal = JobManager::Terminal(job->state());
  if (!e->w->Offer(std::move(*job))) {
    *end = grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    return true;
  }
  if (terminal) *end = grpc::Status::OK;
  return terminal;
}

void JobWatchHub::Run() {
  for (;;) {
    std::vector<std::pair<std::unique_ptr<Entry>, grpc::Status>> closing;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      for (auto& e : entries_) {
        grpc::Status end;
        if (stop_) {
          end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down");
        } else if (!Serve(e.get(), now, &end)) {
          continue;
        }
        closing.emplace_back(std::move(e), std::move(end));
      }
      entries_.erase(std::remove(entries_.begin(), entries_.end(), nullptr), entries_.end());
    }
    for (auto& [e, status] : closing) {
      e->ticket = CallGate::Ticket();  // free the slot before the client sees the end
      e->w->Close(std::move(status));
    }
    {
      absl::MutexLock lock(&mu_);
      if (stop_ && entries_.empty()) return;
    }
    absl::SleepFor(kTick);
  }
}

}  // namespace ragkv::services::internal
