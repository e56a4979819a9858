// VectorIndex: exactness vs brute force, ANN recall, removal, filters,
// persistence, corruption and bad input.
#include "retrieval/vector_index.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/retrieval/test_util.h"

namespace ragkv::retrieval {
namespace {

using testing::RandomUnitVectors;
using testing::TempDir;

// Brute-force top-k (score = IP or -L2^2), ties by smaller id.
std::vector<SearchHit> BruteForce(const std::vector<float>& base, const std::vector<int64_t>& ids,
                                  const float* q, int dim, int k, Metric metric,
                                  const absl::flat_hash_set<int64_t>* allowed = nullptr) {
  std::vector<SearchHit> all;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (allowed != nullptr && !allowed->contains(ids[i])) continue;
    double s = 0;
    for (int j = 0; j < dim; ++j) {
      const double a = base[i * dim + j], b = q[j];
      s += metric == Metric::kInnerProduct ? a * b : -(a - b) * (a - b);
    }
    all.push_back(SearchHit{ids[i], static_cast<float>(s)});
  }
  std::sort(all.begin(), all.end(), [](const SearchHit& a, const SearchHit& b) {
    return a.score != b.score ? a.score > b.score : a.id < b.id;
  });
  if (static_cast<int>(all.size()) > k) all.resize(k);
  return all;
}

std::vector<int64_t> Ids(int n, int64_t offset = 100) {
  std::vector<int64_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = offset + 3 * i;  // sparse, non-positional ids
  return ids;
}

std::unique_ptr<VectorIndex> MakeIndex(const std::string& factory, int dim, Metric metric = Metric::kInnerProduct,
                                       int ef = 64, int nprobe = 16) {
  VectorIndexOptions o;
  o.factory = factory;
  o.dim = dim;
  o.metric = metric;
  o.hnsw_ef_search = ef;
  o.ivf_nprobe = nprobe;
  auto r = VectorIndex::Create(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return std::move(r).value();
}

double RecallAt10(VectorIndex& index, const std::vector<float>& base, const std::vector<int64_t>& ids,
                  const std::vector<float>& queries, int dim) {
  const int nq = static_cast<int>(queries.size() / dim);
  auto res = index.Search(queries, 10).value();
  int found = 0;
  for (int q = 0; q < nq; ++q) {
    auto exact = BruteForce(base, ids, &queries[q * dim], dim, 10, index.options().metric);
    for (const SearchHit& e : exact) {
      for (const SearchHit& h : res[q]) found += h.id == e.id;
    }
  }
  return found / (10.0 * nq);
}

TEST(VectorIndex, FlatIsExactForBothMetrics) {
  const int dim = 32, n = 3000, nq = 40;
  auto base = RandomUnitVectors(n, dim, 1);
  auto queries = RandomUnitVectors(nq, dim, 2);
  const auto ids = Ids(n);
  for (Metric metric : {Metric::kInnerProduct, Metric::kL2}) {
    auto index = MakeIndex("Flat", dim, metric);
    ASSERT_TRUE(index->Add(ids, base).ok());
    auto res = index->Search(queries, 10).value();
    ASSERT_EQ(res.size(), static_cast<size_t>(nq));
    for (int q = 0; q < nq; ++q) {
      auto exact = BruteForce(base, ids, &queries[q * dim], dim, 10, metric);
      ASSERT_EQ(res[q].size(), 10u);
      for (int j = 0; j < 10; ++j) {
        EXPECT_EQ(res[q][j].id, exact[j].id) << "query " << q << " rank " << j;
        EXPECT_NEAR(res[q][j].score, exact[j].score, 1e-4);
      }
    }
  }
}

// 20k random unit vectors (N(0,I) normalized), dim 32, 100 queries, k = 10.
// HNSW16 (efConstruction 40 = FAISS default), efSearch 128: recall@10 >= 0.95.
// IVF32,Flat nprobe 24: recall@10 >= 0.95 (random data has no cluster
// structure, so IVF needs a large probed share: nprobe 16 measured 0.939).
// IVF-PQ is checked on 5k vectors below (PQ training on 20k is too slow for
// the unit-test budget on a loaded 2-core machine).
class AnnRecall : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

TEST_P(AnnRecall, AtLeast95PercentOfExact) {
  const auto& [factory, ef, nprobe] = GetParam();
  const int dim = 32, n = 20000, nq = 100;
  auto base = RandomUnitVectors(n, dim, 3);
  auto queries = RandomUnitVectors(nq, dim, 4);
  const auto ids = Ids(n);
  auto index = MakeIndex(factory, dim, Metric::kInnerProduct, ef, nprobe);
  if (!index->is_trained()) {
    ASSERT_TRUE(index->Train(base).ok());
  }
  ASSERT_TRUE(index->Add(ids, base).ok());
  const double recall = RecallAt10(*index, base, ids, queries, dim);
  RecordProperty("recall_at_10", std::to_string(recall));
  EXPECT_GE(recall, 0.95) << factory;
}

INSTANTIATE_TEST_SUITE_P(Factories, AnnRecall,
                         ::testing::Values(std::make_tuple("HNSW16", 128, 1),
                                           std::make_tuple("IVF32,Flat", 1, 24)));

// IVF-PQ with exact re-ranking: 5k random unit vectors, dim 32, "IVF16,PQ8np,RFlat"
// (8 x 8-bit codes, "np": no polysemous training, which takes minutes),
// nprobe 14, k_factor 8: recall@10 >= 0.95.
TEST(VectorIndex, IvfPqRefinedRecall) {
  const int dim = 32, n = 5000, nq = 100;
  auto base = RandomUnitVectors(n, dim, 30);
  auto queries = RandomUnitVectors(nq, dim, 31);
  const auto ids = Ids(n);
  auto index = MakeIndex("IVF16,PQ8np,RFlat", dim, Metric::kInnerProduct, 1, 14);
  ASSERT_TRUE(index->Train(base).ok());
  ASSERT_TRUE(index->Add(ids, base).ok());
  const double recall = RecallAt10(*index, base, ids, queries, dim);
  RecordProperty("recall_at_10", std::to_string(recall));
  EXPECT_GE(recall, 0.95);
}

class RemoveAndPersist : public ::testing::TestWithParam<std::string> {};

TEST_P(RemoveAndPersist, DeletedNeverReturnedAndSaveLoadIdentical) {
  const std::string factory = GetParam();
  const int dim = 16, n = 2000, nq = 30;
  auto base = RandomUnitVectors(n, dim, 5);
  auto queries = RandomUnitVectors(nq, dim, 6);
  const auto ids = Ids(n);
  auto index = MakeIndex(factory, dim, Metric::kInnerProduct, 64, 8);
  if (!index->is_trained()) {
    ASSERT_TRUE(index->Train(base).ok());
  }
  ASSERT_TRUE(index->Add(ids, base).ok());

  // Remove every id that is in some query's top-5 plus a stripe.
  absl::flat_hash_set<int64_t> removed;
  auto before = index->Search(queries, 5).value();
  for (const auto& hits : before) {
    for (const SearchHit& h : hits) removed.insert(h.id);
  }
  for (int i = 0; i < n; i += 7) removed.insert(ids[i]);
  std::vector<int64_t> to_remove(removed.begin(), removed.end());
  to_remove.push_back(999999999);  // absent: ignored
  EXPECT_EQ(index->Remove(to_remove).value(), static_cast<int64_t>(removed.size()));
  EXPECT_EQ(index->size(), n - static_cast<int64_t>(removed.size()));
  for (int64_t id : removed) EXPECT_FALSE(index->Contains(id));
  auto after = index->Search(queries, 50).value();
  for (const auto& hits : after) {
    EXPECT_EQ(hits.size(), 50u);
    for (const SearchHit& h : hits) EXPECT_FALSE(removed.contains(h.id)) << h.id;
  }

  TempDir dir;
  const std::string path = dir.path() + "/index.rkvidx";
  ASSERT_TRUE(index->Save(path).ok());
  VectorIndexOptions runtime = index->options();
  auto loaded = VectorIndex::Load(path, runtime);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->size(), index->size());
  EXPECT_EQ((*loaded)->tombstones(), index->tombstones());
  auto again = (*loaded)->Search(queries, 50).value();
  ASSERT_EQ(again.size(), after.size());
  for (size_t q = 0; q < after.size(); ++q) {
    ASSERT_EQ(again[q].size(), after[q].size());
    for (size_t j = 0; j < after[q].size(); ++j) {
      EXPECT_EQ(again[q][j].id, after[q][j].id);
      EXPECT_EQ(again[q][j].score, after[q][j].score);
    }
  }
  // Adding after load keeps working (ids stay unique).
  auto extra = RandomUnitVectors(1, dim, 7);
  std::vector<int64_t> extra_id{7};
  EXPECT_TRUE((*loaded)->Add(extra_id, extra).ok());
  EXPECT_EQ((*loaded)->Add(extra_id, extra).code(), absl::StatusCode::kAlreadyExists);
  auto top = (*loaded)->Search(extra, 1).value();
  EXPECT_EQ(top[0][0].id, 7);
}

INSTANTIATE_TEST_SUITE_P(Factories, RemoveAndPersist, ::testing::Values("Flat", "HNSW16", "IVF16,Flat"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), ',', '_');
                           return s;
                         });

