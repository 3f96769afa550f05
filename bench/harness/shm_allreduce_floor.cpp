// shm_allreduce_floor: what a 2-rank float32 sum allreduce costs on this
// machine when no transport copies anything: the floor under every backend's
// large allreduce on one host, and so under DDP's step (issue 31, goal 3).
//
//   shm_allreduce_floor [-n ITERS] [--bytes 1048576,...] [--cpus 0,1] [--copy]
//
// It forks itself into two processes, each pinned to one of --cpus, whose
// vectors lie in one shared mapping. An allreduce is the ring's two halves
// with nothing in between: each process adds the peer's half of its block
// straight from the peer's memory (reduce-scatter), a barrier, then copies the
// peer's reduced block into its own vector (allgather), a barrier. Before each
// iteration both write their inputs afresh (as backward writes the gradients
// before DDP reduces them). Process 0 prints the median and minimum time per
// allreduce over ITERS iterations (default 20). --copy adds a row per size
// for the same allreduce through a transport that copies once more per
// received byte (each half received into a 256 KiB scratch segment in the
// cache, then added or copied from there): one copy fewer than UCX's
// shared-memory FIFO, the best a copying transport can do.
//
// Nothing of Plexus is involved. Exit status: 0 done (every result right), 1
// a wrong result or a system call failed, 2 bad arguments.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kSegmentBytes = size_t{1} << 18;  // as the kit's algorithms

struct Options {
  long iters = 20;
  std::vector<long> bytes = {1 << 20, 16 << 20, 64 << 20};
  int cpus[2] = {0, 1};
  bool copy = false;
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "%s%s"
               "usage: shm_allreduce_floor [-n ITERS] [--bytes 1048576,...] [--cpus 0,1] "
               "[--copy]\n"
               "A 2-rank float32 sum allreduce with both vectors in one shared mapping: each\n"
               "process adds the peer's half from the peer's memory, then copies the peer's\n"
               "reduced half (no transport, no other copy). Forks itself; the two processes\n"
               "are pinned to --cpus (default 0,1). Process 0 prints the median and minimum\n"
               "ms per allreduce over ITERS iterations (default 20) for each --bytes (per\n"
               "rank, multiples of 8; default 1 MiB, 16 MiB, 64 MiB). --copy also times a\n"
               "transport that copies each received byte once into a 256 KiB scratch\n"
               "segment first.\n",
               why ? why : "", why ? "\n" : "");
  return 2;
}

bool ParseList(const std::string& v, std::vector<long>* out) {
  std::stringstream ss(v);
  std::string item;
  out->clear();
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long x = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || x < 0) return false;
    out->push_back(x);
  }
  return !out->empty();
}

bool ParseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--copy") {
      o->copy = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    std::vector<long> list;
    if (a == "-n") {
      if (!ParseList(v, &list) || list.size() != 1 || list[0] < 1) return false;
      o->iters = list[0];
    } else if (a == "--bytes") {
      if (!ParseList(v, &list)) return false;
      for (long b : list) {
        if (b < 8 || b % 8 != 0 || b > (long(1) << 34)) return false;
      }
      o->bytes = list;
    } else if (a == "--cpus") {
      if (!ParseList(v, &list) || list.size() != 2) return false;
      o->cpus[0] = int(list[0]);
      o->cpus[1] = int(list[1]);
    } else {
      return false;
    }
  }
  return true;
}

// A barrier of two processes in shared memory (spinning: both have a CPU).
struct Barrier {
  std::atomic<long> arrived{0};
  std::atomic<long> generation{0};
  void Wait(long* local_generation) {
    const long g = ++*local_generation;
    if (arrived.fetch_add(1) == 1) {
      arrived.store(0);
      generation.store(g);
    } else {
      while (generation.load() < g) {
      }
    }
  }
};

// mine[i] += theirs[i]: the vectorised loop of plexus-algos' kernels (built
// with the same flags).
void AddInto(float* __restrict mine, const float* __restrict theirs, size_t n) {
  for (size_t i = 0; i < n; ++i) mine[i] += theirs[i];
}

