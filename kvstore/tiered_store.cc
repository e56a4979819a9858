#include "kvstore/tiered_store.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "kvstore/internal/fanout_writer.h"
#include "base/sync.h"

namespace ragkv::kvstore {

class TieredStore::Impl {
 public:
  Impl(const TieredStoreOptions& options, std::vector<std::shared_ptr<Tier>> tiers)
      : options_(options), tiers_(std::move(tiers)), hits_by_tier_(tiers_.size()) {
    if (options_.write_policy == WritePolicy::kWriteBack && tiers_.size() > 1) {
      writer_ = std::thread([this] { WriteBackLoop(); });
    }
  }

  ~Impl() {
    if (writer_.joinable()) {
      {
        MutexLock lock(&mu_);
        stop_ = true;
        cv_.SignalAll();
      }
      writer_.join();
    }
  }

  // ---- writes ----

  absl::Status CheckChunk(const ChunkKey& key, const EncodedChunk& chunk) {
    absl::StatusOr<KvChunkHeader> h = DecodeHeader(chunk.header);
    if (!h.ok()) {
      return absl::Status(h.status().code(),
                          absl::StrCat("Put ", key.ToHex(), ": bad header: ", h.status().message()));
    }
    if (h->key != key) {
      return absl::InvalidArgumentError(absl::StrCat("Put ", key.ToHex(),
                                                     ": header is for key ", h->key.ToHex()));
    }
    if (chunk.layers.size() != h->num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("Put ", key.ToHex(), ": ", chunk.layers.size(),
                                                     " layer records, header says ", h->num_layers));
    }
    if (options_.verify_on_put) {
      for (uint32_t i = 0; i < h->num_layers; ++i) {
        absl::StatusOr<LayerRecordView> r = ParseLayerRecord(*h, chunk.layers[i], i);
        if (!r.ok()) {
          return absl::Status(r.status().code(), absl::StrCat("Put ", key.ToHex(), ": layer ", i,
                                                              ": ", r.status().message()));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status WriteTiers(size_t first, const ChunkKey& key,
                          const std::shared_ptr<const EncodedChunk>& chunk) {
    absl::Status first_error;
    // Tiers from `best_effort_from` on may fail once a tier above accepted.
    const size_t best_effort_from =
        tiers_.size() - std::min(options_.best_effort_tiers, tiers_.size() - 1);
    bool accepted = false;
    for (size_t i = first; i < tiers_.size(); ++i) {
      absl::Status s = tiers_[i]->Put(key, chunk);
      if (s.ok()) accepted = true;
      if (!s.ok()) {
        RAGKV_LOG(WARNING) << "kvstore: put " << key.ToHex() << " to tier '" << tiers_[i]->Name()
                           << "' failed: " << s;
        if (accepted && i >= best_effort_from) {
          tier_errors_.fetch_add(1, std::memory_order_relaxed);  // degraded, not failed
          continue;
        }
        if (first_error.ok()) {
          first_error = absl::Status(s.code(), absl::StrCat("tier '", std::string(tiers_[i]->Name()), "': ",
                                                            s.message()));
        }
      }
    }
    return first_error;
  }

  absl::Status Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk) {
    if (chunk == nullptr) return absl::InvalidArgumentError("Put: null chunk");
    RETURN_IF_ERROR(CheckChunk(key, *chunk));
    if (options_.write_policy == WritePolicy::kWriteThrough || tiers_.size() == 1) {
      return WriteTiers(0, key, chunk);
    }
    absl::Status s0 = tiers_[0]->Put(key, chunk);
    if (!s0.ok()) {
      // Never leave a chunk only in the queue: fall back to write-through.
      RAGKV_LOG(WARNING) << "kvstore: write-back put to tier '" << tiers_[0]->Name()
                         << "' failed (" << s0 << "); writing lower tiers synchronously";
      return WriteTiers(1, key, chunk);
    }
    Pending p{key, PeekFingerprint(chunk->header).value_or(Fingerprint{}), chunk->TotalBytes(),
              std::move(chunk)};
    MutexLock lock(&mu_);
    auto has_room = [this, &p]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return queue_.size() < options_.write_back_max_chunks &&
             (queue_.empty() || queued_bytes_ + p.bytes <= options_.write_back_max_bytes);
    };
    cv_.Wait(&mu_, has_room);
    queued_bytes_ += p.bytes;
    queue_.push_back(std::move(p));
    cv_.SignalAll();
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<ChunkWriter>> BeginPut(const ChunkKey& key, std::string header,
                                                         uint64_t total_bytes) {
    absl::StatusOr<KvChunkHeader> h = DecodeHeader(header);
    if (!h.ok()) {
      return absl::Status(h.status().code(),
                          absl::StrCat("Put ", key.ToHex(), ": bad header: ", h.status().message()));
    }
    if (h->key != key) {
      return absl::InvalidArgumentError(absl::StrCat("Put ", key.ToHex(), ": header is for key ",
                                                     h->key.ToHex()));
    }
    if (options_.write_policy == WritePolicy::kWriteBack && tiers_.size() > 1) {
      // The queue holds whole chunks: gather, then the ordinary Put.
      return NewBufferingWriter(std::move(header), h->num_layers,
                                [this, key](std::shared_ptr<const EncodedChunk> c) { return Put(key, std::move(c)); });
    }
    std::vector<internal::FanoutTarget> targets(tiers_.size());
    for (size_t i = 0; i < tiers_.size(); ++i) {
      targets[i].index = i;
      targets[i].name = std::string(tiers_[i]->Name());
      absl::StatusOr<std::unique_ptr<ChunkWriter>> w = tiers_[i]->BeginPut(key, header, total_bytes);
      if (!w.ok()) {
        targets[i].begin_error = w.status();
      } else if (*w == nullptr) {
        targets[i].gather = tiers_[i].get();  // gathered once for all such tiers
      } else {
        targets[i].writer = *std::move(w);
      }
    }
    const size_t best_effort_from =
        tiers_.size() - std::min(options_.best_effort_tiers, tiers_.size() - 1);
    return internal::NewFanoutWriter(*std::move(h), std::move(header), options_.verify_on_put,
                                     std::move(targets), best_effort_from, &tier_errors_);
  }

  void WriteBackLoop() {
    for (;;) {
      Pending p;
      {
        MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
        cv_.Wait(&mu_, ready);
        if (queue_.empty()) return;  // stop_ and drained
        p = std::move(queue_.front());
        queue_.pop_front();
        cv_.SignalAll();
        queued_bytes_ -= p.bytes;
        inflight_ = true;
        inflight_key_ = p.key;
        inflight_fp_ = p.fingerprint;
      }
      absl::Status s = WriteTiers(1, p.key, p.chunk);
      if (!s.ok()) write_back_failures_.fetch_add(1, std::memory_order_relaxed);
      MutexLock lock(&mu_);
      inflight_ = false;
      cv_.SignalAll();
    }
  }

  // DropPending: removes queued writes matching `pred` and waits for an
  // in-flight one to finish.
  template <typename Pred>
  void DropPending(Pred pred) {
    MutexLock lock(&mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (pred(it->key, it->fingerprint)) {
        queued_bytes_ -= it->bytes;
        it = queue_.erase(it);
        cv_.SignalAll();
      } else {
        ++it;
      }
    }
    auto idle = [this, &pred]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !inflight_ || !pred(inflight_key_, inflight_fp_);
    };
    cv_.Wait(&mu_, idle);
  }

  absl::Status Delete(const ChunkKey& key) {
    DropPending([&key](const ChunkKey& k, const Fingerprint&) { return k == key; });
    absl::Status first_error;
    for (auto& t : tiers_) {
      absl::Status s = t->Delete(key);
      if (!s.ok() && first_error.ok()) first_error = s;
    }
    return first_error;
  }

  absl::StatusOr<uint64_t> DeleteByFingerprint(const Fingerprint& fp) {
    DropPending([&fp](const ChunkKey&, const Fingerprint& f) { return f == fp; });
    absl::Status first_error;
    uint64_t n = 0;
    for (auto& t : tiers_) {
      absl::StatusOr<uint64_t> r = t->DeleteByFingerprint(fp);
      if (r.ok()) {
        n += *r;
      } else if (first_error.ok()) {
        first_error = r.status();
      }
    }
    if (!first_error.ok()) return first_error;
    return n;
  }

  absl::Status Flush() {
    {
      MutexLock lock(&mu_);
      auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return queue_.empty() && !inflight_;
      };
      cv_.Wait(&mu_, drained);
    }
    absl::Status first_error;
    for (auto& t : tiers_) {
      absl::Status s = t->Flush();
      if (!s.ok() && first_error.ok()) first_error = s;
    }
    return first_error;
  }

