// learning_test.cc: the OpenAI-compatible server (tests/server/
// server_fixture.h) learning from traffic: pasted paragraphs stored after
// the response and served from the store when pasted again in another
// order; --learn-from-traffic false; cache_salt keeping a tenant's KV to
// itself; documents and the same text pasted giving the same answer from
// the same stored rows; CacheBlend at r = 1.0 equal to full mode; and the
// request deadline; two servers sharing one Redis tier.
#include "tests/server/server_fixture.h"
#include "tests/support/shared_redis.h"

namespace ragkv::server {
namespace {

const std::string kT1 = kStories[0];
const std::string kT2 = kStories[1];
const std::string kT3 = kStories[2];

// Tokens: llama.cpp's tokenization of `text` alone (no BOS).
int Tokens(const std::string& text) {
  auto file = engine::llamacpp::LlamaFile::Open(ModelPath(), {.n_ctx = 256, .threads = 1});
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return 0;
  std::vector<int32_t> t(text.size() + 8);
  return llama_tokenize(llama_model_get_vocab((*file)->model()), text.data(),
                        static_cast<int32_t>(text.size()), t.data(),
                        static_cast<int32_t>(t.size()), false, false);
}

json Paste(const std::string& lead, const std::vector<std::string>& passages,
           const std::string& question, const std::string& salt = "") {
  std::string content = lead;
  for (const std::string& p : passages) content += "\n\n" + p;
  content += "\n\n" + question;
  json b = {{"messages", {{{"role", "user"}, {"content", content}}}},
            {"temperature", 0},
            {"max_tokens", 4}};
  if (!salt.empty()) b["cache_salt"] = salt;
  return b;
}

// Retry: `n` variants of a paste (another lead each: no slot's cells serve
// it), tried until one reports at least `min` cached tokens.
json Retry(const std::vector<std::string>& passages, int min, const std::string& salt = "",
           int n = 20) {
  json bodies = json::array();
  for (int i = 0; i < n; ++i) {
    bodies.push_back(Paste("Try " + std::to_string(i) + ". Passages:", passages,
                           "Who was it about?", salt));
  }
  return {{"retry", bodies}, {"min_cached", min}};
}

int Cached(const json& r) { return r["usage"]["prompt_tokens_details"]["cached_tokens"]; }

class LearningTest : public OpenAiServerTest {
 protected:
  // SpawnWith: a server of its own (2 slots) with `flag` set to `value`.
  static void SpawnWith(const std::string& flag, const std::string& value, const std::string& data,
                        pid_t* pid, std::string* url) {
    Spawn({"--parallel", "2", "--ctx-size", "2048", flag, value}, data, pid, url);
  }
};

// Pasted paragraphs nobody ingested are learned: the same passages pasted
// again, in the other order and at other offsets, come from the store.
TEST_F(LearningTest, PastedPassagesAreLearnedFromTraffic) {
  const int n = Tokens(kT1) + Tokens(kT2);
  const json r = Node("sequence", {{"requests", {Paste("Read these.", {kT1, kT2}, "What happened?"),
                                                 Retry({kT2, kT1}, 0.9 * n)}}});
  ASSERT_EQ(r.size(), 2u) << r;
  EXPECT_LT(Cached(r[0]), 0.1 * n) << r[0];
  EXPECT_GE(Cached(r[1]), 0.9 * n) << r[1];
  EXPECT_EQ(r[1]["ragkv"]["slot_prefix_tokens"], 0) << r[1];
  EXPECT_TRUE(r[1]["ragkv"]["fallback"].is_null()) << r[1];
}

// --first-position-records: the first document of a chat (right after the
// chat template's head) is served from its KV computed right after that
// head once store-back has written it (a request that finds the plain
// record but not this one counts a miss first); a server without the flag
// never looks one up. ragkv.mode cacheblend: no slot's kept cells serve it.
TEST_F(LearningTest, TheFirstDocumentIsServedFromItsFirstPositionRecord) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "Who was it about?"}}}},
                     {"documents", {{{"text", kT1}}, {{"text", kT2}}}},
                     {"ragkv", {{"mode", "cacheblend"}}},
                     {"temperature", 0},
                     {"max_tokens", 4}};
  const std::string family = "ragkv_first_position_records_total";
  const std::string hit = family + "{result=\"hit\"}";
  pid_t pid = -1;
  std::string url;
  // The exact-prefix cache off: it would serve a first document computed
  // fresh once from its stored blocks (exact rows too; counted "unused").
  ASSERT_NO_FATAL_FAILURE(Spawn({"--parallel", "2", "--ctx-size", "2048",
                                 "--first-position-records", "true", "--prefix-cache", "false"},
                                "first-data", &pid, &url));
  const json args = {{"body", body}, {"metric", hit}, {"family", family}, {"min", 1}};
  json on_args = args;
  on_args["tries"] = 40;
  const json on = Node("until_metric", on_args, url);
  // A catalogue document: the chat's documents are found in the templated
  // prompt as catalogue chunks, whose first token is tokenized with the
  // text before it, so the match holds all but its first row(s); the
  // record holds exactly those rows.
  const json ingest = {{"documents", {{{"id", "cake"}, {"text", kT3}}}}};
  Node("sequence",
       {{"requests",
         {{{"http", {{"method", "POST"}, {"path", "/v1/documents"}, {"body", ingest}}}}}}},
       url);
  json cat_args = on_args;
  cat_args["body"]["documents"] = {{{"text", kT3}}, {{"text", kT1}}};
  cat_args["min"] = on["value"].get<double>() + 1;
  const json cat = Node("until_metric", cat_args, url);
  Stop(pid);
  EXPECT_GE(cat["value"].get<double>(), on["value"].get<double>() + 1) << cat;
  EXPECT_GE(on["value"].get<double>(), 1) << on;
  EXPECT_EQ(on["last"]["finish_reason"], "length") << on;
  bool missed = false;  // a lookup that found the plain record only
  for (const json& l : on["family"])
    missed |= l.get<std::string>().find("miss") != std::string::npos;
  EXPECT_TRUE(missed) << on;
  json off_args = args;
  off_args["tries"] = 3;
  const json off = Node("until_metric", off_args);
  EXPECT_EQ(off["value"].get<double>(), 0) << off;
  EXPECT_TRUE(off["family"].empty()) << off;  // no lookup at all
}

