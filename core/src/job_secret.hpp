// Which secret a job's store and ranks authenticate with.
//
// Whoever can reach a job's rendezvous store without having to prove anything
// can join the job as a rank, read what the ranks exchange and end the job.
// So a job always has a secret unless its user says loudly that it need not:
//
//   1. PLEXUS_TOKEN, or the file PLEXUS_TOKEN_FILE names (plexus-run gives
//      every job a fresh PLEXUS_TOKEN): the user's secret.
//   2. PLEXUS_INSECURE=1: no secret at all. Logged as a warning that says
//      what that allows.
//   3. Every rank on one host (the launcher says so, or the master address is
//      this host's own): an automatic secret. The first rank to look creates
//      it in /tmp/plexus-<uid>/ (store/private_dir.hpp: a directory and file
//      only this user can read), named after the rendezvous point, and every
//      other rank of the job reads the same file; rank 0 removes it once
//      every rank has joined. Another user cannot read it, so cannot join.
//   4. Under srun across hosts, where MUNGE works (store/munge_secret.hpp):
//      rank 0 makes a secret and its store hands it out in a MUNGE credential
//      that only this user can open; the other ranks fetch it from the master
//      and accept it only when their own uid made it. PLEXUS_SLURM_MUNGE=0
//      turns this off.
//   5. Otherwise (ranks on several hosts, no secret given): an error that says
//      how to make and share one. A file on one host cannot reach the others,
//      and a secret derived from anything the launcher sets (job ids, host
//      names) would be known to every user of the cluster.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "plexus/launch_env.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/status.hpp"

namespace plexus {

struct JobSecret {
  std::string token;           // "" only with PLEXUS_INSECURE=1
  bool automatic = false;      // made for this job on this host (case 3 above)
  std::string automatic_file;  // its file's name in the private directory, when automatic
  bool from_munge = false;     // carried in a MUNGE credential (case 4 above)
  std::string public_credential;  // on rank 0 with from_munge: what its store hands out
};

// Decides the secret for a job with a rendezvous point (HasRendezvous(l)).
// With an automatic secret, also hands it to store::SetAutomaticToken so that
// the store client, the server and the backends (get_config("PLEXUS_TOKEN"))
// use it (likewise one from MUNGE). Errors name the rank and say what to do.
// BLOCKS on local files, and with MUNGE (ranks other than 0) up to timeout
// fetching rank 0's credential.
Status ChooseJobSecret(const LaunchInfo& l, std::chrono::milliseconds timeout, JobSecret* out);

// The secret of a communicator joined through a store the caller gives
// (Communicator::from_store; PyTorch's c10d store under plexus_torch), by the
// same rules as ChooseJobSecret: the environment's (PLEXUS_TOKEN,
// PLEXUS_TOKEN_FILE; *token stays "", the backends read it from there),
// PLEXUS_INSECURE=1 (none), or, when every rank is on this host
// (local_size == size), an automatic one: rank 0 makes it in a private file
// (store/private_dir.hpp) and writes only the file's NAME to the store
// under its rank key; the others read the file, which only this user can.
// (That store may be open to every user of the host, as torchrun's is: a
// name planted there can only point at another of this user's own files, and
// ranks with different secrets are refused by the backends' handshake.)
// *token is then the secret and *secret_file the file, which rank 0 removes
// once every rank has joined. Ranks on several hosts of an srun step, where
// MUNGE works: rank 0 writes the secret to the store in a MUNGE credential
// only this user can open (case 4 above). Otherwise ranks on several hosts
// with no secret: INVALID_USAGE saying how to give one. BLOCKS up to timeout
// on the store.
Status ChooseStoreSecret(RendezvousStore& store, uint32_t rank, uint32_t size,
                         uint32_t local_size, const std::string& name,
                         std::chrono::milliseconds timeout, std::string* token,
                         std::string* secret_file);

// PLEXUS_INSECURE is "1": the user asked for a job without a secret.
bool InsecureRequested();

// Why a job without a secret across hosts is refused, or, for the warning under
// PLEXUS_INSECURE=1, what anyone who reaches address:port can then do.
std::string OpenStoreConsequences(const std::string& address, uint16_t port);

}  // namespace plexus
