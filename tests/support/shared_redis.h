// shared_redis.h: SharedTestRedis, the shared Redis server that CI starts
// for the tests (RAGKV_TEST_REDIS, .ci/run), checked before tests write into
// it. Part of the test-support target (tests/support/).
#ifndef RAGKV_TESTS_SUPPORT_SHARED_REDIS_H_
#define RAGKV_TESTS_SUPPORT_SHARED_REDIS_H_

#include <string>

#include "absl/status/statusor.h"

namespace ragkv::testing {

// SharedTestRedis: the "host:port" in $RAGKV_TEST_REDIS, or "" when it is
// unset or empty. Tests write keys into that server, so it must keep nothing
// on disk: a server started by hand with Redis's default configuration
// snapshots those keys into its working directory (one started in the
// checkout left dump.rdb there). Asks the server with redis-cli (CONFIG GET
// save / appendonly). Errors: InvalidArgument (not host:port),
// Unavailable (no answer, or redis-cli missing), FailedPrecondition (the
// server has save points or AOF on: start it as .ci/run does, with
// --save "" --appendonly no --dir <tmp>). Callers fail under CI=true and
// fall back to a private server (or skip) elsewhere.
absl::StatusOr<std::string> SharedTestRedis();

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_SUPPORT_SHARED_REDIS_H_