// A salted tenant's passages are its own: another salt (or none) pasting
// the same text reuses nothing, the same salt reuses them.
TEST_F(LearningTest, CacheSaltKeepsATenantsKvToItself) {
  const int n = Tokens(kT3);
  const json r = Node("sequence", {{"requests", {Paste("Alice reads.", {kT3}, "Why?", "alice"),
                                                 Retry({kT3}, 0.9 * n, "alice", 10),
                                                 Paste("Bob reads.", {kT3}, "Why?", "bob"),
                                                 Paste("Eve reads.", {kT3}, "Why?")}}});
  ASSERT_EQ(r.size(), 4u) << r;
  EXPECT_GE(Cached(r[1]), 0.9 * n) << r[1];
  EXPECT_EQ(Cached(r[2]), 0) << r[2];
  EXPECT_EQ(Cached(r[3]), 0) << r[3];
}

// Off: pasted text is never stored, so the second paste reuses nothing.
TEST_F(LearningTest, LearningCanBeTurnedOff) {
  pid_t pid = -1;
  std::string url;
  ASSERT_NO_FATAL_FAILURE(SpawnWith("--learn-from-traffic", "false", "nolearn-data", &pid, &url));
  const json r = Node("sequence",
                      {{"requests", {Paste("Read these.", {kT1, kT2}, "What happened?"),
                                     Retry({kT2, kT1}, 1, "", 5)}}},
                      url);
  ASSERT_EQ(r.size(), 2u) << r;
  EXPECT_EQ(Cached(r[1]), 0) << r[1];
  Stop(pid);
}

