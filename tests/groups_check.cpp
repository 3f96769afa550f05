// Groups (Communicator::split, Communicator::group) and the ABI 1.2
// collectives through the public API, on whatever backend PLEXUS_BACKEND
// names. Run under plexus-run or mpirun with 3 or more ranks:
//   groups_check
// Results are checked exactly (integer sums); every check says what it
// expected. The new collectives are run where the backend supports them
// and counted as skipped otherwise (a 1.1 backend).
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "check_util.hpp"
#include "plexus/abi/call.hpp"
#include "plexus/plexus.hpp"

using plexus::Communicator;
using plexus::DType;
using plexus::ReduceOp;
using plexus_check::Expect;

namespace {

std::string S(uint64_t v) {
  return std::to_string(v);
}

// Whether every rank of the world runs on this host (plexus-run -n N, or
// mpirun on one machine): then every group's ranks are all local too.
bool world_on_one_host = false;

// Sum of job ranks + 1 over the communicator, by allreduce, and a broadcast
// from its rank 0 of that rank's job rank.
void CheckWorks(Communicator& c, const std::string& what) {
  if (world_on_one_host) {
    // (Every group had local_size one too many, so a backend never saw a
    // group as one host's: no shared memory for groups, nor for the
    // two-level scheme's groups inside hosts.)
    Expect(c.local_size() == c.size() && c.local_rank() == c.rank(),
           what + ": on one host, local rank " + S(c.local_rank()) + " of " + S(c.local_size()) +
               " (expected rank " + S(c.rank()) + " of " + S(c.size()) + ")");
  }
  int64_t mine = int64_t(c.job_ranks()[c.rank()]) + 1, sum = 0;
  c.allreduce(&mine, &sum, 1, DType::Int64, ReduceOp::Sum).wait();
  int64_t expect = 0;
  for (uint32_t j : c.job_ranks()) expect += int64_t(j) + 1;
  Expect(sum == expect, what + ": allreduce gave " + S(sum) + ", expected " + S(expect));
  int64_t root_job = c.rank() == 0 ? int64_t(c.job_ranks()[0]) : -1;
  c.broadcast(&root_job, 1, DType::Int64, 0).wait();
  Expect(root_job == int64_t(c.job_ranks()[0]),
         what + ": broadcast from rank 0 gave " + std::to_string(root_job));
}

void CheckSplit(Communicator& world) {
  const uint32_t r = world.rank(), n = world.size();
  // Two colors by parity, keys reversing the order.
  auto half = world.split(r % 2, n - r);
  Expect(half.has_value(), "split by parity: every rank has a color");
  if (!half) return;
  std::vector<uint32_t> expect;
  for (uint32_t j = n; j-- > 0;) {
    if (j % 2 == r % 2) expect.push_back(j);
  }
  Expect(half->job_ranks() == expect, "split by parity: members in reverse order");
  Expect(half->size() == expect.size(), "split by parity: size " + S(half->size()));
  const auto at = std::find(expect.begin(), expect.end(), r) - expect.begin();
  Expect(half->rank() == uint32_t(at),
         "split by parity: rank " + S(half->rank()) + ", expected " + S(at));
  CheckWorks(*half, "split by parity");

  // kNoColor joins nothing.
  auto rest = world.split(r == 0 ? Communicator::kNoColor : 7, r);
  Expect(rest.has_value() == (r != 0), "split with kNoColor on rank 0");
  if (rest) {
    Expect(rest->size() == n - 1 && rest->rank() == r - 1, "split without rank 0: rank and size");
    CheckWorks(*rest, "split without rank 0");
  }
}

void CheckGroup(Communicator& world) {
  const uint32_t r = world.rank(), n = world.size();
  // The last rank and rank 0, in that order.
  const std::vector<uint32_t> pair = {n - 1, 0};
  auto g = world.group(pair);
  const bool member = r == 0 || r == n - 1;
  Expect(g.has_value() == member, "group {last, 0}: membership of rank " + S(r));
  if (g) {
    Expect(g->size() == 2 && g->rank() == (r == 0 ? 1u : 0u), "group {last, 0}: ranks");
    CheckWorks(*g, "group {last, 0}");
  }
  // A group of one.
  const std::vector<uint32_t> one = {1};
  auto solo = world.group(one);
  Expect(solo.has_value() == (r == 1), "group {1}: membership");
  if (solo) {
    Expect(solo->size() == 1 && solo->rank() == 0, "group {1}: size 1");
    CheckWorks(*solo, "group {1}");
  }
  // Lists that differ between ranks fail on every rank.
  std::vector<uint32_t> mine = {0, 1};
  if (r == 0) mine.push_back(2);
  std::string error;
  try {
    world.group(mine);
  } catch (const plexus::Error& e) {
    error = e.what();
  }
  Expect(error.find("another list") != std::string::npos,
         "group with lists that differ: error naming it, got '" + error + "'");
  // A repeated rank fails on every rank.
  error.clear();
  try {
    const std::vector<uint32_t> twice = {0, 1, 0};
    world.group(twice);
  } catch (const plexus::Error& e) {
    error = e.what();
  }
  Expect(error.find("appears twice") != std::string::npos,
         "group with a repeat: error, got '" + error + "'");
}

// Two groups over the same ranks, each driven by its own thread at once.
void CheckConcurrentGroups(Communicator& world) {
  if (world.capabilities().thread_level != PLEXUS_THREAD_MULTIPLE) {
    std::printf("rank %u: skipped two groups from two threads (backend is not THREAD_MULTIPLE)\n",
                world.rank());
    return;
  }
  std::vector<uint32_t> all(world.size());
  std::iota(all.begin(), all.end(), 0u);
  auto a = world.group(all);
  auto b = world.split(0, world.size() - world.rank());
  int bad[2] = {0, 0};
  auto run = [&](Communicator& c, int which) {
    for (int i = 0; i < 50; ++i) {
      std::vector<int32_t> v(1000 + which, int32_t(c.rank() + i));
      c.allreduce(std::span(v)).wait();
      const int32_t expect = int32_t(c.size() * (c.size() - 1) / 2 + c.size() * i);
      if (v.front() != expect || v.back() != expect) ++bad[which];
    }
  };
  std::thread t([&] { run(*b, 1); });
  run(*a, 0);
  t.join();
  Expect(bad[0] == 0 && bad[1] == 0,
         "two groups from two threads: " + S(bad[0] + bad[1]) + " wrong allreduces of 100");
}

// gather, scatter, allgatherv, alltoallv, allreduce_coalesced and reduce_scatterv on c.
void CheckNewCollectives(Communicator& c, const std::string& where) {
  const uint32_t r = c.rank(), n = c.size();
  if (c.supports(PLEXUS_COLL_GATHER)) {
    for (uint32_t root = 0; root < n; ++root) {
      std::vector<int32_t> send(3, int32_t(r * 10)), recv(r == root ? 3 * n : 0, -1);
      c.gather(std::span<const int32_t>(send), std::span(recv), root).wait();
      bool ok = true;
      for (uint32_t i = 0; r == root && i < 3 * n; ++i) ok &= recv[i] == int32_t(i / 3 * 10);
      Expect(ok, where + ": gather to root " + S(root));
    }
  } else {
    // A backend without it (ABI 1.0 or 1.1) refuses it, naming it.
    int32_t status = 0;
    std::string error;
    try {
      int32_t x = 0;
      c.gather(&x, &x, 1, DType::Int32, 0).wait();
    } catch (const plexus::Error& e) {
      status = e.status();
      error = e.what();
    }
    Expect(status == PLEXUS_ERR_UNSUPPORTED && error.find("gather") != std::string::npos,
           where + ": gather on a backend without it: UNSUPPORTED naming it, got '" + error + "'");
    std::printf("rank %u: %s: the 1.2 collectives are not supported by %s (refused: %s)\n", r,
                where.c_str(), c.backend_name().c_str(), error.c_str());
  }
  if (c.supports(PLEXUS_COLL_SCATTER)) {
    for (uint32_t root = 0; root < n; ++root) {
      std::vector<int64_t> send(r == root ? 2 * n : 0), recv(2, -1);
      for (size_t i = 0; i < send.size(); ++i) send[i] = int64_t(i / 2 * 100 + root);
      c.scatter(std::span<const int64_t>(send), std::span(recv), root).wait();
      Expect(recv[0] == int64_t(r * 100 + root) && recv[1] == recv[0],
             where + ": scatter from root " + S(root));
    }
  }
  if (c.supports(PLEXUS_COLL_ALLGATHERV)) {
    // Rank j contributes j elements (rank 0 none) of value j + 1.
    std::vector<uint64_t> counts(n);
    std::iota(counts.begin(), counts.end(), 0u);
    const uint64_t total = std::accumulate(counts.begin(), counts.end(), uint64_t(0));
    std::vector<uint16_t> send(r, uint16_t(r + 1)), recv(total, 0);
    c.allgatherv(std::span<const uint16_t>(send), std::span(recv), counts).wait();
    bool ok = true;
    size_t at = 0;
    for (uint32_t j = 0; j < n; ++j) {
      for (uint32_t k = 0; k < j; ++k) ok &= recv[at++] == j + 1;
    }
    Expect(ok, where + ": allgatherv of uneven blocks");
  }
  if (c.supports(PLEXUS_COLL_ALLTOALLV)) {
    // Rank i sends (i + j) % 3 elements of value 1000 i + j to rank j.
    std::vector<uint64_t> sc(n), rc(n);
    for (uint32_t j = 0; j < n; ++j) {
      sc[j] = (r + j) % 3;
      rc[j] = (j + r) % 3;
    }
    std::vector<float> send, recv(std::accumulate(rc.begin(), rc.end(), uint64_t(0)), -1.0f);
    for (uint32_t j = 0; j < n; ++j) send.insert(send.end(), sc[j], float(1000 * r + j));
    c.alltoallv(std::span<const float>(send), sc, std::span(recv), rc).wait();
    bool ok = true;
    size_t at = 0;
    for (uint32_t i = 0; i < n; ++i) {
      for (uint64_t k = 0; k < rc[i]; ++k) ok &= recv[at++] == float(1000 * i + r);
    }
    Expect(ok, where + ": alltoallv of uneven blocks");
  }
  if (c.supports(PLEXUS_COLL_ALLREDUCE_COALESCED)) {
    std::vector<int32_t> a(5, int32_t(r + 1)), b(0), d(1000, int32_t(2 * r));
    std::vector<int32_t> a_out(5, 0);
    const void* sends[] = {a.data(), b.data(), d.data()};
    void* recvs[] = {a_out.data(), b.data(), d.data()};  // d in place
    const uint64_t counts[] = {5, 0, 1000};
    c.allreduce_coalesced(sends, recvs, counts, DType::Int32, ReduceOp::Sum).wait();
    const int32_t sa = int32_t(n * (n + 1) / 2), sd = int32_t(n * (n - 1));
    Expect(a_out.front() == sa && a_out.back() == sa && d.front() == sd && d.back() == sd,
           where + ": allreduce_coalesced of 3 buffers (one empty, one in place)");
  }
  if (c.supports(PLEXUS_COLL_REDUCE_SCATTERV)) {
    // ABI 1.4, posted through Communicator::Post as the list has it. Block
    // j holds (j + 1) % 3 * 700 elements (one empty, some longer than a
    // segment), packed in reverse rank order; rank i's element k of block
    // j is i + j + k % 5, so the sums are exact. Out of place, then in place.
    std::vector<uint64_t> counts(n), displs(n);
    uint64_t total = 0;
    for (uint32_t j = n; j-- > 0;) {
      counts[j] = (j + 1) % 3 * 70000;
      displs[j] = total;
      total += counts[j];
    }
    for (bool in_place : {false, true}) {
      std::vector<int32_t> send(total), recv(counts[r], -1);
      for (uint32_t j = 0; j < n; ++j) {
        for (uint64_t k = 0; k < counts[j]; ++k) send[displs[j] + k] = int32_t(r + j + k % 5);
      }
      plexus::abi::Call call{PLEXUS_COLL_REDUCE_SCATTERV,
                             send.data(),
                             in_place ? send.data() + displs[r] : recv.data(),
                             counts[r],
                             PLEXUS_DTYPE_INT32,
                             PLEXUS_OP_SUM};
      call.sendcounts = counts.data();
      call.sdispls = displs.data();
      c.Post(call).wait();
      const int32_t* got = in_place ? send.data() + displs[r] : recv.data();
      bool ok = true;
      for (uint64_t k = 0; k < counts[r]; ++k) {
        ok &= got[k] == int32_t(n * (n - 1) / 2 + n * (r + k % 5));
      }
      Expect(ok, where + ": reduce_scatterv of uneven blocks" + (in_place ? " in place" : ""));
    }
  }
}

}  // namespace

int main() {
  auto world = Communicator::from_env();
  plexus_check::rank = world.rank();
  world_on_one_host = world.local_size() == world.size();
  if (world.size() < 3) {
    std::printf("groups_check needs 3 or more ranks\n");
    return 2;
  }
  CheckSplit(world);
  CheckGroup(world);
  CheckConcurrentGroups(world);
  CheckNewCollectives(world, "world");
  auto half = world.split(world.rank() % 2, world.rank());
  if (half) CheckNewCollectives(*half, "split by parity");
  CheckWorks(world, "the parent after its groups");
  std::printf("rank %u: %d passed, %d failed\n", world.rank(), plexus_check::passes,
              plexus_check::failures);
  return plexus_check::failures ? 1 : 0;
}
