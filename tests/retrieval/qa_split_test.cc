// The dev/test split of MuSiQue questions (retrieval/qa_split.h): the id
// rule against SHA-256's published test vectors, the split of the real file
// pinned by ids written here, and the option parsing.
#include "retrieval/qa_split.h"

#include <filesystem>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "retrieval/corpus_reader.h"
#include "tests/retrieval/test_util.h"
#include "tests/support/require.h"

namespace ragkv::retrieval {
namespace {

TEST(QaSplit, IdIsSha256Prefix) {
  // FIPS 180-2 / NIST examples: SHA-256("abc") = ba7816bf 8f01cfea ...,
  // SHA-256("") = e3b0c442 98fc1c14 ...
  EXPECT_EQ(QuestionId("abc"), "ba7816bf8f01cfea");
  EXPECT_EQ(QuestionId(""), "e3b0c44298fc1c14");
  EXPECT_EQ(QuestionId("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8");
  // The bytes as given: no trimming or case folding.
  EXPECT_NE(QuestionId("abc "), QuestionId("abc"));
  EXPECT_NE(QuestionId("ABC"), QuestionId("abc"));
}

TEST(QaSplit, SplitRuleIsFirstHexDigit) {
  EXPECT_EQ(SplitOfQuestion("abc"), QaSplit::kTest);  // b...
  EXPECT_EQ(SplitOfQuestion(""), QaSplit::kTest);     // e...
  // "abcdbcd...nopq" -> 2...
  EXPECT_EQ(SplitOfQuestion("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            QaSplit::kDev);
}

TEST(QaSplit, ParseNamesTheField) {
  EXPECT_EQ(*ParseQaSplit("dev"), QaSplit::kDev);
  EXPECT_EQ(*ParseQaSplit("test"), QaSplit::kTest);
  EXPECT_EQ(*ParseQaSplit("all"), QaSplit::kAll);
  for (const char* bad : {"", "Dev", "train", "dev ", "tests"}) {
    auto s = ParseQaSplit(bad, "--split");
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("--split"), std::string::npos) << s.status();
    EXPECT_NE(s.status().message().find("dev|test|all"), std::string::npos) << s.status();
  }
  for (QaSplit s : {QaSplit::kDev, QaSplit::kTest, QaSplit::kAll}) {
    EXPECT_EQ(*ParseQaSplit(QaSplitName(s)), s);
  }
}

TEST(QaSplit, FilterKeepsOrder) {
  // "abc" is test, the 56-byte vector is dev.
  const std::string dev = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  std::vector<QaExample> qs = {{"abc", {"1"}, {}}, {dev, {"2"}, {}}, {"", {"3"}, {}},
                               {dev, {"4"}, {}}};
  auto d = FilterQaSplit(qs, QaSplit::kDev);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].answers[0], "2");
  EXPECT_EQ(d[1].answers[0], "4");
  auto t = FilterQaSplit(qs, QaSplit::kTest);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].answers[0], "1");
  EXPECT_EQ(t[1].answers[0], "3");
  EXPECT_EQ(FilterQaSplit(qs, QaSplit::kAll).size(), 4u);
}

// The real file: ids written down once (docs/quality_gate.md lists them
// all); if one changes, the split changed and every dev/test figure with it.
TEST(QaSplit, MusiqueFileSplitIsFixed) {
  const std::string path = testing::CorpusDir() + "/musique_dev.json";
  RAGKV_REQUIRE_OR_SKIP(std::filesystem::exists(path))
      << "no corpus at " << path << " (set RAGKV_TEST_CORPUS)";
  auto corpus = ReadCorpusFile(path);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  const std::vector<QaExample>& qs = corpus->questions;
  ASSERT_EQ(qs.size(), 100u);
  EXPECT_EQ(QuestionId(qs[0].question), "3d8dd59a2a86991a");
  EXPECT_EQ(QuestionId(qs[1].question), "262c2e7d268b4753");
  EXPECT_EQ(QuestionId(qs[2].question), "804b6de811fa656e");
  // Non-ASCII: "Where is Amílcar Cabral International Airport?" (UTF-8 bytes).
  EXPECT_EQ(QuestionId(qs[69].question), "6209181dd24e0e34");
  EXPECT_EQ(QuestionId(qs[95].question), "aede5ac5d13df46b");
  EXPECT_EQ(QuestionId(qs[99].question), "712d51e3c2fb8789");
  EXPECT_EQ(SplitOfQuestion(qs[0].question), QaSplit::kDev);
  EXPECT_EQ(SplitOfQuestion(qs[2].question), QaSplit::kTest);

  std::set<std::string> ids;
  for (const QaExample& q : qs) ids.insert(QuestionId(q.question));
  EXPECT_EQ(ids.size(), 100u);  // the ids tell the questions apart

  const std::vector<QaExample> dev = FilterQaSplit(qs, QaSplit::kDev);
  const std::vector<QaExample> test = FilterQaSplit(qs, QaSplit::kTest);
  EXPECT_EQ(dev.size(), 45u);
  EXPECT_EQ(test.size(), 55u);
  std::set<std::string> seen;
  for (const auto* part : {&dev, &test}) {
    for (const QaExample& q : *part) {
      EXPECT_TRUE(seen.insert(q.question).second) << "in both splits: " << q.question;
    }
  }
  EXPECT_EQ(seen.size(), qs.size());  // disjoint and together the whole file
  EXPECT_EQ(dev.front().question, qs[0].question);  // file order kept
  EXPECT_EQ(test.front().question, qs[2].question);
  EXPECT_EQ(FilterQaSplit(qs, QaSplit::kAll).size(), 100u);
}

}  // namespace
}  // namespace ragkv::retrieval
