# FindLlamaCpp: the pinned llama.cpp that scripts/setup-llamacpp installs
# (node-llama-cpp@3.21.1: prebuilt linux-x64 shared libraries + the matching
# source for the headers). A test oracle and benchmark baseline; no ragkv
# library links it.
#
# Input:  RAGKV_LLAMACPP_DIR (cache var; default
#         $XDG_CACHE_HOME or $HOME/.cache, + /ragkv/llamacpp-3.21.1).
# Output: LlamaCpp_FOUND; imported targets llamacpp::llama (libllama,
#         include/llama.h) and llamacpp::ggml (libggml + libggml-base,
#         ggml/include); LLAMACPP_LIB_DIR (pass it to
#         ggml_backend_load_all_from_path: the CPU backends are plugins there);
#         LLAMACPP_SOURCE_DIR (models/ggml-vocab-*.gguf test vectors).
if(DEFINED ENV{XDG_CACHE_HOME})
  set(_lc_cache $ENV{XDG_CACHE_HOME})
else()
  set(_lc_cache $ENV{HOME}/.cache)
endif()
set(RAGKV_LLAMACPP_DIR "${_lc_cache}/ragkv/llamacpp-3.21.1" CACHE PATH
    "where scripts/setup-llamacpp installed node-llama-cpp@3.21.1")
set(LLAMACPP_LIB_DIR ${RAGKV_LLAMACPP_DIR}/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64)
set(LLAMACPP_SOURCE_DIR ${RAGKV_LLAMACPP_DIR}/src)
find_library(LLAMACPP_LLAMA_LIB NAMES llama.v0.4.0 llama PATHS ${LLAMACPP_LIB_DIR} NO_DEFAULT_PATH)
find_library(LLAMACPP_GGML_LIB NAMES ggml.v0.4.0 ggml PATHS ${LLAMACPP_LIB_DIR} NO_DEFAULT_PATH)
find_library(LLAMACPP_GGML_BASE_LIB NAMES ggml-base PATHS ${LLAMACPP_LIB_DIR} NO_DEFAULT_PATH)
find_path(LLAMACPP_INCLUDE_DIR llama.h PATHS ${LLAMACPP_SOURCE_DIR}/include NO_DEFAULT_PATH)
find_path(LLAMACPP_GGML_INCLUDE_DIR ggml.h PATHS ${LLAMACPP_SOURCE_DIR}/ggml/include NO_DEFAULT_PATH)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LlamaCpp REQUIRED_VARS LLAMACPP_LLAMA_LIB LLAMACPP_GGML_LIB
  LLAMACPP_GGML_BASE_LIB LLAMACPP_INCLUDE_DIR LLAMACPP_GGML_INCLUDE_DIR)
if(LlamaCpp_FOUND AND NOT TARGET llamacpp::llama)
  add_library(llamacpp::ggml_base SHARED IMPORTED GLOBAL)
  set_target_properties(llamacpp::ggml_base PROPERTIES IMPORTED_LOCATION ${LLAMACPP_GGML_BASE_LIB}
    INTERFACE_INCLUDE_DIRECTORIES ${LLAMACPP_GGML_INCLUDE_DIR})
  add_library(llamacpp::ggml SHARED IMPORTED GLOBAL)
  set_target_properties(llamacpp::ggml PROPERTIES IMPORTED_LOCATION ${LLAMACPP_GGML_LIB}
    INTERFACE_INCLUDE_DIRECTORIES ${LLAMACPP_GGML_INCLUDE_DIR}
    INTERFACE_LINK_LIBRARIES llamacpp::ggml_base)
  add_library(llamacpp::llama SHARED IMPORTED GLOBAL)
  set_target_properties(llamacpp::llama PROPERTIES IMPORTED_LOCATION ${LLAMACPP_LLAMA_LIB}
    INTERFACE_INCLUDE_DIRECTORIES "${LLAMACPP_INCLUDE_DIR};${LLAMACPP_GGML_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES llamacpp::ggml)
endif()
