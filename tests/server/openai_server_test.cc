// openai_server_test.cc: the OpenAI-compatible server (tests/server/
// server_fixture.h) against llama.cpp's own greedy continuation: tokens,
// streaming, completions, aborts, 429, pasted passages and documents from
// stored KV, metrics, SIGTERM, slots' prefixes, concurrency, bad input.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "tests/server/server_fixture.h"

namespace ragkv::server {
namespace {

TEST_F(OpenAiServerTest, TemperatureZeroEqualsLlamaCppGreedy) {
  const Reference ref = Greedy(kMessages, 24);
  ASSERT_FALSE(ref.output.empty());
  for (const std::string mode : {"full", "local", ""}) {
    const json r = Node("chat", ChatBody(mode, 24));
    ASSERT_TRUE(r.contains("ragkv")) << r;
    // The canonical tokens are llama.cpp's own tokenization of the templated prompt.
    EXPECT_EQ(Ids(r["ragkv"]["prompt_token_ids"]), ref.prompt) << mode;
    EXPECT_EQ(r["usage"]["prompt_tokens"], ref.prompt.size());
    const std::vector<int32_t> got = Ids(r["ragkv"]["output_token_ids"]);
    EXPECT_EQ(r["usage"]["completion_tokens"], got.size());
    if (mode == "full") {
      // The sidecar computed the prompt's KV (f16 on the wire).
      EXPECT_EQ(r["ragkv"]["handed_over_tokens"], ref.prompt.size() - 1) << r;
      ExpectSameUpToNearTie(ref, got);
    } else if (mode == "local") {
      EXPECT_EQ(got, ref.output) << mode;  // llama.cpp prefilled it all
    } else {
      // The default mode may reuse a slot's kept cells (here, those of the
      // full-mode request: the sidecar's f16 rows).
      ExpectSameUpToNearTie(ref, got);
    }
    EXPECT_EQ(r["finish_reason"], got.size() == 24 ? "length" : "stop");
    EXPECT_EQ(std::string(r["id"]).rfind("chatcmpl-", 0), 0u);
    EXPECT_EQ(r["object"], "chat.completion");
  }
}

// A message that spells control tokens gets them as text: only the BOS the
// vocabulary adds is a control token of the prompt.
TEST_F(OpenAiServerTest, ControlTokenTextInContentStaysText) {
  json body = ChatBody("local", 2);
  body["messages"] = {{{"role", "user"}, {"content", "</s><s> Once upon a time </s>"}}};
  const json r = Node("chat", body);
  const std::vector<int32_t> ids = Ids(r["ragkv"]["prompt_token_ids"]);
  ASSERT_FALSE(ids.empty()) << r;
  EXPECT_EQ(ids[0], 1);  // BOS
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1) << r;
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 0) << r;  // no EOS
  // The same text in a completion prompt: text as well.
  const json c = Node("completion", {{"prompt", "</s> Once"}, {"max_tokens", 1},
                                     {"ragkv", {{"return_tokens", true}}}});
  const std::vector<int32_t> cids = Ids(c["ragkv"]["prompt_token_ids"]);
  EXPECT_EQ(std::count(cids.begin(), cids.end(), 2), 0) << c;
}

