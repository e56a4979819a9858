#include "retrieval/qa_split.h"

#include <openssl/evp.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace ragkv::retrieval {

std::string QuestionId(std::string_view question) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // EVP_Digest fails only on allocation failure inside libcrypto; there is
  // no id to return then.
  if (EVP_Digest(question.data(), question.size(), md, &len, EVP_sha256(), nullptr) != 1 ||
      len < 8) {
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(16, '0');
  for (int i = 0; i < 8; ++i) {
    id[2 * i] = kHex[md[i] >> 4];
    id[2 * i + 1] = kHex[md[i] & 0xF];
  }
  return id;
}

QaSplit SplitOfQuestion(std::string_view question) {
  const char first = QuestionId(question)[0];
  return first >= '0' && first <= '7' ? QaSplit::kDev : QaSplit::kTest;
}

std::string_view QaSplitName(QaSplit split) {
  switch (split) {
    case QaSplit::kDev:
      return "dev";
    case QaSplit::kTest:
      return "test";
    case QaSplit::kAll:
      return "all";
  }
  return "all";
}

absl::StatusOr<QaSplit> ParseQaSplit(std::string_view name, std::string_view field) {
  if (name == "dev") return QaSplit::kDev;
  if (name == "test") return QaSplit::kTest;
  if (name == "all") return QaSplit::kAll;
  return absl::InvalidArgumentError(absl::StrCat(
      absl::string_view(field.data(), field.size()), ": unknown split '",
      absl::string_view(name.data(), name.size()), "' (dev|test|all)"));
}

std::vector<QaExample> FilterQaSplit(const std::vector<QaExample>& questions, QaSplit split) {
  std::vector<QaExample> out;
  for (const QaExample& q : questions) {
    if (split == QaSplit::kAll || SplitOfQuestion(q.question) == split) out.push_back(q);
  }
  return out;
}

}  // namespace ragkv::retrieval
