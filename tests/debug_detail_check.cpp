// PLEXUS_DEBUG=detail on a real backend (the hardening issue, items 1 and
// 12): collectives that differ across ranks in root, dtype, op, count or
// kind fail on every rank with an error naming both sides, and nothing is
// posted, so the communicator stays usable; two threads posting on one
// communicator at once are caught. Without the check tcp "completes" a
// broadcast with different roots and mpi an allreduce of int32 against
// float32, each with wrong data. Run with 3 ranks (plexus-run or mpirun)
// and PLEXUS_DEBUG=detail; exits 0 when every expectation held.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "plexus/plexus.hpp"

namespace {

int g_failures = 0;
uint32_t g_rank = 0;

void Expect(bool ok, const std::string& what) {
  std::printf("rank %u: %s %s\n", g_rank, ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++g_failures;
}

// Runs fn; expects INVALID_USAGE whose text contains every part.
template <typename Fn>
void ExpectMismatch(const std::string& what, Fn&& fn, std::initializer_list<std::string> parts) {
  std::string text;
  int32_t code = 0;
  try {
    fn().wait();
  } catch (const plexus::Error& e) {
    code = e.status();
    text = e.what();
  }
  bool ok = code == PLEXUS_ERR_INVALID_USAGE;
  for (const std::string& p : parts) ok = ok && text.find(p) != std::string::npos;
  Expect(ok, what + ": " + (text.empty() ? "(completed without an error)" : text));
}

}  // namespace

int main() {
  const char* debug = std::getenv("PLEXUS_DEBUG");
  if (!debug || std::string(debug) != "detail") {
    std::fprintf(stderr, "run me with PLEXUS_DEBUG=detail\n");
    return 2;
  }
  auto comm = plexus::Communicator::from_env();
  g_rank = comm.rank();
  if (comm.size() != 3) {
    std::fprintf(stderr, "debug_detail_check needs 3 ranks\n");
    return 2;
  }
  const bool last = comm.rank() == 2;
  std::vector<float> f(8, 1.0f);
  std::vector<int32_t> i(8, 1);

  ExpectMismatch(
      "broadcast with different roots",
      [&] { return comm.broadcast(f.data(), 8, plexus::DType::Float32, comm.rank() == 0 ? 0 : 1); },
      {"rank 0 posted broadcast(#0, count 8, float32, root 0)",
       "ranks 1, 2 posted broadcast(#0, count 8, float32, root 1)", "Nothing was posted"});
  ExpectMismatch("allreduce int32 against float32",
                 [&] {
                   return last ? comm.allreduce(f.data(), f.data(), 8, plexus::DType::Float32,
                                                plexus::ReduceOp::Sum)
                               : comm.allreduce(i.data(), i.data(), 8, plexus::DType::Int32,
                                                plexus::ReduceOp::Sum);
                 },
                 {"ranks 0, 1 posted allreduce(#1, count 8, int32, sum)",
                  "rank 2 posted allreduce(#1, count 8, float32, sum)"});
  ExpectMismatch("allreduce sum against max",
                 [&] {
                   return comm.allreduce(i.data(), i.data(), 8, plexus::DType::Int32,
                                         last ? plexus::ReduceOp::Max : plexus::ReduceOp::Sum);
                 },
                 {"int32, sum)", "rank 2 posted allreduce(#2, count 8, int32, max)"});
  ExpectMismatch("reduce with different roots",
                 [&] {
                   return comm.reduce(i.data(), i.data(), 8, plexus::DType::Int32,
                                      plexus::ReduceOp::Sum, comm.rank());
                 },
                 {"rank 0 posted reduce(#3, count 8, int32, sum, root 0)",
                  "rank 1 posted reduce(#3, count 8, int32, sum, root 1)",
                  "rank 2 posted reduce(#3, count 8, int32, sum, root 2)"});
  std::vector<int32_t> gathered(3 * 8);
  ExpectMismatch(
      "allgather with different counts",
      [&] { return comm.allgather(i.data(), gathered.data(), last ? 7 : 8, plexus::DType::Int32); },
      {"allgather(#4, count 8, int32)", "rank 2 posted allgather(#4, count 7, int32)"});
  ExpectMismatch("barrier against allreduce",
                 [&] {
                   return last ? comm.barrier()
                               : comm.allreduce(i.data(), i.data(), 8, plexus::DType::Int32,
                                                plexus::ReduceOp::Sum);
                 },
                 {"ranks 0, 1 posted allreduce(#5", "rank 2 posted barrier(#5)"});

  // Nothing was posted: the communicator is still in step.
  std::vector<int32_t> v(8, int32_t(comm.rank() + 1));
  bool fine = true;
  try {
    comm.allreduce(v.data(), v.data(), 8, plexus::DType::Int32, plexus::ReduceOp::Sum).wait();
  } catch (const plexus::Error& e) {
    fine = false;
    std::printf("rank %u: %s\n", g_rank, e.what());
  }
  Expect(fine && v[0] == 6 && v[7] == 6, "a matching allreduce afterwards gives 1+2+3 = 6");

  // Two threads posting on one communicator (its own, since this breaks it).
  auto shared = plexus::Communicator::from_env();
  std::atomic<int> caught{0}, concurrent{0};
  // Each thread posts until it fails, for up to 3 s: the guard sees only
  // posts that overlap, and with the fingerprints' allgather on shared
  // memory (a few us) 200 posts each missed each other once in ~35 runs.
  auto worker = [&] {
    std::vector<float> data(16, 1.0f);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < until) {
      try {
        shared
            .allreduce(data.data(), data.data(), 16, plexus::DType::Float32, plexus::ReduceOp::Sum)
            .wait();
      } catch (const plexus::Error& e) {
        ++caught;
        if (std::string(e.what()).find("at the same time") != std::string::npos) ++concurrent;
        return;
      }
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  Expect(caught > 0, "two threads posting on one communicator fail (" +
                         std::to_string(caught.load()) + " thread(s) got an error, " +
                         std::to_string(concurrent.load()) + " saying 'at the same time')");
  std::printf("rank %u: %d failure(s)\n", g_rank, g_failures);
  std::fflush(stdout);
  std::_Exit(g_failures == 0 ? 0 : 1);  // the shared communicator is out of step: no teardown
}
