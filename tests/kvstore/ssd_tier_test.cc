#include "kvstore/ssd/ssd_tier.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kvstore/ssd/internal/ssd_tier_internal.h"
#include "kvstore/tiered_store.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "tests/kvstore/test_util.h"

namespace ragkv::kvstore {
namespace {

using testing::ChunkSpec;
using testing::MakeChunk;
using testing::TempDir;
using testing::TestChunk;

// Layers of ~16 KiB so they go to blob files (min_blob_size 4 KiB).
TestChunk Chunk(uint32_t seed, uint8_t fp = 1) {
  ChunkSpec s;
  s.tokens = 64;
  s.kv_heads = 4;
  s.head_dim = 16;
  s.layers = 3;
  s.token_seed = seed;
  s.fp_seed = fp;
  return MakeChunk(s);
}

SsdTierOptions Opts(const std::string& path, uint64_t capacity = uint64_t{1} << 30) {
  SsdTierOptions o;
  o.path = path;
  o.capacity_bytes = capacity;
  o.sync_writes = false;  // tests that need durability set it
  return o;
}

std::unique_ptr<Tier> Open(const SsdTierOptions& o) {
  auto t = CreateSsdTier(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// ExpectIntact: the tier serves exactly c's bytes and they decode.
void ExpectIntact(Tier& tier, const TestChunk& c) {
  auto h = tier.GetHeader(c.key);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(h->has_value()) << "missing " << c.key.ToHex();
  EXPECT_EQ((*h)->view(), c.encoded->header);
  auto layers = testing::ReadLayers(tier, c.key, 0, c.header.num_layers);
  ASSERT_TRUE(layers.ok());
  for (uint32_t l = 0; l < c.header.num_layers; ++l) {
    ASSERT_TRUE((*layers)[l].has_value());
    EXPECT_EQ((*layers)[l]->view(), c.encoded->layers[l]);
    EXPECT_TRUE(ParseLayerRecord(c.header, (*layers)[l]->view(), l).ok());
  }
}

TEST(SsdTier, RoundTripAndRestart) {
  TempDir dir;
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < 5; ++i) chunks.push_back(Chunk(i));
  uint64_t used = 0;
  {
    auto tier = Open(Opts(dir.path()));
    for (auto& c : chunks) ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
    for (auto& c : chunks) ExpectIntact(*tier, c);
    EXPECT_FALSE(tier->GetHeader(Chunk(99).key)->has_value());
    EXPECT_TRUE(*tier->Contains(chunks[0].key));
    TierStats st = tier->Stats();
    EXPECT_EQ(st.entries, 5u);
    EXPECT_EQ(st.hits, 10u);  // ExpectIntact reads each chunk twice
    EXPECT_EQ(st.misses, 1u);
    used = st.bytes_used;
    EXPECT_GT(used, 0u);
  }
  auto tier = Open(Opts(dir.path()));
  TierStats st = tier->Stats();
  EXPECT_EQ(st.entries, 5u);
  EXPECT_EQ(st.bytes_used, used);
  for (auto& c : chunks) ExpectIntact(*tier, c);
  // Overwrite with fewer layers: stale layer records are gone.
  ChunkSpec s;
  s.tokens = 64;
  s.kv_heads = 4;
  s.head_dim = 16;
  s.layers = 1;
  s.token_seed = 0;
  TestChunk shorter = MakeChunk(s);
  ASSERT_EQ(shorter.key, chunks[0].key);
  ASSERT_TRUE(tier->Put(shorter.key, shorter.encoded).ok());
  ExpectIntact(*tier, shorter);
  EXPECT_FALSE(internal::SsdStoredLayer(*tier, shorter.key, 2)->has_value());
}

TEST(SsdTier, DirectReadsRoundTrip) {
  TempDir dir;
  SsdTierOptions o = Opts(dir.path());
  o.use_direct_reads = true;
  std::vector<TestChunk> chunks = {Chunk(1), Chunk(2)};
  {
    auto tier = Open(o);
    for (auto& c : chunks) ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
    for (auto& c : chunks) ExpectIntact(*tier, c);
  }
  auto tier = Open(o);  // after a restart the values come from blob files
  for (auto& c : chunks) ExpectIntact(*tier, c);
}

TEST(SsdTier, EvictsUnderBudgetAcrossRestarts) {
  TempDir dir;
  const uint64_t per = Chunk(0).encoded->TotalBytes();
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < 6; ++i) chunks.push_back(Chunk(i));
  {
    auto tier = Open(Opts(dir.path(), per * 3 + per / 2));
    for (auto& c : chunks) {
      ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
      ASSERT_LE(tier->Stats().bytes_used, per * 3 + per / 2);
    }
    EXPECT_EQ(tier->Stats().entries, 3u);
    EXPECT_EQ(tier->Stats().evictions, 3u);
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(*tier->Contains(chunks[i].key)) << i;
    for (int i = 3; i < 6; ++i) ExpectIntact(*tier, chunks[i]);
    // Oversized chunk: ResourceExhausted, nothing evicted.
    ChunkSpec big;
    big.tokens = 2048;
    big.kv_heads = 4;
    big.head_dim = 16;
    TestChunk b = MakeChunk(big);
    EXPECT_EQ(tier->Put(b.key, b.encoded).code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(tier->Stats().entries, 3u);
  }
  // Reopen with a smaller budget: the oldest are evicted on open.
  auto tier = Open(Opts(dir.path(), per * 2));
  EXPECT_EQ(tier->Stats().entries, 2u);
  EXPECT_FALSE(*tier->Contains(chunks[3].key));
  ExpectIntact(*tier, chunks[4]);
  ExpectIntact(*tier, chunks[5]);
}

TEST(SsdTier, DeleteAndDeleteByFingerprintPersist) {
  TempDir dir;
  {
    auto tier = Open(Opts(dir.path()));
    for (uint32_t i = 0; i < 6; ++i) {
      TestChunk c = Chunk(i, static_cast<uint8_t>(1 + i % 2));
      ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
    }
    ASSERT_TRUE(tier->Delete(Chunk(0, 1).key).ok());
    ASSERT_TRUE(tier->Delete(Chunk(77).key).ok());  // absent: OK
    auto n = tier->DeleteByFingerprint(testing::TestFingerprint(2));
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 3u);
  }
  auto tier = Open(Opts(dir.path()));
  EXPECT_EQ(tier->Stats().entries, 2u);
  EXPECT_FALSE(tier->GetHeader(Chunk(1, 2).key)->has_value());
  EXPECT_FALSE(internal::SsdStoredLayer(*tier, Chunk(1, 2).key, 0)->has_value());
  ExpectIntact(*tier, Chunk(2, 1));
}

std::vector<std::string> BlobFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".blob") out.push_back(e.path().string());
  }
  return out;
}

