#include "kvstore/chunk_key.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "kernels/cpu.h"
#include "tests/kvstore/test_util.h"
#define XXH_INLINE_ALL
#include "xxhash.h"

namespace ragkv::kvstore {
namespace {

using testing::TestFingerprint;
using testing::TestTokens;

// Naive reference: build the exact byte string and hash it in one call.
ChunkKey Reference(const std::string& bytes) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(bytes.data(), bytes.size()));
  ChunkKey k;
  std::memcpy(k.bytes.data(), c.digest, 16);
  return k;
}

std::string TokensLe(const std::vector<int32_t>& t) {
  std::string s;
  for (int32_t x : t) {
    uint32_t u = static_cast<uint32_t>(x);
    for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(u >> (8 * i)));
  }
  return s;
}

TEST(ChunkKey, MatchesSpecifiedByteString) {
  const Fingerprint fp = TestFingerprint(3);
  const std::vector<int32_t> toks = {1, -2, 300000, 7, 0};
  std::string bytes(reinterpret_cast<const char*>(fp.data()), 16);
  bytes += TokensLe(toks);
  EXPECT_EQ(ChunkKey::Of(fp, toks), Reference(bytes));
}

TEST(ChunkKey, DeterministicAndSensitive) {
  const Fingerprint fp = TestFingerprint(1);
  auto toks = TestTokens(512, 9);
  EXPECT_EQ(ChunkKey::Of(fp, toks), ChunkKey::Of(fp, toks));
  auto toks2 = toks;
  toks2[100] += 1;
  EXPECT_NE(ChunkKey::Of(fp, toks), ChunkKey::Of(fp, toks2));
  EXPECT_NE(ChunkKey::Of(fp, toks), ChunkKey::Of(TestFingerprint(2), toks));
  // Token order matters, position in a prompt does not enter the key.
  auto rev = toks;
  std::swap(rev[0], rev[1]);
  EXPECT_NE(ChunkKey::Of(fp, toks), ChunkKey::Of(fp, rev));
}

// SaltedFingerprint follows docs/kv_format.md "Salted keys" byte for byte;
// no salt is the fingerprint itself; salts never collide with each other.
TEST(ChunkKey, SaltedFingerprintFollowsSpec) {
  const Fingerprint fp = TestFingerprint(4);
  EXPECT_EQ(SaltedFingerprint(fp, ""), fp);
  const std::string salt = std::string("tenant-\x01") + '\0' + "b";
  std::string bytes = "ragkv/salt/v1";
  bytes.append(reinterpret_cast<const char*>(fp.data()), 16);
  bytes += salt;
  EXPECT_EQ(SaltedFingerprint(fp, salt), Reference(bytes).bytes);
  EXPECT_NE(SaltedFingerprint(fp, "a"), SaltedFingerprint(fp, "b"));
  EXPECT_NE(SaltedFingerprint(fp, "a"), fp);
  EXPECT_NE(SaltedFingerprint(fp, "a"), SaltedFingerprint(TestFingerprint(5), "a"));
  const auto toks = TestTokens(64, 2);
  EXPECT_NE(ChunkKey::Of(SaltedFingerprint(fp, "a"), toks), ChunkKey::Of(fp, toks));
}

TEST(ChunkKey, NeighbourKeyFollowsSpecAndNeverEqualsAPlainKey) {
  const Fingerprint fp = TestFingerprint(6);
  const std::vector<int32_t> bos = {1};
  const auto toks = TestTokens(40, 3);
  const std::vector<ChunkKey> nbr = {ChunkKey::Of(fp, TestTokens(30, 4)),
                                     ChunkKey::Of(fp, TestTokens(20, 5))};
  // The byte string of docs/kv_format.md, built by hand.
  std::string bytes = "ragkv/neighbours/v1";
  bytes.append(reinterpret_cast<const char*>(fp.data()), 16);
  bytes += TokensLe({1}) + TokensLe(bos) + TokensLe({2});
  for (const ChunkKey& k : nbr) bytes += std::string(k.AsBytes());
  bytes += TokensLe(toks);
  const ChunkKey key = NeighbourChunkKey(fp, bos, nbr, toks);
  EXPECT_EQ(key, Reference(bytes));
  // A plain lookup of the same chunk never finds it.
  EXPECT_NE(key, ChunkKey::Of(fp, toks));
  EXPECT_NE(NeighbourChunkKey(fp, {}, {}, toks), ChunkKey::Of(fp, toks));
  // It commits to the context: the lead, the neighbours and their order.
  EXPECT_NE(key, NeighbourChunkKey(fp, {}, nbr, toks));
  EXPECT_NE(key, NeighbourChunkKey(fp, bos, {nbr[1], nbr[0]}, toks));
  EXPECT_NE(key, NeighbourChunkKey(fp, bos, {nbr[0]}, toks));
  EXPECT_NE(key, NeighbourChunkKey(TestFingerprint(7), bos, nbr, toks));
  // A token moved from the lead into the chunk changes the key (lengths hashed).
  std::vector<int32_t> shifted = {bos[0]};
  shifted.insert(shifted.end(), toks.begin(), toks.end());
  EXPECT_NE(key, NeighbourChunkKey(fp, {}, nbr, shifted));
}

