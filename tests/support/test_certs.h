// test_certs.h: a throwaway PKI for TLS tests (made with the `openssl`
// command line, which scripts/setup installs): a CA, a server certificate
// for 127.0.0.1 / localhost signed by it, a client certificate signed by it,
// and a second, unrelated CA that trusts neither. Files live under `dir`.
#ifndef RAGKV_TESTS_SUPPORT_TEST_CERTS_H_
#define RAGKV_TESTS_SUPPORT_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace ragkv::testing {

struct TestCerts {
  std::string ca;                        // ca.pem
  std::string server_cert, server_key;   // SAN IP:127.0.0.1, DNS:localhost
  std::string client_cert, client_key;
  std::string other_ca;                  // signs nothing here
};

// MakeTestCerts: writes the files (keys mode 600). Internal when openssl fails
// (its output in the message).
absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir);

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_SUPPORT_TEST_CERTS_H_