void FlipByte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good());
  f.seekg(offset);
  char b = 0;
  f.read(&b, 1);
  b ^= 0x5a;
  f.seekp(offset);
  f.write(&b, 1);
}

class FlippedByte : public ::testing::TestWithParam<bool> {};

// A byte flipped inside an SSD record: reported (counted, logged), served as
// a miss, never served -- whether RocksDB's blob CRC (verify on) or the
// store's own XXH3 (RocksDB verification off) catches it.
TEST_P(FlippedByte, IsAMissNeverServed) {
  const bool rocksdb_verify = GetParam();
  TempDir dir;
  TestChunk c = Chunk(1);
  TestChunk other = Chunk(2);
  SsdTierOptions o = Opts(dir.path());
  o.verify_rocksdb_checksums = rocksdb_verify;
  {
    auto tier = Open(o);
    ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
    ASSERT_TRUE(tier->Flush().ok());
  }
  {
    // Force the memtable to blob files: reopen replays the WAL and flushes.
    auto tier = Open(o);
  }
  auto blobs = BlobFiles(dir.path());
  ASSERT_FALSE(blobs.empty()) << "no blob files: BlobDB not in use?";
  const int64_t size = static_cast<int64_t>(std::filesystem::file_size(blobs[0]));
  FlipByte(blobs[0], size / 2);

  auto tier_or = CreateSsdTier(o);
  ASSERT_TRUE(tier_or.ok()) << tier_or.status();
  std::shared_ptr<Tier> tier = std::move(*tier_or);
  ASSERT_TRUE(tier->Put(other.key, other.encoded).ok());
  auto store = TieredStore::Create({}, {tier});
  ASSERT_TRUE(store.ok());
  auto got = (*store)->Get(c.key, c.header.fingerprint);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value()) << "corrupt chunk was served";
  EXPECT_GE(tier->Stats().corrupt_records, 1u);
  // Reported records are deleted; the rest of the tier keeps serving.
  EXPECT_FALSE(*tier->Contains(c.key));
  auto ok = (*store)->Get(other.key, other.header.fingerprint);
  ASSERT_TRUE(ok.ok() && ok->has_value());
  // Streaming sees the same: a miss, no layer delivered.
  int delivered = 0;
  auto sr = (*store)->StreamLayers(c.key, c.header.fingerprint,
                                   [&](const KvChunkHeader&, LoadedLayer) {
                                     ++delivered;
                                     return absl::OkStatus();
                                   });
  ASSERT_TRUE(sr.ok());
  EXPECT_FALSE(sr->found);
  EXPECT_EQ(delivered, 0);
}

