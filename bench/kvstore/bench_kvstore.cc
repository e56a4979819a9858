#include "bench/kvstore/bench_kvstore.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "kvstore/ssd/internal/ssd_tier_internal.h"
#include "kvstore/kv_chunk.h"
#include "kvstore/ram_tier.h"
#include "kvstore/ssd/ssd_tier.h"
#include "kvstore/tiered_store.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace ragkv::kvstore {
namespace {

// BestOf: runs fn `repeats` times, returns the shortest wall time.
template <typename Fn>
double BestOf(int repeats, Fn fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    fn();
    best = std::min(best, SecondsSince(t0));
  }
  return best;
}

// Parallel: runs fn(thread_index) on n threads, returns the wall time.
template <typename Fn>
double Parallel(int n, Fn fn) {
  std::vector<std::thread> ts;
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) ts.emplace_back([&fn, i] { fn(i); });
  for (auto& t : ts) t.join();
  return SecondsSince(t0);
}

// MakeBenchChunk: fp16 raw chunk of `shape` with pseudo-random contents.
absl::StatusOr<std::shared_ptr<const EncodedChunk>> MakeBenchChunk(const KvBenchShape& shape,
                                                                   uint32_t seed, ChunkKey* key) {
  KvChunkHeader h;
  for (uint32_t i = 0; i < 16; ++i) h.fingerprint[i] = static_cast<uint8_t>(i * 13 + 7);
  h.tokens.resize(shape.tokens);
  for (uint32_t t = 0; t < shape.tokens; ++t) h.tokens[t] = static_cast<int32_t>((t * 31 + seed * 7919) % 32000);
  h.key = ChunkKey::Of(h.fingerprint, h.tokens);
  h.dtype = kernels::DType::kF16;
  h.num_layers = shape.layers;
  h.num_kv_heads = shape.kv_heads;
  h.head_dim = shape.head_dim;
  auto chunk = std::make_shared<EncodedChunk>();
  ASSIGN_OR_RETURN(chunk->header, EncodeHeader(&h));
  const int64_t n = h.LayerElements();
  std::vector<float> k(n), v(n);
  uint32_t state = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    k[i] = static_cast<float>(static_cast<int32_t>(state >> 8) % 2000) / 1000.f;
    v[i] = -k[i] * 0.5f;
  }
  auto kv = kernels::TensorView::Contiguous(k.data(), kernels::DType::kF32,
                                            {shape.kv_heads, shape.tokens, shape.head_dim});
  auto vv = kernels::TensorView::Contiguous(v.data(), kernels::DType::kF32,
                                            {shape.kv_heads, shape.tokens, shape.head_dim});
  for (uint32_t l = 0; l < shape.layers; ++l) {
    ASSIGN_OR_RETURN(std::string rec, EncodeLayer(h, l, kv, vv));
    chunk->layers.push_back(std::move(rec));
  }
  *key = h.key;
  return std::shared_ptr<const EncodedChunk>(std::move(chunk));
}

// DropCache: best effort eviction of a file, or of `dir`'s files, from the page cache
// (fdatasync + posix_fadvise DONTNEED on every regular file).
void DropFileCache(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}
void DropCache(const std::string& dir_or_file) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir_or_file, ec)) return DropFileCache(dir_or_file);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_or_file, ec)) {
    if (e.is_regular_file()) DropFileCache(e.path().string());
  }
}

