// test_util.h: helpers shared by the retrieval tests.
#ifndef RAGKV_TESTS_RETRIEVAL_TEST_UTIL_H_
#define RAGKV_TESTS_RETRIEVAL_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "retrieval/retriever.h"

namespace ragkv::retrieval::testing {

// TempDir: a fresh directory under TEST_TMPDIR or /tmp, removed on scope exit.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// RandomUnitVectors: n * dim floats, each row L2-normalized, seeded.
std::vector<float> RandomUnitVectors(int n, int dim, uint32_t seed);

// CorpusDir: RAGKV_TEST_CORPUS or RAGKV_SOURCE_DIR/../shared/corpus.
std::string CorpusDir();

// SmallCorpus: five short documents (two with titles).
std::vector<Document> SmallCorpus();

// SmallRetrieverOptions: a retriever in `dir` with 64-token chunks (several
// per document of SmallCorpus) and unsynced writes.
RetrieverOptions SmallRetrieverOptions(const std::string& dir);

// ChunkIds: the chunk ids of `r`, in order.
std::vector<int64_t> ChunkIds(const std::vector<SearchResult>& r);

}  // namespace ragkv::retrieval::testing

#endif  // RAGKV_TESTS_RETRIEVAL_TEST_UTIL_H_