  // ---- reads ----

  struct FoundHeader {
    KvChunkHeader header;
    PinnedBytes blob;
  };

  // VerifyHeader: turns tier i's GetHeader result into a verified header or
  // nullopt, counting errors, corruption and fingerprint mismatches.
  std::optional<FoundHeader> VerifyHeader(size_t i, const ChunkKey& key, const Fingerprint& fp,
                                          absl::StatusOr<Tier::Blob> blob) {
    Tier& t = *tiers_[i];
    if (!blob.ok()) {
      NoteTierError(t, key, blob.status());
      return std::nullopt;
    }
    if (!blob->has_value()) return std::nullopt;
    absl::StatusOr<KvChunkHeader> h = DecodeHeader((*blob)->view());
    if (!h.ok()) {
      NoteCorrupt(t, key, absl::StrCat("header: ", h.status().message()));
      return std::nullopt;
    }
    if (h->key != key) {
      NoteCorrupt(t, key, absl::StrCat("header belongs to key ", h->key.ToHex()));
      return std::nullopt;
    }
    if (h->fingerprint != fp) {
      fingerprint_mismatches_.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    return FoundHeader{std::move(*h), std::move(**blob)};
  }

  // VerifyLayer: tier i's layer blob verified against `h`, or nullopt.
  std::optional<LoadedLayer> VerifyLayer(size_t i, const ChunkKey& key, const KvChunkHeader& h,
                                         uint32_t layer, Tier::Blob blob) {
    // A missing layer under a present header is a miss in this tier, not
    // corruption: the chunk may have been evicted or replaced concurrently.
    if (!blob.has_value()) return std::nullopt;
    absl::StatusOr<LayerRecordView> r = ParseLayerRecord(h, blob->view(), layer);
    if (!r.ok()) {
      NoteCorrupt(*tiers_[i], key, absl::StrCat("layer ", layer, ": ", r.status().message()));
      return std::nullopt;
    }
    return LoadedLayer{layer, std::move(*blob), i};
  }

  // Promote: copies a chunk found in tier i into tiers 0..i-1.
  void Promote(size_t i, const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk) {
    for (size_t j = 0; j < i; ++j) {
      absl::Status s = tiers_[j]->Put(key, chunk);
      if (s.ok()) {
        promotions_.fetch_add(1, std::memory_order_relaxed);
      } else {
        RAGKV_LOG(DEBUG) << "kvstore: promotion of " << key.ToHex() << " into '"
                         << tiers_[j]->Name() << "' failed: " << s;
      }
    }
  }

  static std::shared_ptr<const EncodedChunk> CopyChunk(std::string_view header,
                                                       const std::vector<LoadedLayer>& layers) {
    auto c = std::make_shared<EncodedChunk>();
    c->header = std::string(header);
    c->layers.reserve(layers.size());
    for (const LoadedLayer& l : layers) c->layers.emplace_back(l.blob.view());
    return c;
  }

  std::optional<ChunkHandle> Finish(size_t i, const ChunkKey& key, FoundHeader fh,
                                    std::vector<LoadedLayer> layers) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    hits_by_tier_[i].fetch_add(1, std::memory_order_relaxed);
    if (options_.promote_on_hit && i > 0) Promote(i, key, CopyChunk(fh.blob.view(), layers));
    return ChunkHandle{std::move(fh.header), std::move(layers), i};
  }

