// The ABI's rules for a post (plexus/abi/call.hpp: Call, CheckCall,
// DescribeCall), under the kit's names, which the backends and the kit's
// own code use.
#pragma once

#include "plexus/abi/call.hpp"
#include "plexus/abi/collectives.hpp"

namespace plexus::kit {

using abi::Call;
using abi::CallBytes;
using abi::CheckCall;
using abi::CommShape;
using abi::DescribeCall;
using abi::IsReduction;
using abi::kHostMemoryOnly;
using abi::VCounts;

}  // namespace plexus::kit
