#include "kvstore/tier.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"

namespace ragkv::kvstore {
namespace {
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class BufferingWriter final : public ChunkWriter {
 public:
  BufferingWriter(std::string header, uint32_t num_layers,
                  std::function<absl::Status(std::shared_ptr<const EncodedChunk>)> commit)
      : num_layers_(num_layers), commit_(std::move(commit)) {
    chunk_.header = std::move(header);
    chunk_.layers.reserve(num_layers);
  }
  absl::Status AddLayer(std::string_view record) override {
    if (chunk_.layers.size() >= num_layers_) {
      return absl::InvalidArgumentError(absl::StrCat("chunk writer: more than ", num_layers_, " layers"));
    }
    chunk_.layers.emplace_back(record);
    return absl::OkStatus();
  }
  absl::Status Commit() override {
    if (chunk_.layers.size() != num_layers_ || commit_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("chunk writer: commit after ",
                                                        chunk_.layers.size(), " of ", num_layers_,
                                                        " layers"));
    }
    auto chunk = std::make_shared<const EncodedChunk>(std::move(chunk_));
    auto commit = std::move(commit_);
    commit_ = nullptr;
    return commit(std::move(chunk));
  }

 private:
  const uint32_t num_layers_;
  std::function<absl::Status(std::shared_ptr<const EncodedChunk>)> commit_;
  EncodedChunk chunk_;
};

}  // namespace

std::unique_ptr<ChunkWriter> NewBufferingWriter(
    std::string header, uint32_t num_layers,
    std::function<absl::Status(std::shared_ptr<const EncodedChunk>)> commit) {
  return std::make_unique<BufferingWriter>(std::move(header), num_layers, std::move(commit));
}

absl::StatusOr<std::unique_ptr<ChunkWriter>> Tier::BeginPut(const ChunkKey&, std::string,
                                                            uint64_t) {
  return std::unique_ptr<ChunkWriter>();  // the chunk whole, through Put
}

PinnedBytes PinnedBytes::FromString(std::string s) {
  auto owner = std::make_shared<const std::string>(std::move(s));
  std::string_view view(*owner);
  return PinnedBytes(view, std::move(owner));
}

std::string TierStats::DebugString() const {
  return absl::StrFormat(
      "%s: hits=%d misses=%d read=%dB (%.2f GB/s) written=%dB (%.2f GB/s) puts=%d deletes=%d "
      "evictions=%d errors=%d corrupt=%d used=%d/%d entries=%d",
      name, hits, misses, bytes_read, ReadGBps(), bytes_written, WriteGBps(), puts, deletes,
      evictions, errors, corrupt_records, bytes_used, capacity_bytes, entries);
}

TierStats TierCounters::Snapshot(std::string_view name) const {
  TierStats s;
  s.name = std::string(name);
  s.hits = hits.load(std::memory_order_relaxed);
  s.misses = misses.load(std::memory_order_relaxed);
  s.bytes_read = bytes_read.load(std::memory_order_relaxed);
  s.bytes_written = bytes_written.load(std::memory_order_relaxed);
  s.puts = puts.load(std::memory_order_relaxed);
  s.deletes = deletes.load(std::memory_order_relaxed);
  s.evictions = evictions.load(std::memory_order_relaxed);
  s.errors = errors.load(std::memory_order_relaxed);
  s.corrupt_records = corrupt_records.load(std::memory_order_relaxed);
  s.quarantined = quarantined.load(std::memory_order_relaxed);
  s.read_seconds = read_ns.load(std::memory_order_relaxed) * 1e-9;
  s.write_seconds = write_ns.load(std::memory_order_relaxed) * 1e-9;
  return s;
}

ScopedTimerNs::ScopedTimerNs(std::atomic<uint64_t>* sink) : sink_(sink), start_ns_(NowNs()) {}
ScopedTimerNs::~ScopedTimerNs() {
  sink_->fetch_add(static_cast<uint64_t>(NowNs() - start_ns_), std::memory_order_relaxed);
}

namespace {
// HeaderCollector: keeps the header and asks for no layer.
class HeaderCollector final : public ChunkReader {
 public:
  LayerRange OnHeader(PinnedBytes header) override {
    header_ = std::move(header);
    return LayerRange{};
  }
  bool OnLayer(uint32_t, std::optional<PinnedBytes>) override { return false; }
  Tier::Blob Take() { return std::move(header_); }

 private:
  Tier::Blob header_;
};
}  // namespace

absl::StatusOr<Tier::Blob> Tier::GetHeader(const ChunkKey& key) {
  HeaderCollector c;
  absl::Status s = ReadChunk(key, c, ReadMode::kHeaderOnly);
  if (!s.ok()) return s;
  return c.Take();
}

void Tier::ReportCorruption(const ChunkKey& key, std::string_view detail) {
  counters_.corrupt_records.fetch_add(1, std::memory_order_relaxed);
  RAGKV_LOG(WARNING) << "kvstore tier '" << Name() << "': corrupt record for key " << key.ToHex()
                     << " (" << detail << "); treated as a miss and deleted";
  absl::Status s = Delete(key);
  if (!s.ok()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    RAGKV_LOG(WARNING) << "kvstore tier '" << Name() << "': could not delete corrupt key "
                       << key.ToHex() << ": " << s;
  }
}

TierStats Tier::Stats() const { return counters_.Snapshot(Name()); }

}  // namespace ragkv::kvstore
