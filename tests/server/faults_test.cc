// faults_test.cc: the OpenAI-compatible server (tests/server/
// server_fixture.h) when its sidecar fails or its clients leave. The
// engine reaches a sidecar of its own process (`--engine-upstream`), so the
// test can kill it (its Blend streams cut while slots are busy) or stop it
// (a blend held mid-way while the client leaves).
#include "tests/server/server_fixture.h"

namespace ragkv::server {
namespace {

class FaultsTest : public OpenAiServerTest {
 protected:
  static void SetUpTestSuite() {}  // each test starts its own servers
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(fs::exists(ModelPath())) << "no test model at " << ModelPath();
    RAGKV_REQUIRE_OR_SKIP(fs::exists(OpenAiDir() + "/node_modules/openai"))
        << "no openai client at " << OpenAiDir() << " (scripts/setup-llamacpp)";
    if (work_.empty()) {
      work_ = fs::temp_directory_path() / ("ragkv-faults-" + std::to_string(::getpid()));
      fs::create_directories(work_);
      fs::create_symlink(OpenAiDir() + "/node_modules", work_ / "node_modules");
      fs::copy_file(std::string(RAGKV_SOURCE_DIR) + "/tests/server/openai_client.mjs",
                    work_ / "openai_client.mjs");
    }
  }

  // SpawnSidecar: a gRPC-only `ragkv serve` of the same model; its pid and
  // address.
  static void SpawnSidecar(const std::string& data, pid_t* pid, std::string* address) {
    const std::string out = SpawnUntil(
        {RAGKV_BINARY, "serve", "--model", ModelPath(), "--listen", "127.0.0.1:0", "--metrics-port",
         "-1", "--data-dir", (work_ / data).string(), "--sync-writes", "false"},
        pid);
    ASSERT_NE(out.find("LISTENING "), std::string::npos) << "the sidecar did not start: " << out;
    const size_t l = out.find("LISTENING ") + 10;
    *address = out.substr(l, out.find_first_of(" \n", l) - l);
  }

  void LeaveMidBlend(const std::string& mode, const json& input);
  static void Kill(pid_t pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }

  static void TearDownTestSuite() {
    if (!work_.empty()) fs::remove_all(work_);
  }
};

json DocsRequest(int seed, const std::string& mode, int max_tokens) {
  json docs = json::array();
  for (int i = 0; i < 2; ++i) {
    docs.push_back({{"title", "Story " + std::to_string(seed) + "." + std::to_string(i)},
                    {"text", kStories[(seed + i) % 3]}});
  }
  json b = {{"messages", {{{"role", "user"}, {"content", "What happened?"}}}},
            {"documents", docs},
            {"temperature", 0},
            {"max_tokens", max_tokens}};
  if (!mode.empty()) b["ragkv"] = {{"mode", mode}};
  return b;
}

// The sidecar killed while one slot streams and another blends: the
// requests after it fall back to llama.cpp's own prefill (the same text as
// mode local), the busy stream finishes, and the server keeps serving.
TEST_F(FaultsTest, ASidecarKilledWhileSlotsAreBusyFallsBack) {
  pid_t sidecar = -1, server = -1;
  std::string address, url;
  ASSERT_NO_FATAL_FAILURE(SpawnSidecar("upstream-data", &sidecar, &address));
  ASSERT_NO_FATAL_FAILURE(Spawn({"--parallel", "2", "--ctx-size", "4096", "--engine-upstream",
                                 address},
                                "front-data", &server, &url));
  const json before = Node("chat", DocsRequest(1, "", 8), url);
  EXPECT_TRUE(before["ragkv"]["fallback"].is_null()) << before;  // the sidecar served it
  json busy = ChatBody("local", 1500);
  busy["logit_bias"] = {{"2", -100}};  // no end of story: the slot stays busy
  json streamed;
  std::thread client([&] { streamed = Node("chat_stream", busy, url); });
  ::usleep(300000);
  Kill(sidecar);
  const json after = Node("chat", DocsRequest(2, "", 8), url);
  const json local = Node("chat", DocsRequest(2, "local", 8), url);
  client.join();
  EXPECT_FALSE(after["ragkv"]["fallback"].is_null()) << after;
  EXPECT_EQ(after["text"], local["text"]) << after;
  EXPECT_EQ(after["finish_reason"], local["finish_reason"]);
  EXPECT_EQ(streamed["finish_reason"], "length") << streamed;
  EXPECT_EQ(Node("chat", ChatBody("", 4), url)["finish_reason"], "length");
  Stop(server);
}

// A client that leaves while its blend is held mid-way (the sidecar
// stopped) is cancelled: its slot is freed once the server notices (a
// stream at its next event, a whole answer at its next 50 ms look at the
// connection), and the server serves the next request. `mode` is the
// client's case (it leaves after 1 s or less).
void FaultsTest::LeaveMidBlend(const std::string& mode, const json& input) {
  pid_t sidecar = -1, server = -1;
  std::string address, url;
  ASSERT_NO_FATAL_FAILURE(SpawnSidecar("held-data", &sidecar, &address));
  ASSERT_NO_FATAL_FAILURE(Spawn({"--parallel", "1", "--ctx-size", "2048", "--engine-upstream",
                                 address},
                                "held-front-data", &server, &url));
  ::kill(sidecar, SIGSTOP);
  json r;
  std::thread client([&] { r = Node(mode, input, url); });
  ::usleep(1500000);  // the client has left
  ::kill(sidecar, SIGCONT);
  client.join();
  EXPECT_EQ(r["abort"]["aborted"], true) << r;
  EXPECT_EQ(r["health"]["active"], 0) << r;
  EXPECT_EQ(r["health"]["cancelled"], r["before"]["cancelled"].get<int>() + 1) << r;
  const json next = Node("chat", DocsRequest(4, "", 4), url);
  EXPECT_EQ(next["finish_reason"], "length") << next;
  EXPECT_TRUE(next["ragkv"]["fallback"].is_null()) << next;
  Stop(server);
  Kill(sidecar);
}

TEST_F(FaultsTest, AClientLeavingMidBlendFreesItsSlot) {
  LeaveMidBlend("abort_held", DocsRequest(3, "", 64));
}

TEST_F(FaultsTest, AClientLeavingAWholeAnswerMidBlendFreesItsSlot) {
  LeaveMidBlend("abort_whole_held", {{"body", DocsRequest(3, "", 64)}, {"abort_ms", 1000}});
}

}  // namespace
}  // namespace ragkv::server
