// test_util.h: helpers shared by the kvstore tests.
#ifndef RAGKV_TESTS_KVSTORE_TEST_UTIL_H_
#define RAGKV_TESTS_KVSTORE_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tensor.h"
#include "kvstore/chunk_key.h"
#include "kvstore/kv_chunk.h"
#include "kvstore/tier.h"

namespace ragkv::kvstore::testing {

inline Fingerprint TestFingerprint(uint8_t seed) {
  Fingerprint fp{};
  for (size_t i = 0; i < fp.size(); ++i) fp[i] = static_cast<uint8_t>(seed * 31 + i * 7 + 1);
  return fp;
}

inline std::vector<int32_t> TestTokens(uint32_t n, uint32_t seed) {
  std::vector<int32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed * 7919u + i * 104729u) % 32000u);
  return t;
}

// Chunk: an encoded chunk plus the f32 K/V it was encoded from.
struct TestChunk {
  KvChunkHeader header;
  ChunkKey key;
  std::shared_ptr<const EncodedChunk> encoded;
  std::vector<std::vector<float>> k, v;  // per layer, [H][T][D]
};

struct ChunkSpec {
  uint32_t tokens = 16;
  uint32_t layers = 3;
  uint32_t kv_heads = 2;
  uint32_t head_dim = 8;
  kernels::DType dtype = kernels::DType::kF32;
  Codec codec = Codec::kRaw;
  Compression compression = Compression::kNone;
  uint8_t fp_seed = 1;
  uint32_t token_seed = 1;
};

// MakeChunk: random N(0,1) K/V (deterministic per seeds), encoded per spec.
inline TestChunk MakeChunk(const ChunkSpec& spec) {
  TestChunk c;
  c.header.fingerprint = TestFingerprint(spec.fp_seed);
  c.header.tokens = TestTokens(spec.tokens, spec.token_seed);
  c.header.key = ChunkKey::Of(c.header.fingerprint, c.header.tokens);
  c.header.dtype = spec.dtype;
  c.header.codec = spec.codec;
  c.header.compression = spec.compression;
  c.header.num_layers = spec.layers;
  c.header.num_kv_heads = spec.kv_heads;
  c.header.head_dim = spec.head_dim;
  c.key = c.header.key;
  std::mt19937 rng(spec.token_seed * 1000 + spec.fp_seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  const int64_t n = int64_t{spec.kv_heads} * spec.tokens * spec.head_dim;
  std::vector<kernels::TensorView> kv, vv;
  for (uint32_t l = 0; l < spec.layers; ++l) {
    c.k.emplace_back(n);
    c.v.emplace_back(n);
    for (auto& x : c.k.back()) x = dist(rng);
    for (auto& x : c.v.back()) x = dist(rng);
  }
  for (uint32_t l = 0; l < spec.layers; ++l) {
    kv.push_back(kernels::TensorView::Contiguous(c.k[l].data(), kernels::DType::kF32,
                                                 {spec.kv_heads, spec.tokens, spec.head_dim}));
    vv.push_back(kernels::TensorView::Contiguous(c.v[l].data(), kernels::DType::kF32,
                                                 {spec.kv_heads, spec.tokens, spec.head_dim}));
  }
  auto enc = EncodeChunk(&c.header, kv, vv);
  EXPECT_TRUE(enc.ok()) << enc.status();
  c.encoded = std::make_shared<const EncodedChunk>(std::move(*enc));
  return c;
}

// TempDir: a fresh directory removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ragkv_kvstore_XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// ReadLayers: layers [first, first + count) of `key` read through
// Tier::ReadChunk (which also reads, and counts, the header). Element i is
// std::nullopt when that layer is absent, or every layer when the header
// is; a tier failure is its Status.
inline absl::StatusOr<std::vector<Tier::Blob>> ReadLayers(Tier& tier, const ChunkKey& key,
                                                          uint32_t first, uint32_t count,
                                                          ReadMode mode = ReadMode::kWhole) {
  struct Collect final : ChunkReader {
    uint32_t first = 0, count = 0;
    std::vector<Tier::Blob> out;
    LayerRange OnHeader(PinnedBytes) override { return LayerRange{first, count}; }
    bool OnLayer(uint32_t layer, Tier::Blob blob) override {
      out[layer - first] = std::move(blob);
      return true;
    }
  } c;
  c.first = first;
  c.count = count;
  c.out.resize(count);
  absl::Status s = tier.ReadChunk(key, c, mode);
  if (!s.ok()) return s;
  return std::move(c.out);
}

// ReadLayer: layer `layer` of `key` (ReadLayers of one).
inline absl::StatusOr<Tier::Blob> ReadLayer(Tier& tier, const ChunkKey& key, uint32_t layer) {
  absl::StatusOr<std::vector<Tier::Blob>> r = ReadLayers(tier, key, layer, 1);
  if (!r.ok()) return r.status();
  return std::move((*r)[0]);
}

}  // namespace ragkv::kvstore::testing

#endif  // RAGKV_TESTS_KVSTORE_TEST_UTIL_H_
