// reorder_http_test.cc: the exact-prefix reorder pass (server/reorder.h,
// docs/services.md "Exact-prefix reorder") on the real `ragkv serve
// --engine llama.cpp` (server_fixture.h), with the sidecar's prefix blocks
// of 8 tokens: a first request in full mode stores its prompt's prefix
// blocks; a second one with the same documents in another order keeps its
// order unless it asks (off by default); with ragkv.reorder (or
// --reorder-documents) the documents are put back in the first's order and
// the sidecar serves that prefix from the stored blocks, whose records'
// bytes are the fused rows' bytes, every layer, never recomputed. A
// non-boolean ragkv.reorder is refused by name.
#include <cstring>

#include "connector/client.h"
#include "connector/kv_sink.h"
#include "kvstore/chunk_key.h"
#include "model/loader.h"
#include "server/reorder.h"
#include "tests/server/server_fixture.h"

namespace ragkv::server {
namespace {

constexpr int kBlock = 8;
const char* const kTitles[] = {"Kite", "Cat", "Cake"};

json Docs(const std::vector<int>& order) {
  json d = json::array();
  for (int i : order) d.push_back({{"title", kTitles[i]}, {"text", kStories[i]}});
  return d;
}

json Body(const std::vector<int>& order, const std::string& question, const json& ragkv) {
  json r = ragkv;
  r["return_tokens"] = true;
  return {{"messages", {{{"role", "user"}, {"content", question}}}},
          {"documents", Docs(order)},
          {"temperature", 0},
          {"max_tokens", 2},
          {"ragkv", r}};
}

size_t Lcp(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

class ReorderTest : public OpenAiServerTest {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(ModelPath()) || !fs::exists(OpenAiDir() + "/node_modules/openai")) return;
    work_ = fs::temp_directory_path() / ("ragkv-reorder-" + std::to_string(::getpid()));
    fs::create_directories(work_);
    fs::create_symlink(OpenAiDir() + "/node_modules", work_ / "node_modules");
    fs::copy_file(std::string(RAGKV_SOURCE_DIR) + "/tests/server/openai_client.mjs",
                  work_ / "openai_client.mjs");
    Spawn({"--parallel", "2", "--ctx-size", "2048", "--prefix-block-tokens",
           std::to_string(kBlock)},
          "data", &pid_, &url_, &grpc_);
  }

  void SetUp() override {
    OpenAiServerTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto m = model::LoadModel(ModelPath());
    ASSERT_TRUE(m.ok()) << m.status();
    fp_ = (*m)->fingerprint();
  }

  ReorderOptions Options() const {
    ReorderOptions o;
    o.key_fp = kvstore::SaltedFingerprint(fp_, "");
    o.block_tokens = kBlock;
    return o;
  }

