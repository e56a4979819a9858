// sidecar_fixture.h: shared helpers of the integration tests: locating the
// test model, a temp directory, a small deterministic corpus, an in-process
// Sidecar on 127.0.0.1:0 and a connector client to it.
#ifndef RAGKV_TESTS_INTEGRATION_SIDECAR_FIXTURE_H_
#define RAGKV_TESTS_INTEGRATION_SIDECAR_FIXTURE_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "connector/client.h"
#include "tests/integration/client_util.h"
#include "kernels/cpu.h"
#include "services/sidecar.h"
#include "tests/support/source_dir.h"

namespace ragkv::testing {

inline std::string ModelsDir() {
  const char* env = std::getenv("RAGKV_TEST_MODELS");
  return env ? env : RAGKV_SOURCE_DIR + "/../shared/models";
}
inline std::string TestModelPath() { return ModelsDir() + "/stories260K.gguf"; }
inline bool HaveTestModel() { return std::filesystem::exists(TestModelPath()); }

// WriteCorpus: `docs` small story documents as .txt files under dir.
inline void WriteCorpus(const std::string& dir, int docs) {
  std::filesystem::create_directories(dir);
  static const char* kNames[] = {"Lily", "Tom", "Ben", "Sue", "Max", "Mia", "Sam", "Ann"};
  static const char* kThings[] = {"ball", "cat", "tree", "cake", "boat", "dog", "park", "kite"};
  for (int d = 0; d < docs; ++d) {
    std::string text;
    for (int s = 0; s < 6; ++s) {
      absl::StrAppendFormat(&text,
                            "Once upon a time, %s had a big red %s. %s loved the %s very much "
                            "and played with it every day in the sun. ",
                            kNames[(d + s) % 8], kThings[(d * 3 + s) % 8], kNames[(d + s) % 8],
                            kThings[(d * 3 + s) % 8]);
    }
    std::ofstream(absl::StrFormat("%s/story_%03d.txt", dir, d)) << text;
  }
}

inline services::SidecarOptions TestSidecarOptions(const std::string& data_dir) {
  // As `ragkv --kernel-threads 1` (the binary's default): concurrency comes
  // from the executor, not from per-kernel OpenMP/BLAS teams.
  kernels::SetMaxThreads(1);
  services::SidecarOptions o;
  o.listen = "127.0.0.1:0";
  o.data_dir = data_dir;
  o.model_path = TestModelPath();
  o.max_seq_len = 512;
  o.chunk_tokens = 48;
  o.ram_budget_bytes = 64 << 20;
  o.ssd_budget_bytes = 256 << 20;
  o.worker_threads = 4;
  o.sync_writes = false;
  return o;
}

inline std::unique_ptr<Client> ClientFor(const std::string& address, std::string token = "") {
  ClientOptions co;
  co.target = address;
  co.auth_token = std::move(token);
  co.default_deadline = absl::Seconds(60);
  auto c = Client::Create(co);
  return c.ok() ? std::move(*c) : nullptr;
}

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_INTEGRATION_SIDECAR_FIXTURE_H_
