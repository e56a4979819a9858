#include "bench/serve/internal/servers.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ragkv::bench_serve::internal {
namespace fs = std::filesystem;
namespace {

constexpr double kStartTimeoutS =
    600;  // a 16-layer F16 file loads in seconds; slack for a busy box

std::string Tail(const std::string& log) {
  return log.size() > 1500 ? log.substr(log.size() - 1500) : log;
}

// Env: each server's OpenMP / BLAS pools capped at the run's threads (the
// sidecar's kernels in ragkv; ggml sets its own count from -t / --threads).
std::vector<std::string> Env(const ServeBenchOptions& o) {
  return {absl::StrCat("OMP_NUM_THREADS=", o.threads),
          absl::StrCat("OPENBLAS_NUM_THREADS=", o.threads)};
}

std::vector<std::string> RagkvArgv(const std::string& name, const ServeBenchOptions& o,
                                   const RunSettings& s) {
  std::vector<std::string> argv = {
      s.ragkv_bin, "serve", "--engine", "llama.cpp", "--model", s.gguf, "--http", "127.0.0.1:0",
      "--listen", "127.0.0.1:0", "--metrics-port", "-1", "--data-dir", s.work_dir + "/data-" + name,
      "--parallel", std::to_string(o.slots), "--ctx-size", std::to_string(o.slots * o.ctx_per_slot),
      "--threads", std::to_string(o.threads), "--sync-writes", "false",
      // One chunk per passage (passages are cut shorter than this).
      "--chunk-tokens", std::to_string(std::max(512, o.workload.passage_tokens * 2)),
      "--corpus-root", s.work_dir + "/corpus"};
  if (name == "ragkv-first") {
    argv.insert(argv.end(), {"--first-position-records", "true"});
  }
  return argv;
}

std::vector<std::string> LlamaServerArgv(const ServeBenchOptions& o, const RunSettings& s,
                                         int port) {
  return {s.llama_server,
          "-m",
          s.gguf,
          "--host",
          "127.0.0.1",
          "--port",
          std::to_string(port),
          "-c",
          std::to_string(o.slots * o.ctx_per_slot),
          "-np",
          std::to_string(o.slots),
          "-t",
          std::to_string(o.threads),
          "-tb",
          std::to_string(o.threads),
          "--cache-reuse",
          "64",
          "--cache-ram",
          "8192",
          "--no-webui"};
}

// After: the text after `key` up to the end of its line or a space.
std::string After(const std::string& log, const std::string& key) {
  const size_t at = log.find(key);
  if (at == std::string::npos) return "";
  const size_t b = at + key.size();
  const size_t e = log.find_first_of(" \n", b);
  return log.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

absl::StatusOr<Server> StartRagkv(Server srv, const ServeBenchOptions& o, const RunSettings& s) {
  const std::string log = s.work_dir + "/" + srv.name + ".log";
  ASSIGN_OR_RETURN(srv.child, ChildProcess::Start(RagkvArgv(srv.name, o, s), Env(o), log));
  if (!srv.child->WaitForLog("LISTENING", kStartTimeoutS)) {
    return absl::UnavailableError(
        absl::StrCat(srv.name, " did not start:\n", Tail(srv.child->Log())));
  }
  const std::string text = srv.child->Log();
  const std::string http = After(text, "HTTP ");
  srv.grpc = After(text, "LISTENING ");
  const size_t colon = http.rfind(':');
  if (colon == std::string::npos) return absl::InternalError("no HTTP address in:\n" + Tail(text));
  srv.port = std::atoi(http.c_str() + colon + 1);
  return srv;
}

}  // namespace

std::string DefaultRagkvBin() {
  std::error_code ec;
  return (fs::read_symlink("/proc/self/exe", ec).parent_path() / "ragkv").string();
}

std::string DefaultLlamaServer() {
  std::string dir;
  if (const char* e = std::getenv("RAGKV_LLAMACPP_DIR"); e != nullptr && *e) {
    dir = e;
  } else {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    dir = absl::StrCat(
        xdg != nullptr && *xdg ? std::string(xdg) : std::string(home ? home : "") + "/.cache",
        "/ragkv/llamacpp-3.21.1");
  }
  return dir + "/server-build/bin/llama-server";
}

absl::StatusOr<Server> StartServer(const std::string& name, const ServeBenchOptions& o,
                                   const RunSettings& s, std::ostream& progress) {
  Server srv;
  srv.name = name;
  srv.body.model = fs::path(s.gguf).filename().string();
  srv.body.max_tokens = o.max_tokens;
  srv.body.banned = s.banned;
  progress << "bench serve: starting " << name << std::endl;
  if (name == "ragkv" || name == "ragkv-local" || name == "ragkv-reorder" ||
      name == "ragkv-first") {
    srv.body.ragkv_mode = name == "ragkv-local" ? "local" : o.ragkv_mode;
    srv.body.reorder = name == "ragkv-reorder";
    ASSIGN_OR_RETURN(srv, StartRagkv(std::move(srv), o, s));
  } else if (name == "llama-server") {
    srv.body.send_documents = false;  // pasted in ragkv's documents layout
    ASSIGN_OR_RETURN(srv.port, FreeLoopbackPort());
    ASSIGN_OR_RETURN(srv.child, ChildProcess::Start(LlamaServerArgv(o, s, srv.port), Env(o),
                                                    s.work_dir + "/llama-server.log"));
  } else {
    return absl::InvalidArgumentError(
        "unknown server " + name +
        " (ragkv, ragkv-local, ragkv-reorder, ragkv-first, llama-server)");
  }
  if (!WaitHealthy(srv.child.get(), srv.port, kStartTimeoutS)) {
    return absl::UnavailableError(absl::StrCat(name, " is not healthy:\n", Tail(srv.child->Log())));
  }
  progress << "bench serve: " << name << " on 127.0.0.1:" << srv.port << " (pid "
           << srv.child->pid() << ")" << std::endl;
  return srv;
}

absl::StatusOr<double> Precompute(const Server& ragkv, const std::vector<std::string>& passages,
                                  const RunSettings& s, std::ostream& progress) {
  fs::create_directories(s.work_dir + "/corpus");
  const std::string corpus = s.work_dir + "/corpus/passages.jsonl";
  {
    std::ofstream f(corpus);
    for (size_t i = 0; i < passages.size(); ++i) {
      f << nlohmann::json({{"id", absl::StrCat("p", i)}, {"title", ""}, {"text", passages[i]}})
               .dump()
        << "\n";
    }
    if (!f) return absl::InternalError("cannot write " + corpus);
  }
  progress << "bench serve: ragkv precompute of " << passages.size() << " passages" << std::endl;
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto job, ChildProcess::Start({s.ragkv_bin, "precompute", "--corpus", corpus,
                                                  "--server", ragkv.grpc},
                                                 {}, s.work_dir + "/precompute.log"));
  const int rc = job->Wait(3600);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("ragkv precompute exited ", rc, ":\n", Tail(job->Log())));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ragkv::bench_serve::internal