  std::unique_ptr<Client> Connect(const std::string& grpc) {
    ClientOptions co;
    co.target = grpc;
    auto c = Client::Create(co);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // StoreFirst: `order` in full mode (every prompt row prefilled exactly);
  // waits until its prefix blocks are stored (store-back runs after the
  // response). Its prompt tokens.
  std::vector<int32_t> StoreFirst(const std::vector<int>& order, const std::string& url,
                                  Client* client) {
    const json r = Node("chat", Body(order, "What did Tom lose?", {{"mode", "full"}}), url);
    const std::vector<int32_t> prompt = Ids(r["ragkv"]["prompt_token_ids"]);
    std::vector<std::string> keys;
    for (const auto& k : ChainKeys(prompt, Options())) keys.emplace_back(k.AsBytes());
    EXPECT_GE(keys.size(), 10u);
    for (int i = 0; i < 200; ++i) {
      auto held = client->Contains(keys);
      if (held.ok() && std::all_of(held->begin(), held->end(), [](bool b) { return b; })) {
        return prompt;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "the first request's prefix blocks were never stored";
    return prompt;
  }

  // StoredChain: the rows of `prompt`'s stored chain (whole blocks), when
  // only `first`'s blocks are stored: the blocks both prompts share whole.
  int64_t SharedChain(const std::vector<int32_t>& first, const std::vector<int32_t>& prompt) const {
    const auto a = ChainKeys(first, Options()), b = ChainKeys(prompt, Options());
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return static_cast<int64_t>(n) * kBlock;
  }

  kvstore::Fingerprint fp_{};
  static inline std::string grpc_;
};

// The rows [0, P) the sidecar serves for `prompt` (a raw Blend, as the
// server sends it but with one document span: the rows after P) are the stored prefix blocks' records, byte for byte at
// every layer, and recomputed at none.
void ExpectRowsAreTheRecords(Client* client, const std::vector<int32_t>& prompt, int64_t P,
                             const ReorderOptions& o) {
  const auto keys = ChainKeys(prompt, o);
  ASSERT_GE(keys.size(), static_cast<size_t>(P / kBlock));
  std::vector<StoredChunk> records;
  for (int64_t b = 0; b < P / kBlock; ++b) {
    auto c = client->GetChunk(std::string(keys[b].AsBytes()));
    ASSERT_TRUE(c.ok()) << "block " << b << ": " << c.status();
    ASSERT_EQ(c->header.layout().num_tokens(), static_cast<uint32_t>(kBlock));
    records.push_back(std::move(*c));
  }
  ASSERT_FALSE(records.empty());
  v1::BlendRequest req;
  req.mutable_raw()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  req.mutable_raw()->set_query_tokens(1);
  // A raw prompt names at least one document span (the server names its
  // documents'); here the rows after the prefix, which no record holds.
  v1::TokenSpan* rest = req.mutable_raw()->add_passages();
  rest->set_begin(static_cast<uint32_t>(P));
  rest->set_end(static_cast<uint32_t>(prompt.size() - 1));
  req.mutable_options()->set_mode(v1::BLEND_MODE_CACHEBLEND);
  req.mutable_options()->set_output_dtype(records[0].header.layout().dtype());
  CollectingKVSink sink;
  const absl::Status blended = client->Blend(req, &sink);
  ASSERT_TRUE(blended.ok()) << blended;
  ASSERT_EQ(sink.stats.prefix_tokens, static_cast<uint32_t>(P));
  const int64_t H = sink.info.num_kv_heads, D = sink.info.head_dim, T = sink.info.num_tokens;
  const size_t es = records[0].header.layout().dtype() == v1::DTYPE_F32 ? 4 : 2;
  const size_t row = static_cast<size_t>(D) * es, block = kBlock * row;
  for (size_t l = 0; l < sink.k.size(); ++l) {
    for (int64_t t = 0; t < P; ++t) {
      ASSERT_FALSE((static_cast<uint8_t>(sink.mask[l][t / 8]) >> (t % 8)) & 1u)
          << "row " << t << " recomputed at layer " << l;
    }
    for (size_t b = 0; b < records.size(); ++b) {
      const v1::LayerKV& rec = records[b].layers[l];
      ASSERT_EQ(rec.k().size(), static_cast<size_t>(H) * block);
      for (int64_t h = 0; h < H; ++h) {
        const size_t at = (static_cast<size_t>(h * T) + b * kBlock) * row;
        EXPECT_EQ(std::memcmp(sink.k[l].data() + at, rec.k().data() + h * block, block), 0)
            << "k, layer " << l << " block " << b << " head " << h;
        EXPECT_EQ(std::memcmp(sink.v[l].data() + at, rec.v().data() + h * block, block), 0)
            << "v, layer " << l << " block " << b << " head " << h;
      }
    }
  }
}

TEST_F(ReorderTest, OffByDefaultOnRequestItRecoversTheStoredOrder) {
  auto client = Connect(grpc_);
  ASSERT_NE(client, nullptr);
  const std::vector<int32_t> first = StoreFirst({0, 1, 2}, url_, client.get());
  ASSERT_FALSE(HasFailure());
  // The same documents in another order: kept as given (off by default).
  const json kept = Node("chat", Body({2, 0, 1}, "Who baked a cake?", {{"mode", "cacheblend"}}));
  EXPECT_FALSE(kept["ragkv"].contains("reorder")) << kept;
  const std::vector<int32_t> kept_prompt = Ids(kept["ragkv"]["prompt_token_ids"]);
  const int64_t kept_chain = SharedChain(first, kept_prompt);
  EXPECT_LE(kept["ragkv"]["stored_prefix_tokens"].get<int64_t>(), kept_chain) << kept;
  // Asked for: put back in the first's order (documents 1, 2, 0 given).
  const json got = Node("chat", Body({1, 2, 0}, "Where did the kite go?",
                                     {{"mode", "cacheblend"}, {"reorder", true}}));
  ASSERT_TRUE(got["ragkv"].contains("reorder")) << got;
  const json& ro = got["ragkv"]["reorder"];
  EXPECT_EQ(ro["document_order"], json::array({2, 0, 1})) << got;
  const std::vector<int32_t> prompt = Ids(got["ragkv"]["prompt_token_ids"]);
  const int64_t P = SharedChain(first, prompt);
  // The first's documents, whole: the chain reaches past them (the
  // question is cut at a block).
  EXPECT_GE(static_cast<int64_t>(Lcp(first, prompt)), P);
  EXPECT_GT(P, kept_chain + 2 * kBlock);
  EXPECT_EQ(ro["prefix_tokens_after"], P) << got;
  EXPECT_LT(ro["prefix_tokens_before"].get<int64_t>(), P) << got;
  // The sidecar served those rows from the stored blocks.
  EXPECT_EQ(got["ragkv"]["stored_prefix_tokens"], P) << got;
  EXPECT_TRUE(got["ragkv"]["fallback"].is_null()) << got;
  ExpectRowsAreTheRecords(client.get(), prompt, P, Options());
  int rc = 0;
  const std::string metrics = RunCapture({"curl", "-s", url_ + "/metrics"}, work_.string(), &rc);
  EXPECT_NE(metrics.find("ragkv_reorder_requests_total{result=\"gained\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("ragkv_reorder_prefix_tokens_gained_total " +
                         std::to_string(P - ro["prefix_tokens_before"].get<int64_t>()) + "\n"),
            std::string::npos)
      << metrics;
}

TEST_F(ReorderTest, ANonBooleanReorderIsRefusedByName) {
  json bodies = json::array();
  for (const json& bad : {json("yes"), json(1)}) {
    json b = Body({0, 1}, "Why?", json::object());
    b["ragkv"]["reorder"] = bad;
    bodies.push_back(b);
  }
  const json r = Node("sequence", {{"requests", bodies}});
  ASSERT_EQ(r.size(), 2u) << r;
  for (const json& e : r) {
    EXPECT_EQ(e["status"], 400) << e;
    EXPECT_EQ(e["param"], "ragkv.reorder") << e;
    EXPECT_NE(e["message"].get<std::string>().find("'reorder' must be a boolean"),
              std::string::npos)
        << e;
  }
}

// --reorder-documents turns it on for every request; ragkv.reorder false
// keeps a request's order.
TEST_F(ReorderTest, TheServerFlagTurnsItOnAndTheFieldWins) {
  pid_t pid = -1;
  std::string url, grpc;
  ASSERT_NO_FATAL_FAILURE(Spawn({"--parallel", "2", "--ctx-size", "2048", "--prefix-block-tokens",
                                 std::to_string(kBlock), "--reorder-documents", "true"},
                                "flag-data", &pid, &url, &grpc));
  auto client = Connect(grpc);
  ASSERT_NE(client, nullptr);
  const std::vector<int32_t> first = StoreFirst({0, 1, 2}, url, client.get());
  const json r = Node("sequence",
                      {{"requests",
                        {Body({2, 1, 0}, "Who baked a cake?", {{"mode", "cacheblend"}}),
                         Body({2, 1, 0}, "Who slept?", {{"mode", "cacheblend"}, {"reorder", false}})}}},
                      url);
  ASSERT_EQ(r.size(), 2u) << r;
  ASSERT_TRUE(r[0]["ragkv"].contains("reorder")) << r[0];
  EXPECT_EQ(r[0]["ragkv"]["reorder"]["document_order"], json::array({2, 1, 0})) << r[0];
  EXPECT_EQ(r[0]["ragkv"]["stored_prefix_tokens"],
            SharedChain(first, Ids(r[0]["ragkv"]["prompt_token_ids"])));
  EXPECT_FALSE(r[1]["ragkv"].contains("reorder")) << r[1];
  Stop(pid);
}

}  // namespace
}  // namespace ragkv::server
