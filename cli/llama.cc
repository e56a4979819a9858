// llama.cc: `ragkv llama`, the llama.cpp twin of `ragkv query`: retrieve
// through the sidecar, blend the prompt's KV there, hand it to llama.cpp
// (engine/llamacpp/), let llama.cpp decode the rest and generate; prints
// the chunks, the answer and the TTFT breakdown (retrieve, blend, KV
// handover, query prefill). Runs in the ragkv-llama binary (the only one
// linking llama.cpp; `ragkv llama` execs it, cli/llama_forward.cc).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "cli/command.h"
#include "cli/flags.h"
#include "connector/client.h"
#include "engine/llamacpp/llama_engine.h"
#include "engine/llamacpp/runtime.h"
#include "model/loader.h"
#include "model/tokenizer.h"

namespace ragkv::cli {
namespace {

namespace lc = engine::llamacpp;
struct LlamaFlags {
  std::string model, server = "127.0.0.1:50051", question, mode = "cacheblend", system;
  AuthTokenFlags auth;
  float ratio = 0.15f;
  uint32_t k = 3;
  int max_new_tokens = 32, threads = 2, n_ctx = 4096;
  bool add_bos = true;
  double deadline_s = 120;
};

// ModeOptions: the Blend options of --mode (false: unknown mode; "local"
// never reaches the sidecar).
bool ModeOptions(const LlamaFlags& f, v1::BlendOptions* b) {
  b->set_output_dtype(v1::DTYPE_F16);
  b->set_add_bos(f.add_bos);
  return ParseBlendMode(f.mode == "local" ? "full" : f.mode, f.ratio, b);
}

class LlamaCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--model", f_.model, "the GGUF llama.cpp runs (the sidecar's model)")->required();
    cmd->add_option("--server", f_.server, "sidecar address")->capture_default_str();
    cmd->add_option("--question", f_.question)->required();
    cmd->add_option("--mode", f_.mode,
                    "local (llama.cpp prefills all) | full | prefix | reuse | cacheblend")
        ->capture_default_str();
    cmd->add_option("--ratio", f_.ratio, "CacheBlend recompute ratio")->capture_default_str();
    cmd->add_option("--k", f_.k, "retrieved chunks")->capture_default_str();
    cmd->add_option("--system", f_.system, "system prompt before the chunks");
    cmd->add_option("--max-new-tokens", f_.max_new_tokens)->capture_default_str();
    cmd->add_option("--add-bos", f_.add_bos)->capture_default_str();
    cmd->add_option("--threads", f_.threads, "llama.cpp threads")->capture_default_str();
    cmd->add_option("--ctx", f_.n_ctx, "llama.cpp context cells")->capture_default_str();
    cmd->add_option("--deadline", f_.deadline_s, "seconds for the sidecar")->capture_default_str();
    AddAuthTokenOptions(cmd, &f_.auth, "the sidecar's bearer token");
  }
  int Run() override;

