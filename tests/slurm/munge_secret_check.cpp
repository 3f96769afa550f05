// The MUNGE path of the job secret (core/src/store/munge_secret.hpp), driven
// by tests/slurm/slurm_test.sh "munge" against a real munged:
//
//   munge_secret_check encode BINDING SECRET  prints a credential of SECRET
//                                          for BINDING that only this uid may open
//   munge_secret_check decode BINDING      reads a credential on stdin; prints
//                                          "secret: N bytes" (exit 0) or
//                                          "refused: <why>" (exit 1)
//   munge_secret_check fetch HOST PORT     asks a job's store, unauthenticated,
//                                          for its public credential and prints
//                                          it (exit 1 with the error)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>

#include "store/munge_secret.hpp"
#include "store/store_protocol.hpp"

int main(int argc, char** argv) {
  using namespace plexus;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "encode" && argc == 4) {
    std::string credential;
    const Status st = store::MungeEncodeSecret(argv[2], argv[3], &credential);
    if (!st.ok()) {
      std::printf("refused: %s\n", st.message().c_str());
      return 1;
    }
    std::printf("%s\n", credential.c_str());
    return 0;
  }
  if (mode == "decode" && argc == 3) {
    std::string credential((std::istreambuf_iterator<char>(std::cin)),
                           std::istreambuf_iterator<char>());
    while (!credential.empty() && (credential.back() == '\n' || credential.back() == '\r')) {
      credential.pop_back();
    }
    std::string secret;
    const Status st = store::MungeDecodeSecret(credential, argv[2], &secret);
    if (!st.ok()) {
      std::printf("refused: %s\n", st.message().c_str());
      return 1;
    }
    std::printf("secret: %zu bytes\n", secret.size());
    return 0;
  }
  if (mode == "fetch" && argc == 4) {
    std::string credential;
    const Status st = store::FetchPublicCredential(argv[2], uint16_t(std::atoi(argv[3])),
                                                   std::chrono::seconds(10), &credential);
    if (!st.ok()) {
      std::printf("refused: %s\n", st.message().c_str());
      return 1;
    }
    std::printf("%s\n", credential.c_str());
    return 0;
  }
  std::fprintf(stderr,
               "usage: munge_secret_check encode BINDING SECRET | decode BINDING | fetch HOST "
               "PORT\n");
  return 2;
}
