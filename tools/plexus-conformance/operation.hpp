// One posted collective from start to verdict, shared by every check that
// needs "post this, wait for it, and say exactly what went wrong".
//
// An Operation owns the buffers it hands to the backend and the regions it
// will verify: a result region must hold exactly the expected elements, an
// untouched region (a send buffer, a non-root's recvbuf) its original bytes,
// and every buffer's guard zones must be intact. Finish() waits with a bound,
// checks the ABI rules on the way (test() repeats the status, request_error,
// request_free) and, if a request never completes, aborts the communicator
// and abandons the buffers the backend may still write.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "buffer.hpp"
#include "check.hpp"
#include "plexus/backend.h"
#include "requests.hpp"

namespace plexus::conformance {

class Operation {
 public:
  Operation(Context& ctx, plexus_comm* comm, plexus_dtype_t dtype)
      : ctx_(ctx), comm_(comm), dtype_(dtype) {}
  ~Operation();  // abandons the buffers if a request may still use them

  // A new buffer of elements elements (unwritten bytes); returns its index.
  size_t AddBuffer(uint64_t elements, const std::string& name);
  uint8_t* data(size_t buffer) { return buffers_[buffer].data(); }
  uint8_t* element(size_t buffer, uint64_t index) {
    return buffers_[buffer].data() + index * ElementBytes();
  }
  size_t ElementBytes() const;

  // After filling: the elements [first, first+count) of buffer must equal
  // want after the operation (want holds count elements).
  void ExpectResult(size_t buffer, uint64_t first, uint64_t count, std::vector<uint8_t> want,
                    const std::string& what);
  // The bytes of buffer [first, first+count) must not change (snapshot now).
  void ExpectUntouched(size_t buffer, uint64_t first, uint64_t count, const std::string& what);

  // Records a post's return: rc must be OK with a non-NULL request, or else
  // an error with *req_out NULL. Returns whether it posted.
  bool Posted(const std::string& what, int32_t rc, plexus_request** req_out);

  // Waits for every posted request (within op_bound from now), checks the
  // ABI rules and the regions; adds problems to findings. Returns whether
  // every request completed with OK. Sets *broken when the communicator must
  // be considered broken (a request failed, hung, or a post failed).
  bool Finish(Findings* findings, bool* broken);

  // Posts an allreduce with op rop of count elements of this operation's
  // dtype, with reduction inputs salted by salt, and registers the
  // expected result. Returns the request, or nullptr when the post failed.
  plexus_request* PostAllreduce(plexus_reduce_op_t rop, uint64_t count, uint64_t salt);

  // Keep the buffers alive until exit (a request may still use them).
  void Abandon() { abandon_ = true; }
  // Whether a request was leaked (still pending after comm_abort): then its
  // communicator must not be destroyed either.
  bool abandoned() const { return abandon_; }
  // A request of this operation failed or was aborted. The ABI gives the
  // buffers back to the caller only if the backend has PLEXUS_CAP_ABORT:
  // then they are kept and watched (see buffer.hpp: the backend must not
  // write them any more); without it the library underneath may still use
  // them, so they are kept alive, unwatched, until the process exits.
  void KeepAfterFailure(const std::string& what) { keep_ = what; }

  // For checks that wait themselves: the requests, in posting order.
  const std::vector<plexus_request*>& requests() const { return requests_; }

 private:
  struct Region {
    size_t buffer;
    uint64_t first, count;
    std::vector<uint8_t> want;
    bool result;  // compared as elements (else as bytes)
    std::string what;
  };

  Context& ctx_;
  plexus_comm* comm_;
  plexus_dtype_t dtype_;
  std::vector<Buffer> buffers_;
  std::vector<std::string> names_;
  std::vector<Region> regions_;
  std::vector<plexus_request*> requests_;
  std::vector<std::string> request_names_;
  std::vector<std::string> post_problems_;
  bool abandon_ = false;
  std::string keep_;
};

}  // namespace plexus::conformance
