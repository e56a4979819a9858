// gguf_fuzzer: GGUF header/metadata/tensor-table parsing (model/loader.h):
// the input is written to <scratch>/in.gguf and loaded as a model
// (LoadModelParts) and as a tokenizer (its embedded vocabulary).
// Seeds: /work/shared/models/stories260K.gguf (scripts/fuzz).
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "model/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = ragkv::fuzz::ScratchDir() + "/in.gguf";
  if (!ragkv::fuzz::WriteFile(path, std::string_view(reinterpret_cast<const char*>(data), size))) {
    return 0;
  }
  ragkv::model::LoadOptions opt;
  opt.max_seq_len = 64;
  (void)ragkv::model::LoadModelParts(path, opt);
  auto tok = ragkv::model::LoadTokenizer(path);
  if (tok.ok()) {
    // A vocabulary that loads must also encode/decode without crashing.
    auto ids = (*tok)->Encode("Once upon a time \xff\x01", true, true);
    if (ids.ok()) (void)(*tok)->Decode(*ids);
  }
  return 0;
}
