// test_util.h: locating ../shared/models for the model tests.
#ifndef RAGKV_TESTS_MODEL_TEST_UTIL_H_
#define RAGKV_TESTS_MODEL_TEST_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/require.h"
#include "tests/support/source_dir.h"

namespace ragkv::model::testing {

// ModelsDir: $RAGKV_TEST_MODELS, else <repo>/../shared/models.
inline std::string ModelsDir() {
  if (const char* e = std::getenv("RAGKV_TEST_MODELS"); e != nullptr && *e) return e;
  return std::string(RAGKV_SOURCE_DIR) + "/../shared/models";
}
inline std::string ModelFile(const std::string& name) { return ModelsDir() + "/" + name; }
inline bool HaveModelFile(const std::string& name) {
  return std::filesystem::exists(ModelFile(name));
}
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ragkv::model::testing

// Returns from the test unless ../shared/models/<name> exists: a failure
// under CI=true, a skip elsewhere (tests/support/require.h).
#define RAGKV_REQUIRE_MODEL_FILE(name)                                                    \
  do {                                                                                    \
    RAGKV_REQUIRE_OR_SKIP(::ragkv::model::testing::HaveModelFile(name))                   \
        << "test data " << ::ragkv::model::testing::ModelFile(name)                       \
        << " not found; set RAGKV_TEST_MODELS to the shared models directory";            \
  } while (0)

#endif  // RAGKV_TESTS_MODEL_TEST_UTIL_H_
