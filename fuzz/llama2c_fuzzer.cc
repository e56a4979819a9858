// llama2c_fuzzer: llama2.c checkpoint header (7 x int32 + weights, sizes
// checked against the file length) and llama2.c tokenizer.bin.
// Input: [mode][bytes]; mode bit 0 = 0: load as a model checkpoint
// (LoadModelParts), 1: load as tokenizer.bin (LoadTokenizer) and run
// Encode/Decode on a fixed text.
// Seeds: "\0"+stories260K.bin, "\1"+tok512.bin (scripts/fuzz).
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "model/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::string path = ragkv::fuzz::ScratchDir() + "/in.bin";
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (!ragkv::fuzz::WriteFile(path, bytes)) return 0;
  if ((data[0] & 1) == 0) {
    ragkv::model::LoadOptions opt;
    opt.max_seq_len = 64;
    (void)ragkv::model::LoadModelParts(path, opt);
  } else {
    auto tok = ragkv::model::LoadTokenizer(path);
    if (tok.ok()) {
      auto ids = (*tok)->Encode("Once upon a time, <0x41> \xc3\xa9\xff", true, true);
      if (ids.ok()) {
        (void)(*tok)->Decode(*ids);
        for (int32_t id : *ids) (void)(*tok)->DecodePiece(1, id);
      }
      (void)(*tok)->DecodePiece(1, (*tok)->vocab_size() - 1);
    }
  }
  return 0;
}
