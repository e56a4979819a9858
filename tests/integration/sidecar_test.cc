// End-to-end tests of the ragkv sidecar over real gRPC on 127.0.0.1 (ephemeral
// ports) with the real stories260K checkpoint, RocksDB, FAISS and the
// connector client.
#include <httplib.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "blend/blender.h"
#include "blend/kv_source.h"
#include "engine/reference_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/convert.h"
#include "kvstore/chunk_key.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

using ::testing::HasSubstr;

class SidecarTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!HaveTestModel()) return;
    dir_ = new TempDir();
    WriteCorpus(dir_->path() + "/corpus", 8);
    services::SidecarOptions o = TestSidecarOptions(dir_->path() + "/data");
    o.corpus_roots = {dir_->path()};  // StartJob reads corpus paths only under it
    // f32 on the wire: EngineCacheBlendAtFullRatioEqualsFullPrefill asserts
    // exactness (f16, the serve default, is tested on its own below).
    o.engine_kv_wire_dtype = "f32";
    auto s = services::Sidecar::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    sidecar_ = s->release();
    client_ = ClientFor(sidecar_->address()).release();
    // Precompute the corpus once for every test.
    auto last = RunPrecomputeJob(client_, dir_->path() + "/corpus", /*workers=*/2);
    ASSERT_TRUE(last.ok()) << last.status();
    ASSERT_EQ(last->state(), v1::JOB_STATE_SUCCEEDED) << last->DebugString();
    first_job_ = new v1::Job(*last);
    model::LoadOptions lo;
    lo.max_seq_len = 512;
    auto m = model::LoadModel(TestModelPath(), lo);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete sidecar_;
    delete model_;
    delete first_job_;
    delete dir_;
  }
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
    ASSERT_NE(sidecar_, nullptr);
  }

  // SomeChunks: up to n chunk infos from a search.
  static std::vector<v1::ChunkInfo> SomeChunks(int n) {
    v1::SearchRequest sr;
    sr.set_text("Lily loved the ball");
    sr.set_k(n);
    sr.set_include_content(true);
    auto r = client_->Search(sr);
    std::vector<v1::ChunkInfo> out;
    if (r.ok()) {
      for (const auto& h : r->hits()) out.push_back(h.chunk());
    }
    return out;
  }

  // ExpectStreamEqualsInProcess: the fused KV in `sink` (f32) equals, bit for
  // bit, an in-process Blender over the same chunks (a fresh precompute: what
  // the store holds) at `ratio`, and its masks cover the recomputed rows.
  static void ExpectStreamEqualsInProcess(const std::vector<v1::ChunkInfo>& chunks,
                                          const std::vector<int32_t>& query, double ratio,
                                          const CollectingKVSink& sink,
                                          std::optional<blend::Selector> selector = {},
                                          int lookahead_layers = 0) {
    std::vector<blend::ChunkKV> kvs;
    std::vector<std::vector<int32_t>> toks;
    for (const auto& c : chunks) toks.emplace_back(c.token_ids().begin(), c.token_ids().end());
    for (const auto& t : toks) {
      auto kv = blend::PrecomputeChunk(*model_, t);
      ASSERT_TRUE(kv.ok());
      kvs.push_back(std::move(*kv));
    }
    std::vector<std::unique_ptr<blend::InMemoryKvSource>> srcs;
    std::vector<blend::BlendSegment> segs;
    for (size_t i = 0; i < kvs.size(); ++i) {
      srcs.push_back(std::make_unique<blend::InMemoryKvSource>(&kvs[i]));
      segs.push_back({blend::SegmentKind::kChunk, absl::MakeConstSpan(toks[i]), srcs.back().get()});
    }
    segs.push_back({blend::SegmentKind::kQuery, absl::MakeConstSpan(query), nullptr});
    auto blender = blend::Blender::Create({model_});
    ASSERT_TRUE(blender.ok());
    blend::BlendOptions bo;
    bo.ratio = ratio;
    if (selector) bo.selector = *selector;
    bo.lookahead_layers = lookahead_layers;
    bo.logits = blend::QueryLogits::kNone;
    auto r = (*blender)->Blend(segs, bo);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(sink.info.num_tokens, r->total_tokens);
    const size_t n = static_cast<size_t>(sink.info.num_kv_heads) * r->total_tokens *
                     sink.info.head_dim;
    std::vector<float> k(n), v(n);
    for (int l = 0; l < sink.info.num_layers; ++l) {
      ASSERT_TRUE(r->cache.ExportLayer(l, 0, r->total_tokens, kernels::DType::kF32, k.data(),
                                       v.data()).ok());
      ASSERT_EQ(sink.k[l].size(), n * 4);
      EXPECT_EQ(0, std::memcmp(sink.k[l].data(), k.data(), n * 4)) << "layer " << l << " ratio " << ratio;
      EXPECT_EQ(0, std::memcmp(sink.v[l].data(), v.data(), n * 4)) << "layer " << l << " ratio " << ratio;
      for (int32_t row : r->recomputed[l]) {
        FusedLayerView view{l, {}, {}, sink.mask[l]};
        EXPECT_TRUE(view.Recomputed(row));
      }
    }
  }

  static TempDir* dir_;
  static services::Sidecar* sidecar_;
  static Client* client_;
  static model::Model* model_;
  static v1::Job* first_job_;
};
TempDir* SidecarTest::dir_ = nullptr;
services::Sidecar* SidecarTest::sidecar_ = nullptr;
Client* SidecarTest::client_ = nullptr;
model::Model* SidecarTest::model_ = nullptr;
v1::Job* SidecarTest::first_job_ = nullptr;

TEST_F(SidecarTest, HealthAndMetrics) {
  EXPECT_TRUE(client_->HealthCheck().ok());
  httplib::Client http("127.0.0.1", sidecar_->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr("ragkv_tier_hits_total{tier=\"ram\"}"));
  EXPECT_THAT(res->body, HasSubstr("ragkv_tier_bytes_written_total{tier=\"ssd\"}"));
}