  // WholeChunkReader: collects and verifies one chunk from tier i
  // (Tier::ReadChunk, ReadMode::kWhole).
  class WholeChunkReader final : public ChunkReader {
   public:
    WholeChunkReader(Impl* store, size_t tier, const ChunkKey& key, const Fingerprint& fp)
        : store_(store), tier_(tier), key_(key), fp_(fp) {}
    LayerRange OnHeader(PinnedBytes header) override {
      fh_ = store_->VerifyHeader(tier_, key_, fp_, Tier::Blob(std::move(header)));
      if (!fh_.has_value()) return LayerRange{};
      layers_.reserve(fh_->header.num_layers);
      return LayerRange{0, fh_->header.num_layers};
    }
    bool OnLayer(uint32_t layer, Tier::Blob blob) override {
      std::optional<LoadedLayer> ll =
          store_->VerifyLayer(tier_, key_, fh_->header, layer, std::move(blob));
      if (!ll.has_value()) return false;
      layers_.push_back(std::move(*ll));
      return true;
    }
    // complete: a verified header and every one of its layers.
    bool complete() const {
      return fh_.has_value() && layers_.size() == fh_->header.num_layers;
    }
    FoundHeader& found() { return *fh_; }
    std::vector<LoadedLayer>& layers() { return layers_; }

