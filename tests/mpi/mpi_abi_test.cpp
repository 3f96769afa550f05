// The MPI plugin driven through its C ABI alone, as a host other than
// libplexus would: dlopen, the entry function, a hand-made host table. Run
// under mpirun with 2 ranks:
//
//   mpirun -np 2 mpi_abi_test /path/to/libplexus-mpi.so
//
// Checks what the C++ API's own checks hide from a backend: every argument
// check (NULL pointers, unknown dtype/op/memory codes, roots and peers out of
// range, overlapping buffers, huge counts) returns INVALID_ARGUMENT or
// UNSUPPORTED with a last error naming the collective; comm_create refuses a
// rank/size that disagrees with MPI_COMM_WORLD; wait() with a timeout returns
// TIMEOUT and leaves the request pending (request_free refuses it); send/recv
// count mismatches are REMOTE errors that write nothing past the receive
// buffer, and so are allreduce count and dtype mismatches; comm_abort from another thread ends a
// wait() promptly with ABORTED and makes later posts fail; an aborted
// collective that the peer completes later is cleaned up before MPI_Finalize.
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plexus/backend.h"

namespace {

int g_failures = 0, g_passes = 0;
uint32_t g_rank = 0;

void Check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passes;
  } else {
    ++g_failures;
    std::fprintf(stderr, "rank %u: FAILED %s\n", g_rank, what.c_str());
  }
}

std::mutex g_log_mutex;
std::vector<std::string> g_log;

void HostLog(void*, int32_t level, const char* message) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  g_log.push_back(std::to_string(level) + " " + message);
}

int64_t HostConfig(void*, const char* key, char* buf, size_t len) {
  const char* v = std::getenv(key);
  if (!v) return -1;
  const size_t n = std::strlen(v);
  if (buf && len) {
    const size_t m = n < len - 1 ? n : len - 1;
    std::memcpy(buf, v, m);
    buf[m] = '\0';
  }
  return int64_t(n);
}

int32_t NoOobAllgather(void*, plexus_oob*, const void*, void*, uint64_t, int64_t) {
  return PLEXUS_ERR_UNSUPPORTED;
}
int32_t NoOobBroadcast(void*, plexus_oob*, void*, uint64_t, uint32_t, int64_t) {
  return PLEXUS_ERR_UNSUPPORTED;
}

const plexus_backend_v1* t = nullptr;

std::string LastError(plexus_comm* comm) {
  char buf[1024] = "";
  t->comm_last_error(comm, buf, sizeof buf);
  return buf;
}

// rc is want, and the last error contains each of words.
void Expect(plexus_comm* comm, int32_t rc, int32_t want, const std::string& what,
            std::initializer_list<const char*> words) {
  const std::string err = LastError(comm);
  bool ok = rc == want;
  for (const char* w : words) ok = ok && err.find(w) != std::string::npos;
  Check(ok, what + ": got status " + std::to_string(rc) + " (want " + std::to_string(want) +
                ") and error '" + err + "'");
}

int32_t WaitFree(plexus_request* req, int64_t timeout_ms = -1) {
  const int32_t rc = t->wait(req, timeout_ms);
  if (rc != PLEXUS_IN_PROGRESS && rc != PLEXUS_ERR_TIMEOUT) t->request_free(req);
  return rc;
}

void Barrier(plexus_comm* comm) {
  plexus_request* req = nullptr;
  Check(t->barrier(comm, &req) == PLEXUS_OK && WaitFree(req) == PLEXUS_OK, "barrier");
}

plexus_comm_config_v1 Config(uint32_t rank, uint32_t size, const char* name) {
  plexus_comm_config_v1 c{};
  c.struct_size = sizeof c;
  c.rank = rank;
  c.size = size;
  c.local_rank = rank;
  c.local_size = size;
  c.device = -1;
  c.timeout_ms = 20000;
  c.name = name;
  return c;
}

