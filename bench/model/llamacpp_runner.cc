#include "bench/model/llamacpp_runner.h"

#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/status_macros.h"

#if RAGKV_HAVE_LLAMACPP_HEADERS
#include "ggml-backend.h"
#include "llama.h"
#endif

namespace ragkv::model {

std::string LlamaCppRunner::DefaultLibDir() {
  std::string dir;
  if (const char* e = std::getenv("RAGKV_LLAMACPP_DIR"); e != nullptr && *e) {
    dir = e;
  } else {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    dir = xdg && *xdg ? std::string(xdg) : std::string(home ? home : "") + "/.cache";
    dir += "/ragkv/llamacpp-3.21.1";
  }
  return dir + "/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64";
}

int64_t ProcessRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      int64_t kb = -1;
      in >> kb;
      return kb < 0 ? -1 : kb * 1024;
    }
    std::getline(in, key);
  }
  return -1;
}

#if RAGKV_HAVE_LLAMACPP_HEADERS

// The llama.cpp entry points the runner calls, resolved with dlsym.
struct LlamaCppRunner::Impl {
  void* llama = nullptr;
  void* ggml = nullptr;
  decltype(&llama_backend_init) backend_init = nullptr;
  decltype(&llama_log_set) log_set = nullptr;
  decltype(&llama_model_default_params) model_defaults = nullptr;
  decltype(&llama_model_load_from_file) load_model = nullptr;
  decltype(&llama_context_default_params) context_defaults = nullptr;
  decltype(&llama_init_from_model) init_context = nullptr;
  decltype(&llama_batch_init) batch_init = nullptr;
  decltype(&llama_batch_free) batch_free = nullptr;
  decltype(&llama_decode) decode = nullptr;
  decltype(&llama_get_memory) get_memory = nullptr;
  decltype(&llama_memory_clear) memory_clear = nullptr;
  decltype(&llama_free) free_context = nullptr;
  decltype(&llama_model_free) free_model = nullptr;
  llama_model* model = nullptr;
  llama_context* ctx = nullptr;
};

namespace {

template <typename F>
absl::Status Resolve(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr) return absl::NotFoundError(absl::StrCat("llama.cpp: no symbol ", name));
  return absl::OkStatus();
}

