// server_fixture.h: the HTTP server tests' fixture: the real `ragkv serve
// --engine llama.cpp` (ragkv execs ragkv-llama) on an ephemeral 127.0.0.1
// port, driven by the official OpenAI npm client
// (tests/server/openai_client.mjs, the pinned `openai` that
// scripts/setup-llamacpp installs), on ../shared/models/stories260K.gguf;
// and the reference, llama.cpp itself in this process: the same templated
// prompt tokenized as one string and continued greedily.
#ifndef RAGKV_TESTS_SERVER_SERVER_FIXTURE_H_
#define RAGKV_TESTS_SERVER_SERVER_FIXTURE_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/exec_args.h"
#include "engine/llamacpp/runtime.h"
#include "llama.h"
#include "model/sampler.h"
#include "tests/support/require.h"
#include "tests/support/source_dir.h"

namespace ragkv::server {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v ? v : fallback;
}
inline std::string ModelPath() { return Env("RAGKV_TEST_MODELS", "../shared/models") + "/stories260K.gguf"; }
inline std::string OpenAiDir() {
  return Env("RAGKV_OPENAI_DIR",
             Env("XDG_CACHE_HOME", Env("HOME", "/root") + "/.cache") + "/ragkv/openai-6.30.1");
}

// Run: argv to its exit, stdout captured (stderr passes through).
inline std::string RunCapture(const std::vector<std::string>& args, const std::string& cwd, int* rc) {
  // Built before fork (base/exec_args.h): the child makes only
  // async-signal-safe calls.
  std::vector<std::string> argv = args;
  if (!argv.empty()) argv[0] = ExecArgs::InPath(argv[0]);
  const ExecArgs exec(std::move(argv));
  int fds[2];
  if (::pipe(fds) != 0) return "";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    exec.Exec();
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

class OpenAiServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(ModelPath()) || !fs::exists(OpenAiDir() + "/node_modules/openai")) return;
    work_ = fs::temp_directory_path() / ("ragkv-openai-" + std::to_string(::getpid()));
    fs::create_directories(work_ / "data");
    // The script runs beside a node_modules link to the pinned client (ES
    // modules resolve packages from the script's folder).
    fs::create_symlink(OpenAiDir() + "/node_modules", work_ / "node_modules");
    fs::copy_file(std::string(RAGKV_SOURCE_DIR) + "/tests/server/openai_client.mjs",
                  work_ / "openai_client.mjs");
    StartServer();
  }
  static void TearDownTestSuite() {
    if (pid_ > 0) Stop(pid_);
    pid_ = -1;
    if (!work_.empty()) fs::remove_all(work_);
  }

  static void StartServer() {
    Spawn({"--parallel", "4", "--ctx-size", "2048"}, "data", &pid_, &url_);
  }

  // SpawnUntil: `args` as a child process (killed with the test), its
  // stdout read until it prints LISTENING (or 180 s); what it printed.
  static std::string SpawnUntil(const std::vector<std::string>& args, pid_t* pid) {
    const ExecArgs exec(args);  // before fork (RunCapture)
    int fds[2];
    if (::pipe(fds) != 0) return "";
    *pid = ::fork();
    if (*pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::close(fds[1]);
      exec.Exec();
      ::_exit(127);
    }
    ::close(fds[1]);
    std::string out;
    char buf[4096];
    pollfd p{fds[0], POLLIN, 0};
    while (out.find("LISTENING") == std::string::npos && ::poll(&p, 1, 180000) > 0) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, n);
    }
    ::close(fds[0]);
    return out;
  }

  // Spawn: `ragkv serve --engine llama.cpp` with `extra` flags and its own
  // data dir; its pid and http://host:port once it prints LISTENING.
  // `model`: the GGUF (default the test model).
  static void Spawn(const std::vector<std::string>& extra, const std::string& data, pid_t* pid,
                    std::string* url, std::string* grpc = nullptr,
                    const std::string& model = ModelPath()) {
    std::vector<std::string> args = {
        RAGKV_BINARY, "serve", "--engine", "llama.cpp", "--model", model,
        "--http", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--metrics-port", "-1",
        "--data-dir", (work_ / data).string(), "--threads", "1", "--sync-writes", "false"};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string out = SpawnUntil(args, pid);
    const size_t at = out.find("HTTP ");
    ASSERT_NE(out.find("LISTENING"), std::string::npos) << "the server did not start: " << out;
    ASSERT_NE(at, std::string::npos) << out;
    *url = "http://" + out.substr(at + 5, out.find('\n', at) - at - 5);
    if (grpc != nullptr) {
      const size_t l = out.find("LISTENING ") + 10;
      *grpc = out.substr(l, out.find(' ', l) - l);
    }
  }

  // SigtermMidRequest: a fresh server (data dir `data`, one slot) given a
  // 900-token chat (`which`: "chat" or "chat_stream") and SIGTERM once its
  // slot is busy; the client's result. The server must exit 0.
  json SigtermMidRequest(const std::string& which, const std::string& data);

  static void Stop(pid_t pid) {
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // SIGTERM drains and exits cleanly.
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exit status " << status;
  }

  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(fs::exists(ModelPath())) << "no test model at " << ModelPath();
    RAGKV_REQUIRE_OR_SKIP(fs::exists(OpenAiDir() + "/node_modules/openai"))
        << "no openai client at " << OpenAiDir() << " (scripts/setup-llamacpp)";
    ASSERT_FALSE(url_.empty()) << "the server did not start";
  }

  // Node: one case of openai_client.mjs; its JSON.
  json Node(const std::string& which, const json& arg = json::object(), std::string url = "") {
    int rc = 0;
    const std::string out = RunCapture(
        {"node", "openai_client.mjs", url.empty() ? url_ : url, kModelId, which, arg.dump()},
                                work_.string(), &rc);
    EXPECT_EQ(rc, 0) << which << ": " << out;
    json j = json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << which << ": " << out;
    return j.is_discarded() ? json::object() : j;
  }

  static constexpr char kModelId[] = "stories260K.gguf";
  static inline fs::path work_;
  static inline pid_t pid_ = -1;
  static inline std::string url_;
};