INSTANTIATE_TEST_SUITE_P(RocksDbVerify, FlippedByte, ::testing::Bool());

// ---- disk full through a FileSystem seam ----

class FullFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FullFs(const std::shared_ptr<rocksdb::FileSystem>& base) : FileSystemWrapper(base) {}
  static const char* kClassName() { return "FullFs"; }
  const char* Name() const override { return kClassName(); }

  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, FullFs* fs)
        : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
      if (fs_->full.load()) return rocksdb::IOStatus::NoSpace("injected ENOSPC");
      return FSWritableFileOwnerWrapper::Append(data, o, d);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& v,
                             rocksdb::IODebugContext* d) override {
      if (fs_->full.load()) return rocksdb::IOStatus::NoSpace("injected ENOSPC");
      return FSWritableFileOwnerWrapper::Append(data, o, v, d);
    }

   private:
    FullFs* fs_;
  };

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    if (full.load()) return rocksdb::IOStatus::NoSpace("injected ENOSPC");
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, r, d);
    if (s.ok()) r->reset(new File(std::move(*r), this));
    return s;
  }

  std::atomic<bool> full{false};
};

TEST(SsdTier, DiskFullIsAClearErrorAndLosesNothing) {
  TempDir dir;
  auto fs = std::make_shared<FullFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  std::vector<TestChunk> before;
  for (uint32_t i = 0; i < 3; ++i) before.push_back(Chunk(i));
  {
    auto tier_or = internal::CreateSsdTierWithEnv(Opts(dir.path()), env.get());
    ASSERT_TRUE(tier_or.ok()) << tier_or.status();
    auto& tier = *tier_or;
    for (auto& c : before) ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
    fs->full = true;
    TestChunk extra = Chunk(50);
    absl::Status s = tier->Put(extra.key, extra.encoded);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find("ssd tier"), std::string_view::npos) << s;
    EXPECT_FALSE(*tier->Contains(extra.key));
    EXPECT_EQ(tier->Stats().errors, 1u);
    // Everything stored before is still served intact.
    for (auto& c : before) ExpectIntact(*tier, c);
    fs->full = false;
    // Writes work again once space is back: each Put after a failure asks
    // RocksDB to resume (its own recovery may need a moment, e.g. under TSan).
    absl::Status again;
    for (int attempt = 0; attempt < 20; ++attempt) {
      again = tier->Put(extra.key, extra.encoded);
      if (again.ok()) break;
    }
    EXPECT_TRUE(again.ok()) << again;
    ExpectIntact(*tier, extra);
  }
  // And nothing is lost across a restart.
  auto tier = Open(Opts(dir.path()));
  for (auto& c : before) ExpectIntact(*tier, c);
}