TEST_F(SidecarTest, PrecomputeStoredEveryChunkAndRerunSkipsAll) {
  EXPECT_GT(first_job_->chunks_total(), 8u);
  EXPECT_EQ(first_job_->chunks_done() + first_job_->chunks_skipped(), first_job_->chunks_total());
  EXPECT_EQ(first_job_->chunks_failed(), 0u);
  v1::StartJobRequest req;
  req.mutable_corpus()->add_paths(dir_->path() + "/corpus");
  auto job = client_->StartJob(req);
  ASSERT_TRUE(job.ok()) << job.status();
  auto last = client_->WatchJob(job->job_id(), [](const v1::Job&) { return true; }, 50);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(last->chunks_skipped(), first_job_->chunks_total());
  EXPECT_EQ(last->chunks_done(), 0u);
  auto got = client_->GetJob(job->job_id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->job_id(), job->job_id());
  auto cancelled = client_->CancelJob(job->job_id());
  EXPECT_TRUE(cancelled.ok());
  // A watch the caller stops: the client's own error names the call's id.
  CallOptions call;
  call.request_id = "watch-7";
  auto stopped = client_->WatchJob(job->job_id(), [](const v1::Job&) { return false; }, 50, call);
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(stopped.status().message(), HasSubstr("[request_id=watch-7]"));
}

TEST_F(SidecarTest, PrecomputeBadInput) {
  v1::StartJobRequest req;
  req.mutable_corpus()->add_paths(dir_->path() + "/does-not-exist");
  auto job = client_->StartJob(req);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(job.status().message(), HasSubstr("does-not-exist"));
  v1::StartJobRequest bad_shard;
  bad_shard.mutable_corpus()->add_paths(dir_->path() + "/corpus");
  bad_shard.mutable_corpus()->set_shard_index(3);
  bad_shard.mutable_corpus()->set_shard_count(2);
  EXPECT_EQ(client_->StartJob(bad_shard).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->GetJob("job-999999").status().code(), absl::StatusCode::kNotFound);
}

// CorpusSpec.neighbours (issue 40): the job's last stage writes every
// catalogue chunk's neighbour-aware record, counted in Job.neighbour_pass;
// the records land in the store; a rerun skips them; k > 16 is refused.
TEST_F(SidecarTest, PrecomputeNeighbourRecordsThroughTheServer) {
  EXPECT_FALSE(first_job_->has_neighbour_pass());  // plain jobs have no pass
  v1::StartJobRequest bad;
  bad.mutable_corpus()->add_paths(dir_->path() + "/corpus");
  bad.mutable_corpus()->set_neighbours(17);
  auto refused = client_->StartJob(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("neighbours 17"));

  auto ssd_entries = [] {
    auto stats = client_->GetStats();
    EXPECT_TRUE(stats.ok() && stats->tiers_size() >= 2);
    return stats.ok() && stats->tiers_size() >= 2 ? stats->tiers(1).entries() : 0;
  };
  const uint64_t before = ssd_entries();
  auto run = [](uint32_t k) -> absl::StatusOr<v1::Job> {
    v1::StartJobRequest req;
    req.mutable_corpus()->add_paths(dir_->path() + "/corpus");
    req.mutable_corpus()->set_neighbours(k);
    auto job = client_->StartJob(req);
    if (!job.ok()) return job.status();
    // Mid-pass, the ETA counts the records left (docs/protocol.md "Job progress").
    return client_->WatchJob(job->job_id(), [](const v1::Job& j) {
      const v1::NeighbourPass& np = j.neighbour_pass();
      const uint64_t n = np.chunks_done() + np.chunks_skipped() + np.chunks_failed();
      if (j.state() == v1::JOB_STATE_RUNNING && n > 0 && n < np.chunks_total()) {
        EXPECT_GT(j.eta_seconds(), 0) << j.DebugString();
      }
      return true;
    }, 50);
  };
  auto first = run(1);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->state(), v1::JOB_STATE_SUCCEEDED) << first->DebugString();
  EXPECT_EQ(first->chunks_skipped(), first_job_->chunks_total());  // plain: all stored
  ASSERT_TRUE(first->has_neighbour_pass());
  const v1::NeighbourPass& p = first->neighbour_pass();
  EXPECT_EQ(p.k(), 1u);
  EXPECT_GE(p.chunks_total(), first_job_->chunks_total());  // duplicates included
  EXPECT_EQ(p.chunks_done() + p.chunks_skipped() + p.chunks_failed(), p.chunks_total());
  EXPECT_EQ(p.chunks_failed(), 0u) << first->DebugString();
  EXPECT_GT(p.chunks_done(), first_job_->chunks_total() / 2);
  EXPECT_GT(p.bytes_stored(), 0u);
  // Each context holds one neighbour chunk: at least one token per record.
  EXPECT_GE(p.context_tokens(), p.chunks_done());
  EXPECT_GE(p.chunk_tokens(), p.chunks_done());
  // The plain chunks were all skipped: the rate is the pass's tokens.
  EXPECT_EQ(first->tokens_done(), 0u);
  EXPECT_GT(first->tokens_per_second(), 0);
  EXPECT_EQ(first->eta_seconds(), 0);
  EXPECT_EQ(ssd_entries(), before + p.chunks_done());  // stored, beside the plain records

  auto again = run(1);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(again->neighbour_pass().chunks_done(), 0u);  // resumable
  EXPECT_EQ(again->neighbour_pass().chunks_skipped(), p.chunks_total());
  EXPECT_EQ(ssd_entries(), before + p.chunks_done());
}

