// Served retrieval settings through the real `ragkv serve` binary: the FAISS
// factory string and the embedder are chosen per server; a data directory
// opened with another setting is refused with both settings named, or
// rebuilt from its catalogue when asked; caller-supplied vectors go through
// ChunkDocuments + IngestDocuments; re-ingest (over gRPC and by precompute
// job) is atomic for concurrent readers; the connector's request ids reach
// the server's log and its errors.
#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/client_util.h"
#include "tests/integration/serve_process.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

std::vector<v1::Document> Docs() {
  std::vector<v1::Document> docs(4);
  const char* texts[] = {
      "Lily had a big red ball. She played with the ball in the park every day.",
      "Tom saw a small cat in the tree. The cat was scared and Tom helped it down.",
      "Ben baked a cake for his mom. The cake was sweet and everyone ate a piece.",
      "Sue sailed a little boat on the lake. The boat was blue and very fast.",
  };
  const char* ids[] = {"ball", "cat", "cake", "boat"};
  for (int i = 0; i < 4; ++i) {
    docs[i].set_doc_id(ids[i]);
    docs[i].set_text(texts[i]);
  }
  return docs;
}

// TopDoc: the doc id of the best hit for `text` (empty on error / no hit).
std::string TopDoc(Client* c, const std::string& text, v1::SearchMode mode = v1::SEARCH_MODE_SERVER) {
  v1::SearchRequest req;
  req.set_text(text);
  req.set_k(3);
  req.set_mode(mode);
  auto r = c->Search(req);
  if (!r.ok() || r->hits().empty()) return "";
  return r->hits(0).chunk().doc_id();
}

std::vector<std::string> ModelArgs(const std::string& data_dir) {
  return {"--data-dir", data_dir, "--model", TestModelPath(), "--max-seq-len", "512"};
}

std::string Joined(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) absl::StrAppend(&out, out.empty() ? "" : " ", "'", a, "'");
  return out;
}

// SearchingReader: a thread that searches `query` (BM25, k = 1) until
// stopped, counting searches and misses: no hit, or a hit not of `want_doc`
// when that is set. Stopped and joined on destruction too, so a failed
// ASSERT in the writer never leaves a joinable thread.
class SearchingReader {
 public:
  SearchingReader(Client* client, std::string query, std::string want_doc)
      : client_(client), query_(std::move(query)), want_doc_(std::move(want_doc)),
        thread_([this] { Run(); }) {}
  ~SearchingReader() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int reads() const { return reads_; }
  int misses() const { return misses_; }
  const std::string& last_miss() const { return last_miss_; }  // valid after Stop

 private:
  void Run() {
    while (!stop_) {
      v1::SearchRequest req;
      req.set_text(query_);
      req.set_k(1);
      req.set_mode(v1::SEARCH_MODE_BM25);
      auto r = client_->Search(req);
      if (!r.ok() || r->hits().empty() ||
          (!want_doc_.empty() && r->hits(0).chunk().doc_id() != want_doc_)) {
        ++misses_;
        last_miss_ = r.ok() ? r->DebugString() : r.status().ToString();
      }
      ++reads_;
    }
  }

  Client* client_;
  const std::string query_, want_doc_;
  std::atomic<bool> stop_{false};
  std::atomic<int> reads_{0}, misses_{0};
  std::string last_miss_;
  std::thread thread_;
};

