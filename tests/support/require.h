// require.h: RAGKV_REQUIRE_OR_SKIP, for a test that needs something CI
// installs. Header-only (GoogleTest alone), so every test binary can use it.
//
// What CI installs (scripts/setup, .ci/run): the ../shared models and corpus
// (RAGKV_TEST_MODELS / RAGKV_TEST_CORPUS), the pinned llama.cpp, redis-server
// and the shared loopback server (RAGKV_TEST_REDIS), openssl. A test that
// needs one of them writes
//
//   RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "no test model at " << path;
//
// Under CI=true a missing requirement is a fatal failure with that message
// (a suite that silently skips in CI hides a broken setup); elsewhere the
// test skips with it. Either way the test body returns, like GTEST_SKIP().
//
// What a machine may lack (a GPU, AMX, AVX-512, user namespaces) and what a
// stage leaves out on purpose (RSS under a sanitizer) stay plain
// GTEST_SKIP(): CI prints those skips with their messages (scripts/test).
#ifndef RAGKV_TESTS_SUPPORT_REQUIRE_H_
#define RAGKV_TESTS_SUPPORT_REQUIRE_H_

#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

namespace ragkv::testing {

// UnderCi: CI=true in the environment (.ci/run exports it).
inline bool UnderCi() {
  const char* e = std::getenv("CI");
  return e != nullptr && std::strcmp(e, "true") == 0;
}

namespace require_internal {

inline ::testing::TestPartResult::Type MissingResult() {
  return UnderCi() ? ::testing::TestPartResult::kFatalFailure : ::testing::TestPartResult::kSkip;
}

inline const char* MissingPrefix() {
  return UnderCi() ? "CI=true and a requirement that CI installs is missing (scripts/setup, .ci/run)"
                   : "";
}

}  // namespace require_internal
}  // namespace ragkv::testing

// RAGKV_REQUIRE_OR_SKIP(cond) << message: returns from the current function
// (a TEST body, SetUp, or any void function) when `cond` is false, failing
// under CI=true and skipping otherwise. The message says what is missing.
#define RAGKV_REQUIRE_OR_SKIP(cond)                                                       \
  GTEST_AMBIGUOUS_ELSE_BLOCKER_                                                           \
  if (cond) {                                                                             \
  } else                                                                                  \
    return GTEST_MESSAGE_AT_(__FILE__, __LINE__,                                          \
                             ::ragkv::testing::require_internal::MissingPrefix(),         \
                             ::ragkv::testing::require_internal::MissingResult())

#endif  // RAGKV_TESTS_SUPPORT_REQUIRE_H_
