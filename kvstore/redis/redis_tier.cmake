# The Redis tier (kvstore/redis/: redis_tier*.{h,cc}, internal/redis_*): hooked into
# ragkv_kvstore by kvstore/CMakeLists.txt (include ... OPTIONAL). hiredis stays
# a PRIVATE dependency: no public kvstore header includes it.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
target_sources(ragkv_kvstore PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/redis_tier.cc
  ${CMAKE_CURRENT_LIST_DIR}/redis_tier_read.cc
  ${CMAKE_CURRENT_LIST_DIR}/redis_tier_write.cc
  ${CMAKE_CURRENT_LIST_DIR}/redis_tier_budget.cc
  ${CMAKE_CURRENT_LIST_DIR}/internal/redis_client.cc
  ${CMAKE_CURRENT_LIST_DIR}/internal/redis_cluster.cc
  ${CMAKE_CURRENT_LIST_DIR}/internal/redis_record.cc
  ${CMAKE_CURRENT_LIST_DIR}/internal/redis_transport.cc)
find_package(OpenSSL REQUIRED)
target_link_libraries(ragkv_kvstore PRIVATE PkgConfig::HIREDIS OpenSSL::SSL absl::time)
