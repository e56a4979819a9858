// Security guarantees of the sidecar over real gRPC on 127.0.0.1:
//  - corpus paths of PrecomputeService.StartJob are confined to
//    --corpus-root (`..`, absolute paths and symlinks that lead out are
//    PERMISSION_DENIED, the same answer whether the target exists or not);
//  - --max-rps / --max-rps-per-peer / --max-inflight answer
//    RESOURCE_EXHAUSTED beyond the limit, admit within it, and count the
//    rejections in /metrics;
//  - the bearer token given by file, environment or argv never appears in the
//    real `ragkv serve` binary's stdout/stderr, in /metrics, in error
//    messages, or (argv) in /proc/PID/cmdline once the server is up; nor
//    does the TLS private key.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ragkv/v1/kvstore.grpc.pb.h"
#include "base/exec_args.h"
#include "services/sidecar.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

namespace fs = std::filesystem;

std::string Scrape(int metrics_port) {
  httplib::Client http("127.0.0.1", metrics_port);
  auto res = http.Get("/metrics");
  return res && res->status == 200 ? res->body : std::string();
}

// Sample: the value of the Prometheus series `series` (exact name+labels),
// -1 when absent.
double Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, series + " ")) {
      double v = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
    }
  }
  return -1;
}

// WaitForInflight: polls the ragkv_rpc_inflight gauge until it reads `n`
// (up to 30 s); false if it never does.
bool WaitForInflight(int metrics_port, double n) {
  for (int i = 0; i < 600; ++i) {
    if (Sample(Scrape(metrics_port), "ragkv_rpc_inflight") == n) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

// ---- Path confinement -------------------------------------------------------

class CorpusRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found";
    root_ = dir_.path() + "/corpus";
    WriteCorpus(root_, 2);
    fs::create_directories(dir_.path() + "/secret");
    std::ofstream(dir_.path() + "/secret/secret.txt")
        << "The secret password of the castle is swordfish, said the old king.";
    fs::create_symlink(dir_.path() + "/secret/secret.txt", root_ + "/leak.txt");
    fs::create_symlink(dir_.path() + "/secret", root_ + "/leakdir");
    services::SidecarOptions o = TestSidecarOptions(dir_.path() + "/data");
    o.services = {"retrieval", "kvstore", "precompute"};
    o.corpus_roots = {root_};
    auto s = services::Sidecar::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    sidecar_ = std::move(*s);
    client_ = ClientFor(sidecar_->address());
    ASSERT_NE(client_, nullptr);
  }

  absl::Status Start(const std::string& path) {
    v1::StartJobRequest req;
    req.mutable_corpus()->add_paths(path);
    return client_->StartJob(req).status();
  }

  TempDir dir_;
  std::string root_;
  std::unique_ptr<services::Sidecar> sidecar_;
  std::unique_ptr<Client> client_;
};

TEST_F(CorpusRootTest, PathsOutsideTheRootArePermissionDeniedWhetherOrNotTheyExist) {
  const std::string outside_existing = dir_.path() + "/secret/secret.txt";
  const std::string outside_missing = dir_.path() + "/secret/no_such_file.txt";
  for (const std::string& p :
       {outside_existing, outside_missing, root_ + "/../secret/secret.txt",
        root_ + "/../secret/no_such_file.txt", root_ + "/no_such_dir/../../secret",
        std::string("/etc/passwd"), std::string("/no/such/file"), std::string("../secret"),
        std::string("../../../../../../etc/passwd"), root_ + "/leak.txt", root_ + "/leakdir",
        root_ + "/leakdir/secret.txt", root_ + "_sibling/x.txt"}) {
    absl::Status s = Start(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << p << ": " << s;
    // The message names the path as given and nothing else: no hint of
    // whether it exists or where it resolved to.
    // (The sidecar appends the call's request id.)
    EXPECT_TRUE(absl::StartsWith(
        std::string(s.message()),
        absl::StrFormat("corpus path '%s' is outside the directories this sidecar "
                        "serves (--corpus-root) [request_id=",
                        p)))
        << p << ": " << s;
  }
}

TEST_F(CorpusRootTest, PathsInsideTheRootWorkAndSymlinksOutAreSkippedInDirectories) {
  // Missing inside the root: NOT_FOUND (probing inside the root is allowed).
  EXPECT_EQ(Start(root_ + "/missing.txt").code(), absl::StatusCode::kNotFound);
  // A relative path is taken against the root.
  {
    auto done = RunPrecomputeJob(client_.get(), "story_000.txt");
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED);
    EXPECT_EQ(done->documents(), 1u);
  }
  // The whole root: both stories, but not the file behind the symlinks.
  auto done = RunPrecomputeJob(client_.get(), root_ + "/./");
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(done->documents(), 2u);
  v1::SearchRequest q;
  q.set_text("secret password castle swordfish king");
  q.set_k(10);
  q.set_include_content(true);
  auto hits = client_->Search(q);
  ASSERT_TRUE(hits.ok()) << hits.status();
  EXPECT_GT(hits->hits_size(), 0);
  for (const auto& h : hits->hits()) {
    EXPECT_FALSE(absl::StrContains(h.chunk().text(), "swordfish")) << h.chunk().doc_id();
  }
}

