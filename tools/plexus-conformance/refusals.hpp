// Calls a backend must refuse (checks_arguments.cpp): each must fail, post
// nothing, set *req_out to NULL and leave an error message.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "buffer.hpp"
#include "check.hpp"
#include "plexus/backend.h"

namespace plexus::conformance {

// One call on the shared communicator. send and recv are scratch buffers of
// size * 16 elements of up to 8 bytes each, fresh for every call.
struct RefusedCall {
  std::string what;  // "NULL recvcounts", ...
  std::function<int32_t(Context& ctx, Buffer& send, Buffer& recv, plexus_request** req)> call;
};

// Which statuses a refusal may return.
enum class Refuse {
  kAnyError,         // any negative status
  kUnclaimed,        // UNSUPPORTED or INVALID_ARGUMENT (a capability not claimed)
  kInvalidArgument,  // exactly INVALID_ARGUMENT
};

// Makes each call; every one must be refused properly, with a status want
// allows. A call accepted by mistake is waited for (bounded) and breaks the
// shared communicator (the ranks may be out of step).
Outcome ExpectRefusedCalls(Context& ctx, const std::string& collective,
                           const std::vector<RefusedCall>& calls, Refuse want);

}  // namespace plexus::conformance