// The peer's half added (reduce-scatter) and its reduced half copied
// (allgather), straight from its memory or through a cached scratch segment.
void Allreduce(float* mine, const float* peer, size_t count, int rank, bool through_scratch,
               float* scratch, Barrier* barrier, long* generation) {
  const size_t half = count / 2;
  const size_t own_from = rank ? half : 0, own_to = rank ? count : half;
  const size_t peer_from = rank ? 0 : half, peer_to = rank ? half : count;
  const size_t seg = kSegmentBytes / sizeof(float);
  if (!through_scratch) {
    AddInto(mine + own_from, peer + own_from, own_to - own_from);
  } else {
    for (size_t at = own_from; at < own_to; at += seg) {
      const size_t n = std::min(seg, own_to - at);
      std::memcpy(scratch, peer + at, n * sizeof(float));
      AddInto(mine + at, scratch, n);
    }
  }
  barrier->Wait(generation);
  if (!through_scratch) {
    std::memcpy(mine + peer_from, peer + peer_from, (peer_to - peer_from) * sizeof(float));
  } else {
    for (size_t at = peer_from; at < peer_to; at += seg) {
      const size_t n = std::min(seg, peer_to - at);
      std::memcpy(scratch, peer + at, n * sizeof(float));
      std::memcpy(mine + at, scratch, n * sizeof(float));
    }
  }
  barrier->Wait(generation);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (argc > 1 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    Usage(nullptr);
    return 0;
  }
  if (!ParseOptions(argc, argv, &o)) return Usage("bad arguments");
  const size_t most = size_t(*std::max_element(o.bytes.begin(), o.bytes.end()));
  const size_t page = 4096;
  const size_t map_bytes = page + 2 * most;
  void* map = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    std::perror("shm_allreduce_floor: mmap");
    return 1;
  }
  auto* barrier = new (map) Barrier;
  auto* base = static_cast<uint8_t*>(map) + page;
  const pid_t child = fork();
  if (child < 0) {
    std::perror("shm_allreduce_floor: fork");
    return 1;
  }
  const int rank = child == 0 ? 1 : 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(o.cpus[rank], &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    std::perror("shm_allreduce_floor: sched_setaffinity (--cpus)");
  }
  std::vector<float> scratch(kSegmentBytes / sizeof(float));
  long generation = 0;
  bool right = true;
  for (int mode = 0; mode < (o.copy ? 2 : 1); ++mode) {
    for (long bytes : o.bytes) {
      const size_t count = size_t(bytes) / sizeof(float);
      auto* mine = reinterpret_cast<float*>(base + rank * most);
      const auto* peer = reinterpret_cast<const float*>(base + (1 - rank) * most);
      std::vector<double> ms;
      for (long it = 0; it < o.iters; ++it) {
        for (size_t i = 0; i < count; ++i) mine[i] = float(rank + 1 + i % 7);
        barrier->Wait(&generation);
        const auto t0 = Clock::now();
        Allreduce(mine, peer, count, rank, mode == 1, scratch.data(), barrier, &generation);
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        for (size_t i = 0; i < count; i += 4097) {
          right = right && mine[i] == float(3 + 2 * (i % 7));
        }
        right = right && mine[count - 1] == float(3 + 2 * ((count - 1) % 7));
        barrier->Wait(&generation);  // nobody rewrites inputs the other still reads
      }
      std::sort(ms.begin(), ms.end());
      if (rank == 0) {
        std::printf(
            "%11ld bytes  %-34s median %9.3f ms  min %9.3f ms  (%ld iterations)\n", bytes,
            mode == 0 ? "straight from the peer's memory:" : "through a 256 KiB scratch copy:",
            ms[ms.size() / 2], ms.front(), o.iters);
        std::fflush(stdout);
      }
    }
  }
  if (!right) std::fprintf(stderr, "process %d: a result was wrong\n", rank);
  if (rank == 1) _exit(right ? 0 : 1);
  int status = 0;
  waitpid(child, &status, 0);
  const bool child_right = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return right && child_right ? 0 : 1;
}