void Quiet(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

// LoadCpuBackend: every CPU variant of lib_dir (llama.cpp keeps the best
// for this CPU), or only libggml-cpu-<variant>.so.
absl::Status LoadCpuBackend(void* ggml, const std::string& lib_dir, const std::string& variant) {
  if (variant.empty()) {
    decltype(&ggml_backend_load_all_from_path) load_all = nullptr;
    RETURN_IF_ERROR(Resolve(ggml, "ggml_backend_load_all_from_path", &load_all));
    load_all(lib_dir.c_str());
    return absl::OkStatus();
  }
  decltype(&ggml_backend_load) load = nullptr;
  RETURN_IF_ERROR(Resolve(ggml, "ggml_backend_load", &load));
  const std::string file = absl::StrCat(lib_dir, "/libggml-cpu-", variant, ".so");
  if (load(file.c_str()) == nullptr) {
    return absl::NotFoundError(absl::StrCat("llama.cpp: cannot load the CPU variant ", file,
                                            " (missing, or this CPU lacks its instructions)"));
  }
  return absl::OkStatus();
}

absl::Status ResolveAll(LlamaCppRunner::Impl* m) {
  for (absl::Status s : {Resolve(m->llama, "llama_backend_init", &m->backend_init),
                         Resolve(m->llama, "llama_log_set", &m->log_set),
                         Resolve(m->llama, "llama_model_default_params", &m->model_defaults),
                         Resolve(m->llama, "llama_model_load_from_file", &m->load_model),
                         Resolve(m->llama, "llama_context_default_params", &m->context_defaults),
                         Resolve(m->llama, "llama_init_from_model", &m->init_context),
                         Resolve(m->llama, "llama_batch_init", &m->batch_init),
                         Resolve(m->llama, "llama_batch_free", &m->batch_free),
                         Resolve(m->llama, "llama_decode", &m->decode),
                         Resolve(m->llama, "llama_get_memory", &m->get_memory),
                         Resolve(m->llama, "llama_memory_clear", &m->memory_clear),
                         Resolve(m->llama, "llama_free", &m->free_context),
                         Resolve(m->llama, "llama_model_free", &m->free_model)}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaCppRunner>> LlamaCppRunner::Open(
    const std::string& lib_dir, const std::string& path, int n_ctx, int threads,
    const std::string& cpu_variant) {
  auto m = std::make_unique<Impl>();
  m->llama = dlopen((lib_dir + "/libllama.v0.4.0.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  m->ggml = dlopen((lib_dir + "/libggml.v0.4.0.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (m->llama == nullptr || m->ggml == nullptr) {
    return absl::NotFoundError(absl::StrCat("llama.cpp libraries not found in ", lib_dir,
                                            " (scripts/setup-llamacpp installs them): ", dlerror()));
  }
  if (absl::Status s = ResolveAll(m.get()); !s.ok()) return s;
  m->log_set(Quiet, nullptr);
  RETURN_IF_ERROR(LoadCpuBackend(m->ggml, lib_dir, cpu_variant));
  m->backend_init();
  llama_model_params mp = m->model_defaults();
  mp.n_gpu_layers = 0;
  m->model = m->load_model(path.c_str(), mp);
  if (m->model == nullptr) return absl::InvalidArgumentError("llama.cpp cannot load " + path);
  llama_context_params cp = m->context_defaults();
  cp.n_ctx = n_ctx;
  cp.n_batch = n_ctx;
  cp.n_ubatch = n_ctx;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.no_perf = true;
  m->ctx = m->init_context(m->model, cp);
  if (m->ctx == nullptr) return absl::InternalError("llama.cpp: cannot create a context");
  return std::unique_ptr<LlamaCppRunner>(new LlamaCppRunner(std::move(m)));
}

absl::StatusOr<double> LlamaCppRunner::Prefill(const std::vector<int32_t>& tokens) {
  Impl& m = *impl_;
  m.memory_clear(m.get_memory(m.ctx), true);
  llama_batch b = m.batch_init(static_cast<int32_t>(tokens.size()), 0, 1);
  b.n_tokens = static_cast<int32_t>(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.token[i] = tokens[i];
    b.pos[i] = static_cast<int32_t>(i);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = i + 1 == tokens.size();
  }
  const auto t0 = Clock::now();
  const int32_t rc = m.decode(m.ctx, b);
  const double s = SecondsSince(t0);
  m.batch_free(b);
  if (rc != 0) return absl::InternalError(absl::StrCat("llama_decode returned ", rc));
  return s;
}

absl::StatusOr<double> LlamaCppRunner::DecodeRate(const std::vector<int32_t>& prompt, int n) {
  Impl& m = *impl_;
  RETURN_IF_ERROR(Prefill(prompt).status());
  llama_batch b = m.batch_init(1, 0, 1);
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    b.n_tokens = 1;
    b.token[0] = prompt[i % prompt.size()];
    b.pos[0] = static_cast<int32_t>(prompt.size()) + i;
    b.n_seq_id[0] = 1;
    b.seq_id[0][0] = 0;
    b.logits[0] = 1;
    if (m.decode(m.ctx, b) != 0) {
      m.batch_free(b);
      return absl::InternalError("llama_decode failed while decoding");
    }
  }
  const double s = SecondsSince(t0);
  m.batch_free(b);
  return n / s;
}

LlamaCppRunner::~LlamaCppRunner() {
  if (impl_->ctx != nullptr) impl_->free_context(impl_->ctx);
  if (impl_->model != nullptr) impl_->free_model(impl_->model);
}

#else  // !RAGKV_HAVE_LLAMACPP_HEADERS

struct LlamaCppRunner::Impl {};

absl::StatusOr<std::unique_ptr<LlamaCppRunner>> LlamaCppRunner::Open(const std::string&,
                                                                     const std::string&, int, int,
                                                                     const std::string&) {
  return absl::UnimplementedError(
      "built without the pinned llama.cpp headers (run scripts/setup-llamacpp, reconfigure)");
}
absl::StatusOr<double> LlamaCppRunner::Prefill(const std::vector<int32_t>&) {
  return absl::UnimplementedError("no llama.cpp");
}
absl::StatusOr<double> LlamaCppRunner::DecodeRate(const std::vector<int32_t>&, int) {
  return absl::UnimplementedError("no llama.cpp");
}
LlamaCppRunner::~LlamaCppRunner() = default;

#endif

LlamaCppRunner::LlamaCppRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

}  // namespace ragkv::model
