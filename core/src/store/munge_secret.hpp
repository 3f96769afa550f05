// The job secret carried in a MUNGE credential: under Slurm, nothing to set
// across nodes.
//
// Slurm clusters run MUNGE (Slurm authenticates with it): a daemon on every
// node shares one cluster key and turns a payload into a credential that only
// MUNGE on those nodes can open, saying which user made it. Rank 0 makes a
// fresh job secret, encodes it restricted to its own uid (MUNGE then opens it
// only for that user, or root) and its store hands the credential to anyone who
// asks (kPublicCredentialKey): published, it tells nobody else anything. The
// other ranks fetch it, have MUNGE open it and accept the secret only when the
// credential was made by their own uid for their own step and store; then
// they authenticate to the store with it as with any secret. An impostor on
// the port can only give a credential of its own uid (refused), one of ours
// made for something else (refused), or this job's own, which it cannot read
// (whose secret it does not know: the handshake fails).
//
// libmunge is loaded at run time (libmunge.so.2), so Plexus runs where MUNGE
// is not installed; MUNGE's default socket (/run/munge/munge.socket.2) is used.
#pragma once

#include <string>

#include "plexus/status.hpp"

namespace plexus::store {

// Whether libmunge loads and its daemon answers (an encode succeeds); *why
// says what is missing when not. Cached after the first call.
bool MungeAvailable(std::string* why);

// Whether a job under srun should carry its secret in a MUNGE credential:
// MungeAvailable, unless PLEXUS_SLURM_MUNGE=0 (then *why says so).
bool MungeWanted(std::string* why);

// What a credential is for: "srun step <job>.<step>, <what>" (what: the
// store's address and port, or a communicator's name), from SLURM_JOB_ID and
// SLURM_STEP_ID. The credential carries it beside the secret, and a rank
// accepts only one made for its own step and store: a credential of the same
// user made for another job (whose port collided, or kept by someone from an
// earlier job) is refused, as is one whose payload its user chose (`munge -s`).
std::string SlurmStepBinding(const std::string& what);

// A credential holding binding and secret that only this process's uid can
// decode, AES-128 encrypted.
Status MungeEncodeSecret(const std::string& binding, const std::string& secret,
                         std::string* credential);

// The secret in credential, when MUNGE opens it, this uid made it and it was
// made for binding. A credential that expired (older than its TTL) or was
// opened before on this host (several ranks per node) still counts: what
// protects the secret is the cluster key, the uid restriction and the binding,
// not its age. Errors say why (another user's credential, another job's, not a
// credential, MUNGE missing). *secret set on success.
Status MungeDecodeSecret(const std::string& credential, const std::string& binding,
                         std::string* secret);

}  // namespace plexus::store
