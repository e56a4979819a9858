# The Redis tier (kvstore/redis_tier.*, kvstore/internal/redis_*): hooked into
# ragkv_kvstore by kvstore/CMakeLists.txt (include ... OPTIONAL). hiredis stays
# a PRIVATE dependency: no public kvstore header includes it.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
target_sources(ragkv_kvstore PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/redis_tier.cc
  ${CMAKE_CURRENT_LIST_DIR}/bench_redis.cc
  ${CMAKE_CURRENT_LIST_DIR}/internal/redis_client.cc
  ${CMAKE_CURRENT_LIST_DIR}/internal/redis_cluster.cc
  ${CMAKE_CURRENT_LIST_DIR}/internal/redis_record.cc
  ${CMAKE_CURRENT_LIST_DIR}/redis_server_process.cc)
target_link_libraries(ragkv_kvstore PRIVATE PkgConfig::HIREDIS absl::time)

# ragkv_bench_redis HOST:PORT [REPEATS]: Redis tier vs raw hiredis (docs/benchmarks.md).
if(RAGKV_BUILD_BENCH)
  add_executable(ragkv_bench_redis ${CMAKE_CURRENT_LIST_DIR}/bench_redis_main.cc)
  target_compile_options(ragkv_bench_redis PRIVATE ${RAGKV_WARNINGS})
  target_link_libraries(ragkv_bench_redis PRIVATE ragkv::kvstore)
endif()
