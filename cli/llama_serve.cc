// llama_serve.cc: ragkv-llama's `serve`, i.e. `ragkv serve --engine
// llama.cpp` (cli/serve.h): the sidecar, and in the same process the
// OpenAI-compatible HTTP server (server/) with the llama.cpp engine. One
// llama_context holds --parallel sequences over --ctx-size cells; the
// engine reaches the sidecar through the connector on its own gRPC port
// (so every fallback of LlamaCppEngine applies).
#include <atomic>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "cli/serve.h"
#include "connector/client.h"
#include "engine/llamacpp/llama_engine.h"
#include "engine/llamacpp/runtime.h"
#include "llama.h"
#include "model/loader.h"
#include "server/documents.h"
#include "server/http_server.h"
#include "server/prompt.h"
#include "server/scheduler.h"
#include "services/sidecar.h"

namespace ragkv::cli {
namespace {

namespace lc = engine::llamacpp;

lc::ContextOptions ContextOf(const EngineServeFlags& f) {
  lc::ContextOptions co;
  co.n_ctx = f.ctx_size;
  co.threads = f.threads;
  co.sequences = f.parallel;
  co.n_batch = f.batch_size;
  return co;
}

server::Scheduler::Options SchedulerOf(const EngineServeFlags& f, llama_context* ctx) {
  server::Scheduler::Options sc;
  sc.ctx = ctx;
  sc.parallel = f.parallel;
  sc.slot_ctx = f.ctx_size / f.parallel;
  sc.max_queue = f.max_queue;
  sc.learn = f.learn;
  return sc;
}

class LlamaFrontEnd : public EngineFrontEnd {
 public:
  ~LlamaFrontEnd() override { Drain(); }
  absl::Status Bind(const EngineServeFlags& flags, services::SidecarOptions* options) override;
  std::string http_address() const override {
    return absl::StrCat(host_, ":", http_ ? http_->port() : 0);
  }
  absl::Status Ready(const services::SidecarOptions& options, services::Sidecar* sidecar) override;
  void Drain() override;

