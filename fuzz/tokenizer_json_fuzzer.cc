// tokenizer_json_fuzzer: Hugging Face tokenizer.json (byte-level BPE) through
// LoadTokenizer(<scratch>/tokenizer.json), then Encode/Decode of a fixed text.
// Seeds: a tiny valid tokenizer.json written by this target when
// RAGKV_FUZZ_SEED_DIR is set (scripts/fuzz).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "model/loader.h"

namespace {

// The GPT-2 byte-to-unicode map, as in tests/model/tokenizer_test.cc.
std::string TinyBpeJson(bool split) {
  auto utf8 = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    return s;
  };
  auto esc = [](const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '"' || c == '\\') o.push_back('\\');
      o.push_back(c);
    }
    return o;
  };
  std::string vocab;
  int n = 0;
  std::string g;
  for (int b = 0; b < 256; ++b) {
    const bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const uint32_t cp = direct ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
    if (b == ' ') g = utf8(cp);
    // Appended piecewise: GCC 12 -O3 warns falsely (-Wrestrict) on
    // "literal" + std::string&&.
    vocab += '"';
    vocab += esc(utf8(cp));
    vocab += "\":";
    vocab += std::to_string(b);
    vocab += ',';
  }
  vocab += "\"he\":256,\"" + g + "t\":257,\"" + g + "the\":258,\"the\":259";
  std::string pre = split
      ? R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s+(?!\\S)|\\s+"}},{"type":"ByteLevel","add_prefix_space":false}]})"
      : R"({"type":"ByteLevel","add_prefix_space":false})";
  return R"({"model":{"type":"BPE","vocab":{)" + vocab + R"(},"merges":["h e",")" + g + " t\",\"" +
         g + "t he\",\"t he\"]},\"added_tokens\":[{\"id\":260,\"content\":\"<|endoftext|>\","
         "\"special\":true}],\"pre_tokenizer\":" + pre + "}";
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (std::string d = ragkv::fuzz::SeedDir(); !d.empty()) {
    ragkv::fuzz::WriteFile(d + "/tiny_bpe.json", TinyBpeJson(false));
    ragkv::fuzz::WriteFile(d + "/tiny_bpe_split.json", TinyBpeJson(true));
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = ragkv::fuzz::ScratchDir() + "/tokenizer.json";
  if (!ragkv::fuzz::WriteFile(path, std::string_view(reinterpret_cast<const char*>(data), size))) {
    return 0;
  }
  auto tok = ragkv::model::LoadTokenizer(path);
  if (!tok.ok()) return 0;
  auto ids = (*tok)->Encode("The theme: 'the' 123 <|endoftext|> \xc3\xa9\xff\n\n", true, true);
  if (ids.ok()) {
    (void)(*tok)->Decode(*ids);
    for (int32_t id : *ids) (void)(*tok)->DecodePiece(0, id);
  }
  (void)(*tok)->DecodePiece(0, (*tok)->vocab_size());
  return 0;
}
