// `ragkv serve --config FILE` / `--print-config` (cli/config_file.h) through
// the real binary: the file sets flags, the command line wins, an unknown
// key is refused with its line, secrets stay out, the printed configuration
// reads back to itself, and a server started from a file serves.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/serve_process.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

constexpr auto& Serve = ServeToExit;

TEST(ConfigFileTest, TheFileSetsFlagsTheCommandLineWinsAndItReadsBack) {
  TempDir dir;
  const std::string f = dir.path() + "/ragkv.toml";
  std::ofstream(f) << "# a deployment\ndata-dir = \"" << dir.path() << "/d\"\nworkers = 6\n"
                   << "kv_tiers = [\"ram\", \"ssd\"]\nsync-writes = false\nram-budget = \"2G\"\n";
  int rc = 0;
  const std::string out = Serve(absl::StrCat("--config ", f, " --workers 3 --print-config"), &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(absl::StrCat("data-dir = \"", dir.path(), "/d\"")), std::string::npos) << out;
  EXPECT_NE(out.find("workers = \"3\""), std::string::npos) << out;  // the flag wins
  EXPECT_NE(out.find("kv-tiers = [\"ram\", \"ssd\"]"), std::string::npos) << out;
  EXPECT_NE(out.find("sync-writes = \"false\""), std::string::npos) << out;
  EXPECT_NE(out.find("ram-budget = \"2G\""), std::string::npos) << out;
  // The printed configuration is a config file that prints itself.
  const std::string g = dir.path() + "/printed.toml";
  std::ofstream(g) << out;
  EXPECT_EQ(Serve(absl::StrCat("--config ", g, " --print-config"), &rc), out);
  EXPECT_EQ(rc, 0);
}

TEST(ConfigFileTest, BadFilesAreRefusedNamingTheKeyAndLine) {
  TempDir dir;
  const std::string f = dir.path() + "/bad.toml";
  std::ofstream(f) << "listen = \"127.0.0.1:0\"\n\nwrkers = 4\n";
  int rc = 0;
  std::string out = Serve(absl::StrCat("--config ", f, " --print-config"), &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(":3: key 'wrkers': unknown"), std::string::npos) << out;
  std::ofstream(f) << "auth-token = \"s3cret\"\n";
  out = Serve(absl::StrCat("--config ", f, " --print-config"), &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_EQ(out.find("s3cret"), std::string::npos) << out;
  std::ofstream(f) << "workers = [1, 2]\n";
  EXPECT_EQ((Serve(absl::StrCat("--config ", f), &rc), rc), 2);
  std::ofstream(f) << "workers = \"many\"\n";
  EXPECT_EQ((Serve(absl::StrCat("--config ", f), &rc), rc), 2);
  std::ofstream(f) << "workers = = 4\n";  // not TOML
  out = Serve(absl::StrCat("--config ", f), &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("bad.toml:1"), std::string::npos) << out;
  EXPECT_EQ((Serve(absl::StrCat("--config ", dir.path(), "/missing.toml"), &rc), rc), 2);
}

TEST(ConfigFileTest, AServerStartedFromAFileServes) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
  TempDir dir;
  const std::string f = dir.path() + "/ragkv.toml";
  std::ofstream(f) << "data-dir = \"" << dir.path() << "/d\"\nmodel = \"" << TestModelPath()
                   << "\"\nmax-seq-len = 512\n";
  auto server = ServeProcess::Start({"--config", f}, dir.path() + "/serve.log");
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = (*server)->NewClient();
  ASSERT_TRUE(client->HealthCheck().ok());
}

}  // namespace
}  // namespace ragkv::testing
