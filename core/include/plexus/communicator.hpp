// plexus::Communicator — a group of ranks and the backend that connects them.
//
//   auto comm = plexus::Communicator::from_env();   // backend from PLEXUS_BACKEND
//   std::vector<float> grad(n);
//   comm.allreduce(std::span(grad), plexus::ReduceOp::Sum).wait();
//
// from_env() is collective: every rank of the job calls it, in the same
// order as its other communicators. Every collective posts the operation and
// returns a plexus::Work at once; buffers must stay valid until the Work
// completes. Errors (bad arguments, an unsupported dtype, a dead peer, a
// timeout) are thrown as plexus::Error carrying the ABI status, the backend
// name and a message naming the operation.
//
// Thread safety: collectives may be posted from several threads if the
// backend's thread_level is PLEXUS_THREAD_MULTIPLE; every rank must post them
// in the same order. abort() may be called from any thread at any time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "plexus/backend.h"
#include "plexus/error.hpp"
#include "plexus/status.hpp"
#include "plexus/types.hpp"
#include "plexus/work.hpp"

namespace plexus {

struct CommunicatorOptions {
  // Backend name or path; empty = PLEXUS_BACKEND, or the best available.
  std::string backend;
  // Deadline for blocking work; zero = PLEXUS_TIMEOUT seconds (default 300).
  std::chrono::milliseconds timeout{0};
  // Device ordinal for GPU backends; -1 = the local rank.
  int device = -1;
  // Configuration keys given to the backend ahead of the environment.
  std::map<std::string, std::string> config;
};

namespace detail {
struct CommState;
}

class Communicator {
 public:
  // Discovers rank and size from the launcher, joins the rendezvous, loads the
  // backend and creates the communicator. Throws plexus::Error.
  static Communicator from_env(const CommunicatorOptions& options = {});

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  // Releases this handle. The backend communicator is destroyed once no Work
  // of it is left either; operations still running then are waited for (up
  // to the timeout) and, failing that, aborted.
  ~Communicator();

  uint32_t rank() const;
  uint32_t size() const;
  uint32_t local_rank() const;
  const std::string& backend_name() const;
  const std::string& backend_version() const;
  const std::string& backend_path() const;
  const plexus_capabilities& capabilities() const;
  std::chrono::milliseconds timeout() const;
  bool supports(plexus_collective_t coll) const;

  // Untyped forms: counts are elements of dtype. Host memory unless a
  // placement is given.
  Work allreduce(const void* send, void* recv, uint64_t count, DType dtype, ReduceOp op,
                 const plexus_placement* where = nullptr);
  Work broadcast(void* buf, uint64_t count, DType dtype, uint32_t root,
                 const plexus_placement* where = nullptr);
  Work reduce(const void* send, void* recv, uint64_t count, DType dtype, ReduceOp op, uint32_t root,
              const plexus_placement* where = nullptr);
  Work allgather(const void* send, void* recv, uint64_t count, DType dtype,
                 const plexus_placement* where = nullptr);
  Work reduce_scatter(const void* send, void* recv, uint64_t count, DType dtype, ReduceOp op,
                      const plexus_placement* where = nullptr);
  Work alltoall(const void* send, void* recv, uint64_t count, DType dtype,
                const plexus_placement* where = nullptr);
  Work send(const void* buf, uint64_t count, DType dtype, uint32_t peer,
            const plexus_placement* where = nullptr);
  Work recv(void* buf, uint64_t count, DType dtype, uint32_t peer,
            const plexus_placement* where = nullptr);
  Work barrier();

  // Typed forms over spans; sizes are checked (INVALID_ARGUMENT otherwise).
  template <Element T>
  Work allreduce(std::span<T> inout, ReduceOp op = ReduceOp::Sum) {
    return allreduce(inout.data(), inout.data(), inout.size(), kDTypeOf<T>, op);
  }
  template <Element T>
  Work allreduce(std::span<const T> send, std::span<T> recv, ReduceOp op = ReduceOp::Sum) {
    CheckSpan(send.size() == recv.size(), "allreduce: send and recv sizes differ");
    return allreduce(send.data(), recv.data(), send.size(), kDTypeOf<T>, op);
  }
  template <Element T>
  Work broadcast(std::span<T> buf, uint32_t root) {
    return broadcast(buf.data(), buf.size(), kDTypeOf<T>, root);
  }
  // recv.size() must be size() * send.size().
  template <Element T>
  Work allgather(std::span<const T> send, std::span<T> recv) {
    CheckSpan(recv.size() == send.size() * size(), "allgather: recv must hold size() * send");
    return allgather(send.data(), recv.data(), send.size(), kDTypeOf<T>);
  }

  // Only root's recv is written; other ranks may pass an empty recv.
  template <Element T>
  Work reduce(std::span<const T> send, std::span<T> recv, ReduceOp op, uint32_t root) {
    CheckSpan(rank() != root || recv.size() == send.size(), "reduce: root's recv size differs");
    return reduce(send.data(), recv.data(), send.size(), kDTypeOf<T>, op, root);
  }
  // send.size() must be size() * recv.size(); rank r receives block r reduced.
  template <Element T>
  Work reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op = ReduceOp::Sum) {
    CheckSpan(send.size() == recv.size() * size(), "reduce_scatter: send must hold size() * recv");
    return reduce_scatter(send.data(), recv.data(), recv.size(), kDTypeOf<T>, op);
  }
  // Both spans hold size() blocks; block j of send goes to rank j.
  template <Element T>
  Work alltoall(std::span<const T> send, std::span<T> recv) {
    CheckSpan(send.size() == recv.size() && send.size() % size() == 0,
              "alltoall: send and recv must both hold size() equal blocks");
    return alltoall(send.data(), recv.data(), send.size() / size(), kDTypeOf<T>);
  }
  template <Element T>
  Work send(std::span<const T> buf, uint32_t peer) {
    return send(buf.data(), buf.size(), kDTypeOf<T>, peer);
  }
  template <Element T>
  Work recv(std::span<T> buf, uint32_t peer) {
    return recv(buf.data(), buf.size(), kDTypeOf<T>, peer);
  }

  // Aborts every pending operation (they fail with PLEXUS_ERR_ABORTED) and
  // makes the communicator unusable. Any thread; idempotent.
  void abort();

 private:
  explicit Communicator(std::shared_ptr<detail::CommState> state);
  static void CheckSpan(bool ok, const char* what);
  // collective: what was posted, counted here in the communicator's sequence
  // (for stall reports); nullptr for send/recv.
  Work Start(const Status& posted, plexus_request* req, const char* what,
             detail::PostedOp* collective);
  detail::CommState& state() const;

  std::shared_ptr<detail::CommState> state_;
};

}  // namespace plexus
