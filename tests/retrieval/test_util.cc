#include "tests/retrieval/test_util.h"

#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <random>

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

}  // namespace ragkv::retrieval::testing
