// trace_cost: the flight recorder's cost per collective, end to end, on a
// communicator of one rank (no launcher: Plexus makes a job of one), where
// an 8-byte allreduce is little more than the host's own path:
//
//   PLEXUS_TRACE_OPS=0    trace_cost [ITERATIONS]   # recorder off
//   PLEXUS_TRACE_OPS=4096 trace_cost [ITERATIONS]   # on (the default)
//
// Prints "ns per allreduce: X" (the median of 7 batches). bench/trace-cost
// runs it both ways, alternating, and reports the difference.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "plexus/plexus.hpp"

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 200000;
  auto comm = plexus::Communicator::from_env();
  double value[1] = {1.0};
  for (int i = 0; i < 1000; ++i) {
    comm.allreduce(value, value, 1, plexus::DType::Float64, plexus::ReduceOp::Sum).wait();
  }
  std::vector<double> batches;
  for (int b = 0; b < 7; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
      comm.allreduce(value, value, 1, plexus::DType::Float64, plexus::ReduceOp::Sum).wait();
    }
    const auto t1 = std::chrono::steady_clock::now();
    batches.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / iterations);
  }
  std::sort(batches.begin(), batches.end());
  std::printf("ns per allreduce: %.1f\n", batches[batches.size() / 2]);
  return 0;
}