void ArgumentChecks(plexus_comm* comm, uint32_t rank) {
  float a[8] = {}, b[8] = {};
  plexus_request* req = nullptr;
  const uint32_t f32 = PLEXUS_DTYPE_FLOAT32, sum = PLEXUS_OP_SUM;

  Expect(comm, t->allreduce(comm, a, b, 8, f32, sum, nullptr, nullptr), PLEXUS_ERR_INVALID_ARGUMENT,
         "allreduce req_out NULL", {"allreduce", "req_out"});
  Expect(comm, t->allreduce(comm, a, b, 8, 99, sum, nullptr, &req), PLEXUS_ERR_INVALID_ARGUMENT,
         "allreduce dtype 99", {"allreduce", "unknown dtype code 99"});
  Check(req == nullptr, "req_out is NULL after a failed post");
  Expect(comm, t->allreduce(comm, a, b, 8, f32, 0, nullptr, &req), PLEXUS_ERR_INVALID_ARGUMENT,
         "allreduce op 0", {"allreduce", "unknown reduce op code 0"});
  Expect(comm, t->reduce_scatter(comm, a, b, 4, f32, 6, nullptr, &req), PLEXUS_ERR_INVALID_ARGUMENT,
         "reduce_scatter op 6", {"reduce_scatter", "op code 6"});
  Expect(comm, t->allreduce(comm, nullptr, b, 8, f32, sum, nullptr, &req),
         PLEXUS_ERR_INVALID_ARGUMENT, "allreduce NULL sendbuf", {"allreduce", "NULL"});
  Expect(comm, t->allreduce(comm, a, a + 1, 4, f32, sum, nullptr, &req),
         PLEXUS_ERR_INVALID_ARGUMENT, "allreduce overlap", {"allreduce", "overlap"});
  Expect(comm, t->broadcast(comm, a, 8, f32, 2, nullptr, &req), PLEXUS_ERR_INVALID_ARGUMENT,
         "broadcast root 2", {"broadcast", "root 2 is not a rank"});
  Expect(comm, t->reduce(comm, a, b, 8, f32, sum, 7, nullptr, &req), PLEXUS_ERR_INVALID_ARGUMENT,
         "reduce root 7", {"reduce", "root 7"});
  Expect(comm, t->reduce(comm, a, nullptr, 8, f32, sum, rank, nullptr, &req),
         PLEXUS_ERR_INVALID_ARGUMENT, "reduce NULL recvbuf on root", {"reduce", "root"});
  Expect(comm, t->send(comm, a, 8, f32, 2, nullptr, &req), PLEXUS_ERR_INVALID_ARGUMENT,
         "send peer 2", {"send", "peer 2"});
  Expect(comm, t->recv(comm, a, 8, 0, 0, nullptr, &req), PLEXUS_ERR_INVALID_ARGUMENT,
         "recv dtype 0", {"recv", "dtype"});
  Expect(comm, t->alltoall(comm, a, a + 2, 2, f32, nullptr, &req), PLEXUS_ERR_INVALID_ARGUMENT,
         "alltoall overlap", {"alltoall", "not in place"});
  Expect(comm, t->allgather(comm, b + 1, b, 2, f32, nullptr, &req), PLEXUS_ERR_INVALID_ARGUMENT,
         "allgather wrong in-place position", {"allgather", "in-place position"});
  Expect(comm, t->reduce_scatter(comm, a, a + 1, 2, f32, sum, nullptr, &req),
         PLEXUS_ERR_INVALID_ARGUMENT, "reduce_scatter wrong in-place position",
         {"reduce_scatter", "in-place position"});
  Expect(comm, t->allgather(comm, a, b, uint64_t(1) << 62, f32, nullptr, &req),
         PLEXUS_ERR_INVALID_ARGUMENT, "allgather huge count", {"allgather", "too large"});
  plexus_placement cuda{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, 0, 0, nullptr};
  Expect(comm, t->allreduce(comm, a, b, 8, f32, sum, &cuda, &req), PLEXUS_ERR_UNSUPPORTED,
         "allreduce on CUDA memory", {"allreduce", "CUDA"});
  plexus_placement odd{sizeof(plexus_placement), 77, -1, 0, nullptr};
  Expect(comm, t->broadcast(comm, a, 8, f32, 0, &odd, &req), PLEXUS_ERR_INVALID_ARGUMENT,
         "broadcast memory type 77", {"broadcast", "memory type 77"});
  Expect(comm, t->barrier(comm, nullptr), PLEXUS_ERR_INVALID_ARGUMENT, "barrier req_out NULL",
         {"barrier"});
  Check(t->allreduce(nullptr, a, b, 8, f32, sum, nullptr, &req) == PLEXUS_ERR_INVALID_ARGUMENT,
        "allreduce on a NULL comm");
  Check(t->test(nullptr) == PLEXUS_ERR_INVALID_ARGUMENT, "test(NULL)");
  Check(t->wait(nullptr, 0) == PLEXUS_ERR_INVALID_ARGUMENT, "wait(NULL)");
  Check(t->request_free(nullptr) == PLEXUS_OK, "request_free(NULL)");
}