 private:
  absl::Status ReadyWithoutBlending();
  EngineServeFlags f_;
  std::string host_, auth_token_;
  std::unique_ptr<server::HttpServer> http_;
  std::unique_ptr<model::Model> own_model_;  // only when the sidecar has none
  const model::Model* model_ = nullptr;      // the sidecar's (one copy per process)
  std::unique_ptr<lc::LlamaFile> file_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<lc::LlamaCppEngine> engine_;
  std::unique_ptr<server::PromptBuilder> prompts_;
  std::unique_ptr<server::Scheduler> scheduler_;
  std::unique_ptr<server::SidecarDocuments> documents_;
  std::atomic<const services::Sidecar*> sidecar_{nullptr};
  // Why ragkv does not blend this model (lc::BlendRefusal); "" when it does.
  std::string blend_refusal_;
  std::string model_path_;
};

absl::Status LlamaFrontEnd::Bind(const EngineServeFlags& flags, services::SidecarOptions* sop) {
  const services::SidecarOptions& so = *sop;
  const std::string model_path = so.model_path;
  model_path_ = model_path;
  const std::string& auth_token = so.auth_token;
  f_ = flags;
  auth_token_ = auth_token;
  if (model_path.empty()) return absl::InvalidArgumentError("--engine llama.cpp needs --model F.gguf");
  const size_t colon = flags.http.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(flags.http.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError("--http must be HOST:PORT, got " + flags.http);
  }
  host_ = flags.http.substr(0, colon);
  server::HttpServer::Options o;
  o.host = host_;
  o.port = port;
  o.auth_token = auth_token;
  o.model_id = flags.alias;
  if (o.model_id.empty()) {
    const size_t slash = model_path.find_last_of('/');
    o.model_id = slash == std::string::npos ? model_path : model_path.substr(slash + 1);
  }
  o.threads = flags.parallel + flags.max_queue + 4;
  o.keep_alive_s = flags.keep_alive_s;
  // The sidecar's own metrics follow the server's on GET /metrics.
  o.more_metrics = [this] {
    const services::Sidecar* s = sidecar_.load();
    return s == nullptr ? std::string() : s->MetricsText();
  };
  o.request_timeout = flags.request_timeout_s > 0 ? absl::Seconds(flags.request_timeout_s)
                                                  : absl::InfiniteDuration();
  o.retrieval_k = flags.retrieval_k;
  o.adaptive_budget = flags.adaptive_budget;
  // The reorder pass looks up prefix blocks as this process's sidecar
  // stores them (an --engine-upstream with other block settings: no hits).
  o.reorder_documents = flags.reorder_documents;
  o.prefix_cache = so.prefix_cache;
  o.prefix_block_tokens = so.prefix_block_tokens;
  o.prefix_max_tokens = so.prefix_cache_max_tokens;
  o.tls_cert_file = so.tls_cert_file;  // the sidecar's TLS applies to HTTP too
  o.tls_key_file = so.tls_key_file;
  ASSIGN_OR_RETURN(http_, server::HttpServer::Start(o));
  // A model whose state is not chunk-composable: refused for blending by
  // name, the sidecar runs without it, llama.cpp prefills every prompt.
  ASSIGN_OR_RETURN(blend_refusal_, lc::BlendRefusal(model_path));
  if (!blend_refusal_.empty()) {
    RAGKV_LOG(WARNING) << "blending refused: " << blend_refusal_;
    sop->model_path.clear();
  }
  return absl::OkStatus();
}

absl::Status LlamaFrontEnd::Ready(const services::SidecarOptions& so, services::Sidecar* sidecar) {
  sidecar_.store(sidecar);
  if (!blend_refusal_.empty()) return ReadyWithoutBlending();
  // ragkv's view of the file: its fingerprint and config (the sidecar's,
  // one copy per process).
  model_ = sidecar->model();
  if (model_ == nullptr) {
    ASSIGN_OR_RETURN(own_model_, model::LoadModel(so.model_path));
    model_ = own_model_.get();
  }
  ASSIGN_OR_RETURN(file_, lc::LlamaFile::Open(so.model_path, ContextOf(f_)));
  ClientOptions cl;
  // The engine's sidecar: this process's, or --engine-upstream's.
  cl.target = so.engine_upstream.empty() ? sidecar->address() : so.engine_upstream;
  cl.auth_token = auth_token_;
  if (!so.tls_cert_file.empty()) {
    std::ifstream in(so.tls_cert_file);
    std::stringstream pem;
    pem << in.rdbuf();
    cl.use_tls = true;
    cl.tls_root_certs_pem = pem.str();
  }
  ASSIGN_OR_RETURN(client_, Client::Create(cl));
  lc::LlamaCppEngine::Options eo;
  eo.ctx = file_->context();
  eo.sidecar = client_.get();
  eo.model_fingerprint.assign(model_->fingerprint().begin(), model_->fingerprint().end());
  eo.config = &model_->config();
  eo.deadline = absl::Seconds(120);
  ASSIGN_OR_RETURN(engine_, lc::LlamaCppEngine::Create(eo));
  ASSIGN_OR_RETURN(prompts_, server::PromptBuilder::Create(file_->model(), f_.chat_template));
  server::Scheduler::Options sc = SchedulerOf(f_, file_->context());
  sc.engine = engine_.get();
  sc.wire_dtype = so.engine_kv_wire_dtype == "f32"    ? v1::DTYPE_F32
                  : so.engine_kv_wire_dtype == "bf16" ? v1::DTYPE_BF16
                                                      : v1::DTYPE_F16;
  scheduler_ = std::make_unique<server::Scheduler>(sc);
  documents_ = std::make_unique<server::SidecarDocuments>(client_.get(), model_->fingerprint());
  http_->SetReady(scheduler_.get(), prompts_.get(), file_->vocab_size(), documents_.get());
  RAGKV_LOG(INFO) << "llama.cpp engine: " << f_.parallel << " slots of " << sc.slot_ctx
                  << " cells, chat template " << prompts_->template_name();
  return absl::OkStatus();
}

// ReadyWithoutBlending: llama.cpp alone (no ragkv model, no engine, no
// catalogue): every prompt is its own prefill, every response names why.
absl::Status LlamaFrontEnd::ReadyWithoutBlending() {
  ASSIGN_OR_RETURN(file_, lc::LlamaFile::Open(model_path_, ContextOf(f_)));
  ASSIGN_OR_RETURN(prompts_, server::PromptBuilder::Create(file_->model(), f_.chat_template));
  server::Scheduler::Options sc = SchedulerOf(f_, file_->context());
  sc.blend_refusal = blend_refusal_;
  scheduler_ = std::make_unique<server::Scheduler>(sc);
  http_->SetReady(scheduler_.get(), prompts_.get(), file_->vocab_size(), nullptr);
  RAGKV_LOG(INFO) << "llama.cpp engine without blending: " << f_.parallel << " slots of "
                  << sc.slot_ctx << " cells, chat template " << prompts_->template_name();
  return absl::OkStatus();
}

void LlamaFrontEnd::Drain() {
  if (http_ != nullptr) http_->SetDraining();
  if (scheduler_ != nullptr) scheduler_->Drain(absl::Seconds(30));
  if (http_ != nullptr) {
    http_->WaitForResponses(absl::Seconds(10));  // the finished jobs' last writes
    http_->Stop();
  }
}

}  // namespace

std::unique_ptr<Command> NewLlamaServeCommand() {
  return NewServeCommandWith([]() -> std::unique_ptr<EngineFrontEnd> {
    return std::make_unique<LlamaFrontEnd>();
  });
}

}  // namespace ragkv::cli
