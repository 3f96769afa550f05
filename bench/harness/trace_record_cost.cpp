// trace_record_cost: the flight recorder alone, as a collective uses it
// (the post's time, Posted, Finished), 5 million times into a ring of 4096,
// and one read of its clock alone (of which a collective needs three, and
// any recorder that times a collective's post and end at least two):
// prints "record: X ns per op" and "clock read: Y ns" (medians of 5
// batches). bench/trace-cost runs it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "trace/flight_recorder.hpp"

int main() {
  plexus::detail::FlightRecorder recorder(4096, "plexus/0", 0, 1, {0}, "none");
  plexus::detail::PostedOp op{};
  op.count = 2;
  std::vector<double> batches;
  uint64_t seq = 0;
  for (int b = 0; b < 5; ++b) {
    constexpr int kOps = 1000000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kOps; ++i) {
      op.posted_ticks = plexus::detail::TraceTicks();
      recorder.Posted(&op, ++seq, 0);
      recorder.Finished(op, 0);
    }
    const auto t1 = std::chrono::steady_clock::now();
    batches.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kOps);
  }
  std::sort(batches.begin(), batches.end());
  std::printf("record: %.1f ns per op\n", batches[batches.size() / 2]);
  std::vector<double> reads;
  uint64_t sink = 0;
  for (int b = 0; b < 5; ++b) {
    constexpr int kReads = 5000000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReads; ++i) sink += plexus::detail::TraceTicks();
    const auto t1 = std::chrono::steady_clock::now();
    reads.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kReads);
  }
  std::sort(reads.begin(), reads.end());
  std::printf("clock read: %.1f ns%s\n", reads[reads.size() / 2], sink == 1 ? " " : "");
  return 0;
}