TEST(ServedRetrievalTest, FactoryAndEmbedderAreServedAnotherSettingIsRefusedOrRebuilt) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
  TempDir dir;
  const std::string data = dir.path() + "/d";
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = ModelArgs(data);
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  std::string want;
  {
    auto s = ServeProcess::Start(with({"--index-factory", "HNSW32", "--embedder", "model",
                                       "--search-mode", "dense"}),
                                 dir.path() + "/1.log");
    ASSERT_TRUE(s.ok()) << s.status();
    auto c = (*s)->NewClient();
    ASSERT_TRUE(c->IngestDocuments(Docs()).ok());
    want = TopDoc(c.get(), "a cat in a tree");
    EXPECT_FALSE(want.empty());
    EXPECT_EQ((*s)->Terminate(), 0);
  }
  // The defaults (Flat, hashed) on that directory: refused, every changed
  // setting named with its stored and its new value.
  int rc = 0;
  std::string out = ServeToExit(Joined(with({"--listen", "127.0.0.1:0", "--metrics-port", "-1"})), &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("'HNSW32,metric=0', now 'Flat,metric=0'"), std::string::npos) << out;
  EXPECT_NE(out.find("--retrieval-rebuild"), std::string::npos) << out;
  EXPECT_NE(out.find("now 'hashed-tfidf-v2:"), std::string::npos) << out;
  out = ServeToExit(Joined(with({"--listen", "127.0.0.1:0", "--metrics-port", "-1", "--index-factory",
                                 "HNSW32", "--embedder", "hashed"})),
                    &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("'model:"), std::string::npos) << out;
  EXPECT_NE(out.find("now 'hashed-tfidf-v2:"), std::string::npos) << out;
  // Asked: rebuilt as Flat from the stored vectors; the same answer, and it
  // stays (a plain restart with the new setting serves it).
  for (bool rebuild : {true, false}) {
    auto s = ServeProcess::Start(with({"--index-factory", "Flat", "--embedder", "model", "--search-mode",
                                       "dense", "--retrieval-rebuild", rebuild ? "true" : "false"}),
                                 dir.path() + "/2.log");
    ASSERT_TRUE(s.ok()) << s.status();
    auto c = (*s)->NewClient();
    EXPECT_EQ(TopDoc(c.get(), "a cat in a tree"), want);
    EXPECT_EQ(TopDoc(c.get(), "cake", v1::SEARCH_MODE_BM25), "cake");
    EXPECT_EQ((*s)->Terminate(), 0);
  }
  // Re-embedding with the hashed embedder when asked.
  auto s = ServeProcess::Start(with({"--retrieval-rebuild", "true"}), dir.path() + "/3.log");
  ASSERT_TRUE(s.ok()) << s.status();
  auto c = (*s)->NewClient();
  EXPECT_EQ(TopDoc(c.get(), "boat on the lake", v1::SEARCH_MODE_DENSE), "boat");
}

TEST(ServedRetrievalTest, BadSettingsStopStartupNamingThem) {
  TempDir dir;
  const std::string base = absl::StrCat("--data-dir ", dir.path(), " --listen 127.0.0.1:0 --metrics-port -1 ");
  struct Case {
    std::string args, says;
  } cases[] = {
      {"--index-factory Bogus7", "Bogus7"},
      {"--embedder wordvec", "unknown embedder 'wordvec'"},
      {"--embedder vectors:0", "dimension '0'"},
      {"--embedder model", "needs a served model"},
      {"--embedder vectors:8 --search-mode dense", "search mode 'dense' needs an embedder"},
      {"--search-mode fuzzy", "fuzzy"},
  };
  for (const Case& k : cases) {
    int rc = 0;
    const std::string out = ServeToExit(base + k.args, &rc);
    EXPECT_NE(rc, 0) << k.args << ": " << out;
    EXPECT_NE(out.find(k.says), std::string::npos) << k.args << ": " << out;
  }
}

// `precompute --server` runs the job with the sidecar's settings: an option
// only local mode uses is refused by name, never ignored.
TEST(ServedRetrievalTest, PrecomputeOnAServerRefusesLocalOnlyOptions) {
  for (const char* local : {"--embedder hashed:64", "--index-factory HNSW32", "--kv-codec int8",
                            "--chunk-tokens 64", "--model m.gguf", "--redis-prefix team2",
                            "--config ragkv.toml"}) {
    int rc = 0;
    const std::string out = RagkvToExit(
        absl::StrCat("precompute --server 127.0.0.1:1 --corpus /nonexistent ", local), &rc);
    EXPECT_EQ(rc, 2) << local << ": " << out;
    const std::string name = std::string(local).substr(0, std::string(local).find(' '));
    EXPECT_NE(out.find(name + " applies to local mode"), std::string::npos) << out;
  }
}

