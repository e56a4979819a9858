// status_macros.h: RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status.
//
// Debian 12's abseil (20220623) ships no status_macros.h, so ragkv keeps this
// one small local copy. Thread-safe (pure macros).
#ifndef RAGKV_BASE_STATUS_MACROS_H_
#define RAGKV_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RAGKV_CONCAT_INNER_(a, b) a##b
#define RAGKV_CONCAT_(a, b) RAGKV_CONCAT_INNER_(a, b)

// RETURN_IF_ERROR(expr): evaluates expr (an absl::Status) and returns it from
// the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                                   \
  do {                                                          \
    ::absl::Status ragkv_status_ = (expr);                      \
    if (!ragkv_status_.ok()) return ragkv_status_;              \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates expr (an absl::StatusOr<T>); on error
// returns its status, else moves the value into lhs (which may be a
// declaration, e.g. `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr) \
  RAGKV_ASSIGN_OR_RETURN_IMPL_(RAGKV_CONCAT_(ragkv_statusor_, __LINE__), lhs, expr)

#define RAGKV_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

#endif  // RAGKV_BASE_STATUS_MACROS_H_
