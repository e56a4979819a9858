// Observability (issue 21) through the real `ragkv serve` binary: a request
// id (the client's x-request-id, or a fresh one) comes back in the response
// metadata and in error messages and ties the RPC to its access log line;
// --access-log=false drops the line; /metrics exports Prometheus histograms
// (RPC latency, blend stages, tier reads) and, with --metrics-auth, asks for
// the RPCs' bearer token.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ragkv/v1/retrieval.grpc.pb.h"
#include "tests/integration/client_util.h"
#include "tests/integration/serve_process.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// HttpGet: GET `path` on 127.0.0.1:port over a plain socket (HTTP/1.0, so
// the server closes), with an optional Authorization header; returns the
// status code (-1 on a socket error) and the body.
int HttpGet(int port, const std::string& path, const std::string& authorization,
            std::string* body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n";
  if (!authorization.empty()) req += "Authorization: " + authorization + "\r\n";
  req += "\r\n";
  if (::send(fd, req.data(), req.size(), 0) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return -1;
  }
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) resp.append(buf, n);
  ::close(fd);
  int code = -1;
  if (resp.size() > 12 && resp.rfind("HTTP/1.", 0) == 0) code = std::atoi(resp.c_str() + 9);
  const size_t split = resp.find("\r\n\r\n");
  *body = split == std::string::npos ? "" : resp.substr(split + 4);
  return code;
}

// Search with `request_id` as x-request-id (none when empty); returns the
// status and the server's x-request-id.
grpc::Status Search(const std::string& address, const std::string& request_id,
                    const std::string& query, std::string* echoed) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::RetrievalService::NewStub(channel);
  grpc::ClientContext ctx;
  if (!request_id.empty()) ctx.AddMetadata("x-request-id", request_id);
  v1::SearchRequest req;
  req.set_text(query);
  req.set_k(2);
  v1::SearchResponse resp;
  grpc::Status st = stub->Search(&ctx, req, &resp);
  const auto& md = ctx.GetServerInitialMetadata();
  auto it = md.find("x-request-id");
  echoed->clear();
  if (it != md.end()) echoed->assign(it->second.data(), it->second.size());
  return st;
}

class ObservabilityTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra) {
    RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
    std::vector<std::string> args = {"--data-dir", dir_.path() + "/data", "--model",
                                     TestModelPath(), "--max-seq-len", "512"};
    args.insert(args.end(), extra.begin(), extra.end());
    log_ = dir_.path() + "/serve.log";
    auto p = ServeProcess::Start(args, log_, /*with_metrics=*/true);
    ASSERT_TRUE(p.ok()) << p.status() << "\n" << ReadAll(log_);
    server_ = std::move(*p);
  }
  TempDir dir_;
  std::string log_;
  std::unique_ptr<ServeProcess> server_;
};

TEST_F(ObservabilityTest, RequestIdsTieCallsToLogLinesAndErrors) {
  ASSERT_NO_FATAL_FAILURE(Start({}));
  std::string echoed;
  grpc::Status st = Search(server_->address(), "client-rid-42", "a little girl", &echoed);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(echoed, "client-rid-42");
  // No id, or one that is not a sane token: the server makes one.
  st = Search(server_->address(), "", "a dog", &echoed);
  EXPECT_EQ(echoed.size(), 16u);
  const std::string fresh = echoed;
  st = Search(server_->address(), "bad id; with spaces", "a dog", &echoed);
  EXPECT_EQ(echoed.size(), 16u);
  EXPECT_NE(echoed, fresh);
  // An error carries the id in its message.
  st = Search(server_->address(), "client-rid-err", "", &echoed);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(st.error_message(), "[request_id=client-rid-err]"))
      << st.error_message();
  // One access log line per RPC, with method, peer, status, ms, bytes, id.
  const std::string log = ReadAll(log_);
  for (const char* want :
       {"rpc method=/ragkv.v1.RetrievalService/Search peer=ipv4:127.0.0.1:",
        "code=OK ms=", "request_id=client-rid-42", "code=INVALID_ARGUMENT",
        "request_id=client-rid-err"}) {
    EXPECT_TRUE(absl::StrContains(log, want)) << want << "\n" << log;
  }
  EXPECT_TRUE(absl::StrContains(log, "request_id=" + fresh)) << log;
  EXPECT_FALSE(absl::StrContains(log, "bad id")) << log;
  // The RPC latency histogram: cumulative buckets, +Inf = count.
  const std::string m = server_->Metrics();
  const std::string series =
      "ragkv_rpc_ms_bucket{method=\"/ragkv.v1.RetrievalService/Search\",code=\"OK\",le=\"+Inf\"} ";
  EXPECT_TRUE(absl::StrContains(m, "# TYPE ragkv_rpc_ms histogram")) << m;
  EXPECT_TRUE(absl::StrContains(m, series + "3")) << m;
  EXPECT_TRUE(absl::StrContains(
      m, "ragkv_rpc_ms_count{method=\"/ragkv.v1.RetrievalService/Search\",code=\"OK\"} 3"))
      << m;
}

