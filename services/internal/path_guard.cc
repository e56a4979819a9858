#include "services/internal/path_guard.h"

#include <system_error>

#include "absl/strings/str_cat.h"

namespace ragkv::services::internal {
namespace fs = std::filesystem;
namespace {

// Inside: `p` and `root` are canonical; true when p == root or p is below.
bool Inside(const fs::path& p, const fs::path& root) {
  auto r = root.begin();
  auto q = p.begin();
  for (; r != root.end(); ++r, ++q) {
    if (r->empty()) continue;  // a trailing separator's empty element
    if (q == p.end() || *q != *r) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<fs::path>> CanonicalRoots(const std::vector<std::string>& roots) {
  std::vector<fs::path> out;
  for (const std::string& root : roots) {
    std::error_code ec;
    fs::path c = fs::canonical(root, ec);
    if (ec || !fs::is_directory(c, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--corpus-root ", root, ": not an existing directory"));
    }
    out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<fs::path> ResolveInRoots(std::string_view path, const std::vector<fs::path>& roots) {
  if (roots.empty()) {
    return absl::FailedPreconditionError(
        "server-side corpus paths are disabled on this sidecar: start `ragkv serve` with "
        "--corpus-root DIR to allow paths under DIR");
  }
  if (path.empty() || path.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("corpus path is empty or contains a NUL byte");
  }
  fs::path p(std::string{path});
  if (p.is_relative()) p = roots.front() / p;
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(p, ec);
  if (!ec) {
    for (const fs::path& root : roots) {
      if (Inside(resolved, root)) return resolved;
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat("corpus path '", std::string(path.substr(0, 256)),
                   "' is outside the directories this sidecar serves (--corpus-root)"));
}

bool IsInsideRoots(const fs::path& path, const std::vector<fs::path>& roots) {
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(path, ec);
  if (ec) return false;
  for (const fs::path& root : roots) {
    if (Inside(resolved, root)) return true;
  }
  return false;
}

}  // namespace ragkv::services::internal
