// ABI 1.3 shared buffers. A backend with mem_alloc and mem_free: every rank
// allocates 1 MiB + 8 bytes (the same size, collectively in order), which
// must be zero-filled and 64-byte aligned; an in-place float32 sum
// allreduce on it (exact inputs) must give the exact sum; mem_free of a
// pointer inside it, and mem_alloc of 0 bytes or with a NULL ptr_out, must
// be refused with INVALID_ARGUMENT (and leave ptr_out alone); (a barrier
// between mem_alloc and the allreduce, as the host's collective is); mem_free of
// the buffer must succeed. UNSUPPORTED from mem_alloc (none here) SKIPs
// with the backend's reason, which must not be empty. Without the slots:
// SKIP; with only one of them: FAIL.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "plexus/abi/call.hpp"
#include "plugin.hpp"
#include "requests.hpp"
#include "traced_calls.hpp"

namespace plexus::conformance {
namespace {

constexpr uint64_t kBytes = (1 << 20) + 8;
constexpr uint64_t kCount = kBytes / 4;

float Input(uint32_t rank, uint64_t i) {
  return float(i % 7 + rank);
}

Outcome RunSharedBuffer(Context& ctx) {
  Plugin& plugin = ctx.plugin();
  const std::string missing = plugin.NoMemAllocReason();
  if (!missing.empty()) {
    return missing.rfind("only ", 0) == 0 ? Outcome::Fail(missing) : Outcome::Skip(missing);
  }
  const TracedCalls& t = ctx.calls();
  plexus_comm* comm = ctx.comm();
  Findings f;
  // Refusals first: they must leave *ptr_out alone.
  void* const sentinel = reinterpret_cast<void*>(uintptr_t(0x5a5a5a5a5a5a5a50ull));
  void* p = sentinel;
  if (int32_t rc = t.mem_alloc(comm, 0, &p); rc != PLEXUS_ERR_INVALID_ARGUMENT || p != sentinel) {
    f.Add("mem_alloc of 0 bytes returned " + StatusText(rc) +
          (p != sentinel ? " and set *ptr_out" : "") + " (want INVALID_ARGUMENT)");
  }
  if (int32_t rc = t.mem_alloc(comm, 64, nullptr); rc != PLEXUS_ERR_INVALID_ARGUMENT) {
    f.Add("mem_alloc with ptr_out NULL returned " + StatusText(rc) + " (want INVALID_ARGUMENT)");
  }
  p = sentinel;
  const int32_t rc = t.mem_alloc(comm, kBytes, &p);
  if (rc == PLEXUS_ERR_UNSUPPORTED) {
    const std::string why = plugin.LastError(comm);
    if (why.empty()) f.Add("mem_alloc returned UNSUPPORTED and comm_last_error says nothing");
    if (p != sentinel) f.Add("mem_alloc returned UNSUPPORTED and set *ptr_out");
    return f.empty() ? Outcome::Skip("mem_alloc: UNSUPPORTED: " + why) : f.ToOutcome();
  }
  if (rc != PLEXUS_OK || !p || p == sentinel) {
    f.Add("mem_alloc(" + std::to_string(kBytes) + ") returned " + StatusText(rc) +
          (rc == PLEXUS_OK ? " and no memory" : ": " + plugin.LastError(comm)));
    return f.ToOutcome();
  }
  auto* bytes = static_cast<unsigned char*>(p);
  if (reinterpret_cast<uintptr_t>(p) % 64 != 0) f.Add("mem_alloc's memory is not 64-byte aligned");
  for (uint64_t i = 0; i < kBytes; ++i) {
    if (bytes[i] != 0) {
      f.Add("mem_alloc's memory is not zero-filled (byte " + std::to_string(i) + ")");
      break;
    }
  }
  auto* v = static_cast<float*>(p);
  for (uint64_t i = 0; i < kCount; ++i) v[i] = Input(ctx.rank, i);
  plexus_request* req = nullptr;
  bool broken = false;
  // The ABI: a rank posts on the memory once every rank's mem_alloc has
  // returned (the host runs a collective in between; a barrier here).
  if (plugin.HasCollective(PLEXUS_COLL_BARRIER)) {
    if (t.post(comm, abi::Call{PLEXUS_COLL_BARRIER}, &req) != PLEXUS_OK)
      return Outcome::Fail("barrier: " + plugin.LastError(comm));
    const Completion c = WaitFor(plugin, req, ctx.op_bound_ms());
    if (!c.done) {
      if (!AbortAndReap(plugin, comm, req)) return Outcome::Fail("a request leaked");
      Outcome o = Outcome::Fail("the barrier after mem_alloc did not complete");
      o.comm_broken = true;
      return o;
    }
    f.Add(CheckAndFree(plugin, req, c.status));
    req = nullptr;
  }
  if (int32_t post = t.post(comm,
                            abi::Call{PLEXUS_COLL_ALLREDUCE, p, p, kCount, PLEXUS_DTYPE_FLOAT32,
                                      PLEXUS_OP_SUM, 0, nullptr},
                            &req);
      post != PLEXUS_OK) {
    f.Add("in-place allreduce on mem_alloc's memory: post returned " + StatusText(post) + ": " +
          plugin.LastError(comm));
    broken = true;
  } else {
    const Completion c = WaitFor(plugin, req, ctx.op_bound_ms());
    if (!c.done) {
      f.Add("in-place allreduce on mem_alloc's memory did not complete in " +
            std::to_string(ctx.op_bound_ms()) + " ms");
      broken = true;
      if (!AbortAndReap(plugin, comm, req)) return Outcome::Fail("a request leaked");
    } else if (c.status != PLEXUS_OK) {
      f.Add("in-place allreduce on mem_alloc's memory failed: " +
            FailureText(plugin, comm, req, c.status));
      broken = true;
      f.Add(CheckAndFree(plugin, req, c.status));
    } else {
      f.Add(c.violation);
      f.Add(CheckAndFree(plugin, req, c.status));
      for (uint64_t i = 0; i < kCount; ++i) {
        float want = 0;
        for (uint32_t r = 0; r < ctx.size; ++r) want += Input(r, i);
        if (v[i] != want) {
          f.Add("in-place allreduce on mem_alloc's memory: element " + std::to_string(i) + " is " +
                std::to_string(v[i]) + ", want " + std::to_string(want));
          break;
        }
      }
    }
  }
  if (int32_t r = t.mem_free(comm, bytes + 64); r != PLEXUS_ERR_INVALID_ARGUMENT) {
    f.Add("mem_free of a pointer inside the buffer returned " + StatusText(r) +
          " (want INVALID_ARGUMENT)");
  }
  if (int32_t r = t.mem_free(comm, p); r != PLEXUS_OK) {
    f.Add("mem_free returned " + StatusText(r) + ": " + plugin.LastError(comm));
  }
  Outcome o = f.ToOutcome("1 MiB from mem_alloc, zero-filled; in-place allreduce exact; freed");
  o.comm_broken = broken;
  return o;
}

}  // namespace

std::vector<Check> SharedBufferChecks(const plexus_capabilities&, uint32_t) {
  Check c;
  c.name = "shared buffers: mem_alloc, an in-place allreduce on it, mem_free";
  c.group = "shared buffers";
  c.run = RunSharedBuffer;
  return {c};
}

}  // namespace plexus::conformance