// RawReadFile: a file of `bytes` (rounded up to 4 MiB) of pseudo-random
// bytes in `dir`, written and fsync'ed once, read back by RawRead. Removed
// on destruction.
class RawReadFile {
 public:
  static constexpr size_t kBlock = 4 << 20;
  static absl::StatusOr<std::unique_ptr<RawReadFile>> Create(const std::string& dir,
                                                              uint64_t bytes) {
    auto f = std::unique_ptr<RawReadFile>(new RawReadFile(dir + "/raw_read_baseline.bin"));
    f->bytes_ = (bytes + kBlock - 1) / kBlock * kBlock;
    std::vector<uint64_t> block(kBlock / 8);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int fd = open(f->path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return absl::InternalError(absl::StrCat("open ", f->path_, ": ", std::strerror(errno)));
    for (uint64_t off = 0; off < f->bytes_; off += kBlock) {
      for (uint64_t& w : block) {  // xorshift: incompressible, not deduplicable
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w = x;
      }
      if (write(fd, block.data(), kBlock) != static_cast<ssize_t>(kBlock)) {
        close(fd);
        return absl::InternalError(absl::StrCat("write ", f->path_, ": ", std::strerror(errno)));
      }
    }
    fsync(fd);
    close(fd);
    return f;
  }
  ~RawReadFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  uint64_t bytes() const { return bytes_; }

  // Read: drops the file from the page cache (fadvise DONTNEED), then
  // `threads` threads each read their own contiguous 1/threads of it
  // sequentially in 4 MiB blocks (own fd, O_DIRECT if `direct`, else
  // buffered reads as `dd` does). Returns the wall seconds. FailedPrecondition
  // if the filesystem refuses O_DIRECT.
  absl::StatusOr<double> Read(int threads, bool direct) const {
    DropCache(path_);
    std::atomic<bool> failed{false};
    std::string error;
    const uint64_t blocks = bytes_ / kBlock;
    const double t = Parallel(threads, [&](int tid) {
      const uint64_t b0 = blocks * tid / threads, b1 = blocks * (tid + 1) / threads;
      void* buf = nullptr;
      if (posix_memalign(&buf, 4096, kBlock) != 0) {
        failed = true;
        return;
      }
      std::unique_ptr<void, decltype(&std::free)> guard(buf, &std::free);
      int fd = open(path_.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
      if (fd < 0) {
        failed = true;
        return;
      }
      for (uint64_t b = b0; b < b1; ++b) {
        if (pread(fd, buf, kBlock, static_cast<off_t>(b * kBlock)) !=
            static_cast<ssize_t>(kBlock)) {
          failed = true;
          break;
        }
      }
      close(fd);
    });
    if (failed) {
      return absl::FailedPreconditionError(absl::StrCat(direct ? "O_DIRECT " : "", "read of ",
                                                        path_, " failed"));
    }
    return t;
  }
  // BestGBps: best of `repeats` Read()s, as GB/s.
  absl::StatusOr<double> BestGBps(int repeats, int threads, bool direct) const {
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      ASSIGN_OR_RETURN(double t, Read(threads, direct));
      best = std::min(best, t);
    }
    return bytes_ / best / 1e9;
  }

 private:
  explicit RawReadFile(std::string path) : path_(std::move(path)) {}
  std::string path_;
  uint64_t bytes_ = 0;
};

struct ShapeData {
  std::vector<ChunkKey> keys;
  std::vector<std::shared_ptr<const EncodedChunk>> chunks;
  Fingerprint fp{};
  uint64_t chunk_bytes = 0;
};

// GetAll: Get every chunk once through `store`; false on any miss.
bool GetAll(TieredStore& store, const ShapeData& d, const std::vector<size_t>& order,
            std::vector<char>* copy_out) {
  for (size_t i : order) {
    auto got = store.Get(d.keys[i], d.fp);
    if (!got.ok() || !got->has_value()) return false;
    if (copy_out != nullptr) {
      size_t off = 0;
      for (const LoadedLayer& l : (*got)->layers) {
        std::memcpy(copy_out->data() + off, l.blob.data(), l.blob.size());
        off += l.blob.size();
      }
    }
  }
  return true;
}

// ShapeBench: the rows of one shape over the same chunks, one method per
// family of rows (RAM tier, SSD Put, SSD cold Get, SSD warm Get).
struct ShapeBench {
  ShapeBench(const KvBenchOptions& options, const KvBenchShape& s, std::vector<KvBenchRow>* out)
      : o(options), shape(s), rows(out) {}

  const KvBenchOptions& o;
  const KvBenchShape& shape;
  std::vector<KvBenchRow>* rows;
  ShapeData d;
  double total = 0;           // bytes of all o.chunks chunks
  std::vector<size_t> order;  // 0, 1, ..., o.chunks - 1

  // Init: makes the chunks (d), total and order.
  absl::Status Init();
  // RamRows: RAM tier Get, pinned or copied out, 1 and o.threads threads, vs
  // memcpy; Get + decode to f32 for information.
  absl::Status RamRows();
  // SsdPutRow: SSD tier Put (verify + WAL fsync + blob) under `so` vs raw
  // RocksDB WriteBatches with the same options in `raw_dir` (removed after).
  absl::Status SsdPutRow(const SsdTierOptions& so, const std::string& raw_dir);
  // SsdColdGetRows: cold Get through fresh tiers on the database in
  // `ssd_dir` (buffered, O_DIRECT, one MultiGet; 1 and T threads) vs raw
  // sequential reads. Returns the raw O_DIRECT 1-thread GB/s.
  absl::StatusOr<double> SsdColdGetRows(const SsdTierOptions& so, const std::string& ssd_dir);
  // SsdWarmGetRow: Get from the page cache (buffered reads) vs
  // `direct_gbps`, the raw O_DIRECT 1-thread read.
  absl::Status SsdWarmGetRow(const SsdTierOptions& so, double direct_gbps);

