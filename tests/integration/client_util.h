// client_util.h: helpers of the tests that talk to a ragkv server (in
// process or a `ragkv serve` child): a temp directory and a precompute job
// run to its end. Header-only; needs only the connector.
#ifndef RAGKV_TESTS_INTEGRATION_CLIENT_UTIL_H_
#define RAGKV_TESTS_INTEGRATION_CLIENT_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"
#include "connector/client.h"

namespace ragkv::testing {

// TempDir: a fresh directory under the system temp dir, removed with its
// contents on scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ragkv-it-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// RunPrecomputeJob: StartJob over `corpus_path` (with `workers` workers; 0 =
// the server's default) and wait for its last state (errors of StartJob /
// WatchJob pass through).
inline absl::StatusOr<v1::Job> RunPrecomputeJob(Client* client, const std::string& corpus_path,
                                                int workers = 0) {
  v1::StartJobRequest req;
  req.mutable_corpus()->add_paths(corpus_path);
  if (workers > 0) req.set_workers(workers);
  auto job = client->StartJob(req);
  if (!job.ok()) return job.status();
  return client->WatchJob(job->job_id(), [](const v1::Job&) { return true; }, 100);
}

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_INTEGRATION_CLIENT_UTIL_H_
