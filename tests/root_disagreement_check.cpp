// Ranks that name different roots (rank 0 says root 0, the others root 1):
// the broadcast (or reduce) itself must fail on every rank, naming both
// roots, without PLEXUS_DEBUG=detail. It used to complete on every rank,
// ranks 1.. holding data nobody sent, and the program ended with exit 0.
// Run under plexus-run:  root_disagreement_check broadcast|reduce
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "plexus/plexus.hpp"

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "broadcast";
  auto comm = plexus::Communicator::from_env();
  const uint32_t root = comm.rank() == 0 ? 0 : 1;
  std::vector<float> data(8, float(comm.rank() + 1)), out(8, 0.0f);
  std::string error;
  try {
    if (what == "reduce") {
      comm.reduce(data.data(), out.data(), data.size(), plexus::DType::Float32,
                  plexus::ReduceOp::Sum, root)
          .wait();
    } else {
      comm.broadcast(data.data(), data.size(), plexus::DType::Float32, root).wait();
    }
  } catch (const plexus::Error& e) {
    error = e.what();
  }
  std::printf("rank %u (root %u): %s\n", comm.rank(), root,
              error.empty() ? "completed without an error" : error.c_str());
  const bool ok = error.find("disagree on the root") != std::string::npos &&
                  error.find("posted root 0") != std::string::npos &&
                  error.find("root 1") != std::string::npos;
  std::printf("rank %u: %s\n", comm.rank(), ok ? "ok" : "FAILED: no error naming both roots");
  return ok ? 0 : 1;
}
