#include "blend/internal/failed_load.h"

#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "blend/blender.h"

namespace ragkv::blend {
namespace {

// The payload's type URL (absl::Status payloads).
constexpr char kFailedLoadUrl[] = "type.googleapis.com/ragkv.blend.FailedLoad";

}  // namespace

std::optional<FailedLoad> FailedLoadOf(const absl::Status& status) {
  const auto p = status.GetPayload(kFailedLoadUrl);  // absl::optional
  if (!p) return std::nullopt;
  const std::vector<std::string> parts = absl::StrSplit(std::string(*p), ',');
  FailedLoad f;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &f.segment) ||
      !absl::SimpleAtoi(parts[1], &f.layer)) {
    return std::nullopt;
  }
  return f;
}

namespace internal {

absl::Status WithFailedLoad(absl::Status status, int segment, int layer) {
  if (!absl::IsCancelled(status)) {
    status.SetPayload(kFailedLoadUrl, absl::Cord(absl::StrCat(segment, ",", layer)));
  }
  return status;
}

}  // namespace internal
}  // namespace ragkv::blend
