// tokenize.cc: `ragkv tokenize`, like llama.cpp's llama-tokenize: the
// tokens of a text under a checkpoint's tokenizer (the GGUF's embedded one,
// tokenizer.json / .model beside an HF or llama2.c checkpoint, or
// --tokenizer). Prints one "id -> 'piece'" line per token, or with --ids the
// list "[id, id, ...]". BOS is prepended where the vocabulary adds one
// (Tokenizer::add_bos: llama.cpp's rule for a GGUF, docs/model.md), as
// llama-tokenize does; --no-bos never prepends it.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_join.h"
#include "cli/command.h"
#include "model/loader.h"
#include "model/tokenizer.h"

namespace ragkv::cli {
namespace {

class TokenizeCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--model,-m", model_, "checkpoint (its tokenizer) or tokenizer file")->required();
    cmd->add_option("--tokenizer", tokenizer_, "tokenizer file (default: the model's)");
    auto* text = cmd->add_option("--text,-p", text_, "text to tokenize");
    auto* file = cmd->add_option("--file,-f", file_, "read the text from this file");
    text->excludes(file);
    cmd->add_flag("--ids", ids_only_, "print only the ids, as [id, id, ...]");
    cmd->add_flag("--no-bos", no_bos_, "do not prepend the BOS token (by default it is where the vocabulary adds one)");
    cmd->add_flag("--show-count", show_count_, "print the number of tokens");
  }
  int Run() override;

 private:
  std::string model_, tokenizer_, text_, file_;
  bool ids_only_ = false, no_bos_ = false, show_count_ = false;
};

int TokenizeCommand::Run() {
  std::string text = text_;
  if (!file_.empty()) {
    std::ifstream in(file_, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "ragkv tokenize: cannot read %s\n", file_.c_str());
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  absl::StatusOr<std::string> path =
      tokenizer_.empty() ? model::DefaultTokenizerPath(model_) : absl::StatusOr<std::string>(tokenizer_);
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tok =
      path.ok() ? model::LoadTokenizer(*path)
                : absl::StatusOr<std::unique_ptr<model::Tokenizer>>(path.status());
  if (!tok.ok()) {
    std::fprintf(stderr, "ragkv tokenize: %s\n", tok.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(text, !no_bos_, false);
  if (!ids.ok()) {
    std::fprintf(stderr, "ragkv tokenize: %s\n", ids.status().ToString().c_str());
    return 1;
  }
  if (ids_only_) {
    std::printf("[%s]\n", absl::StrJoin(*ids, ", ").c_str());
  } else {
    int32_t prev = -1;
    for (int32_t id : *ids) {
      std::printf("%6d -> '%s'\n", id, (*tok)->DecodePiece(prev, id).c_str());
      prev = id;
    }
  }
  if (show_count_) std::printf("Total number of tokens: %zu\n", ids->size());
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewTokenizeCommand() { return std::make_unique<TokenizeCommand>(); }

}  // namespace ragkv::cli