   private:
    Impl* const store_;
    const size_t tier_;
    const ChunkKey& key_;
    const Fingerprint& fp_;
    std::optional<FoundHeader> fh_;
    std::vector<LoadedLayer> layers_;
  };

  std::optional<ChunkHandle> Get(const ChunkKey& key, const Fingerprint& fp) {
    lookups_.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < tiers_.size(); ++i) {
      WholeChunkReader reader(this, i, key, fp);
      absl::Status s = tiers_[i]->ReadChunk(key, reader, ReadMode::kWhole);
      if (!s.ok()) {
        NoteTierError(*tiers_[i], key, s);
        continue;
      }
      if (!reader.complete()) continue;
      return Finish(i, key, std::move(reader.found()), std::move(reader.layers()));
    }
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }

  // MultiGet: Get per key. Each is one ReadChunk per tier tried (for the
  // Redis tier one round trip when the layout hint holds).
  std::vector<std::optional<ChunkHandle>> MultiGet(absl::Span<const ChunkKey> keys,
                                                   const Fingerprint& fp) {
    std::vector<std::optional<ChunkHandle>> out;
    out.reserve(keys.size());
    for (const ChunkKey& key : keys) out.push_back(Get(key, fp));
    return out;
  }

  // StreamingReader: verifies and hands layers of tier i to the callback as
  // the tier delivers them (Tier::ReadChunk, ReadMode::kStream).
  class StreamingReader final : public ChunkReader {
   public:
    StreamingReader(Impl* store, size_t tier, const ChunkKey& key, const Fingerprint& fp,
                    const LayerCallback& callback)
        : store_(store), tier_(tier), key_(key), fp_(fp), callback_(callback) {}
    LayerRange OnHeader(PinnedBytes header) override {
      fh_ = store_->VerifyHeader(tier_, key_, fp_, Tier::Blob(std::move(header)));
      if (!fh_.has_value()) return LayerRange{};
      const KvChunkHeader& h = fh_->header;
      if (store_->options_.promote_on_hit && tier_ > 0) {
        copy_ = std::make_shared<EncodedChunk>();
        copy_->header = std::string(fh_->blob.view());
        copy_->layers.reserve(h.num_layers);
      }
      return LayerRange{0, h.num_layers};
    }
    bool OnLayer(uint32_t layer, Tier::Blob blob) override {
      std::optional<LoadedLayer> ll =
          store_->VerifyLayer(tier_, key_, fh_->header, layer, std::move(blob));
      if (!ll.has_value()) return false;
      return Deliver(std::move(*ll));
    }
    // Deliver: passes a verified layer on (keeping a copy for promotion).
    bool Deliver(LoadedLayer ll) {
      if (copy_ != nullptr) copy_->layers.emplace_back(ll.blob.view());
      callback_status_ = callback_(fh_->header, std::move(ll));
      if (!callback_status_.ok()) return false;
      ++delivered_;
      return true;
    }
    const std::optional<FoundHeader>& found() const { return fh_; }
    uint32_t delivered() const { return delivered_; }
    const absl::Status& callback_status() const { return callback_status_; }
    std::shared_ptr<EncodedChunk> TakeCopy() { return std::move(copy_); }

   private:
    Impl* const store_;
    const size_t tier_;
    const ChunkKey& key_;
    const Fingerprint& fp_;
    const LayerCallback& callback_;
    std::optional<FoundHeader> fh_;
    std::shared_ptr<EncodedChunk> copy_;
    uint32_t delivered_ = 0;
    absl::Status callback_status_;
  };

