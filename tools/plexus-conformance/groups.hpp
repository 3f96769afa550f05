// Groups for the checks: which job ranks form one, each rank's view of it
// (GroupShape, plugin.hpp), making it with comm_create (an out-of-band
// channel over the group's ranks only, as the host does for a backend
// without comm_split) or comm_split, and the work every group check does on
// one: an allreduce over the group and a broadcast from every group rank,
// whose data tell which process each group rank really is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "check.hpp"
#include "plexus/backend.h"
#include "plugin.hpp"

namespace plexus::conformance {

// Every rank's host name, through the store. Collective over the job: every
// rank calls it once in the check (keys carry ctx.seq).
std::string JobHosts(Context& ctx, std::vector<std::string>* hosts);

// This rank's view of the group whose ranks are members (job ranks in group
// order; this rank must be one of them).
GroupShape ShapeIn(const Context& ctx, const std::vector<uint32_t>& members,
                   const std::vector<std::string>& hosts);

// The group of color after comm_split(color[r], key[r]) on the job: ranks
// of that color ordered by (key, rank).
std::vector<uint32_t> SplitMembers(const std::vector<uint32_t>& colors,
                                   const std::vector<uint32_t>& keys, uint32_t color);

// "[2, 0]"
std::string RankList(const std::vector<uint32_t>& ranks);

// A group's communicator, made by comm_create or comm_split; destroyed at
// scope end unless a request of it was leaked.
class GroupComm {
 public:
  explicit GroupComm(Context& ctx) : ctx_(ctx) {}
  ~GroupComm();
  GroupComm(const GroupComm&) = delete;
  GroupComm& operator=(const GroupComm&) = delete;

  // comm_create over shape.members, named name. Returns the plugin's status.
  int32_t Create(const GroupShape& shape, const std::string& name, int64_t timeout_ms);
  // comm_split of parent; shape nullptr for PLEXUS_SPLIT_NO_COLOR.
  int32_t Split(plexus_comm* parent, uint32_t color, uint32_t key, const GroupShape* shape,
                const std::string& name, int64_t timeout_ms);

  plexus_comm* get() const { return comm_; }
  const std::string& error() const { return error_; }  // the plugin's error_buf
  const std::string& name() const { return name_; }
  // Hands the communicator over (for a check after this one): nothing is
  // destroyed at scope end then.
  plexus_comm* release() {
    plexus_comm* c = comm_;
    comm_ = nullptr;
    return c;
  }
  // The call failed but left *comm_out non-NULL (the ABI: NULL on failure).
  bool stray() const { return stray_; }
  void MarkLeaked() { leaked_ = true; }

 private:
  Context& ctx_;
  plexus_comm* comm_ = nullptr;
  std::string error_;
  std::string name_;
  bool leaked_ = false;
  bool stray_ = false;
};

// Makes this rank's group of members (job ranks in group order) the way
// the host makes one: with comm_split of the shared communicator when the
// backend has it (members in group order as keys, every other rank of no
// color, so collective over the job: every rank calls it), else with
// comm_create over members (only they call it). A rank outside members
// makes nothing (group.get() stays NULL). Returns the plugin's status and
// says in *how which call it was, e.g. "comm_split(color 0, key 1)".
int32_t MakeGroup(Context& ctx, GroupComm& group, const std::vector<uint32_t>& members,
                  const std::vector<std::string>& hosts, const std::string& name,
                  int64_t timeout_ms, std::string* how);

// The group checks need an allreduce and a broadcast: "" when the
// capabilities have them (with *reduce_dtype and *move_dtype set, int32
// when claimed), else why not.
std::string GroupOpsMissing(const plexus_capabilities& caps, plexus_dtype_t* reduce_dtype,
                            plexus_dtype_t* move_dtype);

// On comm, the communicator of shape: a sum allreduce of reduce_dtype over
// the group (inputs by group rank, so a wrong size or a missing rank shows),
// then a broadcast of move_dtype from every group rank, whose data are the
// root's job rank's: a backend whose rank g is not members[g] delivers
// another process's data, and the finding says whose. Stops at the first
// failure. Adds problems to f (prefixed with where); *leaked when a request
// never completed (then comm must not be destroyed).
void ExerciseGroup(Context& ctx, plexus_comm* comm, const GroupShape& shape,
                   plexus_dtype_t reduce_dtype, plexus_dtype_t move_dtype, uint64_t salt,
                   const std::string& where, Findings* f, bool* leaked);

}  // namespace plexus::conformance