  // row: appends a row of this shape.
  void row(std::string what, std::string unit, double value, double baseline,
           std::string baseline_what, double target) const {
    rows->push_back(KvBenchRow{shape.name, std::move(what), std::move(unit), value, baseline,
                               std::move(baseline_what), target});
  }
};

absl::Status ShapeBench::Init() {
  for (int i = 0; i < o.chunks; ++i) {
    ChunkKey key;
    ASSIGN_OR_RETURN(auto chunk, MakeBenchChunk(shape, static_cast<uint32_t>(i + 1), &key));
    d.keys.push_back(key);
    d.chunks.push_back(std::move(chunk));
  }
  ASSIGN_OR_RETURN(d.fp, PeekFingerprint(d.chunks[0]->header));
  d.chunk_bytes = d.chunks[0]->TotalBytes();
  total = static_cast<double>(d.chunk_bytes) * o.chunks;
  order.resize(o.chunks);
  for (int i = 0; i < o.chunks; ++i) order[i] = static_cast<size_t>(i);
  return absl::OkStatus();
}

absl::Status ShapeBench::RamRows() {
  RamTierOptions ro;
  ro.capacity_bytes = static_cast<uint64_t>(total * 1.5) + (64 << 20);
  ro.num_shards = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<Tier> ram, CreateRamTier(ro));
  std::shared_ptr<Tier> ram_shared(std::move(ram));
  TieredStoreOptions so;
  so.verify_on_put = false;
  ASSIGN_OR_RETURN(auto store, TieredStore::Create(so, {ram_shared}));
  for (int i = 0; i < o.chunks; ++i) RETURN_IF_ERROR(store->Put(d.keys[i], d.chunks[i]));

  std::vector<char> src(d.chunk_bytes, 1), dst(d.chunk_bytes);
  const double t_memcpy = BestOf(o.repeats, [&] {
    for (int i = 0; i < o.chunks; ++i) std::memcpy(dst.data(), src.data(), d.chunk_bytes);
  });
  const double memcpy_gbps = total / t_memcpy / 1e9;
  bool ok = true;
  const double t_get = BestOf(o.repeats, [&] { ok &= GetAll(*store, d, order, nullptr); });
  const double t_get_copy = BestOf(o.repeats, [&] { ok &= GetAll(*store, d, order, &dst); });
  if (!ok) return absl::InternalError("bench: RAM tier miss");
  row("ram Get (pinned, verified), 1 thread", "GB/s", total / t_get / 1e9, memcpy_gbps,
      "memcpy 1 thread", 0.5);
  row("ram Get + copy out, 1 thread", "GB/s", total / t_get_copy / 1e9, memcpy_gbps,
      "memcpy 1 thread", 0.5);
  // Layer decode to f32 (what the blender consumes), for information.
  {
    auto got = store->Get(d.keys[0], d.fp);
    if (!got.ok() || !got->has_value()) return absl::InternalError("bench: miss");
    const KvChunkHeader& h = (*got)->header;
    std::vector<float> k(h.LayerElements()), v(h.LayerElements());
    const double t_dec = BestOf(o.repeats, [&] {
      for (const LoadedLayer& l : (*got)->layers) (void)l.DecodeToF32(h, k.data(), v.data());
    });
    row("ram Get + decode fp16->f32 (output bytes)", "GB/s",
        2.0 * d.chunk_bytes / t_dec / 1e9, memcpy_gbps, "memcpy 1 thread", 0);
  }
  const int T = o.threads;
  // Enough work per thread (>= 256 MiB) that thread start-up is noise.
  const int iters = std::max(2, static_cast<int>((256.0 * (1 << 20)) / total));
  const double t_par_memcpy = Parallel(T, [&](int) {
    std::vector<char> mine(d.chunk_bytes);
    for (int it = 0; it < iters; ++it) {
      for (int i = 0; i < o.chunks; ++i) std::memcpy(mine.data(), src.data(), d.chunk_bytes);
    }
  });
  std::atomic<bool> par_ok{true};
  const double t_par_get = Parallel(T, [&](int tid) {
    std::vector<size_t> ord(order);
    std::rotate(ord.begin(), ord.begin() + (tid % o.chunks), ord.end());
    for (int it = 0; it < iters; ++it) {
      if (!GetAll(*store, d, ord, nullptr)) par_ok = false;
    }
  });
  if (!par_ok) return absl::InternalError("bench: RAM tier miss (concurrent)");
  row(absl::StrCat("ram Get (pinned, verified), ", T, " threads"), "GB/s",
      total * T * iters / t_par_get / 1e9, total * T * iters / t_par_memcpy / 1e9,
      absl::StrCat("memcpy ", T, " threads"), 0.5);
  return absl::OkStatus();
}

