# ragkv_add_library(<module> SOURCES ... [DEPS ...] [PRIVATE_DEPS ...])
# Makes library ragkv_<module> with alias ragkv::<module>. The include root is
# the repository root, so headers are included as "module/header.h".
set(RAGKV_WARNINGS -Wall -Wextra -Wno-unused-parameter)

function(ragkv_add_library module)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  set(target ragkv_${module})
  if(A_SOURCES)
    add_library(${target} STATIC ${A_SOURCES})
    target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${RAGKV_WARNINGS}>)
    target_link_libraries(${target} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${target} INTERFACE ${A_DEPS})
  endif()
  add_library(ragkv::${module} ALIAS ${target})
endfunction()

# ragkv_add_test(<name> SOURCES ... DEPS ... [LABELS ...])
# One gtest binary; each TEST is discovered as its own ctest case.
function(ragkv_add_test name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_compile_options(${name} PRIVATE ${RAGKV_WARNINGS})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  # RAGKV_SOURCE_DIR (tests/support/source_dir.h) comes from one generated
  # file, not a -D on every object, so that the objects do not depend on the
  # checkout's folder and ccache serves them to a clone elsewhere.
  set(source_dir_cc ${PROJECT_BINARY_DIR}/ragkv_test_source_dir.cc)
  file(CONFIGURE OUTPUT ${source_dir_cc} CONTENT
    "namespace ragkv::testing {\nconst char* SourceDir() { return \"${PROJECT_SOURCE_DIR}\"; }\n}\n")
  target_sources(${name} PRIVATE ${source_dir_cc})
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} TEST_LIST ${name}_TESTS)
  if(A_LABELS)
    # Labels go on through a post-discovery include: gtest_discover_tests'
    # PROPERTIES cannot carry a list value.
    set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
    file(WRITE ${labels_file}
      "foreach(t IN LISTS ${name}_TESTS)\n"
      "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${A_LABELS}\")\n"
      "endforeach()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
  endif()
endfunction()