TEST(SsdTier, AClosedTierRecoversOnReadsAndReportsItsState) {
  TempDir dir;
  auto fs = std::make_shared<FullFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  auto tier_or = internal::CreateSsdTierWithEnv(Opts(dir.path()), env.get());
  ASSERT_TRUE(tier_or.ok()) << tier_or.status();
  auto& tier = *tier_or;
  TestChunk a = Chunk(1), b = Chunk(2);
  ASSERT_TRUE(tier->Put(a.key, a.encoded).ok());
  EXPECT_EQ(tier->Stats().up, 1u);
  fs->full = true;
  EXPECT_FALSE(tier->Put(b.key, b.encoded).ok());
  EXPECT_EQ(tier->Stats().up, 0u) << "a tier that cannot write says so";
  EXPECT_FALSE(tier->Put(b.key, b.encoded).ok());  // the reopen fails too: closed
  fs->full = false;
  // No write comes; reads alone bring it back (at most one try per second).
  bool served = false;
  for (int i = 0; i < 40 && !served; ++i) {
    absl::StatusOr<Tier::Blob> h = tier->GetHeader(a.key);
    served = h.ok() && h->has_value();
    if (!served) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(served);
  EXPECT_EQ(tier->Stats().up, 1u);
  ExpectIntact(*tier, a);
}

// ---- kill -9 ----

// Writer half of KillNine (runs in a child process spawned by the test;
// DISABLED_ so that test discovery does not list it).
TEST(SsdTierChild, DISABLED_Writer) {
  const char* dir = std::getenv("RAGKV_KV_CHILD_DIR");
  const char* fd_env = std::getenv("RAGKV_KV_CHILD_FD");
  if (dir == nullptr || fd_env == nullptr) GTEST_SKIP() << "helper for SsdTier.KillNine only";
  const int fd = std::atoi(fd_env);
  SsdTierOptions o = Opts(dir);
  o.sync_writes = true;
  auto tier = CreateSsdTier(o);
  if (!tier.ok()) _exit(3);
  for (uint32_t i = 0;; ++i) {
    TestChunk c = Chunk(i);
    if (!(*tier)->Put(c.key, c.encoded).ok()) _exit(4);
    if (write(fd, &i, sizeof(i)) != sizeof(i)) _exit(5);  // acknowledged
  }
}

TEST(SsdTier, KillNineKeepsEveryAcknowledgedChunk) {
  TempDir dir;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  // Everything the child needs is prepared before fork (only execve after).
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string filter = "--gtest_filter=SsdTierChild.DISABLED_Writer";
  const std::string also = "--gtest_also_run_disabled_tests";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back("RAGKV_KV_CHILD_DIR=" + dir.path());
  env_strings.push_back("RAGKV_KV_CHILD_FD=" + std::to_string(fds[1]));
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>(exe.c_str()), const_cast<char*>(filter.c_str()),
                  const_cast<char*>(also.c_str()), nullptr};
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    execve(exe.c_str(), argv, envp.data());
    _exit(2);
  }
  close(fds[1]);
  uint32_t acked = 0, got = 0;
  int n_acks = 0;
  while (n_acks < 12 && read(fds[0], &got, sizeof(got)) == sizeof(got)) {
    acked = got;
    ++n_acks;
  }
  ASSERT_EQ(n_acks, 12) << "child died early";
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  // Drain acks written between our last read and the kill.
  while (read(fds[0], &got, sizeof(got)) == sizeof(got)) acked = got;
  close(fds[0]);
  EXPECT_TRUE(WIFSIGNALED(status));

  auto tier = Open(Opts(dir.path()));
  ASSERT_NE(tier, nullptr);
  EXPECT_GE(tier->Stats().entries, acked + 1);
  for (uint32_t i = 0; i <= acked; ++i) ExpectIntact(*tier, Chunk(i));
}

