// internal/servers.h: the servers under test of `ragkv bench serve`,
// private to bench/serve: how each is started (argv, environment), how it
// is asked (BodyOptions), and the one-off `ragkv precompute` of the run's
// passages. servers.cc.
#ifndef RAGKV_BENCH_SERVE_INTERNAL_SERVERS_H_
#define RAGKV_BENCH_SERVE_INTERNAL_SERVERS_H_

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/serve/bench_serve.h"
#include "bench/serve/process.h"
#include "bench/serve/workload.h"

namespace ragkv::bench_serve::internal {

// RunSettings: what every server shares in one run.
struct RunSettings {
  std::string gguf;  // the model file
  std::string ragkv_bin;
  std::string llama_server;
  std::string work_dir;  // data dirs, logs, the corpus file
  std::vector<int32_t> banned;
};

// Server: one started server: its name, HTTP port and request shape.
struct Server {
  std::string name;
  int port = 0;
  std::string grpc;  // ragkv: the sidecar's gRPC address
  BodyOptions body;
  std::unique_ptr<ChildProcess> child;
  double max_rss_mb = 0;
};

// StartServer: `name` (ragkv | ragkv-local | llama-server) started and
// healthy. Errors: unknown name, the child exits or is not healthy in
// time (the log's tail in the message).
absl::StatusOr<Server> StartServer(const std::string& name, const ServeBenchOptions& o,
                                   const RunSettings& s, std::ostream& progress);

// Precompute: writes `passages` as a JSONL corpus under the work dir
// (the ragkv server's --corpus-root) and runs `ragkv precompute --server`
// on it. Returns the seconds it took. Errors: the job fails.
absl::StatusOr<double> Precompute(const Server& ragkv, const std::vector<std::string>& passages,
                                  const RunSettings& s, std::ostream& progress);

// DefaultRagkvBin / DefaultLlamaServer: `ragkv` beside this binary; the
// llama-server that `scripts/setup-llamacpp --server` builds.
std::string DefaultRagkvBin();
std::string DefaultLlamaServer();

}  // namespace ragkv::bench_serve::internal

#endif  // RAGKV_BENCH_SERVE_INTERNAL_SERVERS_H_
