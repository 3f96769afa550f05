// Files that only this user can read or replace: /tmp/plexus-<uid>/NAME.
//
// Ranks of one job on one host that have no secret given to them meet through
// such a file (core/src/job_secret.hpp; plexus-conformance's rendezvous under
// plain mpirun): whoever comes first writes it, the others read what is
// there. /tmp is shared with every other user, so nothing is taken on trust:
//   - the directory is created mode 0700; one that exists must be a real
//     directory (not a symbolic link) owned by this user that nobody else may
//     write or enter, or every call is an error naming it and its owner (the
//     way tmux treats /tmp/tmux-<uid>): another user who made it first must
//     not get to choose or read the secrets in it;
//   - every file is opened relative to that directory's descriptor with
//     O_NOFOLLOW and must be a regular file owned by this user with no group
//     or other permission bits, or it is refused, naming it;
//   - a file is written in full under a temporary name first and then linked
//     (CreateOnce: fails with EEXIST if someone was first, whose contents are
//     then returned) or renamed (Replace) into place, so a reader never sees
//     half a file.
// The directory is /tmp/plexus-<uid>, not under $TMPDIR or $XDG_RUNTIME_DIR:
// every rank of a job must arrive at the same path, and those variables
// differ between shells, sudo, ssh and batch systems. PLEXUS_RUNTIME_DIR names
// another one (the same checks apply); it must then be the same for every
// rank on the host.
//
// Thread safety: every function may be called from any thread. Blocking: local
// file system calls only.
#pragma once

#include <string>

#include "plexus/status.hpp"

namespace plexus::store {

// The largest file accepted (these files hold a line or two).
inline constexpr size_t kMaxPrivateFileBytes = 4096;

// The directory all of this lives in: PLEXUS_RUNTIME_DIR, else "/tmp/plexus-<uid>".
std::string PrivateDirPath();

// name: one path component, [A-Za-z0-9._-] only (anything else is
// INVALID_ARGUMENT). Leaves *contents untouched on failure.
//
// Creates name holding contents unless it exists already; either way *contents
// becomes what the file holds (this call's contents, or the first writer's),
// and *created (when not null) says whether this call made it.
Status CreateOnce(const std::string& name, std::string* contents, bool* created = nullptr);

// Writes name to hold contents, replacing what was there.
Status Replace(const std::string& name, const std::string& contents);

// What name holds. NOT_FOUND-like absence is INVALID_ARGUMENT with *missing
// set to true (when missing is not null), so pollers can tell "not yet" from
// "refused".
Status ReadPrivate(const std::string& name, std::string* contents, bool* missing = nullptr);

// Removes name if it is there; never fails (a file that cannot be removed
// is left for the next job at the same place, which reuses it safely).
void RemovePrivate(const std::string& name);

// A name made of any text: characters outside [A-Za-z0-9.-] become '_'.
std::string PrivateFileName(const std::string& text);

}  // namespace plexus::store