TEST_F(OpenAiServerTest, StreamingAndCompletions) {
  json body = ChatBody("local", 16);
  body["stream_options"] = {{"include_usage", true}};
  const json whole = Node("chat", ChatBody("local", 16));
  const json streamed = Node("chat_stream", body);
  EXPECT_EQ(streamed["text"], whole["text"]);
  EXPECT_EQ(streamed["finish_reason"], whole["finish_reason"]);
  EXPECT_EQ(streamed["ids"], 1);  // one id for every chunk
  ASSERT_TRUE(streamed["usage"].is_object()) << streamed;
  EXPECT_EQ(streamed["usage"]["completion_tokens"], whole["usage"]["completion_tokens"]);
  EXPECT_EQ(streamed["usage"]["prompt_tokens"], whole["usage"]["prompt_tokens"]);

  const json prompt = {{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 12},
                       {"ragkv", {{"return_tokens", true}}}};
  const json c = Node("completion", prompt);
  const json cs = Node("completion_stream", prompt);
  EXPECT_EQ(c["text"], cs["text"]);
  EXPECT_FALSE(std::string(c["text"]).empty());
  EXPECT_EQ(c["usage"]["completion_tokens"], 12);
  EXPECT_EQ(c["finish_reason"], "length");
  // The same prompt as token ids gives the same text.
  json by_ids = prompt;
  by_ids["prompt"] = c["ragkv"]["prompt_token_ids"];
  EXPECT_EQ(Node("completion", by_ids)["text"], c["text"]);
  // A stop string ends the text before it.
  const std::string text = c["text"];
  if (text.size() > 4) {
    json stopped = prompt;
    stopped["stop"] = text.substr(text.size() / 2, 2);
    const json s = Node("completion", stopped);
    EXPECT_EQ(s["finish_reason"], "stop");
    EXPECT_EQ(std::string(s["text"]), text.substr(0, text.find(text.substr(text.size() / 2, 2))));
  }
  // Seeded sampling is repeatable.
  json seeded = ChatBody("local", 12);
  seeded["temperature"] = 0.9;
  seeded["top_p"] = 0.95;
  seeded["seed"] = 42;
  EXPECT_EQ(Node("chat", seeded)["text"], Node("chat", seeded)["text"]);
}

TEST_F(OpenAiServerTest, AbortMidStreamFreesTheSlot) {
  json body = ChatBody("local", 200);
  const json r = Node("abort", body);
  EXPECT_EQ(r["abort"]["aborted"], true) << r;
  EXPECT_EQ(r["after"]["finish_reason"], "length") << r;
  // The aborted request was cancelled (not run to its 200 tokens) and its
  // slot freed.
  EXPECT_EQ(r["health"]["cancelled"], r["before"]["cancelled"].get<int>() + 1) << r;
  EXPECT_EQ(r["health"]["active"], 0) << r;
}

TEST_F(OpenAiServerTest, BeyondTheSlotsAndTheQueueIs429) {
  pid_t pid = -1;
  std::string url;
  ASSERT_NO_FATAL_FAILURE(Spawn({"--parallel", "1", "--ctx-size", "1024",
                                 "--max-queue-requests", "0"},
                                "busy-data", &pid, &url));
  json requests = json::array();
  for (int i = 0; i < 4; ++i) {
    json b = ChatBody("local", 600);
    b["logit_bias"] = {{"2", -100}};  // no end of story: each keeps its slot
    requests.push_back(b);
  }
  const json r = Node("busy", {{"requests", requests}}, url);
  int ok = 0, busy = 0;
  for (const json& s : r["statuses"]) ok += s == 200, busy += s == 429;
  EXPECT_GE(ok, 1) << r;
  EXPECT_GE(busy, 1) << r;
  EXPECT_EQ(ok + busy, 4) << r;
  for (const json& e : r["errors"]) {
    EXPECT_NE(std::string(e["message"]).find("queue is full"), std::string::npos) << e;
    EXPECT_EQ(e["code"], "rate_limit_exceeded") << e;
  }
  // Still serving once the slot is free.
  EXPECT_EQ(Node("chat", ChatBody("local", 4), url)["finish_reason"], "length");
  Stop(pid);
}