TEST(VectorIndex, FilterIsExactForFlat) {
  const int dim = 16, n = 1000;
  auto base = RandomUnitVectors(n, dim, 8);
  auto queries = RandomUnitVectors(5, dim, 9);
  const auto ids = Ids(n);
  auto index = MakeIndex("Flat", dim);
  ASSERT_TRUE(index->Add(ids, base).ok());
  absl::flat_hash_set<int64_t> allowed;
  for (int i = 0; i < n; i += 97) allowed.insert(ids[i]);  // 11 ids, rarely in an unfiltered top-k
  auto res = index->Search(queries, 5, &allowed).value();
  for (int q = 0; q < 5; ++q) {
    auto exact = BruteForce(base, ids, &queries[q * dim], dim, 5, Metric::kInnerProduct, &allowed);
    ASSERT_EQ(res[q].size(), exact.size());
    for (size_t j = 0; j < exact.size(); ++j) EXPECT_EQ(res[q][j].id, exact[j].id);
  }
  absl::flat_hash_set<int64_t> none;
  EXPECT_TRUE(index->Search(queries, 5, &none).value()[0].empty());
}

TEST(VectorIndex, BadInput) {
  VectorIndexOptions o;
  o.dim = 8;
  o.factory = "NoSuchIndex42";
  EXPECT_EQ(VectorIndex::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.factory = "IDMap,Flat";
  EXPECT_EQ(VectorIndex::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.factory = "Flat";
  o.dim = 0;
  EXPECT_EQ(VectorIndex::Create(o).status().code(), absl::StatusCode::kInvalidArgument);

  auto index = MakeIndex("Flat", 8);
  auto v = RandomUnitVectors(2, 8, 10);
  std::vector<int64_t> two{1, 2};
  EXPECT_EQ(index->Add(two, absl::MakeConstSpan(v).subspan(0, 15)).code(), absl::StatusCode::kInvalidArgument);
  std::vector<int64_t> dup{1, 1};
  EXPECT_EQ(index->Add(dup, v).code(), absl::StatusCode::kAlreadyExists);
  std::vector<int64_t> neg{-1, 2};
  EXPECT_EQ(index->Add(neg, v).code(), absl::StatusCode::kInvalidArgument);
  auto nan = v;
  nan[3] = NAN;
  EXPECT_EQ(index->Add(two, nan).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(index->size(), 0);
  ASSERT_TRUE(index->Add(two, v).ok());
  EXPECT_EQ(index->Add(two, v).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(index->size(), 2);

  auto q = RandomUnitVectors(1, 8, 11);
  EXPECT_EQ(index->Search(q, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(index->Search(q, -3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(index->Search(q, VectorIndex::kMaxK + 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(index->Search(absl::MakeConstSpan(q).subspan(0, 7), 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto qnan = q;
  qnan[0] = INFINITY;
  EXPECT_EQ(index->Search(qnan, 1).status().code(), absl::StatusCode::kInvalidArgument);
  // k larger than the index: all vectors.
  EXPECT_EQ(index->Search(q, 1000).value()[0].size(), 2u);

  auto ivf = MakeIndex("IVF4,Flat", 8);
  EXPECT_FALSE(ivf->is_trained());
  EXPECT_EQ(ivf->Add(two, v).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(VectorIndex, CorruptFilesAreDataLoss) {
  TempDir dir;
  const std::string path = dir.path() + "/i.rkvidx";
  auto index = MakeIndex("Flat", 8);
  auto v = RandomUnitVectors(50, 8, 12);
  ASSERT_TRUE(index->Add(Ids(50), v).ok());
  ASSERT_TRUE(index->Save(path).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  VectorIndexOptions runtime;
  runtime.factory = "";
  runtime.dim = 0;
  ASSERT_TRUE(VectorIndex::Load(path, runtime).ok());
  auto write = [&](const std::string& b) { std::ofstream(path, std::ios::binary | std::ios::trunc) << b; };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x5A;
  write(flipped);
  EXPECT_EQ(VectorIndex::Load(path, runtime).status().code(), absl::StatusCode::kDataLoss);
  write(bytes.substr(0, bytes.size() - 20));
  EXPECT_EQ(VectorIndex::Load(path, runtime).status().code(), absl::StatusCode::kDataLoss);
  write("garbage");
  EXPECT_EQ(VectorIndex::Load(path, runtime).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(VectorIndex::Load(dir.path() + "/missing", runtime).status().code(), absl::StatusCode::kNotFound);
  write(bytes);
  runtime.dim = 9;
  EXPECT_EQ(VectorIndex::Load(path, runtime).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(VectorIndex, ConcurrentSearchesWithWriter) {
  const int dim = 16;
  auto index = MakeIndex("HNSW16", dim);
  auto base = RandomUnitVectors(3000, dim, 13);
  const auto ids = Ids(3000);
  ASSERT_TRUE(index->Add(absl::MakeConstSpan(ids).subspan(0, 1000),
                         absl::MakeConstSpan(base).subspan(0, 1000 * dim)).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      auto q = RandomUnitVectors(1, dim, 100 + t);
      while (!stop.load()) {
        auto r = index->Search(q, 10);
        if (!r.ok() || r->at(0).empty()) ++errors;
      }
    });
  }
  for (int b = 1; b < 3; ++b) {
    ASSERT_TRUE(index->Add(absl::MakeConstSpan(ids).subspan(b * 1000, 1000),
                           absl::MakeConstSpan(base).subspan(b * 1000 * dim, 1000 * dim)).ok());
    ASSERT_TRUE(index->Remove(absl::MakeConstSpan(ids).subspan((b - 1) * 1000, 100)).ok());
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(index->size(), 3000 - 200);
}

}  // namespace
}  // namespace ragkv::retrieval
