# ccache on every compile when it is installed (scripts/setup installs it).
# The cache lives in ccache's default place under the user's cache directory
# (~/.cache/ccache). A clone in another folder reuses it because paths under
# the source root are rewritten relative to the build directory (base_dir)
# and the working directory is left out of the hash (hash_dir off; debug
# info then names the first clone's paths, which is harmless for CI).
# RAGKV_CCACHE=OFF turns it off.
option(RAGKV_CCACHE "Compile through ccache when it is installed" ON)
find_program(RAGKV_CCACHE_PROGRAM ccache)
if(RAGKV_CCACHE AND RAGKV_CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(_launcher /usr/bin/env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1
      CCACHE_SLOPPINESS=pch_defines,time_macros ${RAGKV_CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${_launcher})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_launcher})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${_launcher})
endif()
