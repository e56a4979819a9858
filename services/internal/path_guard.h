// path_guard.h: confinement of client-named server-side paths (the corpus
// paths of PrecomputeService.StartJob) to operator-chosen root directories
// (`ragkv serve --corpus-root DIR`).
//
// A path is resolved the way the kernel would open it: made absolute
// (relative paths are taken against the first root), `.`/`..` folded and
// every existing symlink followed (std::filesystem::weakly_canonical). It is
// allowed only when the result lies inside a root (the root itself
// included). A path that escapes, cannot be resolved, or names no file
// gets one and the same PermissionDenied message, so a client cannot probe
// which files exist outside the roots. Files reached while walking a
// directory are checked the same way (IsInsideRoots) so a symlink inside a
// root cannot lead out of it.
//
// Not covered: a process that can write inside a root can swap a checked
// file for a symlink between the check and the read (the roots must be
// trusted directories, writable only by the operator).
// Private to services/.
#ifndef RAGKV_SERVICES_INTERNAL_PATH_GUARD_H_
#define RAGKV_SERVICES_INTERNAL_PATH_GUARD_H_

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ragkv::services::internal {

// CanonicalRoots: each root made absolute and canonical (symlinks
// resolved). InvalidArgument when a root does not exist or is not a
// directory.
absl::StatusOr<std::vector<std::filesystem::path>> CanonicalRoots(
    const std::vector<std::string>& roots);

// ResolveInRoots: `path` resolved as above. The canonical path when it lies
// inside one of `roots` (each canonical, from CanonicalRoots);
// PermissionDenied otherwise (message names `path` as given, never what it
// resolves to); FailedPrecondition when `roots` is empty (server-side paths
// disabled); InvalidArgument for an empty path or one with a NUL byte.
absl::StatusOr<std::filesystem::path> ResolveInRoots(
    std::string_view path, const std::vector<std::filesystem::path>& roots);

// IsInsideRoots: `path` (any form) resolves inside one of `roots`.
bool IsInsideRoots(const std::filesystem::path& path,
                   const std::vector<std::filesystem::path>& roots);

}  // namespace ragkv::services::internal

#endif  // RAGKV_SERVICES_INTERNAL_PATH_GUARD_H_