// Passages pasted into a message (no client change): the chunks `ragkv
// precompute` stored are found in the prompt by their tokens, in any order.
TEST_F(OpenAiServerTest, PastedPassagesAreServedFromStoredChunks) {
  const std::string t1 =
      "Tom had a red kite. Every morning he ran to the hill behind the house and let the wind "
      "carry it up high. One day the string broke and the kite flew over the trees. Tom was sad, "
      "but his dad helped him make a new one.";
  const std::string t2 =
      "The little cat liked to sleep in the sun. She found a warm spot near the window and purred "
      "all afternoon while the children played in the garden outside. When it rained, she hid "
      "under the bed.";
  fs::create_directories(work_ / "corpus");
  {
    std::ofstream f(work_ / "corpus" / "stories.jsonl");
    f << json({{"id", "kite"}, {"title", "Kite"}, {"text", t1}}).dump() << "\n"
      << json({{"id", "cat"}, {"title", "Cat"}, {"text", t2}}).dump() << "\n";
  }
  pid_t pid = -1;
  std::string url, grpc;
  ASSERT_NO_FATAL_FAILURE(Spawn({"--parallel", "2", "--ctx-size", "2048", "--corpus-root",
                                 (work_ / "corpus").string()},
                                "paste-data", &pid, &url, &grpc));
  int rc = 0;
  const std::string pre = RunCapture({RAGKV_BINARY, "precompute", "--corpus",
                                      (work_ / "corpus" / "stories.jsonl").string(), "--server",
                                      grpc},
                                     ".", &rc);
  ASSERT_EQ(rc, 0) << pre;
  // "tokens N": the tokens the job stored.
  const size_t at = pre.find("tokens");
  ASSERT_NE(at, std::string::npos) << pre;
  const int stored = std::atoi(pre.c_str() + pre.find_first_of("0123456789", at));
  ASSERT_GT(stored, 100) << pre;
  for (const std::string& content :
       {"Read these.\n\n" + t1 + "\n\n" + t2 + "\n\nWhat happened?",
        "Passages:\n" + t2 + "\n\n" + t1 + "\n\nWho was sad?"}) {
    const json r = Node("chat", {{"messages", {{{"role", "user"}, {"content", content}}}},
                                 {"temperature", 0}, {"max_tokens", 4}},
                        url);
    EXPECT_GE(r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0.9 * stored) << r;
    EXPECT_TRUE(r["ragkv"]["fallback"].is_null()) << r;
  }
  // The same texts as `documents`, on their first use: the precomputed
  // chunks serve them, although under this SentencePiece vocabulary a
  // chunk's first token alone ("▁Tom") is not its token in place ("Tom").
  const json docs = {{{"title", "Cat"}, {"text", t2}}, {{"title", "Kite"}, {"text", t1}}};
  const json r = Node("chat", {{"messages", {{{"role", "user"}, {"content", "Who was sad?"}}}},
                               {"documents", docs}, {"temperature", 0}, {"max_tokens", 4}},
                      url);
  EXPECT_GE(r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0.9 * stored) << r;
  EXPECT_TRUE(r["ragkv"]["fallback"].is_null()) << r;
  // Server-side retrieval: the question alone, the catalogue's top chunks
  // put in as documents and served from their stored KV.
  const json q = {{"messages", {{{"role", "user"}, {"content", "Why was Tom sad about his kite?"}}}},
                  {"temperature", 0}, {"max_tokens", 4}};
  json with_k = q;
  with_k["ragkv"] = {{"k", 2}};
  const json alone = Node("chat", q, url), retrieved = Node("chat", with_k, url);
  EXPECT_EQ(alone["ragkv"]["retrieved_chunks"], 0) << alone;
  EXPECT_EQ(retrieved["ragkv"]["retrieved_chunks"], 2) << retrieved;
  EXPECT_GE(retrieved["usage"]["prompt_tokens"].get<int>(),
            alone["usage"]["prompt_tokens"].get<int>() + 0.9 * stored)
      << retrieved;
  EXPECT_GE(retrieved["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0.9 * stored)
      << retrieved;
  Stop(pid);
}

// Prometheus text: a value of one sample ("name{labels} value").
double Sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + series.size() + 2);
}

TEST_F(OpenAiServerTest, MetricsCountRequestsTokensAndLatency) {
  const json before = Node("metrics", ChatBody("local", 6));
  const json after = Node("metrics", ChatBody("local", 6));
  ASSERT_EQ(after["status"], 200) << after;
  const std::string a = before["text"], b = after["text"];
  // Two generations each time (one streamed), one bad request.
  EXPECT_EQ(Sample(b, "ragkv_http_ttft_seconds_count") - Sample(a, "ragkv_http_ttft_seconds_count"),
            2) << b;
  EXPECT_EQ(Sample(b, "ragkv_http_tpot_seconds_count") - Sample(a, "ragkv_http_tpot_seconds_count"),
            2) << b;
  EXPECT_EQ(Sample(b, "ragkv_http_completion_tokens_total") -
                Sample(a, "ragkv_http_completion_tokens_total"),
            12) << b;
  EXPECT_GE(Sample(b, "ragkv_http_requests_total{endpoint=\"chat\",code=\"400\"}"), 2) << b;
  EXPECT_GE(Sample(b, "ragkv_http_requests_total{endpoint=\"chat\",code=\"200\"}"), 4) << b;
  EXPECT_EQ(Sample(b, "ragkv_http_slots"), 4) << b;
  EXPECT_EQ(Sample(b, "ragkv_http_queue_depth"), 0) << b;
}

