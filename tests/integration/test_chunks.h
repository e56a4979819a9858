// test_chunks.h: synthetic KV chunks for the fault-injection integration
// tests (no model needed: a fixed test fingerprint, f16 layers of arbitrary
// bits, content a pure function of an integer id) and a bit-exact compare.
#ifndef RAGKV_TESTS_INTEGRATION_TEST_CHUNKS_H_
#define RAGKV_TESTS_INTEGRATION_TEST_CHUNKS_H_

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "connector/client.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_key.h"

namespace ragkv::testing {

inline constexpr int kLayers = 4;
inline constexpr int kHeads = 2;
inline constexpr int kHeadDim = 32;

inline kvstore::Fingerprint TestFingerprint() {
  kvstore::Fingerprint fp{};
  for (size_t i = 0; i < fp.size(); ++i) fp[i] = static_cast<uint8_t>(0xA0 + i);
  return fp;
}

// TestFingerprintBytes: the 16 bytes as they travel in model_fingerprint.
inline std::string TestFingerprintBytes() {
  const kvstore::Fingerprint fp = TestFingerprint();
  return std::string(fp.begin(), fp.end());
}

// MakeTestChunk: chunk `id` of the storm: 8..71 tokens, f16 (arbitrary bits),
// content a pure function of `id`, key = ChunkKey::Of(fp, tokens).
inline StoredChunk MakeTestChunk(int id) {
  std::mt19937_64 rng(0x5EED0000u + static_cast<uint64_t>(id));
  const int tokens = 8 + static_cast<int>(rng() % 64);
  StoredChunk c;
  std::vector<int32_t> ids(tokens);
  ids[0] = id;  // distinct chunks have distinct keys
  for (int t = 1; t < tokens; ++t) ids[t] = static_cast<int32_t>(rng() % 512);
  const kvstore::Fingerprint fp = TestFingerprint();
  c.header.set_key(std::string(kvstore::ChunkKey::Of(fp, ids).AsBytes()));
  c.header.mutable_token_ids()->Assign(ids.begin(), ids.end());
  v1::KVLayout* l = c.header.mutable_layout();
  l->set_num_layers(kLayers);
  l->set_num_kv_heads(kHeads);
  l->set_head_dim(kHeadDim);
  l->set_num_tokens(tokens);
  l->set_dtype(v1::DTYPE_F16);
  l->set_model_fingerprint(TestFingerprintBytes());
  const size_t bytes = size_t{kHeads} * tokens * kHeadDim * 2;
  for (int i = 0; i < kLayers; ++i) {
    v1::LayerKV kv;
    kv.set_layer(i);
    std::string k(bytes, '\0'), v(bytes, '\0');
    for (char& ch : k) ch = static_cast<char>(rng() & 0xBF);  // finite f16 (exponent never all ones)
    for (char& ch : v) ch = static_cast<char>(rng() & 0xBF);
    kv.set_k(std::move(k));
    kv.set_v(std::move(v));
    c.layers.push_back(std::move(kv));
  }
  return c;
}

// SameChunk: header fields and every layer's bytes equal.
inline ::testing::AssertionResult SameChunk(const StoredChunk& want, const StoredChunk& got) {
  if (got.header.key() != want.header.key()) return ::testing::AssertionFailure() << "key";
  const v1::KVLayout &a = want.header.layout(), &b = got.header.layout();
  if (a.num_layers() != b.num_layers() || a.num_kv_heads() != b.num_kv_heads() ||
      a.head_dim() != b.head_dim() || a.num_tokens() != b.num_tokens() || a.dtype() != b.dtype() ||
      a.model_fingerprint() != b.model_fingerprint()) {
    return ::testing::AssertionFailure() << "layout " << b.ShortDebugString();
  }
  if (!std::equal(want.header.token_ids().begin(), want.header.token_ids().end(),
                  got.header.token_ids().begin(), got.header.token_ids().end())) {
    return ::testing::AssertionFailure() << "token ids";
  }
  if (got.layers.size() != want.layers.size()) {
    return ::testing::AssertionFailure() << got.layers.size() << " layers";
  }
  for (size_t i = 0; i < want.layers.size(); ++i) {
    if (got.layers[i].layer() != i || got.layers[i].k() != want.layers[i].k() ||
        got.layers[i].v() != want.layers[i].v()) {
      return ::testing::AssertionFailure() << "layer " << i << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_INTEGRATION_TEST_CHUNKS_H_
