// Communicator::mem_alloc: the backend's shared buffers (ABI 1.3), agreed on
// by every rank, or ordinary memory everywhere.
#include <cstring>
#include <new>

#include "comm_state.hpp"
#include "plexus/communicator.hpp"
#include "plexus/log.hpp"

namespace plexus {
namespace {

constexpr std::align_val_t kAlignment{64};

std::shared_ptr<void> OrdinaryMemory(uint64_t bytes) {
  void* p = ::operator new(static_cast<size_t>(bytes), kAlignment);
  std::memset(p, 0, static_cast<size_t>(bytes));
  return std::shared_ptr<void>(p, [](void* q) { ::operator delete(q, kAlignment); });
}

}  // namespace

std::shared_ptr<void> Communicator::mem_alloc(uint64_t bytes) {
  if (bytes == 0) bytes = 1;
  detail::CommState& s = state();
  // Every rank decides these alike: one backend, one size, one layout.
  if (s.size < 2 || s.two_level || !s.backend->HasMemAlloc()) return OrdinaryMemory(bytes);
  void* p = nullptr;
  const Status got = s.backend->MemAlloc(s.comm, bytes, &p);
  uint8_t ok = got.ok() ? 1 : 0;
  try {
    allreduce(&ok, &ok, 1, DType::UInt8, ReduceOp::Min).wait();
  } catch (...) {
    if (got.ok()) (void)s.backend->MemFree(s.comm, p);
    throw;
  }
  if (!ok) {
    if (got.ok()) (void)s.backend->MemFree(s.comm, p);
    LogLine(PLEXUS_LOG_INFO, "plexus",
            s.name + " rank " + std::to_string(s.rank) + ": mem_alloc(" + std::to_string(bytes) +
                ") gives ordinary memory: " +
                (got.ok() ? std::string("another rank got no shared buffer") : got.message()));
    return OrdinaryMemory(bytes);
  }
  // The buffer holds the communicator's state (and so its backend
  // communicator) until its last holder lets go.
  std::shared_ptr<detail::CommState> keep = state_;
  return std::shared_ptr<void>(p, [keep](void* q) noexcept {
    try {
      if (Status st = keep->backend->MemFree(keep->comm, q); !st.ok()) {
        LogLine(PLEXUS_LOG_WARN, "plexus", keep->name + ": " + st.message());
      }
    } catch (...) {  // (a log line that could not be built)
    }
  });
}

}  // namespace plexus