TEST(CorpusRootDefaultTest, WithoutCorpusRootServerSidePathsAreRefused) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found";
  TempDir dir;
  WriteCorpus(dir.path() + "/corpus", 1);
  services::SidecarOptions o = TestSidecarOptions(dir.path() + "/data");
  o.services = {"retrieval", "kvstore", "precompute"};
  auto s = services::Sidecar::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto client = ClientFor((*s)->address());
  v1::StartJobRequest req;
  req.mutable_corpus()->add_paths(dir.path() + "/corpus");
  auto job = client->StartJob(req);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(job.status().message(), "--corpus-root")) << job.status();

  // A root that is not a directory is a startup error.
  o.data_dir = dir.path() + "/data2";
  o.corpus_roots = {dir.path() + "/no_such_root"};
  EXPECT_EQ(services::Sidecar::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.corpus_roots = {dir.path() + "/corpus/story_000.txt"};
  EXPECT_EQ(services::Sidecar::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- Rate and in-flight limits ----------------------------------------------

services::SidecarOptions KvOnly(const std::string& data_dir) {
  services::SidecarOptions o = TestSidecarOptions(data_dir);
  o.model_path.clear();
  o.services = {"kvstore"};
  return o;
}

TEST(RateLimitTest, GlobalBucketAdmitsTheBurstThenRejectsAndCounts) {
  TempDir dir;
  services::SidecarOptions o = KvOnly(dir.path());
  o.auth_token = "rate-test-token";
  o.max_rps = 0.001;  // one token per 1000 s: nothing refills during the test
  o.rps_burst = 3;
  auto s = services::Sidecar::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto good = ClientFor((*s)->address(), "rate-test-token");
  auto bad = ClientFor((*s)->address(), "wrong-token");
  // Unauthenticated calls are refused before the bucket: they use no token.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(bad->GetStats().status().code(), absl::StatusCode::kUnauthenticated);
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(good->GetStats().ok()) << i;
  for (int i = 0; i < 4; ++i) {
    absl::Status st = good->GetStats().status();
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
    EXPECT_TRUE(absl::StrContains(st.message(), "--max-rps")) << st;
  }
  const std::string m = Scrape((*s)->metrics_port());
  EXPECT_EQ(Sample(m, "ragkv_rpc_rejected_total{reason=\"rate_limit\"}"), 4) << m;
  EXPECT_EQ(Sample(m, "ragkv_rpc_rejected_total{reason=\"unauthenticated\"}"), 5) << m;
}

TEST(RateLimitTest, PerPeerBucketRejectsBeyondItsBurst) {
  TempDir dir;
  services::SidecarOptions o = KvOnly(dir.path());
  o.max_rps_per_peer = 0.001;
  o.rps_burst = 2;
  auto s = services::Sidecar::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  // Two channels from the same host share the peer's bucket.
  auto a = ClientFor((*s)->address());
  auto b = ClientFor((*s)->address());
  EXPECT_TRUE(a->GetStats().ok());
  EXPECT_TRUE(b->GetStats().ok());
  absl::Status st = a->GetStats().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "--max-rps-per-peer")) << st;
  EXPECT_EQ(b->GetStats().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(
      Sample(Scrape((*s)->metrics_port()), "ragkv_rpc_rejected_total{reason=\"peer_rate_limit\"}"),
      2);
}

TEST(RateLimitTest, LimitsAreOffByDefault) {
  TempDir dir;
  auto s = services::Sidecar::Start(KvOnly(dir.path()));
  ASSERT_TRUE(s.ok()) << s.status();
  auto c = ClientFor((*s)->address());
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(c->GetStats().ok()) << i;
  EXPECT_EQ(Scrape((*s)->metrics_port()).find("ragkv_rpc_rejected_total"), std::string::npos);
}

TEST(InflightLimitTest, OpenStreamHoldsTheOnlySlotUntilItEnds) {
  TempDir dir;
  services::SidecarOptions o = KvOnly(dir.path());
  o.max_inflight = 1;
  auto s = services::Sidecar::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto c = ClientFor((*s)->address());

  // A client stream left open (no half-close) holds its admission ticket.
  auto channel = grpc::CreateChannel((*s)->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::KVStoreService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
  v1::PutChunkResponse put_resp;
  auto writer = stub->PutChunk(&ctx, &put_resp);
  // Wait (scraping /metrics, which takes no slot) until the server has
  // admitted the stream.
  ASSERT_TRUE(WaitForInflight((*s)->metrics_port(), 1));
  absl::Status st = c->GetStats().status();
  ASSERT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "--max-inflight 1")) << st;
  const std::string m = Scrape((*s)->metrics_port());
  EXPECT_GE(Sample(m, "ragkv_rpc_rejected_total{reason=\"inflight\"}"), 1) << m;
  EXPECT_EQ(Sample(m, "ragkv_rpc_inflight"), 1) << m;

  // End the stream (empty Put: INVALID_ARGUMENT, still ends the call).
  writer->WritesDone();
  EXPECT_FALSE(writer->Finish().ok());
  // The slot was freed before the stream's status reached the client.
  EXPECT_EQ(Sample(Scrape((*s)->metrics_port()), "ragkv_rpc_inflight"), 0);
  st = c->GetStats().status();
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(c->GetStats().ok());
}

