// The generations plexus-run --elastic says (docs: comm_elastic.cpp): who is
// in the job, as the ranks read it from the store.
//
// A read that fails other than by a key not being there yet is kept, not
// taken for "nothing said": a wait that ends without the launcher's word
// says what the store answered meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/rendezvous_store.hpp"
#include "plexus/status.hpp"

namespace plexus::detail {

// A generation as the launcher wrote it: "<g> <job rank> ...".
struct Generation {
  uint64_t number = 0;  // 0: none said yet
  std::vector<uint32_t> ranks;
  bool Has(uint32_t r) const;
};

std::string LatestGenerationKey();
std::string GenerationKey(uint64_t g);

// The latest generation said (number 0 when none yet) into *out; on a
// failure of the store, *out is left alone.
Status ReadLatestGeneration(RendezvousStore& store, Generation* out);

// Generation g, waiting for it up to timeout.
Status ReadGeneration(RendezvousStore& store, uint64_t g, std::chrono::milliseconds timeout,
                      Generation* out);

// Waits up to timeout for a generation after *after that lacks one of
// ranks (a rank left), into *out; *after moves past the generations that
// only let ranks in. TIMEOUT otherwise, with the store's last error if a
// read failed.
Status WaitForLeaving(RendezvousStore& store, const std::vector<uint32_t>& ranks, uint64_t* after,
                      std::chrono::milliseconds timeout, Generation* out);

}  // namespace plexus::detail
