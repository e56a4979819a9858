// corpus_fuzzer: the corpus readers on untrusted content
// (retrieval/corpus_reader.h): JSONL, MuSiQue JSON, Markdown, and
// ValidateDocument. Input: [format selector][content].
// Invariant checked: every document a parser returns passes
// ValidateDocument (the readers promise validated output).
// Seeds: snippets of /work/shared/corpus and tests (scripts/fuzz).
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "retrieval/corpus_reader.h"

namespace rt = ragkv::retrieval;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ragkv::fuzz::FuzzInput in(data, size);
  const uint8_t sel = in.Byte();
  const std::string_view content = in.Rest();
  auto check = [](const rt::Corpus& c) {
    for (const rt::Document& d : c.documents) {
      if (!rt::ValidateDocument(d).ok()) __builtin_trap();
    }
  };
  switch (sel % 4) {
    case 0:
      if (auto c = rt::ParseJsonl(content, "fuzz.jsonl"); c.ok()) check(*c);
      break;
    case 1:
      if (auto c = rt::ParseMusique(content, "fuzz.json"); c.ok()) check(*c);
      break;
    case 2:
      if (auto d = rt::ParseMarkdown(content, "fuzz.md"); d.ok()) {
        if (!rt::ValidateDocument(*d).ok()) __builtin_trap();
      }
      break;
    default: {
      rt::Document d;
      d.id = std::string(content.substr(0, content.size() / 3));
      d.title = std::string(content.substr(content.size() / 3, content.size() / 3));
      d.text = std::string(content.substr(2 * (content.size() / 3)));
      (void)rt::ValidateDocument(d);
    }
  }
  return 0;
}