TEST_F(SidecarTest, RetrievalRoundTrip) {
  std::vector<v1::Document> docs(1);
  docs[0].set_doc_id("extra-doc");
  docs[0].set_text("The little boat sailed on the blue sea. The fish swam under the boat.");
  auto ing = client_->IngestDocuments(docs);
  ASSERT_TRUE(ing.ok()) << ing.status();
  EXPECT_EQ(ing->documents(), 1u);
  ASSERT_EQ(ing->ingested_size(), 1);
  ASSERT_GE(ing->ingested(0).chunk_ids_size(), 1);
  const uint64_t cid = ing->ingested(0).chunk_ids(0);

  v1::SearchRequest sr;
  sr.set_text("boat sailed on the sea fish");
  sr.set_k(3);
  auto hits = client_->Search(sr);
  ASSERT_TRUE(hits.ok()) << hits.status();
  ASSERT_GE(hits->hits_size(), 1);
  EXPECT_EQ(hits->hits(0).chunk().doc_id(), "extra-doc");
  EXPECT_EQ(hits->hits(0).chunk().kv_key().size(), 16u);

  auto chunks = client_->GetChunks({cid});
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  EXPECT_THAT(chunks->chunks(0).text(), HasSubstr("boat"));
  EXPECT_GT(chunks->chunks(0).token_ids_size(), 0);

  auto del = client_->DeleteDocument("extra-doc");
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_EQ(client_->DeleteDocument("extra-doc").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->GetChunks({cid}).status().code(), absl::StatusCode::kNotFound);

  v1::SearchRequest bad;
  bad.set_text("x");
  bad.set_k(0);
  EXPECT_EQ(client_->Search(bad).status().code(), absl::StatusCode::kInvalidArgument);
  v1::SearchRequest vec;
  vec.mutable_vector()->add_values(1.0f);
  vec.set_k(2);
  EXPECT_EQ(client_->Search(vec).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<v1::Document> empty(1);
  empty[0].set_doc_id("e");
  EXPECT_EQ(client_->IngestDocuments(empty).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SidecarTest, KVStoreEveryRpc) {
  auto chunks = SomeChunks(2);
  ASSERT_GE(chunks.size(), 1u);
  const std::string key = chunks[0].kv_key();
  // Stored by precompute.
  auto has = client_->Contains({key, std::string(16, 'x')});
  ASSERT_TRUE(has.ok()) << has.status();
  EXPECT_THAT(*has, ::testing::ElementsAre(true, false));
  auto look = client_->Lookup({key});
  ASSERT_TRUE(look.ok()) << look.status();
  EXPECT_TRUE(look->results(0).found());
  EXPECT_EQ(look->results(0).num_tokens(), static_cast<uint32_t>(chunks[0].token_ids_size()));
  auto got = client_->GetChunk(key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->layers.size(), static_cast<size_t>(model_->config().n_layers));
  // Matches a fresh precompute bit for bit (f16 as stored).
  std::vector<int32_t> toks(chunks[0].token_ids().begin(), chunks[0].token_ids().end());
  auto kv = blend::PrecomputeChunk(*model_, toks);
  ASSERT_TRUE(kv.ok()) << kv.status();
  for (int l = 0; l < model_->config().n_layers; ++l) {
    ASSERT_EQ(got->layers[l].k().size(), kv->k[l].size());
    EXPECT_EQ(0, std::memcmp(got->layers[l].k().data(), kv->k[l].data(), kv->k[l].size()));
    EXPECT_EQ(0, std::memcmp(got->layers[l].v().data(), kv->v[l].data(), kv->v[l].size()));
  }
  // Fingerprint mismatch is a miss; unknown and malformed keys.
  EXPECT_EQ(client_->GetChunk(key, std::string(16, '\x01')).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->GetChunk(std::string(16, 'x')).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->GetChunk("short").status().code(), absl::StatusCode::kInvalidArgument);

  // Put a new chunk (tokens not in the corpus), read it back, delete it.
  StoredChunk put;
  std::vector<int32_t> new_toks = {1, 100, 200, 300, 400, 17, 42};
  auto nkv = blend::PrecomputeChunk(*model_, new_toks);
  ASSERT_TRUE(nkv.ok());
  const kvstore::ChunkKey nkey = kvstore::ChunkKey::Of(model_->fingerprint(), new_toks);
  put.header.set_key(std::string(nkey.AsBytes()));
  v1::KVLayout* lay = put.header.mutable_layout();
  lay->set_num_layers(model_->config().n_layers);
  lay->set_num_kv_heads(model_->config().n_kv_heads);
  lay->set_head_dim(model_->config().head_dim);
  lay->set_num_tokens(new_toks.size());
  lay->set_dtype(v1::DTYPE_F16);
  lay->set_model_fingerprint(std::string(reinterpret_cast<const char*>(model_->fingerprint().data()), 16));
  put.header.mutable_token_ids()->Assign(new_toks.begin(), new_toks.end());
  for (int l = 0; l < model_->config().n_layers; ++l) {
    v1::LayerKV lk;
    lk.set_layer(l);
    lk.set_k(std::string(reinterpret_cast<const char*>(nkv->k[l].data()), nkv->k[l].size()));
    lk.set_v(std::string(reinterpret_cast<const char*>(nkv->v[l].data()), nkv->v[l].size()));
    put.layers.push_back(lk);
  }
  auto pr = client_->PutChunk(put);
  ASSERT_TRUE(pr.ok()) << pr.status();
  EXPECT_GT(pr->bytes_stored(), 0u);
  auto again = client_->PutChunk(put);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->already_present());
  auto back = client_->GetChunk(put.header.key());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->layers[2].v(), put.layers[2].v());
  auto del = client_->DeleteChunks({put.header.key()});
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->deleted(), 1u);
  EXPECT_EQ(client_->GetChunk(put.header.key()).status().code(), absl::StatusCode::kNotFound);

  // Malformed puts: wrong key, wrong size, wrong fingerprint, missing layers.
  StoredChunk bad = put;
  bad.header.set_key(std::string(16, 'z'));
  EXPECT_EQ(client_->PutChunk(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = put;
  bad.layers[1].mutable_k()->pop_back();
  EXPECT_EQ(client_->PutChunk(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = put;
  bad.header.mutable_layout()->set_model_fingerprint(std::string(16, '\x02'));
  EXPECT_EQ(client_->PutChunk(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = put;
  bad.layers.pop_back();
  EXPECT_EQ(client_->PutChunk(bad).status().code(), absl::StatusCode::kInvalidArgument);

  auto stats = client_->GetStats();
  ASSERT_TRUE(stats.ok());
  ASSERT_GE(stats->tiers_size(), 2);
  EXPECT_EQ(stats->tiers(0).tier(), "ram");
  EXPECT_EQ(stats->tiers(1).tier(), "ssd");
  EXPECT_GT(stats->tiers(1).bytes_written(), 0u);
}

// The fused KV streamed through the connector equals an in-process Blender
// over the same chunks, bit for bit.
TEST_F(SidecarTest, StreamedBlendEqualsInProcessBlender) {
  auto chunks = SomeChunks(3);
  ASSERT_EQ(chunks.size(), 3u);
  std::vector<int32_t> query = {1, 365, 301, 285, 311, 261};  // arbitrary ids < 512
  for (float ratio : {0.0f, 0.3f, 1.0f}) {
    v1::BlendRequest req;
    for (const auto& c : chunks) req.add_segments()->set_chunk_id(c.chunk_id());
    req.add_segments()->mutable_tokens()->mutable_ids()->Assign(query.begin(), query.end());
    req.mutable_options()->set_mode(v1::BLEND_MODE_CACHEBLEND);
    req.mutable_options()->set_recompute_ratio(ratio == 0 ? 1e-9f : ratio);
    CollectingKVSink sink;
    absl::Status s = client_->Blend(req, &sink);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(sink.got_summary);

    ExpectStreamEqualsInProcess(chunks, query, ratio == 0 ? 1e-9 : ratio, sink);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(sink.info.spans[i].cache_hit);
  }
}

// BlendOptions.selector names the row ranking: the stream is the in-process
// Blender's with that selector, and the selectors recompute different rows.
TEST_F(SidecarTest, ANamedSelectorIsHonoured) {
  auto chunks = SomeChunks(3);
  ASSERT_EQ(chunks.size(), 3u);
  std::vector<int32_t> query = {1, 365, 301, 285, 311, 261};
  std::vector<std::string> masks;  // the last layer's recomputed rows
  for (const char* name : {"deviation", "chunk-head", "query-attention"}) {
    blend::Selector sel;
    ASSERT_TRUE(blend::ParseSelector(name, &sel));
    v1::BlendRequest req;
    for (const auto& c : chunks) req.add_segments()->set_chunk_id(c.chunk_id());
    req.add_segments()->mutable_tokens()->mutable_ids()->Assign(query.begin(), query.end());
    req.mutable_options()->set_mode(v1::BLEND_MODE_CACHEBLEND);
    req.mutable_options()->set_recompute_ratio(0.3f);
    req.mutable_options()->set_selector(name);
    CollectingKVSink sink;
    absl::Status s = client_->Blend(req, &sink);
    ASSERT_TRUE(s.ok()) << name << ": " << s;
    ExpectStreamEqualsInProcess(chunks, query, 0.3, sink, sel);
    masks.push_back(sink.mask.back());
  }
  EXPECT_NE(masks[0], masks[1]);
  EXPECT_NE(masks[1], masks[2]);
}

// BlendOptions.lookahead_layers: the stream is the in-process Blender's with
// that look-ahead horizon; above 1024 it is refused by name.
TEST_F(SidecarTest, ALookaheadHorizonIsHonouredAndBoundedByName) {
  auto chunks = SomeChunks(3);
  ASSERT_EQ(chunks.size(), 3u);
  std::vector<int32_t> query = {1, 365, 301, 285, 311, 261};
  v1::BlendRequest req;
  for (const auto& c : chunks) req.add_segments()->set_chunk_id(c.chunk_id());
  req.add_segments()->mutable_tokens()->mutable_ids()->Assign(query.begin(), query.end());
  req.mutable_options()->set_mode(v1::BLEND_MODE_CACHEBLEND);
  req.mutable_options()->set_recompute_ratio(0.3f);
  std::vector<std::vector<std::string>> masks;  // every layer's recomputed rows
  for (int h : {0, 1, 2}) {
    req.mutable_options()->set_lookahead_layers(h);
    CollectingKVSink sink;
    absl::Status s = client_->Blend(req, &sink);
    ASSERT_TRUE(s.ok()) << h << ": " << s;
    ExpectStreamEqualsInProcess(chunks, query, 0.3, sink, blend::Selector::kLookaheadDeviation, h);
    masks.push_back(sink.mask);
  }
  EXPECT_NE(masks[0], masks[1]);  // a one-layer horizon ranks other rows here
  req.mutable_options()->set_lookahead_layers(1025);
  CollectingKVSink refused;
  absl::Status s = client_->Blend(req, &refused);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("lookahead_layers"));
}

// BLEND_MODE_AUTO: the sidecar's loading controller picks r (>= its floor,
// <= its ceiling), says why, and the stream is the Blender's at that r.
TEST_F(SidecarTest, BlendAutoModeAppliesTheControllersRatio) {
  auto chunks = SomeChunks(3);
  ASSERT_EQ(chunks.size(), 3u);
  std::vector<int32_t> query = {1, 365, 301, 285, 311, 261};
  for (int round = 0; round < 2; ++round) {  // the second sees a measured load bandwidth
    v1::BlendRequest req;
    for (const auto& c : chunks) req.add_segments()->set_chunk_id(c.chunk_id());
    req.add_segments()->mutable_tokens()->mutable_ids()->Assign(query.begin(), query.end());
    req.mutable_options()->set_mode(v1::BLEND_MODE_AUTO);
    req.mutable_options()->set_recompute_ratio(0.9f);  // ignored in AUTO
    CollectingKVSink sink;
    absl::Status s = client_->Blend(req, &sink);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(sink.got_summary);
    const services::SidecarOptions defaults;
    EXPECT_GE(sink.stats.ratio, defaults.controller_r_min - 1e-6);
    EXPECT_LE(sink.stats.ratio, defaults.controller_r_max + 1e-6);
    EXPECT_THAT(sink.stats.controller_reason, HasSubstr("tier"));
    // Where the look-ahead's wait for its layers would show, the controller
    // blends with attended-deviation, and says so.
    const std::string& why = sink.stats.controller_reason;
    std::optional<blend::Selector> used;
    if (absl::StrContains(why, "attended-deviation: the look-ahead would wait"))
      used = blend::Selector::kAttendedDeviation;
    ExpectStreamEqualsInProcess(chunks, query, sink.stats.ratio, sink, used);
  }
  // The explicit modes report their ratio and no reason.
  v1::BlendRequest req;
  for (const auto& c : chunks) req.add_segments()->set_chunk_id(c.chunk_id());
  req.add_segments()->mutable_tokens()->mutable_ids()->Assign(query.begin(), query.end());
  req.mutable_options()->set_mode(v1::BLEND_MODE_CACHEBLEND);
  req.mutable_options()->set_recompute_ratio(0.3f);
  CollectingKVSink sink;
  ASSERT_TRUE(client_->Blend(req, &sink).ok());
  EXPECT_FLOAT_EQ(sink.stats.ratio, 0.3f);
  EXPECT_EQ(sink.stats.controller_reason, "");
  // adaptive_mass: the summary reports the ratio the request chose, inside
  // [the floor, the cap]; the rows recomputed follow it.
  req.mutable_options()->set_adaptive_mass(0.5f);
  CollectingKVSink adaptive;
  ASSERT_TRUE(client_->Blend(req, &adaptive).ok());
  EXPECT_GT(adaptive.stats.ratio, 0.0f);
  EXPECT_LT(adaptive.stats.ratio, 0.3f);  // half the error needs fewer rows than the cap
  EXPECT_LT(adaptive.stats.recomputed_tokens, sink.stats.recomputed_tokens);
  // adaptive_threshold (overrides the mass): a threshold above every row's
  // error leaves the floor, one below every row's takes the cap, and the
  // ratio never decreases as the threshold falls.
  float last = 0;
  for (float t : {0.5f, 1.6e-4f, 1e-12f}) {
    req.mutable_options()->set_adaptive_threshold(t);
    CollectingKVSink th;
    ASSERT_TRUE(client_->Blend(req, &th).ok()) << t;
    EXPECT_GE(th.stats.ratio, last) << t;
    EXPECT_LE(th.stats.ratio, 0.3f) << t;
    last = th.stats.ratio;
    if (t == 0.5f) {
      EXPECT_NEAR(th.stats.ratio, blend::BlendOptions().adaptive_min, 0.01);
    }
  }
  EXPECT_NEAR(last, 0.3f, 0.01);
  // adaptive_budget (overrides both): the first request of a budget gets the
  // budget; the server keeps 16 distinct budgets and refuses a 17th by name.
  req.mutable_options()->set_adaptive_budget(0.1f);
  CollectingKVSink budget;
  ASSERT_TRUE(client_->Blend(req, &budget).ok());
  EXPECT_LE(budget.stats.ratio, 0.1f + 1e-6f);
  EXPECT_GE(budget.stats.ratio, 0.08f);
  for (int i = 1; i <= 16; ++i) {  // 0.1 and 15 more, then one too many
    req.mutable_options()->set_adaptive_budget(0.2f + 0.01f * static_cast<float>(i));
    CollectingKVSink more;
    const absl::Status st = client_->Blend(req, &more);
    if (i < 16) {
      EXPECT_TRUE(st.ok()) << i << " " << st;
    } else {
      EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
      EXPECT_THAT(st.message(), HasSubstr("16 distinct budgets"));
    }
  }
}

TEST_F(SidecarTest, BlendBadInput) {
  CollectingKVSink sink;
  v1::BlendRequest empty;
  EXPECT_EQ(client_->Blend(empty, &sink).code(), absl::StatusCode::kInvalidArgument);
  v1::BlendRequest unknown;
  unknown.add_segments()->set_chunk_id(987654321);
  unknown.add_segments()->set_text("what?");
  EXPECT_EQ(client_->Blend(unknown, &sink).code(), absl::StatusCode::kNotFound);
  auto chunks = SomeChunks(1);
  v1::BlendRequest no_query;
  no_query.add_segments()->set_chunk_id(chunks[0].chunk_id());
  EXPECT_EQ(client_->Blend(no_query, &sink).code(), absl::StatusCode::kInvalidArgument);
  v1::BlendRequest ratio;
  ratio.add_segments()->set_chunk_id(chunks[0].chunk_id());
  ratio.add_segments()->set_text("q");
  ratio.mutable_options()->set_recompute_ratio(1.5f);
  EXPECT_EQ(client_->Blend(ratio, &sink).code(), absl::StatusCode::kInvalidArgument);
  v1::BlendRequest selector = ratio;
  selector.mutable_options()->set_recompute_ratio(0.2f);
  selector.mutable_options()->set_selector("nearest");
  const absl::Status bad_selector = client_->Blend(selector, &sink);
  EXPECT_EQ(bad_selector.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_selector.message(), HasSubstr("selector 'nearest'"));
  v1::BlendRequest mass = selector;
  mass.mutable_options()->clear_selector();
  mass.mutable_options()->set_adaptive_mass(1.5f);
  const absl::Status bad_mass = client_->Blend(mass, &sink);
  EXPECT_EQ(bad_mass.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_mass.message(), HasSubstr("adaptive_mass 1.5 outside"));
  v1::BlendRequest threshold = mass;
  threshold.mutable_options()->set_adaptive_mass(0);
  threshold.mutable_options()->set_adaptive_threshold(-1);
  const absl::Status bad_threshold = client_->Blend(threshold, &sink);
  EXPECT_EQ(bad_threshold.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_threshold.message(), HasSubstr("adaptive_threshold -1 outside"));
  v1::BlendRequest budget = threshold;
  budget.mutable_options()->set_adaptive_threshold(0);
  budget.mutable_options()->set_adaptive_budget(2);
  const absl::Status bad_budget = client_->Blend(budget, &sink);
  EXPECT_EQ(bad_budget.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_budget.message(), HasSubstr("adaptive_budget 2 outside"));
  v1::RetrieveAndBlendRequest rk;
  rk.set_query("Lily");
  rk.set_k(0);
  EXPECT_EQ(client_->RetrieveAndBlend(rk, &sink).code(), absl::StatusCode::kInvalidArgument);
  rk.set_k(65);
  EXPECT_EQ(client_->RetrieveAndBlend(rk, &sink).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SidecarTest, RetrieveAndBlendStreamsRetrievedChunks) {
  v1::RetrieveAndBlendRequest req;
  req.set_query("Tom loved the cat");
  req.set_k(2);
  req.set_system_prompt("A story.");
  CollectingKVSink sink;
  absl::Status s = client_->RetrieveAndBlend(req, &sink);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(sink.info.retrieved_chunk_ids.size(), 2u);
  EXPECT_EQ(sink.k.size(), static_cast<size_t>(model_->config().n_layers));
  EXPECT_GT(sink.stats.TimingMs("total"), 0);
}

// A sink that fails mid-stream cancels the call; the server keeps serving.
class FailingSink : public CollectingKVSink {
 public:
  absl::Status OnLayer(const FusedLayerView& l) override {
    return absl::AbortedError("engine went away");
  }
};

TEST_F(SidecarTest, ClientDisconnectMidStreamKeepsServerServing) {
  auto chunks = SomeChunks(2);
  v1::BlendRequest req;
  for (const auto& c : chunks) req.add_segments()->set_chunk_id(c.chunk_id());
  req.add_segments()->set_text("and then");
  for (int i = 0; i < 5; ++i) {
    FailingSink bad;
    EXPECT_EQ(client_->Blend(req, &bad).code(), absl::StatusCode::kAborted);
  }
  CollectingKVSink ok;
  EXPECT_TRUE(client_->Blend(req, &ok).ok());
  EXPECT_TRUE(client_->HealthCheck().ok());
}

TEST_F(SidecarTest, EngineCacheBlendAtFullRatioEqualsFullPrefill) {
  auto chunks = SomeChunks(2);
  ASSERT_EQ(chunks.size(), 2u);
  v1::GenerateRequest req;
  req.add_question_tokens(1);  // token-level prompt
  for (int id : {415, 301, 262}) req.add_question_tokens(id);
  for (const auto& c : chunks) req.add_chunk_ids(c.chunk_id());
  req.set_max_new_tokens(12);
  req.mutable_blend()->set_mode(v1::BLEND_MODE_FULL_PREFILL);
  auto full = client_->Generate(req);
  ASSERT_TRUE(full.ok()) << full.status();
  req.mutable_blend()->set_mode(v1::BLEND_MODE_CACHEBLEND);
  req.mutable_blend()->set_recompute_ratio(1.0f);
  auto blended = client_->Generate(req);
  ASSERT_TRUE(blended.ok()) << blended.status();
  EXPECT_EQ(full->prompt_tokens_size(), blended->prompt_tokens_size());
  EXPECT_THAT(std::vector<int>(blended->answer_tokens().begin(), blended->answer_tokens().end()),
              ::testing::ElementsAreArray(full->answer_tokens()));
  EXPECT_GT(blended->ttft().ttft_ms(), 0);
  // Full reuse and prefix caching run too.
  for (auto mode : {v1::BLEND_MODE_FULL_REUSE, v1::BLEND_MODE_PREFIX_CACHING}) {
    req.mutable_blend()->set_mode(mode);
    auto r = client_->Generate(req);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->answer_tokens_size(), 12);
  }
  // Text question with retrieval.
  v1::GenerateRequest text;
  text.set_question("What did Lily love?");
  text.set_k(2);
  text.set_max_new_tokens(8);
  auto tr = client_->Generate(text);
  ASSERT_TRUE(tr.ok()) << tr.status();
  EXPECT_EQ(tr->chunk_ids_size(), 2);
  EXPECT_GT(tr->ttft().retrieve_ms(), 0);
  v1::GenerateRequest bad;
  EXPECT_EQ(client_->Generate(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.set_question("x");
  bad.set_k(100);
  EXPECT_EQ(client_->Generate(bad).status().code(), absl::StatusCode::kInvalidArgument);
  // A question far past the context (4M token ids, a 4 MB message) is refused
  // before anything is sized from it; once it sized the KV cache and killed
  // the server with bad_alloc. So is max_new_tokens past the context, before
  // any decoding, and a long text question.
  v1::GenerateRequest huge;
  huge.mutable_question_tokens()->Resize(4'000'000, 5);
  auto hr = client_->Generate(huge);
  EXPECT_EQ(hr.status().code(), absl::StatusCode::kOutOfRange) << hr.status();
  EXPECT_NE(hr.status().message().find("context"), std::string::npos) << hr.status();
  v1::GenerateRequest long_new;
  long_new.add_question_tokens(5);
  long_new.set_max_new_tokens(1000);  // <= kMaxGenerateNewTokens, > the 512 context
  EXPECT_EQ(client_->Generate(long_new).status().code(), absl::StatusCode::kOutOfRange);
  v1::GenerateRequest long_text;
  long_text.set_question(std::string(20000, 'a') + " Lily");
  long_text.set_k(0);
  EXPECT_EQ(client_->Generate(long_text).status().code(), absl::StatusCode::kOutOfRange);
  // And the server still answers.
  auto after = client_->Generate(text);
  EXPECT_TRUE(after.ok()) << after.status();
}

// The engine's wire dtype and query-row reuse (engine/reference_engine.h): engines
// built here against the fixture's sidecar. Reusing the sidecar's query rows
// (forward of the last query token only) gives the same greedy tokens as
// prefilling the whole query on the imported context (the former path); f16
// on the wire gives the same first token as f32 on these prompts (its logit
// error, ~1e-3 of the logit range, is measured by tests/services/
// engine_wire_test.cc); the f16 bytes are exactly kernels::Convert of the f32.
TEST_F(SidecarTest, EngineQueryRowReuseAndF16Wire) {
  auto chunks = SomeChunks(3);
  ASSERT_EQ(chunks.size(), 3u);
  auto tok = model::LoadTokenizer(TestModelPath());
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto make = [&](v1::DType dt, bool reuse) {
    engine::ReferenceEngine::Options eo{model_, tok->get(), client_};
    eo.kv_wire_dtype = dt;
    eo.reuse_query_kv = reuse;
    auto e = engine::ReferenceEngine::Create(eo);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  };
  auto old32 = make(v1::DTYPE_F32, false), new32 = make(v1::DTYPE_F32, true),
       new16 = make(v1::DTYPE_F16, true);
  ASSERT_TRUE(old32 && new32 && new16);
  EXPECT_FALSE(engine::ReferenceEngine::Create(
                   {model_, tok->get(), client_, v1::DTYPE_UNSPECIFIED, true})
                   .ok());
  const std::vector<std::vector<int32_t>> queries = {
      {1, 415, 301, 262}, {1, 349, 263, 461, 285, 271, 418}, {1, 260}};
  int compared = 0;
  for (size_t q = 0; q < queries.size(); ++q) {
    for (auto [mode, ratio] : {std::pair{v1::BLEND_MODE_CACHEBLEND, 0.15f},
                               std::pair{v1::BLEND_MODE_CACHEBLEND, 1.0f},
                               std::pair{v1::BLEND_MODE_FULL_REUSE, 0.f},
                               std::pair{v1::BLEND_MODE_PREFIX_CACHING, 0.f}}) {
      v1::GenerateRequest req;
      for (int id : queries[q]) req.add_question_tokens(id);
      // Two of the three chunks, a different pair per query.
      for (size_t c = 0; c < chunks.size(); ++c) {
        if (c != q) req.add_chunk_ids(chunks[c].chunk_id());
      }
      req.set_max_new_tokens(4);
      req.mutable_blend()->set_mode(mode);
      req.mutable_blend()->set_recompute_ratio(ratio);
      auto a = old32->Generate(req);
      auto b = new32->Generate(req);
      auto c = new16->Generate(req);
      ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status() << b.status() << c.status();
      EXPECT_THAT(std::vector<int>(b->answer_tokens().begin(), b->answer_tokens().end()),
                  ::testing::ElementsAreArray(a->answer_tokens()))
          << "query " << q << " mode " << mode << " r " << ratio;
      ASSERT_GT(c->answer_tokens_size(), 0);
      EXPECT_EQ(c->answer_tokens(0), a->answer_tokens(0))
          << "f16 wire, query " << q << " mode " << mode << " r " << ratio;
      EXPECT_THAT(std::vector<int>(b->prompt_tokens().begin(), b->prompt_tokens().end()),
                  ::testing::ElementsAreArray(a->prompt_tokens()));
      EXPECT_EQ(b->context_tokens(), a->context_tokens());
      ++compared;
    }
  }
  EXPECT_EQ(compared, 12);
  // BlendService's f16 output is the f32 fused KV converted by the kernels.
  v1::BlendRequest br;
  br.add_segments()->set_chunk_id(chunks[0].chunk_id());
  br.add_segments()->set_chunk_id(chunks[1].chunk_id());
  br.add_segments()->mutable_tokens()->add_ids(415);
  br.mutable_options()->set_mode(v1::BLEND_MODE_FULL_REUSE);
  br.mutable_options()->set_output_dtype(v1::DTYPE_F32);
  CollectingKVSink s32, s16;
  ASSERT_TRUE(client_->Blend(br, &s32).ok());
  br.mutable_options()->set_output_dtype(v1::DTYPE_F16);
  ASSERT_TRUE(client_->Blend(br, &s16).ok());
  EXPECT_EQ(s16.info.dtype, WireDType::kF16);
  ASSERT_EQ(s16.k.size(), s32.k.size());
  for (size_t l = 0; l < s32.k.size(); ++l) {
    ASSERT_EQ(s16.k[l].size() * 2, s32.k[l].size());
    const int64_t n = static_cast<int64_t>(s32.k[l].size() / 4);
    std::string conv(n * 2, '\0');
    ASSERT_TRUE(kernels::Convert(
                    kernels::TensorView::Contiguous(s32.v[l].data(), kernels::DType::kF32, {n}),
                    kernels::TensorView::Contiguous(conv.data(), kernels::DType::kF16, {n}))
                    .ok());
    EXPECT_EQ(conv, s16.v[l]) << "layer " << l;
  }
}

TEST_F(SidecarTest, ThirtyTwoConcurrentClients) {
  auto chunks = SomeChunks(2);
  ASSERT_EQ(chunks.size(), 2u);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 32; ++t) {
    threads.emplace_back([&, t] {
      auto c = ClientFor(sidecar_->address());
      v1::SearchRequest sr;
      sr.set_text(t % 2 ? "Lily ball" : "Tom cat");
      sr.set_k(2);
      if (!c->Search(sr).ok()) ++failures;
      if (!c->GetChunk(chunks[t % 2].kv_key()).ok()) ++failures;
      v1::BlendRequest br;
      br.add_segments()->set_chunk_id(chunks[t % 2].chunk_id());
      br.add_segments()->set_text("the end");
      CollectingKVSink sink;
      absl::Status s = c->Blend(br, &sink, absl::Seconds(120));
      if (!s.ok() && s.code() != absl::StatusCode::kResourceExhausted) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// kv_tiers: a sidecar whose only KV tier is the SSD stores and serves every
// chunk there (no RAM tier, nothing promoted); bad tier lists are refused.
TEST(SidecarKvTiersTest, SsdOnlySidecarServesBlendsFromSsd) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
  TempDir dir;
  WriteCorpus(dir.path() + "/corpus", 2);
  services::SidecarOptions o = TestSidecarOptions(dir.path() + "/data");
  o.corpus_roots = {dir.path()};
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"disk"}, {"ram", "ram"}, {"ssd", "redis"}}) {
    o.kv_tiers = bad;
    auto s = services::Sidecar::Start(o);
    ASSERT_FALSE(s.ok()) << absl::StrJoin(bad, ",");
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  }
  o.kv_tiers = {"ssd"};
  auto s = services::Sidecar::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto client = ClientFor((*s)->address());
  ASSERT_NE(client, nullptr);
  auto job = RunPrecomputeJob(client.get(), dir.path() + "/corpus", /*workers=*/2);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->DebugString();
  v1::SearchRequest sr;
  sr.set_text("Lily loved the ball");
  sr.set_k(2);
  auto hits = client->Search(sr);
  ASSERT_TRUE(hits.ok()) << hits.status();
  ASSERT_EQ(hits->hits_size(), 2);
  v1::BlendRequest req;
  for (const auto& h : hits->hits()) req.add_segments()->set_chunk_id(h.chunk().chunk_id());
  req.add_segments()->mutable_tokens()->mutable_ids()->Add(1);
  req.mutable_options()->set_mode(v1::BLEND_MODE_AUTO);
  // The first blend has no loading bandwidth yet (r = r_min); the second
  // decides with the SSD tier's, measured by the first.
  for (int round = 0; round < 2; ++round) {
    CollectingKVSink sink;
    ASSERT_TRUE(client->Blend(req, &sink).ok());
    EXPECT_TRUE(sink.info.spans[0].cache_hit);
    EXPECT_TRUE(sink.info.spans[1].cache_hit);
    if (round == 1) {
      EXPECT_THAT(sink.stats.controller_reason, HasSubstr("ssd"));
    }
  }
  auto stats = client->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->tiers_size(), 1);
  EXPECT_EQ(stats->tiers(0).tier(), "ssd");
  EXPECT_GE(stats->tiers(0).hits(), 2u);
  (*s)->Shutdown(absl::Seconds(2));
}

TEST(SidecarSecurityTest, BearerTokenAndMessageLimits) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found";
  TempDir dir;
  auto o = TestSidecarOptions(dir.path());
  o.auth_token = "s3cret";
  o.max_message_bytes = 64 << 10;
  o.services = {"retrieval", "kvstore"};
  o.model_path.clear();
  auto s = services::Sidecar::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto anon = ClientFor((*s)->address());
  EXPECT_TRUE(anon->HealthCheck().ok());  // probes stay open
  EXPECT_EQ(anon->GetStats().status().code(), absl::StatusCode::kUnauthenticated);
  std::vector<v1::Document> docs(1);
  docs[0].set_doc_id("d");
  docs[0].set_text("hello world");
  EXPECT_EQ(anon->IngestDocuments(docs).status().code(), absl::StatusCode::kUnauthenticated);
  auto wrong = ClientFor((*s)->address(), "s3creT");
  EXPECT_EQ(wrong->GetStats().status().code(), absl::StatusCode::kUnauthenticated);
  auto good = ClientFor((*s)->address(), "s3cret");
  EXPECT_TRUE(good->GetStats().ok());
  EXPECT_TRUE(good->IngestDocuments(docs).ok());
  // Oversized message.
  docs[0].set_text(std::string(200 << 10, 'a'));
  EXPECT_EQ(good->IngestDocuments(docs).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(good->GetStats().ok());  // still serving
  // No model: model-dependent services are absent or refuse.
  CollectingKVSink sink;
  v1::BlendRequest br;
  br.add_segments()->set_text("x");
  EXPECT_EQ(good->Blend(br, &sink).code(), absl::StatusCode::kUnimplemented);
}

TEST(SidecarSecurityTest, TlsRejectsPlaintextAndUntrustedClients) {
  TempDir dir;
  const std::string cert = dir.path() + "/cert.pem", key = dir.path() + "/key.pem";
  const std::string cmd = absl::StrFormat(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout %s -out %s 2>/dev/null",
      key, cert);
  RAGKV_REQUIRE_OR_SKIP(std::system(cmd.c_str()) == 0) << "openssl not available";
  services::SidecarOptions o;
  o.listen = "127.0.0.1:0";
  o.data_dir = dir.path() + "/data";
  o.tls_cert_file = cert;
  o.tls_key_file = key;
  o.services = {"kvstore"};
  o.metrics_port = -1;
  auto s = services::Sidecar::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  ClientOptions co;
  co.target = (*s)->address();
  co.max_attempts = 1;
  co.default_deadline = absl::Seconds(5);
  auto plain = Client::Create(co);
  EXPECT_EQ((*plain)->GetStats().status().code(), absl::StatusCode::kUnavailable);
  co.use_tls = true;
  co.tls_server_name = "localhost";
  std::ifstream in(cert);
  co.tls_root_certs_pem.assign(std::istreambuf_iterator<char>(in), {});
  auto tls = Client::Create(co);
  EXPECT_TRUE((*tls)->GetStats().ok());
  // A client that does not trust the certificate is refused.
  TempDir other;
  const std::string cmd2 = absl::StrFormat(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -keyout %s/k.pem "
      "-out %s/c.pem 2>/dev/null", other.path(), other.path());
  ASSERT_EQ(std::system(cmd2.c_str()), 0);
  std::ifstream in2(other.path() + "/c.pem");
  co.tls_root_certs_pem.assign(std::istreambuf_iterator<char>(in2), {});
  auto untrusted = Client::Create(co);
  EXPECT_EQ((*untrusted)->GetStats().status().code(), absl::StatusCode::kUnavailable);
}

TEST(SidecarLifecycleTest, ClientRetriesUntilServerComesUp) {
  // A client started before its server: UNAVAILABLE is retried with backoff.
  TempDir dir;
  // Reserve a port by starting and stopping a sidecar.
  services::SidecarOptions o;
  o.listen = "127.0.0.1:0";
  o.data_dir = dir.path() + "/a";
  o.services = {"kvstore"};
  o.metrics_port = -1;
  auto first = services::Sidecar::Start(o);
  ASSERT_TRUE(first.ok());
  const int port = (*first)->port();
  (*first)->Shutdown();
  first->reset();
  ClientOptions co;
  co.target = absl::StrFormat("127.0.0.1:%d", port);
  co.max_attempts = 30;
  co.initial_backoff = absl::Milliseconds(50);
  co.max_backoff = absl::Milliseconds(200);
  auto c = Client::Create(co);
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(400));
    o.listen = co.target;
    o.data_dir = dir.path() + "/b";
    auto s = services::Sidecar::Start(o);
    if (s.ok()) {
      absl::SleepFor(absl::Seconds(3));
      (*s)->Shutdown();
    }
  });
  auto stats = (*c)->GetStats(absl::Seconds(10));
  starter.join();
  EXPECT_TRUE(stats.ok()) << stats.status();
}

}  // namespace
}  // namespace ragkv::testing

