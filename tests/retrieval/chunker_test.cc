// Chunker: determinism, word boundaries, target bound, coverage, passage
// awareness, overlap, long words, and tokenizer independence.
#include "retrieval/chunker.h"

#include <random>
#include <string>

#include "gtest/gtest.h"
#include "retrieval/internal/text.h"
#include "retrieval/tokenizer.h"

namespace ragkv::retrieval {
namespace {

// A merging tokenizer unlike the byte one: a leading "dummy prefix" token
// (as SentencePiece adds), one token per 3 bytes of a non-space run, one per
// whitespace byte. So Encode(a + b) != Encode(a) + Encode(b).
class ChunkyTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> Encode(std::string_view text) const override {
    std::vector<int32_t> ids{1};
    size_t i = 0;
    while (i < text.size()) {
      if (text[i] == ' ' || text[i] == '\n') {
        ids.push_back(2);
        ++i;
        continue;
      }
      size_t j = i;
      while (j < text.size() && j - i < 3 && text[j] != ' ' && text[j] != '\n') ++j;
      int32_t h = 7;
      for (size_t k = i; k < j; ++k) h = h * 31 + static_cast<unsigned char>(text[k]);
      ids.push_back(3 + (h & 0x3FF));
      i = j;
    }
    return ids;
  }
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t>) const override {
    return absl::UnimplementedError("no decode");
  }
  std::string Fingerprint() const override { return "chunky"; }
};

std::string RandomText(uint32_t seed, int words) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(1, 12), letter(0, 25), gap(0, 30);
  std::string s;
  for (int w = 0; w < words; ++w) {
    if (w > 0) {
      const int g = gap(rng);
      s += g == 0 ? "\n\n" : (g == 1 ? ". " : " ");
    }
    const int n = len(rng);
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + letter(rng)));
    if (w % 17 == 5) s += "\xC3\xA9";  // a two-byte UTF-8 letter inside a word
  }
  return s;
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Checks the chunker contract on `text`.
void CheckChunks(const std::string& text, const std::vector<ChunkSpan>& chunks, const Tokenizer& tok,
                 int target, int overlap) {
  ASSERT_FALSE(chunks.empty());
  const auto words = internal::SplitWords(text);
  size_t prev_begin = 0, prev_end = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkSpan& c = chunks[i];
    EXPECT_EQ(c.ordinal, static_cast<int>(i));
    ASSERT_LT(c.byte_begin, c.byte_end);
    ASSERT_LE(c.byte_end, text.size());
    EXPECT_EQ(c.text, text.substr(c.byte_begin, c.byte_end - c.byte_begin));
    EXPECT_EQ(c.token_ids, tok.Encode(c.text));
    EXPECT_LE(static_cast<int>(c.token_ids.size()), target) << "chunk " << i;
    // Word boundaries: starts at a word start, ends at a word end.
    EXPECT_TRUE(c.byte_begin == 0 || IsSpace(text[c.byte_begin - 1])) << "chunk " << i;
    EXPECT_TRUE(c.byte_end == text.size() || IsSpace(text[c.byte_end])) << "chunk " << i;
    EXPECT_FALSE(IsSpace(text[c.byte_begin]));
    if (i > 0) {
      EXPECT_GT(c.byte_begin, prev_begin);
      EXPECT_GT(c.byte_end, prev_end);
      if (overlap == 0) {
        EXPECT_GT(c.byte_begin, prev_end - 1);
      } else {
        EXPECT_LE(c.byte_begin, prev_end + 2);  // contiguous or overlapping
      }
    }
    prev_begin = c.byte_begin;
    prev_end = c.byte_end;
  }
  // Coverage: every word lies in some chunk.
  for (const auto& w : words) {
    bool covered = false;
    for (const ChunkSpan& c : chunks) covered |= (c.byte_begin <= w.begin && w.end <= c.byte_end);
    EXPECT_TRUE(covered) << "word at " << w.begin << " not covered";
  }
}

TEST(Chunker, ShortPassageIsOneChunk) {
  auto tok = std::make_shared<ByteTokenizer>();
  auto chunker = Chunker::Create({}, tok).value();
  const std::string text = "  A short passage about Exeter College.\n\n";
  auto chunks = chunker->Chunk(text).value();
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].text, "A short passage about Exeter College.");
  EXPECT_EQ(chunks[0].byte_begin, 2u);
}

TEST(Chunker, BoundariesBoundAndCoverageByteTokenizer) {
  auto tok = std::make_shared<ByteTokenizer>();
  for (int target : {16, 64, 512}) {
    auto chunker = Chunker::Create({target, 0}, tok).value();
    const std::string text = RandomText(static_cast<uint32_t>(target), 600);
    auto chunks = chunker->Chunk(text).value();
    EXPECT_GT(chunks.size(), 1u);
    CheckChunks(text, chunks, *tok, target, 0);
  }
}

