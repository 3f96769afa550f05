// The job secret from the environment: PLEXUS_TOKEN, or the file PLEXUS_TOKEN_FILE names.
//
// plexus-run gives every rank a fresh PLEXUS_TOKEN. Under other launchers
// (torchrun, mpirun, by hand) there is no such thing, and putting a secret on
// every command line or in an exported variable shows it to `ps` and to shell
// histories; PLEXUS_TOKEN_FILE names a file (mode 600, on a shared file system
// or copied to every host) that holds it instead. Everything that uses the job
// secret reads it through here: the rendezvous store's server and client
// (TokenFromEnvironment) and the host's get_config("PLEXUS_TOKEN") that
// backends (the TCP mesh) read, so every connection authenticates with the
// same secret.
//
// Under those launchers a job on one host gets a secret of its own all the
// same (core/src/job_secret.hpp): the first rank to look makes it, in a file
// only this user can read, and SetAutomaticToken hands it to everything here.
//
// There is deliberately no secret derived from a launcher's job id
// (TORCHELASTIC_RUN_ID, SLURM_JOB_ID, Open MPI's jobid): every user of the
// cluster can list those, so a key made from them would look like
// authentication without being any.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "plexus/status.hpp"

namespace plexus::store {

// The job secret, "" when there is none (no authentication):
//   - PLEXUS_TOKEN when it is set and not empty;
//   - else, when PLEXUS_TOKEN_FILE is set and not empty, that file's contents
//     with trailing whitespace (the newline) removed. A file that cannot be
//     read, is not a regular file, is empty, is larger than
//     kMaxTokenFileBytes or holds a NUL byte is an error naming the path. A
//     file that group or others may read is used, with a warning (once);
//   - else the automatic secret of this process's job (SetAutomaticToken),
//     "" when there is none.
//
// PLEXUS_TOKEN wins when both are set, and the file is then not read at all:
// plexus-run sets a fresh PLEXUS_TOKEN for each job while its ranks inherit the
// caller's environment, so a PLEXUS_TOKEN_FILE exported for torchrun or mpirun
// jobs must not make every plexus-run job fail. Ranks that end up with
// different secrets this way are not silent either: the handshake refuses them
// with "PLEXUS_TOKEN differs".
Status TokenFromEnvironment(std::string* token);

// The secret this process's job made for itself (core/src/job_secret.hpp),
// used where the environment names none. Set once, before any store client,
// server or backend of the job exists; thread-safe to read afterwards.
void SetAutomaticToken(const std::string& token);

// bytes random bytes (getrandom) as 2 x bytes lowercase hex digits in *out.
// False with *error (*out untouched) when the system has no randomness to give.
bool RandomHex(size_t bytes, std::string* out, std::string* error);

// A fresh job secret: 32 random bytes as 64 lowercase hex digits (RandomHex).
bool MakeJobToken(std::string* token, std::string* error);

// The largest PLEXUS_TOKEN_FILE accepted (a secret is one line; this is not a
// place to read a large file into memory by mistake).
inline constexpr size_t kMaxTokenFileBytes = 64 * 1024;

// What the host's get_config reports for key from the environment: getenv(key),
// except that PLEXUS_TOKEN, when unset or empty, is TokenFromEnvironment (so
// that backends authenticate with a PLEXUS_TOKEN_FILE too). False when unset.
// A PLEXUS_TOKEN_FILE that cannot be read is logged as an error and reported as
// unset: the rendezvous store, which every multi-rank job connects to before a
// backend asks, has failed with that error already, and a rank without the
// secret is refused by the ranks that have it.
bool ConfigFromEnvironment(const char* key, std::string* value);

// The get_config of the ABI (plexus_host_v1 and plexus_comm_config_v1):
// overrides[key], else ConfigFromEnvironment(key), copied into buf (len
// bytes, NUL-terminated, cut to fit); returns the value's full length, or
// -1 when key is NULL or unset.
int64_t GetConfig(const std::map<std::string, std::string>& overrides, const char* key, char* buf,
                  size_t len);

}  // namespace plexus::store
