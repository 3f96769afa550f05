// Builds the full mesh of TCP connections for one communicator.
//
// Every rank opens a listening socket on its local address (port chosen by
// the OS) and publishes address and port through the host's out-of-band
// allgather. Rank r then connects to every lower rank and accepts one
// connection from every higher rank. The connecting side opens with a hello
// naming its rank and the communicator's nonce (rank 0's random number,
// broadcast out of band), so that a stray or foreign connection is refused and
// logged instead of being taken for a peer.
#pragma once

#include <cstdint>
#include <vector>

#include "plexus/algos/status.hpp"
#include "plexus/backend.h"

namespace plexus::tcp {

// On success *fds holds one connected non-blocking socket per peer (-1 at
// index rank). BLOCKS up to config.timeout_ms. On failure nothing is left open.
algos::Status ConnectMesh(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                          std::vector<int>* fds);

}  // namespace plexus::tcp
