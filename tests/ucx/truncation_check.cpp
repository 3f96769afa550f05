// A receive that gets a message of the wrong size fails, naming the peer and
// both sizes, and nothing is written past the receive buffer. Two ranks
// (plexus-run -n 2); each case runs on a fresh communicator, since a failed
// operation breaks its communicator:
//
//   longer   rank 0 sends 2n elements, rank 1 receives n: UCX's truncation
//   shorter  rank 0 sends n/2 elements, rank 1 receives n: the received length
//
// for n = 64 (an eager message), n = 64 Ki float32 (256 KiB: eager in many
// fragments on one host, where the backend copies messages below 1 MiB
// through shared memory; rendezvous elsewhere) and n = 1 Mi float32 (4 MiB:
// rendezvous).
// Rank 1's receive buffer sits inside a larger allocation filled with a
// pattern; after the failure every byte behind (and, for "longer", inside
// nothing but the n elements asked for) must still hold the pattern. Exit 0
// when every case behaves, 1 otherwise.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "plexus/plexus.hpp"

namespace {

constexpr uint8_t kPattern = 0x5A;
constexpr size_t kGuard = 1 << 16;  // bytes watched behind the buffer

int g_failures = 0;

void Fail(uint32_t rank, const std::string& what) {
  std::fprintf(stderr, "rank %u: FAIL %s\n", rank, what.c_str());
  ++g_failures;
}

void RunCase(const char* name, uint64_t n, uint64_t sent) {
  plexus::CommunicatorOptions options;
  options.timeout = std::chrono::milliseconds(10000);
  auto comm = plexus::Communicator::from_env(options);
  const uint32_t rank = comm.rank();
  const std::string label =
      std::string(name) + " (" + std::to_string(sent) + " elements into " + std::to_string(n) + ")";
  if (rank == 0) {
    std::vector<float> data(sent, 1.0f);
    try {
      comm.send(data.data(), sent, plexus::DType::Float32, 1).wait();
    } catch (const plexus::Error& e) {
      // A rendezvous send may fail when the receiver gives up: fine.
      std::printf("rank 0: %s: send ended with: %s\n", label.c_str(), e.what());
    }
  } else if (rank == 1) {
    const size_t bytes = n * sizeof(float);
    std::vector<uint8_t> memory(bytes + kGuard, kPattern);
    bool failed = false;
    std::string error;
    try {
      comm.recv(memory.data(), n, plexus::DType::Float32, 0).wait();
    } catch (const plexus::Error& e) {
      failed = true;
      error = e.what();
      if (e.status() != PLEXUS_ERR_REMOTE) Fail(rank, label + ": status is not REMOTE: " + error);
    }
    if (!failed) {
      Fail(rank, label + ": the receive completed OK");
    } else {
      std::printf("rank 1: %s: %s\n", label.c_str(), error.c_str());
      if (error.find("rank 0") == std::string::npos)
        Fail(rank, label + ": error does not name rank 0");
      if (error.find(std::to_string(bytes)) == std::string::npos &&
          error.find(std::to_string(n)) == std::string::npos) {
        Fail(rank, label + ": error does not name the expected size");
      }
    }
    size_t changed = 0, first = 0;
    for (size_t i = bytes; i < memory.size(); ++i) {
      if (memory[i] != kPattern && changed++ == 0) first = i - bytes;
    }
    if (changed) {
      Fail(rank, label + ": " + std::to_string(changed) +
                     " byte(s) written past the receive buffer, the first at offset " +
                     std::to_string(first) + " behind it");
    } else {
      std::printf("rank 1: %s: the %zu bytes behind the buffer are untouched\n", label.c_str(),
                  kGuard);
    }
  }
}

}  // namespace

int main() {
  try {
    for (uint64_t n : {uint64_t(64), uint64_t(1) << 16, uint64_t(1) << 20}) {
      RunCase("longer", n, 2 * n);
      RunCase("shorter", n, n / 2);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected error: %s\n", e.what());
    return 1;
  }
  if (g_failures) {
    std::fprintf(stderr, "%d failure(s)\n", g_failures);
    return 1;
  }
  std::printf("truncation: ok\n");
  return 0;
}
