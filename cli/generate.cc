// generate.cc: `ragkv generate`: run the model on a prompt, llama2.c run.c
// compatible (model/generate.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/command.h"
#include "model/generate.h"

namespace ragkv::cli {
namespace {

class GenerateCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--model", gen_.model_path, "checkpoint or synthetic:<spec>")->required();
    cmd->add_option("--tokenizer", gen_.tokenizer_path);
    cmd->add_option("--prompt", gen_.prompt);
    cmd->add_option("--prompt-ids", ids_, "comma-separated token ids");
    cmd->add_option("--max-new", gen_.max_new)->capture_default_str();
    cmd->add_option("--temperature", gen_.sampler.temperature)->capture_default_str();
    cmd->add_flag("--print-ids", gen_.print_ids);
    cmd->add_option("--max-seq-len", gen_.max_seq_len);
  }
  int Run() override;

 private:
  model::GenerateOptions gen_;
  std::string ids_;
};

int GenerateCommand::Run() {
  if (!ids_.empty()) {
    auto ids = model::ParseIdList(ids_);
    if (!ids.ok()) {
      std::fprintf(stderr, "ragkv generate: %s\n", ids.status().ToString().c_str());
      return 2;
    }
    gen_.prompt_ids = *ids;
  }
  absl::Status s = model::RunGenerate(gen_, std::cout);
  if (!s.ok()) {
    std::fprintf(stderr, "ragkv generate: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewGenerateCommand() { return std::make_unique<GenerateCommand>(); }

}  // namespace ragkv::cli
