// Failures that are this rank's own, reported as such and survived (the
// hardening issue): a reduce_scatter whose count is far larger than its
// buffers. On 2 ranks the kernel refuses to read the buffer (EFAULT), which
// used to be reported as "rank 1 is unreachable (send: Bad address)"; on 3
// the ring's scratch vectors cannot be allocated, which used to end the
// process with an uncaught std::bad_alloc. Either way every rank must get an
// error that says what happened, and go on living. On one host the
// reduce_scatter goes through the kit's shared memory, which copies the
// buffer itself (no kernel to say EFAULT): it refuses a buffer larger than
// any address space before touching it (it used to end the process with
// SIGSEGV). Run under plexus-run with
// PLEXUS_BACKEND=tcp, with PLEXUS_SHM=off for the transport's faults;
// exits 0 when every rank saw what it should.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "plexus/plexus.hpp"

int main() {
  auto comm = plexus::Communicator::from_env();
  static char buf[64];
  const uint64_t count = uint64_t(1) << 60;  // int8: 1 EiB in, far beyond buf
  std::string error;
  // The in-place form (recvbuf = sendbuf + rank x count), so that the
  // backend's argument check, which refuses buffers that overlap any other
  // way, lets the call through to the faults this test is about. (Only an
  // address: rank r > 0's recvbuf is never written, the send fails first.)
  auto* recv = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(buf) + comm.rank() * count);
  try {
    comm.reduce_scatter(buf, recv, count, plexus::DType::Int8, plexus::ReduceOp::Sum).wait();
  } catch (const plexus::Error& e) {
    error = e.what();
  }
  std::printf("rank %u: %s\n", comm.rank(), error.empty() ? "(no error)" : error.c_str());
  const bool two = comm.size() == 2;
  const char* shm = std::getenv("PLEXUS_SHM");
  const bool transport = shm != nullptr && std::string(shm) == "off";
  const std::string want = !transport ? "more than any address space holds"
                           : two      ? "own buffer is not readable (send: Bad address)"
                                      : "out of memory for the algorithm's scratch buffers";
  bool ok = error.find(want) != std::string::npos;
  if (error.find("unreachable") != std::string::npos) ok = false;  // blamed on a peer
  std::printf("rank %u: %s\n", comm.rank(), ok ? "ok" : ("FAILED: want '" + want + "'").c_str());
  return ok ? 0 : 1;
}