// Rank 0 waits with a timeout for a message rank 1 sends only later.
void TimeoutChecks(plexus_comm* comm, uint32_t rank) {
  int32_t value = rank == 1 ? 42 : 0;
  plexus_request* req = nullptr;
  if (rank == 0) {
    Check(t->recv(comm, &value, 1, PLEXUS_DTYPE_INT32, 1, nullptr, &req) == PLEXUS_OK, "post recv");
    const auto start = std::chrono::steady_clock::now();
    const int32_t rc = t->wait(req, 100);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    Check(rc == PLEXUS_ERR_TIMEOUT, "wait(100 ms) on an unmatched recv returns TIMEOUT");
    Check(ms >= 90 && ms < 5000, "the wait took about 100 ms (" + std::to_string(ms) + ")");
    Check(t->test(req) == PLEXUS_IN_PROGRESS, "the request is still pending after the timeout");
    Check(t->request_free(req) == PLEXUS_ERR_INVALID_USAGE, "request_free of a pending request");
    Barrier(comm);  // now rank 1 sends
    Check(WaitFree(req) == PLEXUS_OK && value == 42, "the recv completes after the send");
  } else {
    Barrier(comm);
    Check(t->send(comm, &value, 1, PLEXUS_DTYPE_INT32, 0, nullptr, &req) == PLEXUS_OK &&
              WaitFree(req) == PLEXUS_OK,
          "send after the barrier");
  }
}

// Send and recv counts that disagree are REMOTE errors on the receiver, and
// a longer message never lands past the end of the receive buffer (Open MPI
// 4.1 writes it there when it was posted with a plain MPI_Irecv).
void RecvMismatchChecks(plexus_comm* comm, uint32_t rank) {
  static int32_t big[4096];
  plexus_request* req = nullptr;
  if (rank == 1) {
    for (int i = 0; i < 4096; ++i) big[i] = i;
    for (uint64_t count : {3, 2048}) {
      Check(t->send(comm, big, count, PLEXUS_DTYPE_INT32, 0, nullptr, &req) == PLEXUS_OK &&
                WaitFree(req) == PLEXUS_OK,
            "send " + std::to_string(count));
    }
  } else {
    int32_t five[5] = {};
    t->recv(comm, five, 5, PLEXUS_DTYPE_INT32, 1, nullptr, &req);
    Expect(comm, WaitFree(req), PLEXUS_ERR_REMOTE, "recv 5 of a 3-element send",
           {"recv from rank 1", "sent 3 int32 elements where 5 were expected"});
    for (int32_t& x : big) x = -7;
    t->recv(comm, big, 1024, PLEXUS_DTYPE_INT32, 1, nullptr, &req);
    Expect(comm, WaitFree(req), PLEXUS_ERR_REMOTE, "recv 1024 of a 2048-element send",
           {"recv from rank 1", "sent 2048 int32 elements where 1024 were expected"});
    int written = 0;
    for (int i = 1024; i < 4096; ++i) written += big[i] != -7;
    Check(written == 0, "nothing written past the recv's 1024 elements (" +
                            std::to_string(written) + " elements changed)");
  }
  Barrier(comm);
}