// SIGTERM drains: a stream in flight runs to its end, then the server exits 0.
TEST_F(OpenAiServerTest, SigtermLetsInFlightStreamsFinish) {
  const json r = SigtermMidRequest("chat_stream", "drain-data");
  EXPECT_EQ(r["finish_reason"], "length") << r;
  EXPECT_EQ(r["usage"].is_null() ? 0 : 1, 0);  // include_usage was not asked
}

// SIGTERM drains a non-streamed request too: its answer is written whole
// before the stop ends the connections.
TEST_F(OpenAiServerTest, SigtermLetsAnInFlightRequestWriteItsAnswer) {
  const json r = SigtermMidRequest("chat", "drain-plain");
  EXPECT_EQ(r["finish_reason"], "length") << r;
  EXPECT_EQ(r["usage"]["completion_tokens"], 900) << r;
}

// KeepAliveGet: GET `path` on a new kept-alive connection to 127.0.0.1:port;
// the whole response (headers and Content-Length bytes, up to 10 s) into
// *answer; the connection is left open (the caller closes the fd).
int KeepAliveGet(int port, const std::string& path, std::string* answer) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return fd;
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) return fd;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  size_t want = std::string::npos;  // header bytes + Content-Length, once known
  while (answer->size() < want && ::poll(&p, 1, 10000) > 0) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    answer->append(buf, n);
    const size_t end = answer->find("\r\n\r\n");
    const size_t cl = answer->find("Content-Length: ");
    if (want == std::string::npos && end != std::string::npos && cl != std::string::npos) {
      want = end + 4 + std::stoul(answer->substr(cl + 16));
    }
  }
  return fd;
}

// SIGTERM does not wait for idle clients: an SDK's pooled connection stays
// open between requests, and cpp-httplib 0.11 notices a stop only after the
// keep-alive (here 600 s) runs out. The server closes the idle connection
// and exits 0 while the client still holds it; 20 s is a hang bound (the
// drain takes milliseconds), not a speed figure.
TEST_F(OpenAiServerTest, SigtermClosesIdleKeptAliveConnections) {
  pid_t pid = -1;
  std::string url;
  ASSERT_NO_FATAL_FAILURE(
      Spawn({"--parallel", "1", "--ctx-size", "256", "--http-keep-alive", "600"}, "idle-data", &pid,
            &url));
  std::string answer;
  const int fd = KeepAliveGet(std::stoi(url.substr(url.rfind(':') + 1)), "/v1/models", &answer);
  ASSERT_NE(answer.find("200 OK"), std::string::npos) << answer;
  ASSERT_NE(answer.find(kModelId), std::string::npos) << answer;
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 200), 0) << "the connection is not idle before the stop";
  ::kill(pid, SIGTERM);
  // The server ends the connection (EOF) and exits, the client still holding it.
  char buf[64];
  ssize_t n = -1;
  if (::poll(&p, 1, 20000) > 0) n = ::read(fd, buf, sizeof buf);
  EXPECT_EQ(n, 0) << "the idle connection was not closed within 20 s of SIGTERM";
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 2000 && done == 0; ++i) {
    done = ::waitpid(pid, &status, WNOHANG);
    if (done == 0) ::usleep(10000);
  }
  if (done == 0) ::kill(pid, SIGKILL), ::waitpid(pid, &status, 0);
  EXPECT_EQ(done, pid) << "the server did not exit within 20 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ::close(fd);
}

// Idle pooled clients do not lock out new ones: a kept-alive connection
// holds an HTTP worker between its requests, so with a fixed pool a client
// past the pool's size got no answer (not even a 429) until an idle one's
// keep-alive (here 600 s) ran out. 6 workers are kept (--parallel 1, queue
// 1) and 16 connections stay idle; a new one must be answered. 10 s is a
// hang bound, not a speed figure.
TEST_F(OpenAiServerTest, IdleKeptAliveClientsDoNotLockOutNewOnes) {
  pid_t pid = -1;
  std::string url;
  ASSERT_NO_FATAL_FAILURE(Spawn({"--parallel", "1", "--ctx-size", "256", "--max-queue-requests",
                                 "1", "--http-keep-alive", "600"},
                                "pool-data", &pid, &url));
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) {
    std::string answer;
    idle.push_back(KeepAliveGet(port, "/v1/models", &answer));
    EXPECT_NE(answer.find("200 OK"), std::string::npos) << "connection " << i << ": " << answer;
  }
  std::string answer;
  const int fd = KeepAliveGet(port, "/health", &answer);
  EXPECT_NE(answer.find("HTTP/1.1 200"), std::string::npos)
      << "no answer within 10 s with 16 idle connections open: " << answer;
  ::close(fd);
  for (int i : idle) ::close(i);
  Stop(pid);
}