// Reference: llama.cpp's own greedy continuation of `messages` templated
// with chatml (the default for a file without a template) and tokenized as
// one string: tokens, and per step the top-2 gap and the logits' scale.
struct Reference {
  std::vector<int32_t> prompt, output;
  std::vector<double> gap, scale;
};

inline Reference Greedy(const std::vector<std::pair<std::string, std::string>>& messages, int n,
                        const std::string& model = ModelPath()) {
  namespace lc = engine::llamacpp;
  Reference r;
  auto file = lc::LlamaFile::Open(model, {.n_ctx = 1024, .threads = 1});
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return r;
  std::vector<llama_chat_message> msgs;
  for (const auto& [role, content] : messages) msgs.push_back({role.c_str(), content.c_str()});
  std::string text(8192, '\0');
  const int len = llama_chat_apply_template("chatml", msgs.data(), msgs.size(), true, text.data(),
                                            static_cast<int32_t>(text.size()));
  text.resize(len);
  const llama_vocab* vocab = llama_model_get_vocab((*file)->model());
  r.prompt.resize(text.size() + 8);
  r.prompt.resize(llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), r.prompt.data(),
                                 static_cast<int32_t>(r.prompt.size()), true, true));
  std::vector<int32_t> all = r.prompt;
  std::vector<float> logits;
  EXPECT_TRUE(lc::DecodeTokens((*file)->context(), all, 0, 0, 1, &logits).ok());
  const int vocab_n = (*file)->vocab_size();
  for (int i = 0; i < n; ++i) {
    const int32_t best = model::Argmax(logits.data(), vocab_n);
    std::vector<float> rest = logits;
    rest[best] = -INFINITY;
    double mx = 0;
    for (float v : logits) mx = std::max(mx, static_cast<double>(std::fabs(v)));
    r.gap.push_back(logits[best] - rest[model::Argmax(rest.data(), vocab_n)]);
    r.scale.push_back(mx);
    if (llama_vocab_is_eog(vocab, best)) break;
    r.output.push_back(best);
    all.push_back(best);
    EXPECT_TRUE(lc::DecodeTokens((*file)->context(), all, all.size() - 1, 0, 1, &logits).ok());
  }
  return r;
}

// ExpectSameUpToNearTie: the served tokens equal the reference's, except
// that they may part where the reference's top-2 logit gap is below the f16
// wire's error (EngineWireTest: 2 * 5e-3 of the logits' scale).
inline void ExpectSameUpToNearTie(const Reference& ref, const std::vector<int32_t>& got) {
  size_t i = 0;
  while (i < ref.output.size() && i < got.size() && ref.output[i] == got[i]) ++i;
  if (i == ref.output.size() && i == got.size()) return;
  ASSERT_LT(i, ref.gap.size());
  EXPECT_LE(ref.gap[i], 2 * 5e-3 * ref.scale[i])
      << "the served tokens part from llama.cpp's greedy ones at " << i << " where the gap is "
      << ref.gap[i];
}

inline std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

// kStories: four short stories in the test model's register (documents).
inline const char* const kStories[] = {
    "Tom had a red kite. Every morning he ran to the hill behind the house and let the wind "
    "carry it up high. One day the string broke and the kite flew over the trees.",
    "The little cat liked to sleep in the sun. She found a warm spot near the window and "
    "purred all afternoon while the children played in the garden outside.",
    "Sara and her mom baked a big cake for the party. They put pink frosting on top and "
    "many candles. Everyone sang and the dog barked happily.",
    "A small bird lived in a tall tree by the river. It sang every day to the fish and the "
    "frogs, and they all listened quietly until the sun went down.",
};

inline const std::vector<std::pair<std::string, std::string>> kMessages = {
    {"system", "You tell short stories."}, {"user", "Once upon a time, Lily found a ball."}};

inline json ChatBody(const std::string& mode, int max_tokens) {
  json msgs = json::array();
  for (const auto& [role, content] : kMessages) msgs.push_back({{"role", role}, {"content", content}});
  json b = {{"messages", msgs}, {"temperature", 0}, {"max_tokens", max_tokens},
            {"ragkv", {{"return_tokens", true}}}};
  if (!mode.empty()) b["ragkv"]["mode"] = mode;
  return b;
}

inline json OpenAiServerTest::SigtermMidRequest(const std::string& which, const std::string& data) {
  pid_t pid = -1;
  std::string url;
  Spawn({"--parallel", "1", "--ctx-size", "1024"}, data, &pid, &url);
  if (pid <= 0 || url.empty()) return json();  // Spawn has failed the test
  json body = ChatBody("local", 900);
  body["logit_bias"] = {{"2", -100}};  // no end of story: it runs to max_tokens
  json r;
  std::thread client([&] { r = Node(which, body, url); });
  for (int i = 0; i < 200; ++i) {  // once the request is under way (the slot is busy)
    int rc = 0;
    const std::string h = RunCapture(
        {"node", "-e", "fetch(process.argv[1]).then((r) => r.text()).then(console.log)",
         url + "/health"},
        ".", &rc);
    if (h.find("\"active\":1") != std::string::npos) break;
    ::usleep(20000);
  }
  ::kill(pid, SIGTERM);
  client.join();
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  return r;
}

}  // namespace ragkv::server

#endif  // RAGKV_TESTS_SERVER_SERVER_FIXTURE_H_