absl::Status ShapeBench::SsdPutRow(const SsdTierOptions& so, const std::string& raw_dir) {
  // Raw RocksDB baseline: same options, the same values as one WriteBatch per chunk.
  rocksdb::DBOptions dbo;
  rocksdb::ColumnFamilyOptions kvo, mo;
  internal::MakeSsdRocksOptions(so, &dbo, &kvo, &mo);
  dbo.create_if_missing = true;
  rocksdb::Options opts(dbo, kvo);
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(opts, raw_dir, &raw);
  if (!s.ok()) return absl::InternalError(absl::StrCat("bench raw rocksdb open: ", s.ToString()));
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  auto t0 = Clock::now();
  for (int i = 0; i < o.chunks; ++i) {
    rocksdb::WriteBatch b;
    const std::string kb(d.keys[i].AsBytes());
    for (size_t l = 0; l < d.chunks[i]->layers.size(); ++l) {
      b.Put(kb + "L" + std::to_string(l), d.chunks[i]->layers[l]);
    }
    b.Put(kb + "H", d.chunks[i]->header);
    s = db->Write(wo, &b);
    if (!s.ok()) return absl::InternalError(absl::StrCat("bench raw put: ", s.ToString()));
  }
  const double t_raw_put = SecondsSince(t0);
  db.reset();
  std::filesystem::remove_all(raw_dir);

  ASSIGN_OR_RETURN(std::unique_ptr<Tier> ssd, CreateSsdTier(so));
  std::shared_ptr<Tier> ssd_shared(std::move(ssd));
  TieredStoreOptions sto;  // verify_on_put on: what production does
  ASSIGN_OR_RETURN(auto store, TieredStore::Create(sto, {ssd_shared}));
  t0 = Clock::now();
  for (int i = 0; i < o.chunks; ++i) RETURN_IF_ERROR(store->Put(d.keys[i], d.chunks[i]));
  const double t_put = SecondsSince(t0);
  row("ssd Put (verify + WAL fsync + blob)", "GB/s", total / t_put / 1e9, total / t_raw_put / 1e9,
      "raw RocksDB WriteBatch, same options", 0);
  return absl::OkStatus();
}