// Allreduces that disagree fail as REMOTE on both ranks, naming the
// difference, and leave their communicator unusable (each runs on its own):
// counts (1024 on rank 0, 2048 on rank 1) at once, without writing past
// rank 0's buffer; dtypes (int32 against float32) after the communicator's
// timeout_ms.
void AllreduceMismatchChecks(plexus_backend_ctx* ctx, uint32_t rank) {
  static int32_t in[2048], out[4096];
  for (int32_t& x : in) x = 1;
  for (int32_t& x : out) x = -7;
  char why[512] = "";
  {
    plexus_comm_config_v1 cfg = Config(rank, 2, "abi-test/mismatch-count");
    plexus_comm* c = nullptr;
    Check(t->comm_create(ctx, &cfg, &c, why, sizeof why) == PLEXUS_OK, "comm for the count check");
    const uint64_t count = rank == 0 ? 1024 : 2048;
    plexus_request* req = nullptr;
    Check(t->allreduce(c, in, out, count, PLEXUS_DTYPE_INT32, PLEXUS_OP_SUM, nullptr, &req) ==
              PLEXUS_OK,
          "post an allreduce of " + std::to_string(count));
    const std::string want = rank == 0
                                 ? "rank 1 sent 2048 int32 elements where this rank expects 1024"
                                 : "rank 0 sent 1024 int32 elements where this rank expects 2048";
    Expect(c, WaitFree(req), PLEXUS_ERR_REMOTE, "allreduce counts that disagree",
           {"allreduce", want.c_str()});
    int written = 0;
    for (uint64_t i = count; i < 4096; ++i) written += out[i] != -7;
    Check(written == 0, "nothing written past the allreduce's recvbuf (" + std::to_string(written) +
                            " elements changed)");
    Expect(c, t->barrier(c, &req), PLEXUS_ERR_REMOTE, "a post after the failed allreduce",
           {"barrier", "unusable after an earlier failure"});
    t->comm_destroy(c);
  }
  {
    plexus_comm_config_v1 cfg = Config(rank, 2, "abi-test/mismatch-dtype");
    cfg.timeout_ms = 1000;
    plexus_comm* c = nullptr;
    Check(t->comm_create(ctx, &cfg, &c, why, sizeof why) == PLEXUS_OK, "comm for the dtype check");
    const plexus_dtype_t dtype = rank == 0 ? PLEXUS_DTYPE_INT32 : PLEXUS_DTYPE_FLOAT32;
    plexus_request* req = nullptr;
    Check(t->allreduce(c, in, out, 1024, dtype, PLEXUS_OP_SUM, nullptr, &req) == PLEXUS_OK,
          "post an allreduce of one dtype");
    const std::string want = rank == 0 ? "rank 1 posted this allreduce with dtype float32"
                                       : "rank 0 posted this allreduce with dtype int32";
    Expect(c, WaitFree(req, 10000), PLEXUS_ERR_REMOTE, "allreduce dtypes that disagree",
           {"allreduce", want.c_str()});
    t->comm_destroy(c);
  }
}