// --adaptive-budget: a request that sets no ratio spends the budget rule's
// share (at most 3 x 0.02 here), one that sets a ratio keeps it.
TEST_F(LearningTest, TheAdaptiveBudgetFlagSetsTheRatioOfRequestsThatSetNone) {
  pid_t pid = -1;
  std::string url;
  ASSERT_NO_FATAL_FAILURE(SpawnWith("--adaptive-budget", "0.02", "budget-data", &pid, &url));
  const int n = Tokens(kT1) + Tokens(kT2);
  json budget = Paste("Now read.", {kT1, kT2}, "Who was it about?");
  budget["ragkv"] = {{"mode", "cacheblend"}};
  json fixed = Paste("Read again.", {kT1, kT2}, "Who was it about?");
  fixed["ragkv"] = {{"mode", "cacheblend"}, {"ratio", 0.15}};
  const json r = Node("sequence", {{"requests", {Paste("Read these.", {kT1, kT2}, "What happened?"),
                                                 Retry({kT1, kT2}, 0.9 * n), budget, fixed}}},
                      url);
  ASSERT_EQ(r.size(), 4u) << r;
  EXPECT_GE(Cached(r[2]), 0.9 * n) << r[2];
  EXPECT_EQ(Cached(r[3]), Cached(r[2])) << r[3];
  EXPECT_LT(r[2]["ragkv"]["recomputed_tokens"].get<int>(),
            r[3]["ragkv"]["recomputed_tokens"].get<int>())
      << r[2] << r[3];
  Stop(pid);
}

// Messages with the documents pasted in ragkv's layout (each title line and
// text, blank lines between, at the start of the last user message).
std::vector<std::pair<std::string, std::string>> PastedDocs(const std::string& question) {
  return {{"user", "Kite\n" + kT1 + "\n\nCat\n" + kT2 + "\n\n" + question}};
}
json DocsBody(const std::string& question, const json& ragkv) {
  return {{"messages", {{{"role", "user"}, {"content", question}}}},
          {"documents", {{{"title", "Kite"}, {"text", kT1}}, {{"title", "Cat"}, {"text", kT2}}}},
          {"temperature", 0},
          {"max_tokens", 16},
          {"ragkv", ragkv}};
}
json PastedBody(const std::string& question, const json& ragkv) {
  json b = DocsBody(question, ragkv);
  b.erase("documents");
  b["messages"][0]["content"] = PastedDocs(question)[0].second;
  return b;
}

// `documents` and the same text pasted are one prompt: the same tokens,
// the same rows from the store, the same recomputed rows and answer; at
// r = 1.0 CacheBlend recomputes every row it does not hold exactly (the
// stored exact prefix covers the leading ones) and answers as full mode,
// and both equal llama.cpp's greedy continuation up to an f16 near-tie.
TEST_F(LearningTest, DocumentsPastedTextAndFullModeAgree) {
  const std::string q = "What did Tom lose?";
  const int n = Tokens("Kite\n" + kT1) + Tokens("Cat\n" + kT2);
  json store_first = DocsBody(q, {{"return_tokens", true}});
  store_first["messages"][0]["content"] = "Tell me.";
  json retry = json::array();
  for (int i = 0; i < 20; ++i) {
    json b = DocsBody("Warm-up " + std::to_string(i) + ".", json::object());
    b["max_tokens"] = 1;
    retry.push_back(b);
  }
  const json r = Node(
      "sequence",
      {{"requests",
        {store_first, {{"retry", retry}, {"min_cached", 0.9 * n}},
         DocsBody(q, {{"return_tokens", true}, {"mode", "cacheblend"}, {"ratio", 0.15}}),
         PastedBody(q, {{"return_tokens", true}, {"mode", "cacheblend"}, {"ratio", 0.15}}),
         DocsBody(q, {{"return_tokens", true}, {"mode", "cacheblend"}, {"ratio", 1.0}}),
         DocsBody(q, {{"return_tokens", true}, {"mode", "full"}})}}});
  ASSERT_EQ(r.size(), 6u) << r;
  const json &docs = r[2], &pasted = r[3], &all = r[4], &full = r[5];
  EXPECT_EQ(docs["ragkv"]["prompt_token_ids"], pasted["ragkv"]["prompt_token_ids"]);
  EXPECT_GE(Cached(docs), 0.9 * n) << docs;
  EXPECT_EQ(Cached(pasted), Cached(docs)) << pasted;
  EXPECT_EQ(pasted["ragkv"]["recomputed_tokens"], docs["ragkv"]["recomputed_tokens"]) << pasted;
  EXPECT_EQ(pasted["ragkv"]["output_token_ids"], docs["ragkv"]["output_token_ids"]);
  const int prompt = all["usage"]["prompt_tokens"];
  EXPECT_EQ(all["ragkv"]["handed_over_tokens"], prompt - 1) << all;
  EXPECT_EQ(full["ragkv"]["handed_over_tokens"], prompt - 1) << full;
  const Reference ref = Greedy(PastedDocs(q), 16);
  EXPECT_EQ(Ids(full["ragkv"]["prompt_token_ids"]), ref.prompt);
  ExpectSameUpToNearTie(ref, Ids(full["ragkv"]["output_token_ids"]));
  ExpectSameUpToNearTie(ref, Ids(all["ragkv"]["output_token_ids"]));
}

