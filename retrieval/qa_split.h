// qa_split.h: the fixed dev/test split of MuSiQue-style question files
// (docs/quality_gate.md "The dev/test split").
//
// The question files carry no ids, so one is defined from the text:
//   QuestionId(q) = the first 16 hex digits (lower case) of SHA-256 over the
//   question's UTF-8 bytes, exactly as ParseMusique stores them in
//   QaExample::question: the JSON string value after JSON unescaping, with
//   no trimming, case folding or Unicode normalization.
// Split rule: a question is in "dev" when its id's first hex digit is 0-7,
// in "test" when it is 8-f. The rule depends only on the question text, so
// it is the same on every machine and for every copy or reordering of the
// file. Every method, threshold and default is chosen on dev and reported
// on test.
//
// All functions are pure (thread-safe).
#ifndef RAGKV_RETRIEVAL_QA_SPLIT_H_
#define RAGKV_RETRIEVAL_QA_SPLIT_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "retrieval/corpus_reader.h"

namespace ragkv::retrieval {

enum class QaSplit { kDev, kTest, kAll };

// QuestionId: 16 lower-case hex digits (the first 8 bytes of SHA-256 of
// `question`'s bytes).
std::string QuestionId(std::string_view question);

// SplitOfQuestion: kDev or kTest by the rule above (never kAll).
QaSplit SplitOfQuestion(std::string_view question);

// QaSplitName: "dev", "test" or "all".
std::string_view QaSplitName(QaSplit split);

// ParseQaSplit: "dev", "test" or "all" (exactly; lower case). Anything else
// is InvalidArgument naming `field` (e.g. "--split") and the valid names.
absl::StatusOr<QaSplit> ParseQaSplit(std::string_view name, std::string_view field = "split");

// FilterQaSplit: the members of `questions` in `split` (kAll: all of them),
// in their original order.
std::vector<QaExample> FilterQaSplit(const std::vector<QaExample>& questions, QaSplit split);

}  // namespace ragkv::retrieval

#endif  // RAGKV_RETRIEVAL_QA_SPLIT_H_
