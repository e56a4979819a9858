#include "tests/retrieval/test_util.h"

#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "tests/support/source_dir.h"

namespace ragkv::retrieval::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/ragkv_retrieval_test_XXXXXX";
  if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::vector<float> RandomUnitVectors(int n, int dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(n) * dim);
  for (int i = 0; i < n; ++i) {
    double ss = 0;
    float* row = v.data() + static_cast<size_t>(i) * dim;
    for (int j = 0; j < dim; ++j) {
      row[j] = normal(rng);
      ss += row[j] * row[j];
    }
    for (int j = 0; j < dim; ++j) row[j] = static_cast<float>(row[j] / std::sqrt(ss));
  }
  return v;
}

std::string CorpusDir() {
  const char* env = std::getenv("RAGKV_TEST_CORPUS");
  if (env != nullptr && *env != '\0') return env;
  return std::string(RAGKV_SOURCE_DIR) + "/../shared/corpus";
}

std::vector<Document> SmallCorpus() {
  return {
      {"exeter", "Exeter College", "Exeter College is a constituent college of the University of Oxford."},
      {"hannibal", "Hannibal and Scipio",
       "Hannibal and Scipio is a Caroline era stage play written by Thomas Nabbes, first performed in 1635."},
      {"smeco", "", "The Southern Maryland Electric Cooperative is headquartered in Hughesville, Maryland."},
      {"menteng", "", "Menteng is an administrative village in the Menteng district of Indonesia."},
      {"campora", "", "Campora is a town in the province of Salerno in the Campania region of Italy."},
  };
}

RetrieverOptions SmallRetrieverOptions(const std::string& dir) {
  RetrieverOptions o;
  o.dir = dir;
  o.chunker.target_tokens = 64;  // byte tokens: several chunks per document
  o.sync_writes = false;
  return o;
}

std::vector<int64_t> ChunkIds(const std::vector<SearchResult>& r) {
  std::vector<int64_t> ids;
  for (const auto& x : r) ids.push_back(x.chunk_id);
  return ids;
}

}  // namespace ragkv::retrieval::testing