// Rank 0's operations on comm2 never get a partner before it aborts comm2
// from another thread; rank 1 posts its side of the allreduce afterwards.
void AbortChecks(plexus_backend_ctx* ctx, plexus_comm* comm, uint32_t rank) {
  plexus_comm_config_v1 cfg = Config(rank, 2, "abi-test/abort");
  plexus_comm* comm2 = nullptr;
  char why[512] = "";
  Check(t->comm_create(ctx, &cfg, &comm2, why, sizeof why) == PLEXUS_OK, "second comm_create");
  static float data[1024];  // MPI may write here until rank 1 completes the allreduce
  for (float& x : data) x = float(rank + 1);
  plexus_request* req = nullptr;
  if (rank == 0) {
    plexus_request* recv_req = nullptr;
    int32_t never = 0;
    Check(t->allreduce(comm2, data, data, 1024, PLEXUS_DTYPE_FLOAT32, PLEXUS_OP_SUM, nullptr,
                       &req) == PLEXUS_OK,
          "post an allreduce rank 1 joins late");
    Check(t->recv(comm2, &never, 1, PLEXUS_DTYPE_INT32, 1, nullptr, &recv_req) == PLEXUS_OK,
          "post a recv that is never matched");
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      t->comm_abort(comm2);
    });
    const auto start = std::chrono::steady_clock::now();
    const int32_t rc = t->wait(req, 10000);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    aborter.join();
    Check(rc == PLEXUS_ERR_ABORTED, "wait ends with ABORTED (got " + std::to_string(rc) + ")");
    Check(ms < 3000, "abort ended the wait promptly (" + std::to_string(ms) + " ms)");
    Check(t->test(recv_req) == PLEXUS_ERR_ABORTED, "the other pending request is ABORTED too");
    Check(t->request_free(req) == PLEXUS_OK && t->request_free(recv_req) == PLEXUS_OK,
          "aborted requests can be freed");
    Expect(comm2, t->barrier(comm2, &req), PLEXUS_ERR_ABORTED, "post after abort",
           {"barrier", "aborted"});
    Check(t->comm_abort(comm2) == PLEXUS_OK, "comm_abort is idempotent");
    t->comm_destroy(comm2);
    Barrier(comm);  // rank 1 may now post its side of the allreduce
  } else {
    t->comm_destroy(nullptr);  // a no-op
    Barrier(comm);
    Check(t->allreduce(comm2, data, data, 1024, PLEXUS_DTYPE_FLOAT32, PLEXUS_OP_SUM, nullptr,
                       &req) == PLEXUS_OK &&
              WaitFree(req) == PLEXUS_OK && data[0] == 3.0f,
          "rank 1's late allreduce completes against rank 0's aborted one");
    t->comm_destroy(comm2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: mpi_abi_test /path/to/libplexus-mpi.so\n");
    return 2;
  }
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* s = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!r || !s || std::string(s) != "2") {
    std::printf("skipped: run me under mpirun -np 2\n");
    return 77;
  }
  const uint32_t rank = uint32_t(std::atoi(r));
  g_rank = rank;
  setenv("PLEXUS_BACKEND", "mpi", 1);  // an explicit choice: init() initialises MPI

  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  auto entry = reinterpret_cast<plexus_backend_get_v1_fn>(dlsym(lib, PLEXUS_BACKEND_ENTRY_V1));
  Check(entry != nullptr, "the entry symbol is exported");
  if (!entry) return 1;
  Check(entry(PLEXUS_ABI_MINOR, nullptr) == PLEXUS_ERR_INVALID_ARGUMENT, "entry(NULL)");
  Check(entry(PLEXUS_ABI_MINOR, &t) == PLEXUS_OK && t, "entry returns the table");
  Check(std::string(t->name) == "mpi", "name is mpi");
  Check(std::string(t->version).find("Open MPI") != std::string::npos,
        std::string("version names Open MPI: ") + t->version);

  plexus_host_v1 host{};
  host.struct_size = sizeof host;
  host.abi_major = PLEXUS_ABI_MAJOR;
  host.abi_minor = PLEXUS_ABI_MINOR;
  host.log = HostLog;
  host.get_config = HostConfig;
  host.oob_allgather = NoOobAllgather;
  host.oob_broadcast = NoOobBroadcast;
  host.local_address = "";
  plexus_backend_ctx* ctx = nullptr;
  Check(t->init(nullptr, &ctx) == PLEXUS_ERR_INVALID_ARGUMENT, "init(NULL host)");
  if (t->init(&host, &ctx) != PLEXUS_OK || !ctx) {
    std::fprintf(stderr, "rank %u: init failed\n", rank);
    return 1;
  }
  plexus_capabilities caps{};
  caps.struct_size = sizeof caps;
  Check(t->get_capabilities(ctx, &caps) == PLEXUS_OK, "get_capabilities");
  Check(caps.collectives == (1u << PLEXUS_COLL_COUNT_V1) - 1, "every collective");
  Check(caps.memory_types == 1u << PLEXUS_MEMORY_HOST, "host memory only (Debian's Open MPI)");
  Check(caps.dtypes == 0x1ffeu && caps.reduce_dtypes[PLEXUS_OP_AVG] == 0x1ffeu, "every dtype");
  Check(caps.thread_level == PLEXUS_THREAD_MULTIPLE, "MPI_THREAD_MULTIPLE granted");
  Check((caps.flags & PLEXUS_CAP_IN_PLACE) && !(caps.flags & PLEXUS_CAP_ABORT), "flags");

  char why[512] = "";
  plexus_comm* comm = nullptr;
  plexus_comm_config_v1 wrong = Config(1 - rank, 2, "abi-test/wrong-rank");
  Check(t->comm_create(ctx, &wrong, &comm, why, sizeof why) == PLEXUS_ERR_INVALID_USAGE && !comm &&
            std::string(why).find("MPI_COMM_WORLD has this process as rank") != std::string::npos,
        std::string("comm_create with the other rank fails: ") + why);
  plexus_comm_config_v1 wrong_size = Config(rank, 3, "abi-test/wrong-size");
  Check(t->comm_create(ctx, &wrong_size, &comm, why, sizeof why) == PLEXUS_ERR_INVALID_USAGE &&
            std::string(why).find("of 3") != std::string::npos,
        std::string("comm_create with size 3 fails: ") + why);
  Check(t->comm_create(ctx, nullptr, &comm, why, sizeof why) == PLEXUS_ERR_INVALID_ARGUMENT,
        "comm_create(NULL config)");
  plexus_comm_config_v1 cfg = Config(rank, 2, "abi-test/main");
  Check(t->comm_create(ctx, &cfg, &comm, why, sizeof why) == PLEXUS_OK && comm,
        std::string("comm_create: ") + why);
  if (!comm) return 1;

  ArgumentChecks(comm, rank);
  Barrier(comm);
  TimeoutChecks(comm, rank);
  RecvMismatchChecks(comm, rank);
  AllreduceMismatchChecks(ctx, rank);
  AbortChecks(ctx, comm, rank);
  Barrier(comm);
  t->comm_destroy(comm);
  t->finalize(ctx);
  {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    bool warned = false;
    for (const auto& line : g_log) {
      if (line.find("not calling MPI_Finalize") != std::string::npos) warned = true;
    }
    Check(!warned, "the aborted allreduce was cleaned up and MPI finalised");
  }
  std::printf("rank %u: %d checks passed, %d failed\n", rank, g_passes, g_failures);
  return g_failures == 0 ? 0 : 1;
}