TEST(Chunker, WorksWithAMergingTokenizer) {
  auto tok = std::make_shared<ChunkyTokenizer>();
  auto chunker = Chunker::Create({48, 0}, tok).value();
  const std::string text = RandomText(3, 500);
  auto chunks = chunker->Chunk(text).value();
  CheckChunks(text, chunks, *tok, 48, 0);
}

TEST(Chunker, OverlapRepeatsTrailingWords) {
  auto tok = std::make_shared<ByteTokenizer>();
  auto chunker = Chunker::Create({64, 16}, tok).value();
  const std::string text = RandomText(11, 400);
  auto chunks = chunker->Chunk(text).value();
  CheckChunks(text, chunks, *tok, 64, 16);
  int overlapping = 0;
  for (size_t i = 1; i < chunks.size(); ++i) overlapping += chunks[i].byte_begin < chunks[i - 1].byte_end;
  EXPECT_GT(overlapping, static_cast<int>(chunks.size()) / 2);
}

TEST(Chunker, Deterministic) {
  auto tok = std::make_shared<ByteTokenizer>();
  const std::string text = RandomText(5, 800);
  auto a = Chunker::Create({100, 10}, tok).value()->Chunk(text).value();
  auto b = Chunker::Create({100, 10}, tok).value()->Chunk(text).value();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].byte_begin, b[i].byte_begin);
    EXPECT_EQ(a[i].byte_end, b[i].byte_end);
    EXPECT_EQ(a[i].token_ids, b[i].token_ids);
    EXPECT_EQ(a[i].token_begin, b[i].token_begin);
  }
}

TEST(Chunker, PrefersParagraphEnds) {
  auto tok = std::make_shared<ByteTokenizer>();
  auto chunker = Chunker::Create({100, 0}, tok).value();
  // Two 70-byte paragraphs: the cut falls at the paragraph break.
  const std::string p1 = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu.";
  const std::string p2 = "one two three four five six seven eight nine ten eleven twelve thirteen";
  const std::string text = p1 + "\n\n" + p2;
  auto chunks = chunker->Chunk(text).value();
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].text, p1);
  EXPECT_EQ(chunks[1].text, p2);
}

TEST(Chunker, OverlongWordIsSplitAtCodePoints) {
  auto tok = std::make_shared<ByteTokenizer>();
  auto chunker = Chunker::Create({16, 0}, tok).value();
  std::string word;
  for (int i = 0; i < 30; ++i) word += "\xC3\xA9";  // 60 bytes, no spaces
  const std::string text = "short " + word + " tail";
  auto chunks = chunker->Chunk(text).value();
  std::string joined;
  for (const ChunkSpan& c : chunks) {
    EXPECT_LE(c.token_ids.size(), 16u);
    EXPECT_TRUE(internal::ValidateUtf8(c.text).ok()) << c.text;
    joined += c.text;
  }
  EXPECT_NE(joined.find("\xC3\xA9"), std::string::npos);
}

TEST(Chunker, BadInput) {
  auto tok = std::make_shared<ByteTokenizer>();
  EXPECT_EQ(Chunker::Create({4, 0}, tok).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Chunker::Create({64, 32}, tok).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Chunker::Create({64, 0}, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  auto chunker = Chunker::Create({}, tok).value();
  EXPECT_EQ(chunker->Chunk("   \n\t ").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ByteTokenizer, RoundTripAndBadIds) {
  ByteTokenizer tok;
  const std::string text = "caf\xC3\xA9 \x01 end";
  auto ids = tok.Encode(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(tok.Decode(ids).value(), text);
  std::vector<int32_t> bad{5, 2};
  EXPECT_EQ(tok.Decode(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Text, Utf8Validation) {
  EXPECT_TRUE(internal::ValidateUtf8("plain ascii").ok());
  EXPECT_TRUE(internal::ValidateUtf8("\xE2\x82\xAC \xF0\x9F\x98\x80").ok());
  EXPECT_FALSE(internal::ValidateUtf8("\xC3").ok());              // truncated
  EXPECT_FALSE(internal::ValidateUtf8("\xC0\xAF").ok());          // overlong
  EXPECT_FALSE(internal::ValidateUtf8("\xED\xA0\x80").ok());      // surrogate
  EXPECT_FALSE(internal::ValidateUtf8("\xFF").ok());              // bad lead
  EXPECT_FALSE(internal::ValidateUtf8("a\x80").ok());             // stray continuation
}

}  // namespace
}  // namespace ragkv::retrieval
