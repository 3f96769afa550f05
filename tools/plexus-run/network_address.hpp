// The addresses plexus-run chooses or checks: a free port for a store it does
// not host, and across hosts an address the other nodes can reach.
#pragma once

#include <cstdint>
#include <string>

#include "options.hpp"

namespace plexus::run {

// With --nnodes > 1: "" when the other nodes can reach this one (--master-addr,
// PLEXUS_SOCKET_IFNAME and PLEXUS_TCP_ADDR none of them loopback), or the
// error saying what to give instead.
std::string CheckReachableByOtherNodes(const Options& opts);

// --no-store: a port the OS leaves free on addr (racy by nature), or false
// with *error.
bool PickFreePort(const std::string& addr, uint16_t* port, std::string* error);

}  // namespace plexus::run
