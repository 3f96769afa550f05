// How every collective of PlexusBackend is posted (collectives_reduce.cpp,
// collectives_move.cpp): the errors of a post, a blocking call run at once,
// the parts of a coalesced call, the label of the work.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <exception>

#include "plexus/backend.h"
#include "plexus/error.hpp"
#include "work.hpp"

namespace plexus_torch::detail {

// Posting: what the caller got wrong, or what the backend cannot do, is a
// RuntimeError (TORCH_CHECK) at once; anything else a DistBackendError.
template <class F>
auto Posting(F&& post) -> decltype(post()) {
  try {
    return post();
  } catch (const plexus::Error& e) {
    const int32_t s = e.status();
    if (s == PLEXUS_ERR_INVALID_ARGUMENT || s == PLEXUS_ERR_INVALID_USAGE ||
        s == PLEXUS_ERR_UNSUPPORTED) {
      TORCH_CHECK(false, e.what());
    }
    std::rethrow_exception(BackendError(e.what()));
  }
}

// A blocking call (async_op=False) is run to completion before it returns:
// c10d waits for it at once anyway, and run here, right after its post, a
// small operation runs on this thread instead of being taken by the
// backend's worker while Python is between the post and the wait (which
// costs a thread switch each way). Failures stay in the work for wait().
template <class Options>
c10::intrusive_ptr<c10d::Work> Handed(const c10::intrusive_ptr<PlexusWork>& work,
                                      const Options& opts) {
  if (!opts.asyncOp) work->Settle();
  return work;
}

// A coalesced call is one work of several posts: each part is posted as
// its own call would be (asynchronously), then handed over whole.
template <class Options>
Options Part(const Options& opts) {
  Options part = opts;
  part.asyncOp = true;
  return part;
}

// The label of operation op on tensors like t, for the work's messages.
inline OpLabel Described(const char* op, const at::Tensor& t) {
  return {op, t.scalar_type(), t.numel()};
}

}  // namespace plexus_torch::detail
