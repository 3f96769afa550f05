// Ranks that name different roots (rank 0 says root 0, the others root 1):
// the broadcast (or reduce) itself must fail on every rank, naming both
// roots, without PLEXUS_DEBUG=detail. It used to complete on every rank,
// ranks 1.. holding data nobody sent, and the program ended with exit 0.
// Run under plexus-run:  root_disagreement_check broadcast|reduce
//
// root_disagreement_check paths: rank 0 posts an allreduce (on one host, the
// kit's shared memory) where the others post a broadcast (messages over the
// transport): every rank must fail at once (within 5 s, PLEXUS_TIMEOUT being
// 30) with an error that says "collective mismatch". The mpi backend's own
// engine once left the broadcast to its timeout.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "plexus/plexus.hpp"

int PathsDisagree(plexus::Communicator& comm) {
  std::vector<float> data(16, 1.0f);
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  try {
    if (comm.rank() == 0) {
      comm.allreduce(data.data(), data.data(), data.size(), plexus::DType::Float32,
                     plexus::ReduceOp::Sum)
          .wait();
    } else {
      comm.broadcast(data.data(), data.size(), plexus::DType::Float32, 0).wait();
    }
  } catch (const plexus::Error& e) {
    error = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("rank %u (%s) after %.2f s: %s\n", comm.rank(),
              comm.rank() == 0 ? "allreduce" : "broadcast", s,
              error.empty() ? "completed without an error" : error.c_str());
  const bool ok = error.find("collective mismatch") != std::string::npos && s < 5.0;
  std::printf("rank %u: %s\n", comm.rank(),
              ok ? "ok" : "FAILED: no collective mismatch named within 5 s");
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "broadcast";
  auto comm = plexus::Communicator::from_env();
  if (what == "paths") return PathsDisagree(comm);
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
