// source_dir.h: RAGKV_SOURCE_DIR, the repository root the test binary was
// configured from, as a std::string. SourceDir() is defined in one tiny
// file CMake generates per build dir (cmake/RagkvHelpers.cmake,
// ragkv_add_test), not by a -D on every test object: the objects then do not
// depend on where the checkout lies, and ccache serves them to a clone in
// another folder (CI's fresh clone).
#ifndef RAGKV_TESTS_SUPPORT_SOURCE_DIR_H_
#define RAGKV_TESTS_SUPPORT_SOURCE_DIR_H_

#include <string>

namespace ragkv::testing {
const char* SourceDir();
}  // namespace ragkv::testing

#define RAGKV_SOURCE_DIR (std::string(::ragkv::testing::SourceDir()))

#endif  // RAGKV_TESTS_SUPPORT_SOURCE_DIR_H_