// LilyDoc: the one-chunk document the blend tests ingest.
v1::Document LilyDoc() {
  v1::Document d;
  d.set_doc_id("d");
  d.set_text("Once upon a time a girl named Lily had a red ball. She played in the park.");
  return d;
}

// The connector's request id on a Generate reaches the engine's inner
// Blend call too: one id ties both access log lines.
TEST_F(ObservabilityTest, GenerateForwardsItsRequestIdToTheInnerBlend) {
  ASSERT_NO_FATAL_FAILURE(Start({"--chunk-tokens", "48"}));
  auto client = server_->NewClient();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->IngestDocuments({LilyDoc()}).ok());
  v1::GenerateRequest req;
  req.set_question("What did Lily have?");
  req.set_k(1);
  req.set_max_new_tokens(2);
  req.mutable_blend()->set_mode(v1::BLEND_MODE_CACHEBLEND);
  CallOptions call;
  call.request_id = "gen-rid-7";
  auto resp = client->Generate(req, call);
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(server_->Terminate(), 0);
  const std::string log = ReadAll(log_);
  for (const char* method : {"/ragkv.v1.EngineService/Generate", "/ragkv.v1.BlendService/Blend"}) {
    bool found = false;
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);) {
      found = found || (absl::StrContains(line, absl::StrCat("rpc method=", method, " ")) &&
                        absl::StrContains(line, "request_id=gen-rid-7"));
    }
    EXPECT_TRUE(found) << method << "\n" << log;
  }
}

TEST_F(ObservabilityTest, BlendStagesAndTierReadsAreHistograms) {
  ASSERT_NO_FATAL_FAILURE(Start({"--chunk-tokens", "48"}));
  auto client = server_->NewClient();
  ASSERT_NE(client, nullptr);
  auto ing = client->IngestDocuments({LilyDoc()});
  ASSERT_TRUE(ing.ok()) << ing.status();
  const uint64_t id = ing->ingested(0).chunk_ids(0);
  v1::BlendRequest br;
  br.add_segments()->set_chunk_id(id);
  br.add_segments()->set_text("What did Lily have?");
  // The first blend misses and stores the chunk back; later ones read it.
  for (int i = 0; i < 40; ++i) {
    CollectingKVSink sink;
    ASSERT_TRUE(client->Blend(br, &sink).ok());
    if (sink.info.spans[0].cache_hit) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  const std::string m = server_->Metrics();
  for (const char* want : {"# TYPE ragkv_stage_ms histogram",
                           "ragkv_stage_ms_bucket{stage=\"blend\",le=\"+Inf\"}",
                           "ragkv_stage_ms_bucket{stage=\"total\",le=\"0.25\"}",
                           "# TYPE ragkv_tier_read_ms histogram",
                           "ragkv_tier_read_ms_bucket{tier=\"ram\",le=\"+Inf\"} ",
                           "# TYPE ragkv_blend_ratio histogram"}) {
    EXPECT_TRUE(absl::StrContains(m, want)) << want << "\n" << m;
  }
}

TEST_F(ObservabilityTest, AccessLogOffAndMetricsBehindTheToken) {
  const std::string token_file = dir_.path() + "/token";
  {
    std::ofstream(token_file) << "s3cret-token\n";
  }
  ::chmod(token_file.c_str(), 0600);
  ASSERT_NO_FATAL_FAILURE(
      Start({"--access-log=false", "--metrics-auth=true", "--auth-token-file", token_file}));
  std::string echoed;
  Search(server_->address(), "rid-unlogged", "a dog", &echoed);  // UNAUTHENTICATED
  EXPECT_EQ(echoed, "rid-unlogged");
  EXPECT_FALSE(absl::StrContains(ReadAll(log_), "rid-unlogged"));
  std::string body;
  EXPECT_EQ(HttpGet(server_->metrics_port(), "/metrics", "", &body), 401);
  EXPECT_EQ(HttpGet(server_->metrics_port(), "/metrics", "Bearer wrong", &body), 401);
  EXPECT_EQ(HttpGet(server_->metrics_port(), "/metrics", "Bearer s3cret-token", &body), 200);
  EXPECT_TRUE(absl::StrContains(body, "ragkv_rpc_ms_bucket")) << body;
}

}  // namespace
}  // namespace ragkv::testing