TEST(ServeEngineTest, WithoutLlamaCppExitsTwoNamingTheSetup) {
  int rc = 0;
  const std::string out = RunCapture(
      {"sh", "-c",
       std::string("RAGKV_LLAMA_BIN=/nonexistent/ragkv-llama ") + RAGKV_BINARY +
           " serve --engine llama.cpp --model x.gguf 2>&1"},
      ".", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("scripts/setup-llamacpp"), std::string::npos) << out;
  const std::string other = RunCapture(
      {"sh", "-c", std::string(RAGKV_BINARY) + " serve --engine vllm --model x.gguf 2>&1"}, ".",
      &rc);
  EXPECT_EQ(rc, 2) << other;
}

std::vector<json> Docs(int seed) {
  std::vector<json> d;
  for (int i = 0; i < 3; ++i) {
    d.push_back({{"title", "Story " + std::to_string(seed * 10 + i)},
                 {"text", kStories[(seed + i) % 4]}});
  }
  return d;
}

TEST_F(OpenAiServerTest, DocumentsAreServedFromStoredKv) {
  json body = {{"messages", {{{"role", "user"}, {"content", "What happened to the kite?"}}}},
               {"documents", Docs(1)}, {"temperature", 0}, {"max_tokens", 8}};
  // The documents' tokens, as llama.cpp tokenizes each title line + text.
  auto file = engine::llamacpp::LlamaFile::Open(ModelPath(), {.n_ctx = 256, .threads = 1});
  ASSERT_TRUE(file.ok());
  const llama_vocab* vocab = llama_model_get_vocab((*file)->model());
  int doc_tokens = 0;
  for (const json& d : Docs(1)) {
    const std::string block = std::string(d["title"]) + "\n" + std::string(d["text"]);
    std::vector<int32_t> t(block.size() + 8);
    doc_tokens += llama_tokenize(vocab, block.data(), static_cast<int32_t>(block.size()), t.data(),
                                 static_cast<int32_t>(t.size()), false, false);
  }
  const json r = Node("documents", {{"body", body}, {"min_cached", 0.9 * doc_tokens}});
  const int first = r["first"]["usage"]["prompt_tokens_details"]["cached_tokens"];
  const int second = r["second"]["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_LT(first, doc_tokens) << r;
  EXPECT_GE(second, 0.9 * doc_tokens) << r;
  EXPECT_EQ(r["second"]["ragkv"]["slot_prefix_tokens"], 0) << r;  // the store served them
}

// A slot keeps its cells: the same prompt again costs one token, and the
// next turn of the conversation only its new tokens.
TEST_F(OpenAiServerTest, ASlotReusesItsPrefixAcrossTurns) {
  json body = ChatBody("", 12);
  body["messages"] = {{{"role", "user"}, {"content", "Once upon a time, Max had a big dog."}}};
  const json r = Node("conversation", body);
  const int n = r["first"]["usage"]["prompt_tokens"];
  EXPECT_EQ(r["same"]["usage"]["prompt_tokens_details"]["cached_tokens"], n - 1) << r;
  EXPECT_EQ(r["same"]["ragkv"]["prefilled_tokens"], 1) << r;
  // llama.cpp's own cells, reused: the very same continuation.
  EXPECT_EQ(r["same"]["ragkv"]["output_token_ids"], r["first"]["ragkv"]["output_token_ids"]) << r;
  const int cached = r["next"]["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GE(cached, 0.9 * n) << r;
  EXPECT_EQ(r["next"]["ragkv"]["slot_prefix_tokens"], cached) << r;
  EXPECT_EQ(r["next"]["ragkv"]["prefilled_tokens"],
            r["next"]["usage"]["prompt_tokens"].get<int>() - cached)
      << r;
}

TEST_F(OpenAiServerTest, ConcurrentStreamsEqualEachAlone) {
  json requests = json::array();
  for (int i = 0; i < 8; ++i) {  // 8 clients on 4 slots: 4 wait in the queue
    requests.push_back({{"messages", {{{"role", "user"}, {"content", "Tell me about story " +
                                                                         std::to_string(i)}}}},
                        {"documents", Docs(10 + i)}, {"temperature", 0}, {"max_tokens", 16},
                        {"ragkv", {{"mode", "full"}}}});
  }
  const json r = Node("concurrent", {{"requests", requests}});
  ASSERT_EQ(r["together"].size(), 8u) << r;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(r["together"][i]["text"], r["alone"][i]["text"]) << i;
    EXPECT_EQ(r["together"][i]["finish_reason"], r["alone"][i]["finish_reason"]) << i;
    EXPECT_FALSE(r["together"][i]["finish_reason"].is_null()) << i;
  }
}

// The sidecar's TLS files apply to the HTTP port: the OpenAI client speaks
// HTTPS to it (trusting the certificate), and a plain-HTTP client gets no
// answer.
TEST_F(OpenAiServerTest, TheSidecarsTlsAppliesToHttp) {
  const std::string cert = (work_ / "tls_cert.pem").string();
  const std::string key = (work_ / "tls_key.pem").string();
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
      "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " + key + " -out " + cert + " 2>/dev/null";
  RAGKV_REQUIRE_OR_SKIP(std::system(cmd.c_str()) == 0) << "openssl not available";
  ::chmod(key.c_str(), 0600);
  pid_t pid = -1;
  std::string url;
  ASSERT_NO_FATAL_FAILURE(Spawn({"--parallel", "1", "--ctx-size", "512", "--tls-cert", cert,
                                 "--tls-key", key},
                                "tls-data", &pid, &url));
  const json body = {{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
                     {"temperature", 0}, {"max_tokens", 4}};
  ::setenv("NODE_EXTRA_CA_CERTS", cert.c_str(), 1);
  const json r = Node("chat", body, "https" + url.substr(4));
  EXPECT_EQ(r["usage"]["completion_tokens"], 4) << r;
  int rc = 0;
  const std::string plain =
      RunCapture({"node", "openai_client.mjs", url, kModelId, "chat", body.dump()}, work_.string(), &rc);
  ::unsetenv("NODE_EXTRA_CA_CERTS");
  EXPECT_NE(rc, 0) << plain;
  Stop(pid);
}

TEST_F(OpenAiServerTest, BadInputIsRefusedByName) {
  const json r = Node("errors");
  auto expect = [&](const char* name, int status, const char* param, const char* code = nullptr) {
    SCOPED_TRACE(name);
    const json& e = r[name];
    EXPECT_EQ(e["status"], status) << e;
    const json& err = e.contains("json") ? e["json"]["error"] : e;
    if (param != nullptr) {
      EXPECT_EQ(err["param"], param) << e;
    }
    if (code != nullptr) {
      EXPECT_EQ(err["code"], code) << e;
    }
    if (e.contains("json") && status >= 400) {
      for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(err.contains(k)) << k;
    }
  };
  expect("malformed", 400, nullptr, "invalid_json");
  expect("not_object", 400, nullptr, "invalid_json");
  expect("wrong_type", 400, "temperature");
  expect("no_messages", 400, "messages");
  expect("unknown_model", 404, "model", "model_not_found");
  expect("n2", 400, "n");
  expect("logprobs", 400, "logprobs");
  expect("tools", 400, "tools");
  expect("image", 400, "messages[0].content[1]");
  expect("too_long", 400, "messages", "context_length_exceeded");
  expect("oversized", 400, nullptr, "body_too_large");
  expect("bad_ids", 400, "prompt");
  expect("bad_logit_bias", 400, "logit_bias");
  expect("defaults", 200, nullptr);
  expect("no_route", 404, nullptr);
  EXPECT_EQ(r["models"], json::array({kModelId}));
  expect("health", 200, nullptr);
  expect("after", 200, nullptr);  // still serving
}

}  // namespace
}  // namespace ragkv::server