TEST(InflightLimitTest, EngineCallsToItsOwnSidecarAreNotCountedAgainstTheLimit) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found";
  TempDir dir;
  WriteCorpus(dir.path() + "/corpus", 2);
  services::SidecarOptions o = TestSidecarOptions(dir.path() + "/data");
  o.corpus_roots = {dir.path() + "/corpus"};
  o.max_inflight = 1;  // Generate itself takes the only slot
  auto s = services::Sidecar::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto c = ClientFor((*s)->address());
  auto done = RunPrecomputeJob(c.get(), dir.path() + "/corpus");
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED);
  v1::GenerateRequest g;
  g.set_question("What did Lily have?");
  g.set_k(2);
  g.set_max_new_tokens(2);
  g.mutable_blend()->set_mode(v1::BLEND_MODE_CACHEBLEND);
  g.mutable_blend()->set_recompute_ratio(0.15f);
  auto resp = c->Generate(g);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->chunk_ids_size(), 2);
}

// ---- No secret in logs, metrics, error messages or argv ----------------------

struct ServeRun {
  pid_t pid = -1;
  std::string out_path, err_path;
  std::string address;
  int metrics_port = -1;
};

// StartServe: fork/exec RAGKV_BINARY with `args` and `env` (added to the
// parent's); stdout/stderr to files. Waits for the LISTENING line.
ServeRun StartServe(const std::string& dir, const std::vector<std::string>& args,
                    const std::vector<std::string>& env) {
  ServeRun r;
  r.out_path = dir + "/serve.out";
  r.err_path = dir + "/serve.err";
  std::vector<std::string> argv = {RAGKV_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const ExecArgs exec(std::move(argv), env);  // before fork (base/exec_args.h)
  r.pid = fork();
  if (r.pid == 0) {
    int out = open(r.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open(r.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    exec.Exec();
    _exit(127);
  }
  for (int i = 0; i < 1200; ++i) {  // up to 60 s (model load on a busy box)
    std::ifstream in(r.out_path);
    std::string word, addr, metrics_word;
    int mport = -1;
    if (in >> word >> addr >> metrics_word >> mport && word == "LISTENING") {
      r.address = addr;
      r.metrics_port = mport;
      return r;
    }
    int status = 0;
    if (waitpid(r.pid, &status, WNOHANG) == r.pid) {
      r.pid = -1;
      return r;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return r;
}

// StopServe: SIGTERM and reap; the exit code.
int StopServe(ServeRun* r) {
  if (r->pid <= 0) return -1;
  kill(r->pid, SIGTERM);
  int status = 0;
  waitpid(r->pid, &status, 0);
  r->pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Cmdline(pid_t pid) {
  std::string s = ReadAll(absl::StrFormat("/proc/%d/cmdline", pid));
  for (char& ch : s) {
    if (ch == '\0') ch = ' ';
  }
  return s;
}

// Exercise: right token, wrong token, no token, errors, metrics; returns
// every text a client or scraper saw. Fails the test on wrong behaviour.
std::unique_ptr<Client> TlsOrPlainClient(const std::string& address, const std::string& token,
                                         const std::string& root_pem) {
  if (root_pem.empty()) return ClientFor(address, token);
  ClientOptions co;
  co.target = address;
  co.auth_token = token;
  co.use_tls = true;
  co.tls_root_certs_pem = root_pem;
  co.tls_server_name = "localhost";
  auto c = Client::Create(co);
  return c.ok() ? std::move(*c) : nullptr;
}

std::string Exercise(const ServeRun& r, const std::string& token, const std::string& wrong,
                     const std::string& corpus_dir, const std::string& root_pem = "") {
  std::string seen;
  auto good = TlsOrPlainClient(r.address, token, root_pem);
  auto bad = TlsOrPlainClient(r.address, wrong, root_pem);
  auto none = TlsOrPlainClient(r.address, "", root_pem);
  EXPECT_TRUE(good->GetStats().ok());
  for (Client* c : {bad.get(), none.get()}) {
    absl::Status st = c->GetStats().status();
    EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
    seen += st.ToString() + "\n";
    v1::SearchRequest q;
    q.set_text("x");
    q.set_k(1);
    seen += c->Search(q).status().ToString() + "\n";
  }
  // Errors with the right token: unknown job, path outside the roots,
  // missing path inside.
  seen += good->GetJob("job-999").status().ToString() + "\n";
  for (const std::string& p : {std::string("/etc/passwd"), corpus_dir + "/missing.txt"}) {
    v1::StartJobRequest req;
    req.mutable_corpus()->add_paths(p);
    absl::Status st = good->StartJob(req).status();
    EXPECT_FALSE(st.ok());
    seen += st.ToString() + "\n";
  }
  const std::string metrics = Scrape(r.metrics_port);
  EXPECT_NE(metrics.find("ragkv_rpc_rejected_total{reason=\"unauthenticated\"}"), std::string::npos)
      << metrics;
  seen += metrics;
  return seen;
}

class SecretInLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = dir_.path() + "/corpus";
    WriteCorpus(corpus_, 1);
    base_ = {"--log-level",
             "debug",
             "serve",
             "--listen",
             "127.0.0.1:0",
             "--data-dir",
             dir_.path() + "/data",
             "--metrics-port",
             "0",
             "--corpus-root",
             corpus_};
    if (HaveTestModel()) {
      base_.insert(base_.end(),
                   {"--model", TestModelPath(), "--max-seq-len", "512", "--chunk-tokens", "48"});
    } else {
      base_.push_back("--services");
      base_.push_back("retrieval,kvstore,precompute");
    }
  }

  void ExpectNoSecret(ServeRun* r, const std::string& seen) {
    const int rc = StopServe(r);
    EXPECT_EQ(rc, 0);
    const std::string logs = ReadAll(r->out_path) + ReadAll(r->err_path);
    EXPECT_NE(logs.find("bearer auth on"), std::string::npos) << logs;
    for (const char* secret : {kToken, kWrong}) {
      EXPECT_EQ(logs.find(secret), std::string::npos) << "secret in the server's logs:\n" << logs;
      EXPECT_EQ(seen.find(secret), std::string::npos) << "secret seen by a client:\n" << seen;
    }
  }

  static constexpr char kToken[] = "s3cr3t-T0ken-d0-not-log-7f3a9c";
  static constexpr char kWrong[] = "wr0ng-T0ken-also-secret-81b2e4";
  TempDir dir_;
  std::string corpus_;
  std::vector<std::string> base_;
};

TEST_F(SecretInLogsTest, TokenFromFile) {
  const std::string file = dir_.path() + "/token";
  std::ofstream(file) << kToken << "\n";  // trailing newline is stripped
  chmod(file.c_str(), 0600);
  std::vector<std::string> args = base_;
  args.push_back("--auth-token-file");
  args.push_back(file);
  ServeRun r = StartServe(dir_.path(), args, {});
  ASSERT_GT(r.pid, 0) << ReadAll(r.err_path);
  const std::string seen = Exercise(r, kToken, kWrong, corpus_);
  EXPECT_EQ(Cmdline(r.pid).find(kToken), std::string::npos);
  ExpectNoSecret(&r, seen);
}

TEST_F(SecretInLogsTest, TokenFromEnvironment) {
  ServeRun r = StartServe(dir_.path(), base_, {std::string("RAGKV_AUTH_TOKEN=") + kToken});
  ASSERT_GT(r.pid, 0) << ReadAll(r.err_path);
  const std::string seen = Exercise(r, kToken, kWrong, corpus_);
  ExpectNoSecret(&r, seen);
}

TEST_F(SecretInLogsTest, TokenOnArgvWarnsAndIsScrubbedFromTheProcessList) {
  std::vector<std::string> args = base_;
  args.push_back("--auth-token");
  args.push_back(kToken);
  ServeRun r = StartServe(dir_.path(), args, {});
  ASSERT_GT(r.pid, 0) << ReadAll(r.err_path);
  EXPECT_EQ(Cmdline(r.pid).find(kToken), std::string::npos) << Cmdline(r.pid);
  const std::string seen = Exercise(r, kToken, kWrong, corpus_);
  ExpectNoSecret(&r, seen);
  EXPECT_NE(ReadAll(r.err_path).find("visible to every local user"), std::string::npos);
}

TEST_F(SecretInLogsTest, TlsKeyMaterialIsNotLoggedEither) {
  const std::string cert = dir_.path() + "/cert.pem", key = dir_.path() + "/key.pem";
  const std::string cmd = absl::StrFormat(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout %s -out %s 2>/dev/null",
      key, cert);
  RAGKV_REQUIRE_OR_SKIP(std::system(cmd.c_str()) == 0) << "openssl not available";
  chmod(key.c_str(), 0600);
  std::vector<std::string> args = base_;
  args.insert(args.end(), {"--tls-cert", cert, "--tls-key", key});
  ServeRun r = StartServe(dir_.path(), args, {std::string("RAGKV_AUTH_TOKEN=") + kToken});
  ASSERT_GT(r.pid, 0) << ReadAll(r.err_path);
  const std::string seen = Exercise(r, kToken, kWrong, corpus_, ReadAll(cert));
  const std::string logs_before_stop = ReadAll(r.out_path) + ReadAll(r.err_path);
  ExpectNoSecret(&r, seen);
  // Every base64 line of the private key (64 characters each).
  std::istringstream pem(ReadAll(key));
  std::string line;
  int lines = 0;
  const std::string logs = ReadAll(r.out_path) + ReadAll(r.err_path);
  while (std::getline(pem, line)) {
    if (line.empty() || line[0] == '-') continue;
    ++lines;
    EXPECT_EQ(logs.find(line), std::string::npos) << "key material in the logs";
    EXPECT_EQ(seen.find(line), std::string::npos) << "key material seen by a client";
  }
  EXPECT_GT(lines, 10);
  EXPECT_NE(logs_before_stop.find("(TLS)"), std::string::npos) << logs_before_stop;
}

TEST_F(SecretInLogsTest, UnsafeTokenFileIsRefusedWithoutPrintingIt) {
  const std::string file = dir_.path() + "/token";
  std::ofstream(file) << kToken << "\n";
  chmod(file.c_str(), 0644);
  std::vector<std::string> args = base_;
  args.push_back("--auth-token-file");
  args.push_back(file);
  ServeRun r = StartServe(dir_.path(), args, {});
  EXPECT_LE(r.pid, 0);  // exited before listening
  const std::string logs = ReadAll(r.out_path) + ReadAll(r.err_path);
  EXPECT_NE(logs.find("chmod 600"), std::string::npos) << logs;
  EXPECT_EQ(logs.find(kToken), std::string::npos) << logs;
}

}  // namespace
}  // namespace ragkv::testing