  // ResumeReader: continues `out`'s stream from tier `tier`, at the first
  // layer not yet delivered, if that tier holds a chunk with the same header
  // digest (the same bytes); its layers are verified against `h`.
  class ResumeReader final : public ChunkReader {
   public:
    ResumeReader(Impl* store, size_t tier, const ChunkKey& key, const KvChunkHeader& h,
                 StreamingReader& out)
        : store_(store), tier_(tier), key_(key), h_(h), out_(out) {}
    LayerRange OnHeader(PinnedBytes header) override {
      std::optional<FoundHeader> fh =
          store_->VerifyHeader(tier_, key_, h_.fingerprint, Tier::Blob(std::move(header)));
      if (!fh.has_value() || fh->header.digest != h_.digest) return LayerRange{};
      return LayerRange{out_.delivered(), h_.num_layers - out_.delivered()};
    }
    bool OnLayer(uint32_t layer, Tier::Blob blob) override {
      std::optional<LoadedLayer> ll = store_->VerifyLayer(tier_, key_, h_, layer, std::move(blob));
      return ll.has_value() && out_.Deliver(std::move(*ll));
    }

   private:
    Impl* const store_;
    const size_t tier_;
    const ChunkKey& key_;
    const KvChunkHeader& h_;
    StreamingReader& out_;
  };

  absl::StatusOr<StreamResult> StreamLayers(const ChunkKey& key, const Fingerprint& fp,
                                            const LayerCallback& callback) {
    lookups_.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < tiers_.size(); ++i) {
      StreamingReader reader(this, i, key, fp, callback);
      absl::Status s = tiers_[i]->ReadChunk(key, reader, ReadMode::kStream);
      RETURN_IF_ERROR(reader.callback_status());
      if (!s.ok()) NoteTierError(*tiers_[i], key, s);
      if (!reader.found().has_value()) continue;
      const KvChunkHeader& h = reader.found()->header;
      // Nothing delivered: try the next tier afresh.
      if (reader.delivered() == 0 && h.num_layers > 0) continue;
      // A layer missing or corrupt mid-stream: continue from the next tiers
      // holding a chunk with the same header digest.
      for (size_t j = i + 1; j < tiers_.size() && reader.delivered() < h.num_layers; ++j) {
        ResumeReader resume(this, j, key, h, reader);
        absl::Status rs = tiers_[j]->ReadChunk(key, resume, ReadMode::kStream);
        RETURN_IF_ERROR(reader.callback_status());
        if (!rs.ok()) NoteTierError(*tiers_[j], key, rs);
      }
      if (reader.delivered() < h.num_layers) {
        misses_.fetch_add(1, std::memory_order_relaxed);
        return absl::DataLossError(absl::StrCat(
            "StreamLayers ", key.ToHex(), ": layer ", reader.delivered(), " unreadable after ",
            reader.delivered(), " layers were delivered, and no other tier holds the same chunk"));
      }
      hits_.fetch_add(1, std::memory_order_relaxed);
      hits_by_tier_[i].fetch_add(1, std::memory_order_relaxed);
      std::shared_ptr<EncodedChunk> copy = reader.TakeCopy();
      if (copy != nullptr) Promote(i, key, std::move(copy));
      return StreamResult{true, reader.delivered(), i};
    }
    misses_.fetch_add(1, std::memory_order_relaxed);
    return StreamResult{};
  }

  std::optional<size_t> Locate(const ChunkKey& key) {
    for (size_t i = 0; i < tiers_.size(); ++i) {
      absl::StatusOr<bool> c = tiers_[i]->Contains(key);
      if (!c.ok()) {
        NoteTierError(*tiers_[i], key, c.status());
        continue;
      }
      if (*c) return i;
    }
    return std::nullopt;
  }

  StoreStats Stats() const {
    StoreStats s;
    s.lookups = lookups_.load();
    s.hits = hits_.load();
    s.misses = misses_.load();
    s.fingerprint_mismatches = fingerprint_mismatches_.load();
    s.corrupt_records = corrupt_.load();
    s.tier_errors = tier_errors_.load();
    s.promotions = promotions_.load();
    s.write_back_failures = write_back_failures_.load();
    {
      MutexLock lock(&mu_);
      s.write_back_queued = queue_.size();
    }
    for (const auto& h : hits_by_tier_) s.hits_by_tier.push_back(h.load());
    return s;
  }

  std::vector<TierStats> TierStatsAll() const {
    std::vector<TierStats> out;
    for (const auto& t : tiers_) out.push_back(t->Stats());
    return out;
  }

  size_t num_tiers() const { return tiers_.size(); }
  Tier& tier(size_t i) { return *tiers_.at(i); }

 private:
  struct Pending {
    ChunkKey key;
    Fingerprint fingerprint{};
    uint64_t bytes = 0;
    std::shared_ptr<const EncodedChunk> chunk;
  };

  void NoteTierError(Tier& t, const ChunkKey& key, const absl::Status& s) {
    tier_errors_.fetch_add(1, std::memory_order_relaxed);
    t.counters().errors.fetch_add(1, std::memory_order_relaxed);
    RAGKV_LOG(WARNING) << "kvstore: tier '" << t.Name() << "' failed for " << key.ToHex() << ": "
                       << s << " (treated as a miss)";
  }

  void NoteCorrupt(Tier& t, const ChunkKey& key, const std::string& detail) {
    corrupt_.fetch_add(1, std::memory_order_relaxed);
    t.ReportCorruption(key, detail);
  }

  const TieredStoreOptions options_;
  const std::vector<std::shared_ptr<Tier>> tiers_;

  std::atomic<uint64_t> lookups_{0}, hits_{0}, misses_{0}, fingerprint_mismatches_{0},
      corrupt_{0}, tier_errors_{0}, promotions_{0}, write_back_failures_{0};
  std::vector<std::atomic<uint64_t>> hits_by_tier_;

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool inflight_ ABSL_GUARDED_BY(mu_) = false;
  ChunkKey inflight_key_ ABSL_GUARDED_BY(mu_);
  Fingerprint inflight_fp_ ABSL_GUARDED_BY(mu_){};
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
};