TEST(ChunkKey, HexRoundTripAndErrors) {
  const ChunkKey k = ChunkKey::Of(TestFingerprint(5), TestTokens(10, 1));
  const std::string hex = k.ToHex();
  ASSERT_EQ(hex.size(), 32u);
  auto back = ChunkKey::FromHex(hex);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, k);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  EXPECT_EQ(*ChunkKey::FromHex(upper), k);
  EXPECT_EQ(ChunkKey::FromHex("abc").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChunkKey::FromHex(std::string(31, '0') + "g").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ChunkKey::FromBytes(k.AsBytes()), k);
  EXPECT_FALSE(ChunkKey::FromBytes("short").ok());

  const Fingerprint fp = TestFingerprint(8);
  EXPECT_EQ(*FingerprintFromHex(FingerprintToHex(fp)), fp);
  EXPECT_FALSE(FingerprintFromHex("xyz").ok());
}

TEST(ChunkKey, PrefixChainFollowsSpec) {
  const Fingerprint fp = TestFingerprint(4);
  const ChunkKey root = PrefixRootKey(fp);
  EXPECT_EQ(root, Reference(std::string("ragkv/prefix/v1") +
                            std::string(reinterpret_cast<const char*>(fp.data()), 16)));
  const std::vector<int32_t> b0 = TestTokens(16, 1), b1 = TestTokens(16, 2);
  const ChunkKey k0 = PrefixBlockKey(root, b0);
  const ChunkKey k1 = PrefixBlockKey(k0, b1);
  EXPECT_EQ(k0, Reference(std::string("P") + std::string(root.AsBytes()) + TokensLe(b0)));
  EXPECT_EQ(k1, Reference(std::string("P") + std::string(k0.AsBytes()) + TokensLe(b1)));
  // The same block after a different prefix gets a different key.
  EXPECT_NE(PrefixBlockKey(PrefixBlockKey(root, b1), b1), k1);
  // Prefix keys never coincide with the chunk key of the same tokens.
  EXPECT_NE(k0, ChunkKey::Of(fp, b0));
  EXPECT_NE(PrefixRootKey(TestFingerprint(5)), root);
}

TEST(ChunkKey, HashableAndOrdered) {
  absl::flat_hash_set<ChunkKey> set;
  for (uint32_t i = 0; i < 1000; ++i) set.insert(ChunkKey::Of(TestFingerprint(1), TestTokens(4, i)));
  EXPECT_EQ(set.size(), 1000u);
  const ChunkKey a = ChunkKey::Of(TestFingerprint(1), TestTokens(4, 1));
  const ChunkKey b = ChunkKey::Of(TestFingerprint(1), TestTokens(4, 2));
  EXPECT_TRUE((a < b) != (b < a));
  EXPECT_EQ(std::hash<ChunkKey>()(a), std::hash<ChunkKey>()(a));
}

}  // namespace
}  // namespace ragkv::kvstore

namespace {
// The kvstore tests run the kernels single-threaded: the machine is shared,
// and libgomp is not TSan-instrumented (its thread pool shows up as false
// races under RAGKV_SANITIZE=thread).
const bool kKernelsSingleThreaded = [] {
  ragkv::kernels::SetMaxThreads(1);
  return true;
}();
}  // namespace

// ThreadSanitizer suppressions for this binary: RocksDB (its memtable
// skiplist) and libgomp come from uninstrumented Debian shared libraries, so
// TSan cannot see their internal synchronization. Races in ragkv code are
// still reported.
extern "C" const char* __tsan_default_suppressions() {
  return "race:librocksdb.so\n"
         "race:libgomp.so\n";
}