TEST(SsdTier, ConcurrentReadersAndWriters) {
  TempDir dir;
  auto tier = Open(Opts(dir.path()));
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < 8; ++i) chunks.push_back(Chunk(i));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(tier->Put(chunks[i].key, chunks[i].encoded).ok());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    for (int r = 0; r < 40; ++r) {
      const TestChunk& c = chunks[4 + r % 4];
      if (!tier->Put(c.key, c.encoded).ok()) bad++;
    }
  });
  for (int rd = 0; rd < 3; ++rd) {
    threads.emplace_back([&, rd] {
      for (int r = 0; r < 60; ++r) {
        const TestChunk& c = chunks[(r + rd) % 4];
        auto h = tier->GetHeader(c.key);
        if (!h.ok() || !h->has_value() || (*h)->view() != c.encoded->header) bad++;
        auto ls = testing::ReadLayers(*tier, c.key, 0, 3);
        if (!ls.ok()) {
          bad++;
          continue;
        }
        for (uint32_t l = 0; l < 3; ++l) {
          if (!(*ls)[l].has_value() || (*ls)[l]->view() != c.encoded->layers[l]) bad++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace ragkv::kvstore

namespace ragkv::kvstore {
namespace {

// Layers of 320 KiB: above the parallel-read threshold (256 KiB per layer).
TestChunk LargeChunk(uint32_t seed) {
  return MakeChunk(ChunkSpec{.tokens = 320, .layers = 5, .kv_heads = 2, .head_dim = 64,
                             .token_seed = seed});
}

TEST(SsdTier, LargeLayersReadInParallelAreByteIdenticalAndOutliveTheTier) {
  TempDir dir;
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < 3; ++i) chunks.push_back(LargeChunk(40 + i));
  ASSERT_GT(chunks[0].encoded->layers[0].size(), size_t{256} << 10);
  {
    auto t = Open(Opts(dir.path()));
    ASSERT_NE(t, nullptr);
    for (const TestChunk& c : chunks) ASSERT_TRUE(t->Put(c.key, c.encoded).ok());
  }
  for (int read_threads : {1, 2, 4}) {
    for (bool direct : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "read_threads=" << read_threads << " direct=" << direct);
      SsdTierOptions o = Opts(dir.path());
      o.read_threads = read_threads;
      o.use_direct_reads = direct;
      std::vector<std::vector<Tier::Blob>> kept;
      {
        // Reopened: the layers are read from blob files, not the memtable.
        auto t = Open(o);
        ASSERT_NE(t, nullptr);
        for (const TestChunk& c : chunks) {
          auto ls = testing::ReadLayers(*t, c.key, 0, 5);
          ASSERT_TRUE(ls.ok()) << ls.status();
          ASSERT_EQ(ls->size(), 5u);
          for (uint32_t l = 0; l < 5; ++l) {
            ASSERT_TRUE((*ls)[l].has_value()) << l;
            EXPECT_TRUE((*ls)[l]->view() == c.encoded->layers[l]) << l;
          }
          kept.push_back(std::move(*ls));
          // Beyond the last layer: absent, the others still read.
          auto beyond = testing::ReadLayers(*t, c.key, 3, 4);
          ASSERT_TRUE(beyond.ok()) << beyond.status();
          EXPECT_TRUE((*beyond)[0].has_value());
          EXPECT_TRUE((*beyond)[1].has_value());
          EXPECT_FALSE((*beyond)[2].has_value());
          EXPECT_FALSE((*beyond)[3].has_value());
        }
      }
      // The tier (and its database) is gone; the handles still hold the bytes.
      for (size_t i = 0; i < chunks.size(); ++i) {
        for (uint32_t l = 0; l < 5; ++l) {
          EXPECT_TRUE(kept[i][l]->view() == chunks[i].encoded->layers[l]) << i << "/" << l;
        }
      }
    }
  }
}

TEST(SsdTier, ConcurrentParallelReadsOfLargeChunks) {
  TempDir dir;
  SsdTierOptions o = Opts(dir.path());
  o.read_threads = 3;
  auto t = Open(o);
  ASSERT_NE(t, nullptr);
  std::shared_ptr<Tier> tier(std::move(t));
  auto store = TieredStore::Create({}, {tier});
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<TestChunk> chunks;
  for (uint32_t i = 0; i < 4; ++i) {
    chunks.push_back(LargeChunk(60 + i));
    ASSERT_TRUE((*store)->Put(chunks.back().key, chunks.back().encoded).ok());
  }
  std::atomic<int> bad{0}, served{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      for (int it = 0; it < 6; ++it) {
        const TestChunk& c = chunks[(r + it) % chunks.size()];
        auto got = (*store)->Get(c.key, c.header.fingerprint);
        if (!got.ok() || !got->has_value()) {
          ++bad;
          continue;
        }
        for (uint32_t l = 0; l < 5; ++l) {
          if ((*got)->layers[l].blob.view() != c.encoded->layers[l]) ++bad;
        }
        ++served;
      }
    });
  }
  // A writer replaces one chunk meanwhile (same bytes, new sequence).
  for (int it = 0; it < 4; ++it) ASSERT_TRUE((*store)->Put(chunks[0].key, chunks[0].encoded).ok());
  for (std::thread& th : readers) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(served.load(), 24);
}

TEST(SsdTier, BadReadThreadsIsInvalidArgument) {
  TempDir dir;
  SsdTierOptions o = Opts(dir.path());
  o.read_threads = 0;
  auto t = CreateSsdTier(o);
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
}

}  // namespace
}  // namespace ragkv::kvstore

namespace ragkv::kvstore {
namespace {

// The default use_direct_reads must not make the tier unusable on a
// filesystem that may refuse O_DIRECT (tmpfs before Linux 6.6): it falls
// back to buffered reads.
TEST(SsdTier, DefaultOptionsWorkOnTmpfs) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  char tmpl[] = "/dev/shm/ragkv_kvstore_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = tmpl;
  {
    SsdTierOptions o = Opts(path);
    ASSERT_TRUE(o.use_direct_reads);  // the default
    auto t = Open(o);
    ASSERT_NE(t, nullptr);
    TestChunk c = LargeChunk(80);
    ASSERT_TRUE(t->Put(c.key, c.encoded).ok());
    auto ls = testing::ReadLayers(*t, c.key, 0, 5);
    ASSERT_TRUE(ls.ok()) << ls.status();
    for (uint32_t l = 0; l < 5; ++l) {
      ASSERT_TRUE((*ls)[l].has_value());
      EXPECT_TRUE((*ls)[l]->view() == c.encoded->layers[l]);
    }
  }
  {
    auto t = Open(Opts(path));  // reopened: reads from the blob files
    ASSERT_NE(t, nullptr);
    TestChunk c = LargeChunk(80);
    auto ls = testing::ReadLayers(*t, c.key, 0, 5);
    ASSERT_TRUE(ls.ok()) << ls.status();
    for (uint32_t l = 0; l < 5; ++l) {
      ASSERT_TRUE((*ls)[l].has_value());
      EXPECT_TRUE((*ls)[l]->view() == c.encoded->layers[l]);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace
}  // namespace ragkv::kvstore
