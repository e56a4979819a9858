// ragkv_generate: standalone `ragkv generate` (the ragkv binary in services/
// calls the same RunGenerate).
//   ragkv_generate --model PATH [--tokenizer PATH] (--prompt TEXT | --prompt-ids 1,2,3)
//                  --max-new N [--temperature 0] [--top-p 0.9] [--seed N] [--print-ids]
#include <iostream>

#include <CLI/CLI.hpp>

#include "kernels/cpu.h"
#include "model/generate.h"

int main(int argc, char** argv) {
  CLI::App app{"ragkv generate: greedy / sampled generation with a Llama-family model"};
  ragkv::model::GenerateOptions o;
  std::string ids;
  int threads = 0;
  app.add_option("--model", o.model_path, ".bin, .gguf, HF dir/.safetensors or synthetic:<spec>")->required();
  app.add_option("--tokenizer", o.tokenizer_path, "tokenizer (.bin, .model, .json, .gguf, dir)");
  auto* p = app.add_option("--prompt", o.prompt, "prompt text (BOS is added)");
  auto* pi = app.add_option("--prompt-ids", ids, "prompt token ids, comma-separated");
  p->excludes(pi);
  app.add_option("--max-new", o.max_new, "tokens to generate")->required();
  app.add_option("--temperature", o.sampler.temperature, "0 = greedy");
  app.add_option("--top-p", o.sampler.top_p, "nucleus mass");
  app.add_option("--seed", o.sampler.seed, "sampling seed");
  app.add_option("--ctx", o.max_seq_len, "override the context length");
  app.add_option("--threads", threads, "kernel threads (0 = all cores)");
  app.add_flag("--print-ids", o.print_ids, "print generated ids instead of text");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) ragkv::kernels::SetMaxThreads(threads);
  if (!ids.empty()) {
    auto parsed = ragkv::model::ParseIdList(ids);
    if (!parsed.ok()) {
      std::cerr << "error: " << parsed.status().message() << "\n";
      return 2;
    }
    o.prompt_ids = *parsed;
  }
  absl::Status s = ragkv::model::RunGenerate(o, std::cout);
  if (!s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
