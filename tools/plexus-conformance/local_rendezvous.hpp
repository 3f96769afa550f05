// A rendezvous point for plain `mpirun -np N plexus-conformance ...` on one
// host.
//
// The suite needs the job's rendezvous store (its results never travel
// through the backend under test), and Open MPI's mpirun names none. When
// every rank runs on this host and the launcher gives the job an id (PMIx
// namespace, Open MPI jobid, Slurm job/step), rank 0 starts a store on a
// free port of 127.0.0.1 with a fresh job secret and publishes "port token"
// in a file named after the job id in the private directory where jobs on one
// host keep their automatic secrets (core/src/store/private_dir.hpp: this
// user's only, written atomically); the other ranks read it. Every rank then
// sets PLEXUS_MASTER_ADDR/PORT, PLEXUS_STORE_HOSTED and (unless set)
// PLEXUS_TOKEN, so that the host's usual job discovery finds the store.
#pragma once

#include <string>

namespace plexus::conformance {

// Does nothing (returns true) when the launcher already named a
// rendezvous point or there is one rank. Returns false with *error when the
// ranks are spread over hosts or no job id is known, or the file does not
// appear within timeout_ms.
bool PrepareLocalRendezvous(int64_t timeout_ms, std::string* error);

// Rank 0, once every rank has connected: removes the file.
void RemoveLocalRendezvousFile();

}  // namespace plexus::conformance