 private:
  int Fail(int code, const std::string& what) {
    std::fprintf(stderr, "ragkv llama: %s\n", what.c_str());
    return code;
  }
  LlamaFlags f_;
};

int LlamaCommand::Run() {
  const LlamaFlags& f = f_;
  v1::BlendOptions opts;
  if (!ModeOptions(f, &opts)) return Fail(2, "unknown --mode " + f.mode);
  // ragkv's view of the file: its fingerprint (the sidecar's must equal it)
  // and its tokenizer (the one the sidecar's catalogue used).
  auto ours = model::LoadModel(f.model);
  if (!ours.ok()) return Fail(1, ours.status().ToString());
  auto tok = model::LoadTokenizer(f.model);
  if (!tok.ok()) return Fail(1, tok.status().ToString());
  auto file = lc::LlamaFile::Open(f.model, {.n_ctx = f.n_ctx, .threads = f.threads});
  if (!file.ok()) return Fail(1, file.status().ToString());
  ClientOptions co;
  co.target = f.server;
  auto token = ResolveAuthToken(f.auth, "ragkv llama");
  if (!token.ok()) return Fail(2, token.status().ToString());
  co.auth_token = *token;
  auto client = Client::Create(co);
  if (!client.ok()) return Fail(1, client.status().ToString());

  const auto t0 = Clock::now();
  v1::SearchRequest sr;
  sr.set_text(f.question);
  sr.set_k(f.k);
  sr.set_include_content(true);
  auto hits = (*client)->Search(sr, absl::Seconds(f.deadline_s));
  if (!hits.ok()) return Fail(1, "retrieval: " + hits.status().ToString());
  const double retrieve_ms = MsSince(t0);

  // The prompt: [BOS] [system] chunks question, the same tokens the sidecar fuses.
  v1::BlendRequest req;
  *req.mutable_options() = opts;
  std::vector<int32_t> prompt;
  if (f.add_bos && (*tok)->add_bos()) prompt.push_back((*tok)->bos_id());
  auto add_text = [&](const std::string& text) -> bool {
    auto ids = (*tok)->Encode(text, false, false);
    if (!ids.ok() || ids->empty()) return false;
    req.add_segments()->mutable_tokens()->mutable_ids()->Assign(ids->begin(), ids->end());
    prompt.insert(prompt.end(), ids->begin(), ids->end());
    return true;
  };
  if (!f.system.empty() && !add_text(f.system)) return Fail(2, "--system tokenizes to nothing");
  std::string ids;
  for (const auto& h : hits->hits()) {
    req.add_segments()->set_chunk_id(h.chunk().chunk_id());
    prompt.insert(prompt.end(), h.chunk().token_ids().begin(), h.chunk().token_ids().end());
    absl::StrAppend(&ids, ids.empty() ? "" : ",", h.chunk().chunk_id());
  }
  if (!add_text(f.question)) return Fail(2, "--question tokenizes to nothing");

  const std::string fp((*ours)->fingerprint().begin(), (*ours)->fingerprint().end());
  lc::LlamaCppEngine::Options eo;
  eo.ctx = (*file)->context();
  eo.sidecar = f.mode == "local" ? nullptr : client->get();
  eo.model_fingerprint = fp;
  eo.config = &(*ours)->config();
  eo.deadline = absl::Seconds(f.deadline_s);
  auto engine = lc::LlamaCppEngine::Create(eo);
  if (!engine.ok()) return Fail(1, engine.status().ToString());
  auto r = (*engine)->Prefill(req, prompt, 0);
  if (!r.ok()) return Fail(1, r.status().ToString());
  const auto td = Clock::now();
  auto answer = (*file)->GreedyFrom(r->logits, static_cast<int32_t>(prompt.size()), 0,
                                    f.max_new_tokens);
  if (!answer.ok()) return Fail(1, answer.status().ToString());
  const double decode_ms = MsSince(td);

  std::printf("chunks:   [%s]\n", ids.c_str());
  std::printf("answer:   %s\n", (*file)->Text(*answer).c_str());
  std::printf("context:  %zu tokens: %d handed over (%d in chunks the store served, %d "
              "recomputed by the sidecar), %d prefilled by llama.cpp (mode %s)\n",
              prompt.size(), r->handed_over_tokens, r->reused_tokens, r->recomputed_tokens,
              r->prefilled_tokens, f.mode.c_str());
  if (!r->fallback.empty() && f.mode != "local") std::printf("fallback: %s\n", r->fallback.c_str());
  std::printf("TTFT:     %.2f ms = retrieve %.2f + blend %.2f + KV handover %.2f + query prefill "
              "%.2f\n",
              retrieve_ms + r->blend_ms + r->handover_ms + r->decode_ms, retrieve_ms, r->blend_ms,
              r->handover_ms, r->decode_ms);
  std::printf("decode:   %.2f ms for %zu tokens\n", decode_ms, answer->size());
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewLlamaCommand() { return std::make_unique<LlamaCommand>(); }

}  // namespace ragkv::cli