// Prompt tokens llama.cpp decodes itself share the decode steps' batches:
// with --batch-size 8 a local prompt is fed over several steps while
// another slot streams, and the answer is still llama.cpp's greedy one.
TEST_F(LearningTest, APromptFedOverSeveralStepsAnswersAsAlone) {
  pid_t pid = -1;
  std::string url;
  ASSERT_NO_FATAL_FAILURE(
      Spawn({"--parallel", "2", "--ctx-size", "2048", "--batch-size", "8"}, "batch-data", &pid, &url));
  json busy = ChatBody("local", 400);
  busy["logit_bias"] = {{"2", -100}};
  json streamed;
  std::thread client([&] { streamed = Node("chat_stream", busy, url); });
  const Reference ref = Greedy(kMessages, 12);
  const json r = Node("chat", ChatBody("local", 12), url);
  client.join();
  EXPECT_EQ(Ids(r["ragkv"]["prompt_token_ids"]), ref.prompt);
  EXPECT_GT(ref.prompt.size(), 16u);  // at least three steps of 8
  EXPECT_EQ(r["ragkv"]["prefilled_tokens"], ref.prompt.size()) << r;
  ExpectSameUpToNearTie(ref, Ids(r["ragkv"]["output_token_ids"]));
  EXPECT_EQ(streamed["finish_reason"], "length") << streamed;
  Stop(pid);
}

// Scale-out: two servers share one Redis tier (CI's loopback redis-server,
// a key prefix of their own); documents sent through one are served from
// stored KV by the other, whose own RAM and SSD tiers never saw them.
TEST_F(LearningTest, TwoServersShareOneRedisTier) {
  absl::StatusOr<std::string> redis = ::ragkv::testing::SharedTestRedis();
  RAGKV_REQUIRE_OR_SKIP(redis.ok() && !redis->empty())
      << "no shared test redis-server (RAGKV_TEST_REDIS): " << redis.status();
  const std::string prefix = "ragkv-scaleout-" + std::to_string(::getpid()) + ":";
  const std::vector<std::string> flags = {"--parallel", "1", "--ctx-size", "2048", "--redis",
                                          *redis, "--redis-prefix", prefix};
  pid_t a = -1, b = -1;
  std::string url_a, url_b;
  ASSERT_NO_FATAL_FAILURE(Spawn(flags, "scale-a", &a, &url_a));
  ASSERT_NO_FATAL_FAILURE(Spawn(flags, "scale-b", &b, &url_b));
  const int n = Tokens("Kite\n" + kT1) + Tokens("Cat\n" + kT2);
  const json first = Node("chat", DocsBody("Through A.", json::object()), url_a);
  EXPECT_LT(Cached(first), 0.1 * n) << first;
  json retry = json::array();
  for (int i = 0; i < 20; ++i) retry.push_back(DocsBody("Through B " + std::to_string(i) + ".", {}));
  const json r = Node("sequence", {{"requests", {{{"retry", retry}, {"min_cached", 0.9 * n}}}}},
                      url_b);
  ASSERT_EQ(r.size(), 1u) << r;
  EXPECT_GE(Cached(r[0]), 0.9 * n) << r[0];
  EXPECT_EQ(r[0]["ragkv"]["slot_prefix_tokens"], 0) << r[0];
  Stop(a);
  Stop(b);
}

json Http(const std::string& method, const std::string& path, const json& body = nullptr) {
  return {{"http", {{"method", method}, {"path", path}, {"body", body}}}};
}