TEST(ServedRetrievalTest, CallerSuppliedVectorsAreIngestedPerChunkAndSearched) {
  TempDir dir;
  auto s = ServeProcess::Start({"--data-dir", dir.path(), "--services", "retrieval", "--chunk-tokens", "32",
                                "--embedder", "vectors:4:toy"},
                               dir.path() + "/serve.log");
  ASSERT_TRUE(s.ok()) << s.status();
  auto c = (*s)->NewClient();
  std::vector<v1::Document> docs = Docs();
  auto chunks = c->ChunkDocuments(docs);
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  ASSERT_EQ(chunks->documents_size(), 4);
  EXPECT_GT(chunks->documents(0).texts_size(), 1);  // 32 byte-tokens per chunk
  // Without vectors: refused, naming the way.
  auto refused = c->IngestDocuments(docs);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("ChunkDocuments"), absl::string_view::npos) << refused.status();
  // Document i's chunks all point along axis i.
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < chunks->documents(i).texts_size(); ++j) {
      v1::FloatVector* v = docs[i].add_chunk_vectors();
      for (int d = 0; d < 4; ++d) v->add_values(d == i ? 1.f : 0.f);
    }
  }
  std::vector<v1::Document> short_one = {docs[1]};
  short_one[0].mutable_chunk_vectors()->RemoveLast();
  auto wrong = c->IngestDocuments(short_one);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument) << wrong.status();
  // The right number of floats in misshapen vectors (5 + 3 for 4 + 4).
  std::vector<v1::Document> misshapen = {docs[1]};
  ASSERT_GE(misshapen[0].chunk_vectors_size(), 2);
  misshapen[0].mutable_chunk_vectors(0)->add_values(0.f);
  misshapen[0].mutable_chunk_vectors(1)->mutable_values()->RemoveLast();
  auto bent = c->IngestDocuments(misshapen);
  EXPECT_EQ(bent.status().code(), absl::StatusCode::kInvalidArgument) << bent.status();
  EXPECT_NE(bent.status().message().find("chunk_vectors[0] has 5 values, the index dim is 4"),
            absl::string_view::npos) << bent.status();
  ASSERT_TRUE(c->IngestDocuments(docs).ok());
  v1::SearchRequest q;
  q.set_k(2);
  for (int i = 0; i < 4; ++i) {
    q.clear_vector();
    for (int d = 0; d < 4; ++d) q.mutable_vector()->add_values(d == i ? 0.9f : 0.1f);
    auto r = c->Search(q);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_FALSE(r->hits().empty());
    EXPECT_EQ(r->hits(0).chunk().doc_id(), docs[i].doc_id());
  }
  // Text queries are lexical here; dense text search cannot embed them.
  EXPECT_EQ(TopDoc(c.get(), "sailed a boat"), "boat");
  v1::SearchRequest dense;
  dense.set_text("boat");
  dense.set_k(1);
  // A mode that needs the text embedded is refused by name (never silently
  // searched another way), as is a query vector with a lexical mode.
  for (v1::SearchMode mode : {v1::SEARCH_MODE_DENSE, v1::SEARCH_MODE_HYBRID}) {
    dense.set_mode(mode);
    absl::Status st = c->Search(dense).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(v1::SearchMode_Name(mode) + " needs the query embedded"),
              absl::string_view::npos) << st;
  }
  dense.set_mode(v1::SEARCH_MODE_BM25);
  ASSERT_TRUE(c->Search(dense).ok());
  q.set_mode(v1::SEARCH_MODE_BM25);
  EXPECT_EQ(c->Search(q).status().code(), absl::StatusCode::kInvalidArgument);
  q.set_mode(v1::SEARCH_MODE_DENSE);
  EXPECT_TRUE(c->Search(q).ok());
}

// Re-ingest over gRPC: a reader searching for a word both versions share
// always finds the document.
TEST(ServedRetrievalTest, ReingestOverGrpcIsAtomicForReaders) {
  TempDir dir;
  auto s = ServeProcess::Start({"--data-dir", dir.path(), "--services", "retrieval"}, dir.path() + "/serve.log");
  ASSERT_TRUE(s.ok()) << s.status();
  auto writer = (*s)->NewClient();
  auto reader = (*s)->NewClient();
  std::vector<v1::Document> docs = Docs();
  docs[0].set_text("The first story about zanzibar and a red ball.");
  ASSERT_TRUE(writer->IngestDocuments(docs).ok());
  SearchingReader reader_thread(reader.get(), "zanzibar", "ball");
  for (int round = 0; round < 40; ++round) {
    v1::Document d = docs[0];
    d.set_text(absl::StrCat("Version ", round, " of a story about zanzibar and a red ball. ",
                            std::string(round % 3 * 40, 'x')));
    ASSERT_TRUE(writer->IngestDocuments({d}).ok());
  }
  reader_thread.Stop();
  EXPECT_GT(reader_thread.reads(), 0);
  EXPECT_EQ(reader_thread.misses(), 0)
      << "of " << reader_thread.reads() << " searches; last: " << reader_thread.last_miss();
}

