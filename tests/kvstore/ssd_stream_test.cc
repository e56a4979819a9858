// The layer-wise Put (Tier::BeginPut, TieredStore::BeginPut) on the real
// SSD tier (RocksDB in a temp dir): invisible until Commit, byte-identical
// to a whole Put after it, nothing left by an abort or by a process killed
// mid-write (reclaimed at the next open), a stored chunk kept intact by a
// cut replacement, and a bad record failing the write in every tier.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kvstore/ram_tier.h"
#include "kvstore/ssd_tier.h"
#include "kvstore/tiered_store.h"
#include "tests/kvstore/test_util.h"

namespace ragkv::kvstore {
namespace {

using testing::ChunkSpec;
using testing::MakeChunk;
using testing::TempDir;
using testing::TestChunk;

TestChunk Chunk(uint32_t seed) {
  ChunkSpec s;
  s.tokens = 64;
  s.kv_heads = 4;
  s.head_dim = 16;
  s.layers = 4;
  s.token_seed = seed;
  return MakeChunk(s);
}

std::unique_ptr<Tier> OpenSsd(const std::string& path) {
  SsdTierOptions o;
  o.path = path;
  o.capacity_bytes = uint64_t{1} << 30;
  o.sync_writes = false;
  auto t = CreateSsdTier(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// Absent: no header and no layer record of c in `tier`.
void ExpectAbsent(Tier& tier, const TestChunk& c) {
  EXPECT_FALSE(tier.GetHeader(c.key)->has_value());
  for (uint32_t l = 0; l < c.header.num_layers; ++l) {
    EXPECT_FALSE(tier.GetLayer(c.key, l)->has_value()) << "layer " << l << " left behind";
  }
}

TEST(SsdStream, InvisibleUntilCommitThenIdenticalToAWholePut) {
  TempDir dir;
  auto tier = OpenSsd(dir.path());
  const TestChunk c = Chunk(1);
  auto w = tier->BeginPut(c.key, c.encoded->header, c.encoded->TotalBytes());
  ASSERT_TRUE(w.ok()) << w.status();
  for (uint32_t l = 0; l < c.header.num_layers; ++l) {
    ASSERT_TRUE((*w)->AddLayer(c.encoded->layers[l]).ok());
    EXPECT_FALSE(tier->GetHeader(c.key)->has_value()) << "visible after layer " << l;
    EXPECT_FALSE(*tier->Contains(c.key));
  }
  EXPECT_GT(tier->Stats().bytes_used, 0u);  // the reservation counts in the budget
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_EQ((*tier->GetHeader(c.key))->view(), c.encoded->header);
  for (uint32_t l = 0; l < c.header.num_layers; ++l) {
    EXPECT_EQ((*tier->GetLayer(c.key, l))->view(), c.encoded->layers[l]);
  }
  EXPECT_EQ(tier->Stats().bytes_used, c.encoded->TotalBytes());
  EXPECT_EQ(tier->Stats().entries, 1u);
  w->reset();
  tier.reset();
  tier = OpenSsd(dir.path());  // and it is durable
  EXPECT_EQ((*tier->GetHeader(c.key))->view(), c.encoded->header);
  EXPECT_EQ(tier->Stats().bytes_used, c.encoded->TotalBytes());
}

TEST(SsdStream, AbortedWriteLeavesNothing) {
  TempDir dir;
  auto tier = OpenSsd(dir.path());
  const TestChunk c = Chunk(2);
  {
    auto w = tier->BeginPut(c.key, c.encoded->header, c.encoded->TotalBytes());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddLayer(c.encoded->layers[0]).ok());
    ASSERT_TRUE((*w)->AddLayer(c.encoded->layers[1]).ok());
    EXPECT_FALSE((*w)->Commit().ok());  // two layers are missing
  }
  ExpectAbsent(*tier, c);
  EXPECT_EQ(tier->Stats().bytes_used, 0u);
  // The key can be written again afterwards.
  auto w = tier->BeginPut(c.key, c.encoded->header, c.encoded->TotalBytes());
  ASSERT_TRUE(w.ok());
  for (const auto& rec : c.encoded->layers) ASSERT_TRUE((*w)->AddLayer(rec).ok());
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_TRUE(*tier->Contains(c.key));
}

// Child half of AWriteCutByADeadProcessIsReclaimedAtOpen (exec'd by it, so
// no fork of a threaded process; DISABLED_ keeps discovery from listing it):
// opens the tier, streams half of Chunk(3) and dies without any destructor,
// as kill -9 would leave it.
TEST(SsdStreamChild, DISABLED_HalfWrite) {
  const char* dir = std::getenv("RAGKV_KV_STREAM_DIR");
  if (dir == nullptr) GTEST_SKIP() << "helper for SsdStream.AWriteCut... only";
  const TestChunk c = Chunk(3);
  SsdTierOptions o;
  o.path = dir;
  o.sync_writes = true;
  auto t = CreateSsdTier(o);
  if (!t.ok()) _exit(2);
  auto w = (*t)->BeginPut(c.key, c.encoded->header, c.encoded->TotalBytes());
  if (!w.ok() || !(*w)->AddLayer(c.encoded->layers[0]).ok() ||
      !(*w)->AddLayer(c.encoded->layers[1]).ok()) {
    _exit(3);
  }
  _exit(0);  // no Commit, no abort, no RocksDB close
}

TEST(SsdStream, AWriteCutByADeadProcessIsReclaimedAtOpen) {
  TempDir dir;
  const TestChunk c = Chunk(3), kept = Chunk(4);
  {
    auto tier = OpenSsd(dir.path());
    ASSERT_TRUE(tier->Put(kept.key, kept.encoded).ok());
  }
  // Everything the child needs is prepared before fork (only execve after).
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=SsdStreamChild.DISABLED_HalfWrite";
  std::string also = "--gtest_also_run_disabled_tests";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back("RAGKV_KV_STREAM_DIR=" + dir.path());
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>(exe.c_str()), filter.data(), also.data(), nullptr};
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execve(exe.c_str(), argv, envp.data());
    _exit(4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  auto tier = OpenSsd(dir.path());
  ExpectAbsent(*tier, c);
  EXPECT_EQ(tier->Stats().bytes_used, kept.encoded->TotalBytes());
  EXPECT_EQ((*tier->GetHeader(kept.key))->view(), kept.encoded->header);
}

// Replacing a stored chunk is one atomic Put at Commit: the old chunk stays
// readable during the stream and intact when the stream is cut.
TEST(SsdStream, ACutReplacementKeepsTheStoredChunk) {
  TempDir dir;
  auto tier = OpenSsd(dir.path());
  const TestChunk c = Chunk(5);
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  {
    auto w = tier->BeginPut(c.key, c.encoded->header, c.encoded->TotalBytes());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddLayer(c.encoded->layers[0]).ok());
    EXPECT_EQ((*tier->GetHeader(c.key))->view(), c.encoded->header);
  }
  for (uint32_t l = 0; l < c.header.num_layers; ++l) {
    EXPECT_EQ((*tier->GetLayer(c.key, l))->view(), c.encoded->layers[l]);
  }
}

// Write-through over RAM + SSD: a record that fails verification fails the
// write, and destroying the writer aborts it in both tiers.
TEST(SsdStream, TieredBadRecordCommitsNothingAnywhere) {
  TempDir dir;
  RamTierOptions ro;
  ro.capacity_bytes = uint64_t{64} << 20;
  auto ram = CreateRamTier(ro);
  ASSERT_TRUE(ram.ok());
  std::shared_ptr<Tier> ssd = OpenSsd(dir.path());
  auto store = TieredStore::Create({}, {std::shared_ptr<Tier>(std::move(*ram)), ssd});
  ASSERT_TRUE(store.ok());
  const TestChunk c = Chunk(6);
  {
    auto w = (*store)->BeginPut(c.key, c.encoded->header, c.encoded->TotalBytes());
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->AddLayer(c.encoded->layers[0]).ok());
    std::string bad = c.encoded->layers[1];
    bad[bad.size() / 2] ^= 0x40;
    EXPECT_FALSE((*w)->AddLayer(bad).ok());
    EXPECT_FALSE((*w)->AddLayer(c.encoded->layers[2]).ok());  // the write stays failed
  }
  EXPECT_FALSE((*store)->Contains(c.key));
  ExpectAbsent(*ssd, c);
  EXPECT_EQ(ssd->Stats().bytes_used, 0u);
  // A good stream lands in both tiers.
  auto w = (*store)->BeginPut(c.key, c.encoded->header, c.encoded->TotalBytes());
  ASSERT_TRUE(w.ok());
  for (const auto& rec : c.encoded->layers) ASSERT_TRUE((*w)->AddLayer(rec).ok());
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_TRUE(*(*store)->tier(0).Contains(c.key));
  EXPECT_TRUE(*ssd->Contains(c.key));
  auto got = (*store)->Get(c.key, c.header.fingerprint);
  ASSERT_TRUE(got.ok() && got->has_value());
  // A header for another key is refused before anything is written.
  EXPECT_FALSE((*store)->BeginPut(Chunk(7).key, c.encoded->header, c.encoded->TotalBytes()).ok());
}

}  // namespace
}  // namespace ragkv::kvstore