// Documents over HTTP: ingested with POST /v1/documents, named by id in a
// chat (their chunks' KV stored after the first use, then served), deleted
// with DELETE /v1/documents/{id} (then refused by name); and
// POST /v1/cache/forget deletes the KV a request's passages were stored as.
TEST_F(LearningTest, DocumentsOverHttpAndForgetting) {
  const json ingest = {{"documents", {{{"id", "kite"}, {"title", "Kite"}, {"text", kT1}},
                                      {{"id", "cake"}, {"text", kT3}}}}};
  auto by_id = [](const std::string& q, const json& docs) {
    return json{{"messages", {{{"role", "user"}, {"content", q}}}},
                {"documents", docs},
                {"temperature", 0},
                {"max_tokens", 4}};
  };
  const json ids = {{{"id", "kite"}}, {{"id", "cake"}}};
  json retry = json::array();
  for (int i = 0; i < 20; ++i) retry.push_back(by_id("Again " + std::to_string(i) + "?", ids));
  const int n = Tokens("Kite\n" + kT1) + Tokens(kT3);
  const json r = Node(
      "sequence",
      {{"requests",
        {Http("POST", "/v1/documents", ingest), by_id("What flew away?", ids),
         {{"retry", retry}, {"min_cached", 0.8 * n}},
         by_id("Which?", {{{"id", "no-such-doc"}}}),
         Http("DELETE", "/v1/documents/kite"), by_id("And now?", ids),
         Http("DELETE", "/v1/documents/kite"),
         Http("POST", "/v1/documents", {{"documents", {{{"id", ""}, {"text", "x"}}}}})}}});
  ASSERT_EQ(r.size(), 8u) << r;
  EXPECT_EQ(r[0]["status"], 200) << r[0];
  ASSERT_EQ(r[0]["json"]["data"].size(), 2u) << r[0];
  EXPECT_FALSE(r[0]["json"]["data"][0]["chunk_ids"].empty()) << r[0];
  EXPECT_EQ(r[1]["finish_reason"], "length") << r[1];
  EXPECT_GE(Cached(r[2]), 0.8 * n) << r[2];
  EXPECT_EQ(r[3]["status"], 400) << r[3];
  EXPECT_EQ(r[3]["param"], "documents[0].id") << r[3];
  EXPECT_EQ(r[3]["code"], "document_not_found") << r[3];
  EXPECT_EQ(r[4]["status"], 200) << r[4];
  EXPECT_GE(r[4]["json"]["chunks_deleted"].get<int>(), 1) << r[4];
  EXPECT_EQ(r[5]["status"], 400) << r[5];  // "kite" is gone
  EXPECT_EQ(r[6]["status"], 404) << r[6];
  EXPECT_EQ(r[7]["status"], 400) << r[7];
  EXPECT_EQ(r[7]["json"]["error"]["param"], "documents[0].id") << r[7];

  // Forgetting: a learned passage, forgotten, is not served again.
  const int m = Tokens(kT2);
  json forget = Paste("Forget me.", {kT2}, "Why?");
  forget["model"] = kModelId;
  const json f = Node(
      "sequence",
      {{"requests",
        {Paste("Forget me.", {kT2}, "Why?"), Retry({kT2}, 0.9 * m, "", 10),
         Http("POST", "/v1/cache/forget", forget),
         Paste("Once more.", {kT2}, "Why?")}}});
  ASSERT_EQ(f.size(), 4u) << f;
  EXPECT_GE(Cached(f[1]), 0.9 * m) << f[1];
  EXPECT_EQ(f[2]["status"], 200) << f[2];
  EXPECT_GE(f[2]["json"]["deleted"].get<int>(), 1) << f[2];
  EXPECT_EQ(Cached(f[3]), 0) << f[3];
}

// A request past --request-timeout ends with 504 deadline_exceeded (an
// error event in a stream) and frees its slot; the next one is served.
TEST_F(LearningTest, ARequestPastItsDeadlineIs504) {
  pid_t pid = -1;
  std::string url;
  ASSERT_NO_FATAL_FAILURE(Spawn({"--parallel", "1", "--ctx-size", "4096", "--request-timeout",
                                 "0.3"},
                                "deadline-data", &pid, &url));
  json body = ChatBody("local", 3000);
  body["logit_bias"] = {{"2", -100}};  // no end of story: it would run 3000 tokens
  const json r = Node("deadline", body, url);
  EXPECT_EQ(r["whole"]["status"], 504) << r;
  EXPECT_EQ(r["whole"]["code"], "deadline_exceeded") << r;
  EXPECT_NE(r["streamed"]["status"], 200) << r;
  EXPECT_EQ(r["after"]["finish_reason"], "length") << r;
  EXPECT_EQ(r["health"]["active"], 0) << r;
  Stop(pid);
}

}  // namespace
}  // namespace ragkv::server