// `ragkv precompute --server --neighbours k` (issue 40): the sidecar's job
// writes the neighbour-aware records too and the CLI prints their pass; a
// rerun finds them stored; k over the limit is refused before any call.
TEST(ServedRetrievalTest, PrecomputeOnAServerWritesNeighbourRecords) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
  TempDir dir;
  const std::string corpus = dir.path() + "/corpus";
  std::filesystem::create_directories(corpus);
  std::ofstream(corpus + "/a.txt") << "Lily had a red ball. She played with the ball in the park.";
  std::ofstream(corpus + "/b.txt") << "Tom saw a big red ball. He wanted to play in the park.";
  std::ofstream(corpus + "/c.txt") << "The cat sat on the mat and looked at the moon all night.";
  std::vector<std::string> args = ModelArgs(dir.path() + "/d");
  args.insert(args.end(), {"--corpus-root", corpus});
  auto s = ServeProcess::Start(args, dir.path() + "/serve.log");
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string cmd =
      absl::StrCat("precompute --server ", (*s)->address(), " --corpus ", corpus, " --neighbours 1");
  int rc = -1;
  std::string out = RagkvToExit(cmd, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("neighbours k=1: 3 chunks, 3 computed, 0 skipped, 0 failed"),
            std::string::npos) << out;
  out = RagkvToExit(cmd, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("neighbours k=1: 3 chunks, 0 computed, 3 skipped, 0 failed"),
            std::string::npos) << out;
  out = RagkvToExit(absl::StrCat("precompute --server ", (*s)->address(), " --corpus ", corpus,
                                 " --neighbours 17"), &rc);
  EXPECT_EQ(rc, 2) << out;
}

// Re-ingest by precompute job (a changed corpus file): the same.
TEST(ServedRetrievalTest, ReingestByPrecomputeJobIsAtomicForReaders) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
  TempDir dir;
  const std::string corpus = dir.path() + "/corpus";
  std::filesystem::create_directories(corpus);
  auto write = [&](int version) {
    std::ofstream(corpus + "/story.txt")
        << "Once upon a time zanzibar had a kite, version " << version << ". "
        << std::string(version % 3 * 30, 'y');
  };
  write(0);
  std::vector<std::string> args = ModelArgs(dir.path() + "/d");
  args.insert(args.end(), {"--corpus-root", corpus});
  auto s = ServeProcess::Start(args, dir.path() + "/serve.log");
  ASSERT_TRUE(s.ok()) << s.status();
  auto writer = (*s)->NewClient(absl::Seconds(120));
  auto reader = (*s)->NewClient();
  auto first = RunPrecomputeJob(writer.get(), corpus);
  ASSERT_TRUE(first.ok()) << first.status();
  SearchingReader reader_thread(reader.get(), "zanzibar kite", "");
  for (int v = 1; v <= 6; ++v) {
    write(v);
    auto job = RunPrecomputeJob(writer.get(), corpus);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->DebugString();
  }
  reader_thread.Stop();
  EXPECT_GT(reader_thread.reads(), 0);
  EXPECT_EQ(reader_thread.misses(), 0)
      << "of " << reader_thread.reads() << " searches; last: " << reader_thread.last_miss();
}

// A caller's request id reaches the server's access log and comes back in
// error messages; an id the server would not take is refused client-side.
TEST(ServedRetrievalTest, ConnectorRequestIdsReachTheServer) {
  TempDir dir;
  const std::string log = dir.path() + "/serve.log";
  auto s = ServeProcess::Start({"--data-dir", dir.path(), "--services", "retrieval", "--access-log", "true"}, log);
  ASSERT_TRUE(s.ok()) << s.status();
  auto c = (*s)->NewClient();
  CallOptions call;
  call.request_id = "trace-42.a:b_c";
  std::string echoed;
  call.request_id_out = &echoed;
  auto missing = c->DeleteDocument("no-such-doc", call);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("[request_id=trace-42.a:b_c]"), absl::string_view::npos)
      << missing.status();
  EXPECT_EQ(echoed, "trace-42.a:b_c");
  // A generated id when none is given, reported and distinct per call.
  std::string a, b;
  CallOptions ca, cb;
  ca.request_id_out = &a;
  cb.request_id_out = &b;
  ASSERT_TRUE(c->IngestDocuments(Docs(), ca).ok());
  ASSERT_TRUE(c->HealthCheck("", cb).ok());
  EXPECT_EQ(a.rfind("c-", 0), 0u) << a;
  EXPECT_NE(a, b);
  CallOptions bad;
  bad.request_id = "has space";
  const absl::Status refused = c->HealthCheck("", bad);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("'has space'"), absl::string_view::npos) << refused;
  EXPECT_EQ((*s)->Terminate(), 0);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("request_id=trace-42.a:b_c"), std::string::npos) << text;
  EXPECT_NE(text.find("request_id=" + a), std::string::npos) << text;
}

}  // namespace
}  // namespace ragkv::testing
