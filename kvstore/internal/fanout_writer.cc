#include "kvstore/internal/fanout_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace ragkv::kvstore::internal {
namespace {

class FanoutWriter final : public ChunkWriter {
 public:
  FanoutWriter(KvChunkHeader header, std::string header_blob, bool verify,
               std::vector<FanoutTarget> targets, size_t best_effort_from,
               std::atomic<uint64_t>* tier_errors)
      : header_(std::move(header)),
        verify_(verify),
        targets_(std::move(targets)),
        best_effort_from_(best_effort_from),
        tier_errors_(tier_errors) {
    for (size_t t = 0; t < targets_.size(); ++t) {
      if (!targets_[t].begin_error.ok() && failed_.ok()) failed_ = Drop(t, targets_[t].begin_error);
      if (targets_[t].gather != nullptr) gathered_ = std::make_shared<EncodedChunk>();
    }
    if (gathered_ != nullptr) {
      gathered_->header = std::move(header_blob);
      gathered_->layers.reserve(header_.num_layers);
    }
  }

  absl::Status AddLayer(std::string_view record) override {
    if (!failed_.ok()) return failed_;
    if (next_ >= header_.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("Put ", header_.key.ToHex(), ": more than ",
                                                     header_.num_layers, " layers"));
    }
    if (verify_) {
      absl::StatusOr<LayerRecordView> r = ParseLayerRecord(header_, record, next_);
      if (!r.ok()) {
        return failed_ = absl::Status(r.status().code(), absl::StrCat("Put ", header_.key.ToHex(), ": layer ",
                                                                      next_, ": ", r.status().message()));
      }
    }
    for (size_t t = 0; t < targets_.size() && failed_.ok(); ++t) {
      if (targets_[t].writer == nullptr) continue;
      absl::Status s = targets_[t].writer->AddLayer(record);
      if (!s.ok()) failed_ = Drop(t, s);
    }
    if (gathered_ != nullptr && failed_.ok()) gathered_->layers.emplace_back(record);
    ++next_;
    return failed_;
  }

  const absl::Status& failed() const { return failed_; }

  absl::Status Commit() override {
    if (!failed_.ok()) return failed_;
    if (next_ != header_.num_layers) {
      return absl::FailedPreconditionError(absl::StrCat("Put ", header_.key.ToHex(), ": commit after ",
                                                        next_, " of ", header_.num_layers, " layers"));
    }
    absl::Status first;
    std::shared_ptr<const EncodedChunk> chunk = std::move(gathered_);
    for (size_t t = 0; t < targets_.size(); ++t) {
      FanoutTarget& x = targets_[t];
      if (x.writer == nullptr && x.gather == nullptr) continue;
      absl::Status s = x.writer != nullptr ? x.writer->Commit() : x.gather->Put(header_.key, chunk);
      x.gather = nullptr;
      if (!s.ok()) {
        absl::Status e = Drop(t, s);
        if (first.ok()) first = e;
      }
      committed_any_ = committed_any_ || s.ok();
    }
    return failed_ = first;
  }

 private:
  // Drop: target t failed with `s`: logged, its writer aborted; OK when the
  // failure only degrades a best-effort tier, else the error to return.
  absl::Status Drop(size_t t, const absl::Status& s) {
    FanoutTarget& x = targets_[t];
    RAGKV_LOG(WARNING) << "kvstore: put " << header_.key.ToHex() << " to tier '" << x.name
                       << "' failed: " << s;
    x.writer.reset();
    x.gather = nullptr;
    bool above_live = committed_any_;
    for (size_t u = 0; u < t; ++u) {
      above_live = above_live || targets_[u].writer != nullptr || targets_[u].gather != nullptr;
    }
    if (x.index >= best_effort_from_ && above_live) {
      tier_errors_->fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    return absl::Status(s.code(), absl::StrCat("tier '", x.name, "': ", s.message()));
  }

  const KvChunkHeader header_;
  const bool verify_;
  std::vector<FanoutTarget> targets_;
  const size_t best_effort_from_;
  std::atomic<uint64_t>* const tier_errors_;
  std::shared_ptr<EncodedChunk> gathered_;  // while a gather target is live
  uint32_t next_ = 0;
  bool committed_any_ = false;
  absl::Status failed_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ChunkWriter>> NewFanoutWriter(KvChunkHeader header, std::string header_blob,
                                             bool verify, std::vector<FanoutTarget> targets,
                                             size_t best_effort_from,
                                             std::atomic<uint64_t>* tier_errors) {
  auto w = std::make_unique<FanoutWriter>(std::move(header), std::move(header_blob), verify,
                                          std::move(targets), best_effort_from, tier_errors);
  if (!w->failed().ok()) return w->failed();
  return std::unique_ptr<ChunkWriter>(std::move(w));
}

}  // namespace ragkv::kvstore::internal
