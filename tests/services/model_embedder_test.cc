// ModelEmbedder (issue 5, embedder c) on the real stories260K checkpoint.
#include "services/model_embedder.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "retrieval/retriever.h"
#include "tests/support/require.h"
#include "tests/support/source_dir.h"

namespace ragkv::services {
namespace {

std::string ModelsDir() {
  const char* env = std::getenv("RAGKV_TEST_MODELS");
  return env != nullptr ? env : std::string(RAGKV_SOURCE_DIR) + "/../shared/models";
}

class ModelEmbedderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string bin = ModelsDir() + "/stories260K.bin";
    RAGKV_REQUIRE_OR_SKIP(std::filesystem::exists(bin)) << "no model at " << bin << " (RAGKV_TEST_MODELS)";
    auto m = model::LoadModel(bin);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    auto t = model::LoadTokenizer(ModelsDir() + "/tok512.bin");
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = std::move(*t);
    auto e = ModelEmbedder::Create(model_.get(), tok_.get());
    ASSERT_TRUE(e.ok()) << e.status();
    emb_ = std::move(*e);
  }
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<model::Tokenizer> tok_;
  std::unique_ptr<ModelEmbedder> emb_;
};

double Dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

TEST_F(ModelEmbedderTest, UnitVectorsOfHiddenSizeDeterministicAndDistinct) {
  const int d = emb_->dim();
  ASSERT_EQ(d, model_->config().dim);
  std::vector<std::string> texts = {"Lily went to the park with her dog.",
                                    "The sun was hot and the sea was blue."};
  auto docs = emb_->EmbedDocuments(texts);
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 2u * d);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(Dot(docs->data() + i * d, docs->data() + i * d, d), 1.0, 1e-5);
  // Documents and queries share one map, and it is deterministic.
  auto q = emb_->EmbedQuery(texts[0], nullptr);
  ASSERT_TRUE(q.ok());
  for (int j = 0; j < d; ++j) EXPECT_EQ((*q)[j], (*docs)[j]);
  EXPECT_LT(Dot(docs->data(), docs->data() + d, d), 0.9999);
  EXPECT_EQ(emb_->Fingerprint(), "model:" + model_->fingerprint_hex());
  EXPECT_EQ(emb_->EmbedQuery("", nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ModelEmbedder::Create(nullptr, tok_.get()).ok());
}

TEST_F(ModelEmbedderTest, DrivesARetrieverEndToEnd) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("ragkv-model-emb-" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  {
    retrieval::RetrieverOptions o;
    o.dir = dir;
    o.sync_writes = false;
    o.embedder = std::shared_ptr<const retrieval::Embedder>(std::move(emb_));
    auto r = retrieval::Retriever::Create(o);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<retrieval::Document> docs = {
        {"a", "", "Once upon a time there was a little girl named Lily who loved flowers."},
        {"b", "", "Tom had a big red ball. He kicked it high into the sky every day."},
        {"c", "", "The old cat slept in the warm sun by the window all afternoon."}};
    ASSERT_TRUE((*r)->Ingest(docs).ok());
    // A document's own text retrieves it first.
    for (const auto& d : docs) {
      retrieval::SearchOptions so;
      so.k = 3;
      auto res = (*r)->Search(d.text, so);
      ASSERT_TRUE(res.ok()) << res.status();
      ASSERT_FALSE(res->empty());
      EXPECT_EQ((*res)[0].doc_id, d.id);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ragkv::services
