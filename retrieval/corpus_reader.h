// corpus_reader.h: documents and the readers that turn corpus files into them.
//
// Formats: plain text (.txt: one document per file), Markdown (.md: one
// document; title = first "# " heading), JSONL (.jsonl: one JSON object per
// line with "text" and optional "id", "title"), and MuSiQue-style JSON
// (.json: a list of {question, answers, passages: [{title, text}]}; every
// passage becomes a document "musique:<question>:<passage>"; a passage
// identical in title and text to an earlier one is the same document, listed
// under each question that retrieved it).
// All functions are pure (thread-safe); errors are InvalidArgument (bad
// content, with line/offset) or NotFound / Internal (I/O).
#ifndef RAGKV_RETRIEVAL_CORPUS_READER_H_
#define RAGKV_RETRIEVAL_CORPUS_READER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ragkv::retrieval {

// Document: one unit of ingestion. `id` is unique within a catalogue.
struct Document {
  std::string id;
  std::string title;  // may be empty
  std::string text;   // UTF-8, non-empty, not binary
};

// ValidateDocument: OK when `doc` can be ingested; InvalidArgument for an
// empty id (or one over 1 KiB), empty/whitespace-only text, binary text
// (NUL bytes or mostly control bytes), or invalid UTF-8 in id/title/text.
absl::Status ValidateDocument(const Document& doc);

// A MuSiQue question with the ids of the documents made from its passages.
struct QaExample {
  std::string question;
  std::vector<std::string> answers;
  std::vector<std::string> passage_doc_ids;
};

struct Corpus {
  std::vector<Document> documents;
  std::vector<QaExample> questions;  // only for MuSiQue-style JSON
};

enum class CorpusFormat { kAuto, kPlainText, kMarkdown, kJsonl, kMusique };

// ReadCorpusFile: reads `path` in `format` (kAuto: by extension .txt, .md,
// .markdown, .jsonl, .json). Plain text/Markdown documents get id = file
// name. Every document is validated (ValidateDocument) and ids must be unique
// within the file (InvalidArgument naming the duplicate).
absl::StatusOr<Corpus> ReadCorpusFile(const std::string& path,
                                      CorpusFormat format = CorpusFormat::kAuto);

// Parsers over in-memory content (`name` is used for ids and messages).
absl::StatusOr<Corpus> ParseJsonl(std::string_view content, std::string_view name);
absl::StatusOr<Corpus> ParseMusique(std::string_view content, std::string_view name);
absl::StatusOr<Document> ParseMarkdown(std::string_view content, std::string_view name);

}  // namespace ragkv::retrieval

#endif  // RAGKV_RETRIEVAL_CORPUS_READER_H_