namespace ragkv::testing {
namespace {

// A server shut down (SIGTERM path) in the middle of a precompute job keeps
// every chunk it stored; a new server on the same data dir resumes the job
// (skipping them) and finishes it.
TEST(SidecarLifecycleTest, ServerRestartedMidJobResumes) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found";
  TempDir dir;
  WriteCorpus(dir.path() + "/corpus", 6);
  auto o = TestSidecarOptions(dir.path() + "/data");
  o.corpus_roots = {dir.path() + "/corpus"};
  o.precompute_chunk_delay = absl::Milliseconds(40);
  o.metrics_port = -1;
  uint64_t stored_before = 0;
  {
    auto s = services::Sidecar::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    auto c = ClientFor((*s)->address());
    v1::StartJobRequest req;
    req.mutable_corpus()->add_paths(dir.path() + "/corpus");
    auto job = c->StartJob(req);
    ASSERT_TRUE(job.ok()) << job.status();
    // Wait until some chunks are stored, then shut the server down.
    for (int i = 0; i < 200; ++i) {
      auto j = c->GetJob(job->job_id());
      ASSERT_TRUE(j.ok());
      if (j->chunks_done() >= 3) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    (*s)->Shutdown();
    auto j = c->GetJob(job->job_id(), absl::Seconds(1));
    EXPECT_FALSE(j.ok());  // the server is gone
  }
  o.precompute_chunk_delay = absl::ZeroDuration();
  auto s = services::Sidecar::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto c = ClientFor((*s)->address());
  v1::StartJobRequest req;
  req.mutable_corpus()->add_paths(dir.path() + "/corpus");
  auto job = c->StartJob(req);
  ASSERT_TRUE(job.ok()) << job.status();
  auto last = c->WatchJob(job->job_id(), [](const v1::Job&) { return true; }, 50);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->state(), v1::JOB_STATE_SUCCEEDED);
  stored_before = last->chunks_skipped();
  EXPECT_GE(stored_before, 3u);
  EXPECT_EQ(last->chunks_done() + last->chunks_skipped(), last->chunks_total());
  EXPECT_EQ(last->chunks_failed(), 0u);
  // Every chunk is served.
  v1::SearchRequest sr;
  sr.set_text("Once upon a time");
  sr.set_k(50);
  auto hits = c->Search(sr);
  ASSERT_TRUE(hits.ok());
  std::vector<std::string> keys;
  for (const auto& h : hits->hits()) keys.push_back(h.chunk().kv_key());
  auto present = c->Contains(keys);
  ASSERT_TRUE(present.ok());
  for (bool p : *present) EXPECT_TRUE(p);
}

}  // namespace
}  // namespace ragkv::testing
