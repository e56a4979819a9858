// KVCachePool: kept memory is handed out again, zeroed; the idle cap holds;
// bad shapes keep KVCache::Create's errors; concurrent use is safe (tsan).
#include "model/kv_cache_pool.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ragkv::model {
namespace {

ModelConfig SmallConfig() {
  ModelConfig c;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.hidden_dim = 128;
  c.vocab_size = 32;
  c.max_seq_len = 256;
  EXPECT_TRUE(c.Validate().ok());
  return c;
}


void Fill(KVCache* kv, float x) {
  for (int l = 0; l < kv->n_layers(); ++l) {
    const size_t n = size_t(kv->kv_heads()) * kv->capacity_tokens() * kv->head_dim();
    std::fill(kv->k_data(l), kv->k_data(l) + n, x);
    std::fill(kv->v_data(l), kv->v_data(l) + n, x);
  }
}

bool AllZero(KVCache& kv) {
  for (int l = 0; l < kv.n_layers(); ++l) {
    const size_t n = size_t(kv.kv_heads()) * kv.capacity_tokens() * kv.head_dim();
    for (size_t i = 0; i < n; ++i) {
      if (kv.k_data(l)[i] != 0.0f || kv.v_data(l)[i] != 0.0f) return false;
    }
  }
  return true;
}

// KVCacheBytes against a naive count of the planes of a real cache: every
// layer's K and V, [kv_heads][capacity][head_dim] each, contiguous.
TEST(KVCacheBytes, MatchesTheCacheItDescribes) {
  for (int layers : {1, 3}) {
    for (int kv_heads : {1, 2, 4}) {
      ModelConfig c = SmallConfig();
      c.n_layers = layers;
      c.n_kv_heads = kv_heads;
      ASSERT_TRUE(c.Validate().ok());
      for (int64_t tokens : {1, 7, 256}) {
        auto kv = KVCache::Create(c, tokens);
        ASSERT_TRUE(kv.ok()) << kv.status();
        size_t naive = 0;
        for (int l = 0; l < kv->n_layers(); ++l) {
          for (int plane = 0; plane < 2; ++plane) {
            for (int h = 0; h < kv->kv_heads(); ++h) {
              for (int64_t t = 0; t < kv->capacity_tokens(); ++t) naive += kv->head_dim();
            }
          }
        }
        EXPECT_EQ(KVCacheFloats(c, tokens), naive);
        EXPECT_EQ(KVCacheBytes(c, tokens), naive * sizeof(float));
        // The cache's memory spans exactly that many floats.
        const int last = kv->n_layers() - 1;
        EXPECT_EQ(static_cast<size_t>(kv->v_data(last) - kv->k_data(0)) + naive / (2 * layers),
                  naive);
      }
    }
  }
}

TEST(KVCachePool, KeptMemoryComesBackZeroed) {
  const ModelConfig c = SmallConfig();
  KVCachePool pool(1 << 20);
  auto a = pool.Create(c, 100);
  ASSERT_TRUE(a.ok()) << a.status();
  Fill(&*a, 7.0f);
  const float* mem = a->k_data(0);
  pool.Release(std::move(*a));
  EXPECT_EQ(pool.stats().idle_bytes, KVCacheBytes(c, 256));  // rounded up to 256 tokens
  auto b = pool.Create(c, 60);  // smaller: the same memory, zeroed
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->k_data(0), mem);
  EXPECT_EQ(b->capacity_tokens(), 60);
  EXPECT_EQ(b->num_tokens(), 0);
  EXPECT_TRUE(AllZero(*b));
  EXPECT_EQ(pool.stats().idle_bytes, 0u);
  auto d = pool.Create(c, 200);  // nothing kept: allocated
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(AllZero(*d));
  const float* d_mem = d->k_data(0);
  pool.Release(std::move(*d));
  auto e = pool.Create(c, 250);  // a slightly longer prompt fits the rounded buffer
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->k_data(0), d_mem);
  const KVCachePool::Stats st = pool.stats();
  EXPECT_EQ(st.reused, 2u);
  EXPECT_EQ(st.allocated, 2u);
}

TEST(KVCachePool, TheSmallestBufferThatFitsIsChosen) {
  const ModelConfig c = SmallConfig();
  KVCachePool pool(1 << 20);
  auto big = pool.Create(c, 600), mid = pool.Create(c, 100);
  ASSERT_TRUE(big.ok() && mid.ok());
  const float* mid_mem = mid->k_data(0);
  pool.Release(std::move(*big));
  pool.Release(std::move(*mid));
  auto x = pool.Create(c, 90);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->k_data(0), mid_mem);
  EXPECT_EQ(pool.stats().idle_bytes, KVCacheBytes(c, 768));
}

TEST(KVCachePool, IdleMemoryStaysUnderTheCapDroppingSmallBuffersFirst) {
  const ModelConfig c = SmallConfig();
  KVCachePool pool(KVCacheBytes(c, 1024));
  auto a = pool.Create(c, 600), b = pool.Create(c, 40), d = pool.Create(c, 30);
  ASSERT_TRUE(a.ok() && b.ok() && d.ok());  // 768 + 256 + 256 tokens' worth
  pool.Release(std::move(*b));
  pool.Release(std::move(*d));
  pool.Release(std::move(*a));  // over the cap: one 256 goes, the 768 stays
  EXPECT_EQ(pool.stats().idle_bytes, KVCacheBytes(c, 1024));
  KVCachePool none(0);  // keeps nothing
  auto e = none.Create(c, 10);
  ASSERT_TRUE(e.ok());
  none.Release(std::move(*e));
  EXPECT_EQ(none.stats().idle_bytes, 0u);
  KVCachePool small(KVCacheBytes(c, 10));  // a buffer above the cap is dropped
  auto f = small.Create(c, 20);
  ASSERT_TRUE(f.ok());
  small.Release(std::move(*f));
  EXPECT_EQ(small.stats().idle_bytes, 0u);
}

TEST(KVCachePool, BadShapesAreRefusedAndKeepTheMemory) {
  const ModelConfig c = SmallConfig();
  KVCachePool pool(1 << 20);
  auto a = pool.Create(c, 50);
  ASSERT_TRUE(a.ok());
  pool.Release(std::move(*a));
  EXPECT_EQ(pool.Create(c, 0).status().code(), absl::StatusCode::kInvalidArgument);
  ModelConfig bad = c;
  bad.n_heads = 3;  // not a multiple of n_kv_heads
  EXPECT_FALSE(pool.Create(bad, 10).ok());
  EXPECT_EQ(pool.stats().idle_bytes, KVCacheBytes(c, 256));
}

TEST(KVCachePool, ConcurrentCreateAndRelease) {
  const ModelConfig c = SmallConfig();
  KVCachePool pool(KVCacheBytes(c, 300));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, &c, t] {
      for (int i = 0; i < 50; ++i) {
        auto kv = pool.Create(c, 16 + (i * 7 + t) % 64);
        ASSERT_TRUE(kv.ok());
        ASSERT_TRUE(AllZero(*kv));
        Fill(&*kv, static_cast<float>(t + 1));
        pool.Release(std::move(*kv));
      }
    });
  }
  for (auto& th : threads) th.join();
  const KVCachePool::Stats st = pool.stats();
  EXPECT_EQ(st.reused + st.allocated, 200u);
  EXPECT_GT(st.reused, 0u);
  EXPECT_LE(st.idle_bytes, KVCacheBytes(c, 300));
}

}  // namespace
}  // namespace ragkv::model
