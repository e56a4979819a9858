// query.cc: `ragkv query`: ask the sidecar's reference engine a question;
// prints the chunks, the answer and the TTFT breakdown.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/command.h"
#include "cli/flags.h"
#include "connector/client.h"

namespace ragkv::cli {
namespace {


class QueryCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--server", f_.server, "engine address")->capture_default_str();
    cmd->add_option("--question", f_.question)->required();
    cmd->add_option("--mode", f_.mode, "full|prefix|reuse|cacheblend")->capture_default_str();
    cmd->add_option("--ratio", f_.ratio,
                    "CacheBlend recompute ratio (0: the server's, per its quality gate)")
        ->capture_default_str();
    cmd->add_option("--k", f_.k, "retrieved chunks")->capture_default_str();
    cmd->add_option("--max-new-tokens", f_.max_new_tokens)->capture_default_str();
    cmd->add_option("--add-bos", f_.add_bos)->capture_default_str();
    AddAuthTokenOptions(cmd, &f_.auth, "the engine's bearer token");
    cmd->add_option("--format", f_.format, "text|tsv")->capture_default_str();
    cmd->add_option("--deadline", f_.deadline_s, "seconds")->capture_default_str();
  }
  int Run() override;

 private:
  struct Flags {
    std::string server = "127.0.0.1:50051", question, mode = "cacheblend", format = "text";
    AuthTokenFlags auth;
    float ratio = 0.0f;
    uint32_t k = 3;
    uint32_t max_new_tokens = 32;
    bool add_bos = true;
    double deadline_s = 120;};
  Flags f_;
};

int QueryCommand::Run() {
  const Flags& f = f_;
  if (f.question.empty()) {
    std::fprintf(stderr, "ragkv query: --question is required\n");
    return 2;
  }
  v1::GenerateRequest req;
  req.set_question(f.question);
  req.set_k(f.k);
  req.set_max_new_tokens(f.max_new_tokens);
  v1::BlendOptions* b = req.mutable_blend();
  b->set_add_bos(f.add_bos);
  if (!ParseBlendMode(f.mode, f.ratio, b)) {
    std::fprintf(stderr, "ragkv query: unknown --mode %s\n", f.mode.c_str());
    return 2;
  }
  ClientOptions co;
  co.target = f.server;
  absl::StatusOr<std::string> token = ResolveAuthToken(f.auth, "ragkv query");
  if (!token.ok()) {
    std::fprintf(stderr, "ragkv query: %s\n", token.status().ToString().c_str());
    return 2;
  }
  co.auth_token = *token;
  auto client = Client::Create(co);
  if (!client.ok()) {
    std::fprintf(stderr, "ragkv query: %s\n", client.status().ToString().c_str());
    return 1;
  }
  auto resp = (*client)->Generate(req, absl::Seconds(f.deadline_s));
  if (!resp.ok()) {
    std::fprintf(stderr, "ragkv query: %s\n", resp.status().ToString().c_str());
    return 1;
  }
  const v1::TtftBreakdown& t = resp->ttft();
  std::string ids;
  for (uint64_t id : resp->chunk_ids()) absl::StrAppend(&ids, ids.empty() ? "" : ",", id);
  if (f.format == "tsv") {
    std::printf("%s\t%s\t%u\t%u\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", f.mode.c_str(), ids.c_str(),
                resp->context_tokens(), resp->recomputed_tokens(), t.retrieve_ms(), t.fetch_ms(),
                t.blend_ms(), t.query_prefill_ms(), t.ttft_ms());
    return 0;
  }
  std::printf("chunks:  [%s]\n", ids.c_str());
  std::printf("answer:  %s\n", resp->answer().c_str());
  std::printf("context: %u tokens, %u recomputed (mode %s)\n", resp->context_tokens(),
              resp->recomputed_tokens(), f.mode.c_str());
  if (!resp->quality_gate().empty()) std::printf("gate:    %s\n", resp->quality_gate().c_str());
  for (const v1::FailedLoad& fl : resp->failed_loads()) {
    std::printf("failed:  chunk %llu at layer %u, recomputed (%s)\n",
                static_cast<unsigned long long>(fl.chunk_id()), fl.layer(), fl.reason().c_str());
  }
  std::printf("TTFT:    %.2f ms = retrieve %.2f + fetch %.2f + blend %.2f + query prefill %.2f "
              "(+ overhead)\n",
              t.ttft_ms(), t.retrieve_ms(), t.fetch_ms(), t.blend_ms(), t.query_prefill_ms());
  std::printf("decode:  %.2f ms for %d tokens\n", t.decode_ms(), resp->answer_tokens_size());
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewQueryCommand() { return std::make_unique<QueryCommand>(); }

}  // namespace ragkv::cli