absl::StatusOr<double> ShapeBench::SsdColdGetRows(const SsdTierOptions& so,
                                                  const std::string& ssd_dir) {
  // Cold reads: a fresh tier (new RocksDB instance, empty block cache) after
  // fdatasync + fadvise(DONTNEED) on every DB file, vs a raw sequential read
  // of a file of the same size on the same filesystem, page cache dropped
  // the same way. Tier and baselines alternate within each repetition (the
  // machine is shared: load drifts); the best of `repeats` is kept for each.
  ASSIGN_OR_RETURN(std::unique_ptr<RawReadFile> raw_file,
                   RawReadFile::Create(o.dir, static_cast<uint64_t>(total)));
  const int T = std::min(o.threads, o.chunks);
  SsdTierOptions buffered = so;
  buffered.use_direct_reads = false;
  SsdTierOptions direct = so;
  direct.use_direct_reads = true;
  SsdTierOptions one_multiget = buffered;  // the read path before read_threads
  one_multiget.read_threads = 1;
  // ColdTierRead: seconds to Get every chunk once through a fresh tier with
  // `threads` readers (chunks dealt round-robin).
  auto cold_tier_read = [&](const SsdTierOptions& opts, int threads) -> absl::StatusOr<double> {
    DropCache(ssd_dir);
    ASSIGN_OR_RETURN(std::unique_ptr<Tier> ssd, CreateSsdTier(opts));
    std::shared_ptr<Tier> ssd_shared(std::move(ssd));
    ASSIGN_OR_RETURN(auto store, TieredStore::Create({}, {ssd_shared}));
    std::atomic<bool> ok{true};
    const double t = Parallel(threads, [&](int tid) {
      std::vector<size_t> mine;
      for (int i = tid; i < o.chunks; i += threads) mine.push_back(static_cast<size_t>(i));
      if (!GetAll(*store, d, mine, nullptr)) ok = false;
    });
    if (!ok) return absl::InternalError("bench: SSD tier miss");
    return t;
  };
  struct Best {
    double s = 1e30;
    void Add(double t) { s = std::min(s, t); }
  };
  Best raw_direct_1, raw_buffered_1, raw_direct_t, raw_buffered_t;
  Best tier_buffered_1, tier_direct_1, tier_buffered_t, tier_direct_t, tier_multiget_1;
  const double raw_bytes = static_cast<double>(raw_file->bytes());
  for (int r = 0; r < o.repeats; ++r) {
    ASSIGN_OR_RETURN(double t, raw_file->Read(1, /*direct=*/true));
    raw_direct_1.Add(t);
    ASSIGN_OR_RETURN(t, cold_tier_read(buffered, 1));
    tier_buffered_1.Add(t);
    ASSIGN_OR_RETURN(t, raw_file->Read(1, /*direct=*/false));
    raw_buffered_1.Add(t);
    ASSIGN_OR_RETURN(t, cold_tier_read(direct, 1));
    tier_direct_1.Add(t);
    ASSIGN_OR_RETURN(t, cold_tier_read(one_multiget, 1));
    tier_multiget_1.Add(t);
    if (T > 1) {
      ASSIGN_OR_RETURN(t, raw_file->Read(T, /*direct=*/true));
      raw_direct_t.Add(t);
      ASSIGN_OR_RETURN(t, cold_tier_read(buffered, T));
      tier_buffered_t.Add(t);
      ASSIGN_OR_RETURN(t, raw_file->Read(T, /*direct=*/false));
      raw_buffered_t.Add(t);
      ASSIGN_OR_RETURN(t, cold_tier_read(direct, T));
      tier_direct_t.Add(t);
    }
  }
  const double direct_gbps = raw_bytes / raw_direct_1.s / 1e9;
  const double buffered_gbps = raw_bytes / raw_buffered_1.s / 1e9;
  row("ssd cold Get, buffered reads, 1 thread", "GB/s", total / tier_buffered_1.s / 1e9,
      direct_gbps, "raw O_DIRECT seq read, 4 MiB, 1 thread", 0.5);
  row("ssd cold Get, buffered reads, 1 thread", "GB/s", total / tier_buffered_1.s / 1e9,
      buffered_gbps, "raw buffered seq read (dd), 1 thread", 0.5);
  row("ssd cold Get, use_direct_reads, 1 thread", "GB/s", total / tier_direct_1.s / 1e9,
      direct_gbps, "raw O_DIRECT seq read, 4 MiB, 1 thread", 0.5);
  row("ssd cold Get, buffered, read_threads=1 (one MultiGet)", "GB/s",
      total / tier_multiget_1.s / 1e9, buffered_gbps, "raw buffered seq read (dd), 1 thread", 0);
  if (T > 1) {
    const double direct_t_gbps = raw_bytes / raw_direct_t.s / 1e9;
    const double buffered_t_gbps = raw_bytes / raw_buffered_t.s / 1e9;
    const std::string threads = absl::StrCat(T, " threads");
    row(absl::StrCat("ssd cold Get, buffered reads, ", threads), "GB/s",
        total / tier_buffered_t.s / 1e9, direct_t_gbps,
        absl::StrCat("raw O_DIRECT seq read, 4 MiB, ", threads), 0.5);
    row(absl::StrCat("ssd cold Get, buffered reads, ", threads), "GB/s",
        total / tier_buffered_t.s / 1e9, buffered_t_gbps,
        absl::StrCat("raw buffered seq read (dd), ", threads), 0.5);
    row(absl::StrCat("ssd cold Get, use_direct_reads, ", threads), "GB/s",
        total / tier_direct_t.s / 1e9, direct_t_gbps,
        absl::StrCat("raw O_DIRECT seq read, 4 MiB, ", threads), 0.5);
    row(absl::StrCat("ssd cold Get, use_direct_reads, ", threads), "GB/s",
        total / tier_direct_t.s / 1e9, direct_gbps, "raw O_DIRECT seq read, 4 MiB, 1 thread",
        0.5);
  }
  return direct_gbps;  // raw_file is removed here
}

