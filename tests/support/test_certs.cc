#include "tests/support/test_certs.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace ragkv::testing {
namespace {

absl::Status Run(const std::string& dir, const std::string& cmd) {
  const std::string log = dir + "/openssl.log";
  const std::string full = absl::StrCat("cd '", dir, "' && ", cmd, " >>'", log, "' 2>&1");
  if (std::system(full.c_str()) == 0) return absl::OkStatus();
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  return absl::InternalError(absl::StrCat("openssl failed: ", cmd, "\n", ss.str()));
}

}  // namespace

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir) {
  const char* kDays = "-days 2";
  for (const char* name : {"ca", "other-ca"}) {
    if (absl::Status s = Run(dir, absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -keyout ",
                                               name, ".key -out ", name, ".pem ", kDays,
                                               " -subj /CN=ragkv-test-", name));
        !s.ok()) {
      return s;
    }
  }
  std::ofstream(dir + "/san.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  struct Leaf {
    const char* name;
    const char* ext;
  };
  for (const Leaf& leaf : {Leaf{"server", " -extfile san.ext"}, Leaf{"client", ""}}) {
    const std::string n = leaf.name;
    if (absl::Status s = Run(dir, absl::StrCat("openssl req -newkey rsa:2048 -nodes -keyout ", n,
                                               ".key -out ", n, ".csr -subj /CN=", n));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = Run(dir, absl::StrCat("openssl x509 -req -in ", n,
                                               ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -out ",
                                               n, ".pem ", kDays, leaf.ext));
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = Run(dir, "chmod 600 *.key"); !s.ok()) return s;
  TestCerts c;
  c.ca = dir + "/ca.pem";
  c.server_cert = dir + "/server.pem";
  c.server_key = dir + "/server.key";
  c.client_cert = dir + "/client.pem";
  c.client_key = dir + "/client.key";
  c.other_ca = dir + "/other-ca.pem";
  return c;
}

}  // namespace ragkv::testing