absl::StatusOr<std::unique_ptr<TieredStore>> TieredStore::Create(
    const TieredStoreOptions& options, std::vector<std::shared_ptr<Tier>> tiers) {
  if (tiers.empty()) return absl::InvalidArgumentError("TieredStore: at least one tier required");
  for (const auto& t : tiers) {
    if (t == nullptr) return absl::InvalidArgumentError("TieredStore: null tier");
  }
  if (options.write_back_max_chunks == 0) {
    return absl::InvalidArgumentError("TieredStoreOptions.write_back_max_chunks must be > 0");
  }
  return std::unique_ptr<TieredStore>(
      new TieredStore(std::make_unique<Impl>(options, std::move(tiers))));
}

TieredStore::TieredStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TieredStore::~TieredStore() {
  absl::Status s = impl_->Flush();
  if (!s.ok()) {
    RAGKV_LOG(WARNING) << "kvstore: flush on shutdown: " << s;
  }
}

absl::StatusOr<std::unique_ptr<ChunkWriter>> TieredStore::BeginPut(const ChunkKey& key,
                                                                   std::string header,
                                                                   uint64_t total_bytes) {
  return impl_->BeginPut(key, std::move(header), total_bytes);
}

absl::Status TieredStore::Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk) {
  return impl_->Put(key, std::move(chunk));
}
absl::StatusOr<std::optional<ChunkHandle>> TieredStore::Get(const ChunkKey& key,
                                                            const Fingerprint& fp) {
  return impl_->Get(key, fp);
}
std::vector<std::optional<ChunkHandle>> TieredStore::MultiGet(absl::Span<const ChunkKey> keys,
                                                              const Fingerprint& fp) {
  return impl_->MultiGet(keys, fp);
}
absl::StatusOr<StreamResult> TieredStore::StreamLayers(const ChunkKey& key, const Fingerprint& fp,
                                                       const LayerCallback& callback) {
  return impl_->StreamLayers(key, fp, callback);
}
bool TieredStore::Contains(const ChunkKey& key) { return impl_->Locate(key).has_value(); }
std::optional<size_t> TieredStore::Locate(const ChunkKey& key) { return impl_->Locate(key); }
absl::Status TieredStore::Delete(const ChunkKey& key) { return impl_->Delete(key); }
absl::StatusOr<uint64_t> TieredStore::DeleteByFingerprint(const Fingerprint& fp) {
  return impl_->DeleteByFingerprint(fp);
}
absl::Status TieredStore::Flush() { return impl_->Flush(); }
StoreStats TieredStore::Stats() const { return impl_->Stats(); }
std::vector<TierStats> TieredStore::TierStatsAll() const { return impl_->TierStatsAll(); }
size_t TieredStore::num_tiers() const { return impl_->num_tiers(); }
Tier& TieredStore::tier(size_t i) { return impl_->tier(i); }

}  // namespace ragkv::kvstore