absl::Status ShapeBench::SsdWarmGetRow(const SsdTierOptions& so, double direct_gbps) {
  SsdTierOptions buffered = so;
  buffered.use_direct_reads = false;
  ASSIGN_OR_RETURN(std::unique_ptr<Tier> ssd, CreateSsdTier(buffered));
  std::shared_ptr<Tier> ssd_shared(std::move(ssd));
  ASSIGN_OR_RETURN(auto store, TieredStore::Create({}, {ssd_shared}));
  bool ok = GetAll(*store, d, order, nullptr);  // warm the page cache
  const double t_warm = BestOf(o.repeats, [&] { ok &= GetAll(*store, d, order, nullptr); });
  if (!ok) return absl::InternalError("bench: SSD tier miss");
  row("ssd warm Get (buffered reads, page cache), 1 thread", "GB/s", total / t_warm / 1e9, direct_gbps,
      "raw O_DIRECT seq read, 4 MiB, 1 thread", 0);
  return absl::OkStatus();
}

absl::Status BenchShape(const KvBenchOptions& o, const KvBenchShape& shape,
                        std::vector<KvBenchRow>* rows) {
  ShapeBench b(o, shape, rows);
  RETURN_IF_ERROR(b.Init());

  // ---- RAM tier ----
  RETURN_IF_ERROR(b.RamRows());

  // ---- SSD tier: Put vs raw RocksDB, cold read vs O_DIRECT ----
  const std::string ssd_dir = o.dir + "/ssd_" + shape.name;
  const std::string raw_dir = o.dir + "/rawdb_" + shape.name;
  std::filesystem::remove_all(ssd_dir);
  std::filesystem::remove_all(raw_dir);
  std::filesystem::create_directories(o.dir);
  SsdTierOptions so;
  so.path = ssd_dir;
  so.capacity_bytes = static_cast<uint64_t>(b.total * 4) + (1 << 30);
  so.sync_writes = true;
  RETURN_IF_ERROR(b.SsdPutRow(so, raw_dir));
  ASSIGN_OR_RETURN(const double direct_gbps, b.SsdColdGetRows(so, ssd_dir));
  RETURN_IF_ERROR(b.SsdWarmGetRow(so, direct_gbps));
  std::filesystem::remove_all(ssd_dir);

  if (o.extra_rows) {
    ASSIGN_OR_RETURN(std::vector<KvBenchRow> extra, o.extra_rows(shape));
    for (auto& r : extra) rows->push_back(std::move(r));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<KvBenchRow>> RunKvStoreBench(const KvBenchOptions& options,
                                                        std::FILE* out) {
  KvBenchOptions o = options;
  if (o.shapes.empty()) {
    o.shapes = {KvBenchShape{"llama8b-512tok", 512, 32, 8, 128},
                KvBenchShape{"stories260k-512tok", 512, 5, 4, 8}};
  }
  if (o.chunks < 1 || o.threads < 1 || o.repeats < 1) {
    return absl::InvalidArgumentError("kvstore bench: chunks, threads and repeats must be >= 1");
  }
  std::vector<KvBenchRow> rows;
  for (const KvBenchShape& s : o.shapes) {
    RETURN_IF_ERROR(BenchShape(o, s, &rows));
  }
  std::error_code ec;
  std::filesystem::remove_all(o.dir, ec);
  if (out != nullptr) {
    std::fprintf(out, "%-20s | %-56s | %9s | %9s | %-38s | %6s | %s\n", "shape", "measurement",
                 "value", "baseline", "baseline is", "ratio", "target");
    for (const KvBenchRow& r : rows) {
      std::string target = "-";
      if (r.target_ratio > 0) {
        target = absl::StrFormat(">= %.2f %s", r.target_ratio,
                                 r.ratio() >= r.target_ratio ? "met" : "MISSED");
      }
      std::fprintf(out, "%-20s | %-56s | %9.2f | %9.2f | %-38s | %6.2f | %s\n", r.shape.c_str(),
                   r.what.c_str(), r.value, r.baseline, r.baseline_what.c_str(), r.ratio(),
                   target.c_str());
    }
    std::fprintf(out, "(values and baselines in %s)\n", rows.empty() ? "GB/s" : rows[0].unit.c_str());
  }
  return rows;
}

}  // namespace ragkv::kvstore
