// Corpus readers: formats and bad input.
#include "retrieval/corpus_reader.h"

#include <fstream>

#include "gtest/gtest.h"
#include "tests/retrieval/test_util.h"

namespace ragkv::retrieval {
namespace {

TEST(CorpusReader, Jsonl) {
  auto c = ParseJsonl(
      "{\"id\": \"a\", \"title\": \"T\", \"text\": \"hello world\"}\n\n{\"id\": 7, \"text\": \"second\"}\n",
      "x.jsonl");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->documents.size(), 2u);
  EXPECT_EQ(c->documents[0].id, "a");
  EXPECT_EQ(c->documents[0].title, "T");
  EXPECT_EQ(c->documents[1].id, "7");
  EXPECT_EQ(c->documents[1].text, "second");
}

TEST(CorpusReader, JsonlBadInput) {
  EXPECT_EQ(ParseJsonl("{\"id\": \"a\"}\n", "x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJsonl("not json\n", "x").status().code(), absl::StatusCode::kInvalidArgument);
  auto dup = ParseJsonl("{\"id\":\"a\",\"text\":\"x\"}\n{\"id\":\"a\",\"text\":\"y\"}\n", "x");
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("duplicate"), std::string::npos);
  EXPECT_EQ(ParseJsonl("{\"id\":\"a\",\"text\":\"  \"}\n", "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CorpusReader, MarkdownTitle) {
  auto d = ParseMarkdown("intro\n# The Title\n\nbody text\n", "doc.md");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->id, "doc.md");
  EXPECT_EQ(d->title, "The Title");
}

TEST(CorpusReader, MusiqueShape) {
  auto c = ParseMusique(
      R"([{"question":"q1?","answers":["A"],"passages":[{"title":"t","text":"p one"},{"title":"","text":"p two"}]},
          {"question":"q2?","answers":["B","b2"],"passages":[{"title":"","text":"p three"}]}])",
      "m.json");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->documents.size(), 3u);
  ASSERT_EQ(c->questions.size(), 2u);
  EXPECT_EQ(c->questions[0].passage_doc_ids, (std::vector<std::string>{"musique:0:0", "musique:0:1"}));
  EXPECT_EQ(c->questions[1].answers.size(), 2u);
  EXPECT_EQ(ParseMusique("{}", "m").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseMusique("[{\"passages\":[{\"title\":\"x\"}]}]", "m").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CorpusReader, MusiqueRepeatedPassageIsOneDocument) {
  auto c = ParseMusique(
      R"([{"question":"q1?","answers":["A"],"passages":[{"title":"t","text":"same"},{"title":"u","text":"other"}]},
          {"question":"q2?","answers":["B"],"passages":[{"title":"t","text":"same"},{"title":"x","text":"same"}]}])",
      "m.json");
  ASSERT_TRUE(c.ok()) << c.status();
  // (t, same) appears twice: one document, referenced by both questions; a
  // different title makes (x, same) a document of its own.
  ASSERT_EQ(c->documents.size(), 3u);
  EXPECT_EQ(c->questions[1].passage_doc_ids,
            (std::vector<std::string>{"musique:0:0", "musique:1:1"}));
}

TEST(CorpusReader, ValidateDocument) {
  EXPECT_TRUE(ValidateDocument({"id", "", "text"}).ok());
  EXPECT_EQ(ValidateDocument({"", "", "text"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateDocument({"id", "", ""}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateDocument({"id", "", std::string("a\0b", 3)}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateDocument({"id", "", "\x01\x02\x03\x04 x"}).code(), absl::StatusCode::kInvalidArgument);
  auto bad = ValidateDocument({"id", "", "caf\xC3 bad"});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("UTF-8"), std::string::npos);
}

TEST(CorpusReader, ReadFilesByExtension) {
  testing::TempDir dir;
  {
    std::ofstream(dir.path() + "/a.txt") << "plain text document";
    std::ofstream(dir.path() + "/b.jsonl") << "{\"id\":\"x\",\"text\":\"y\"}\n";
  }
  auto t = ReadCorpusFile(dir.path() + "/a.txt");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->documents[0].id, "a.txt");
  auto j = ReadCorpusFile(dir.path() + "/b.jsonl");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->documents[0].id, "x");
  EXPECT_EQ(ReadCorpusFile(dir.path() + "/missing.txt").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ragkv::retrieval
