#include "groups.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "data.hpp"
#include "exchange.hpp"
#include "operation.hpp"
#include "plexus/abi/call.hpp"
#include "session.hpp"

namespace plexus::conformance {
namespace {

std::string Hostname() {
  char name[256] = "";
  gethostname(name, sizeof name - 1);
  return name;
}

constexpr uint64_t kReduceCount = 1009;
constexpr uint64_t kBroadcastCount = 257;

}  // namespace

std::string JobHosts(Context& ctx, std::vector<std::string>* hosts) {
  Exchange& ex = ctx.exchange();
  const std::string base = "hosts/" + std::to_string(ctx.seq) + "/";
  Status st = ex.Set(base + std::to_string(ctx.rank), Hostname());
  if (!st.ok()) return "rendezvous store: " + st.message();
  hosts->assign(ctx.size, std::string());
  for (uint32_t r = 0; r < ctx.size; ++r) {
    st = ex.Get(base + std::to_string(r), &(*hosts)[r], ex.timeout());
    if (!st.ok()) return "rendezvous store: rank " + std::to_string(r) + "'s host: " + st.message();
  }
  return {};
}

GroupShape ShapeIn(const Context& ctx, const std::vector<uint32_t>& members,
                   const std::vector<std::string>& hosts) {
  GroupShape shape;
  shape.members = members;
  shape.size = uint32_t(members.size());
  shape.device = int32_t(ctx.session.launch().local_rank);  // the process's, in any group
  shape.local_size = 0;
  const std::string& mine = hosts.at(ctx.rank);
  for (uint32_t g = 0; g < members.size(); ++g) {
    if (members[g] == ctx.rank) {
      shape.rank = g;
      shape.local_rank = shape.local_size;
    }
    if (hosts.at(members[g]) == mine) ++shape.local_size;
  }
  return shape;
}

std::vector<uint32_t> SplitMembers(const std::vector<uint32_t>& colors,
                                   const std::vector<uint32_t>& keys, uint32_t color) {
  std::vector<uint32_t> members;
  for (uint32_t r = 0; r < colors.size(); ++r) {
    if (colors[r] == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
  return members;
}

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

GroupComm::~GroupComm() {
  if (comm_) ctx_.session.DestroyComm(comm_, leaked_);
}

int32_t GroupComm::Create(const GroupShape& shape, const std::string& name, int64_t timeout_ms) {
  name_ = name;
  const int32_t rc =
      ctx_.plugin().CreateGroupComm(shape, ctx_.session.store(), name, timeout_ms, &comm_, &error_);
  if (rc != PLEXUS_OK) {
    stray_ = comm_ != nullptr;
    comm_ = nullptr;
  }
  return rc;
}

int32_t GroupComm::Split(plexus_comm* parent, uint32_t color, uint32_t key, const GroupShape* shape,
                         const std::string& name, int64_t timeout_ms) {
  name_ = name;
  const int32_t rc = ctx_.plugin().SplitComm(parent, color, key, shape, ctx_.session.store(), name,
                                             timeout_ms, &comm_, &error_);
  if (rc != PLEXUS_OK) {
    stray_ = comm_ != nullptr;
    comm_ = nullptr;
  }
  return rc;
}

int32_t MakeGroup(Context& ctx, GroupComm& group, const std::vector<uint32_t>& members,
                  const std::vector<std::string>& hosts, const std::string& name,
                  int64_t timeout_ms, std::string* how) {
  const auto at = std::find(members.begin(), members.end(), ctx.rank);
  const bool in = at != members.end();
  if (ctx.plugin().has_comm_split()) {
    if (!in) {
      *how = "comm_split(color NO_COLOR)";
      return group.Split(ctx.comm(), PLEXUS_SPLIT_NO_COLOR, 0, nullptr, name, timeout_ms);
    }
    const uint32_t key = uint32_t(at - members.begin());
    *how = "comm_split(color 0, key " + std::to_string(key) + ")";
    const GroupShape shape = ShapeIn(ctx, members, hosts);
    return group.Split(ctx.comm(), 0, key, &shape, name, timeout_ms);
  }
  *how = "comm_create over " + RankList(members);
  if (!in) return PLEXUS_OK;
  return group.Create(ShapeIn(ctx, members, hosts), name, timeout_ms);
}

std::string GroupOpsMissing(const plexus_capabilities& caps, plexus_dtype_t* reduce_dtype,
                            plexus_dtype_t* move_dtype) {
  if (!(caps.collectives & (1u << PLEXUS_COLL_ALLREDUCE)) ||
      !(caps.collectives & (1u << PLEXUS_COLL_BROADCAST))) {
    return "needs allreduce and broadcast";
  }
  auto pick = [](uint32_t mask) -> plexus_dtype_t {
    if (mask & (1u << PLEXUS_DTYPE_INT32)) return PLEXUS_DTYPE_INT32;
    for (plexus_dtype_t d = 1; d <= PLEXUS_DTYPE_MAX_V1; ++d) {
      if (mask & (1u << d)) return d;
    }
    return 0;
  };
  *reduce_dtype = pick(caps.reduce_dtypes[PLEXUS_OP_SUM]);
  *move_dtype = pick(caps.dtypes);
  if (!*reduce_dtype) return "needs a sum allreduce of some dtype";
  if (!*move_dtype) return "needs a broadcast of some dtype";
  return {};
}

void ExerciseGroup(Context& ctx, plexus_comm* comm, const GroupShape& shape,
                   plexus_dtype_t reduce_dtype, plexus_dtype_t move_dtype, uint64_t salt,
                   const std::string& where, Findings* f, bool* leaked) {
  const TracedCalls& t = ctx.calls();
  const std::string in = " (" + where + ", group rank " + std::to_string(shape.rank) + " of " +
                         std::to_string(shape.size) + ")";
  {
    Operation op(ctx, comm, reduce_dtype);
    const uint64_t n = kReduceCount;
    const size_t s = op.AddBuffer(n, "sendbuf");
    const size_t r = op.AddBuffer(n, "recvbuf");
    FillReduceInput(reduce_dtype, PLEXUS_OP_SUM, shape.rank, shape.size, salt, 0, n, op.data(s));
    std::vector<uint8_t> want(n * ElementSize(reduce_dtype));
    FillReduceResult(reduce_dtype, PLEXUS_OP_SUM, shape.size, salt, 0, n, want.data());
    op.ExpectUntouched(s, 0, n, "sendbuf");
    op.ExpectResult(r, 0, n, std::move(want),
                    "allreduce over the group's " + std::to_string(shape.size) + " rank(s)");
    plexus_request* req = nullptr;
    op.Posted("allreduce",
              t.post(comm,
                     abi::Call{PLEXUS_COLL_ALLREDUCE, op.data(s), op.data(r), n, reduce_dtype,
                               PLEXUS_OP_SUM, 0, nullptr},
                     &req),
              &req);
    Findings mine;
    bool broken = false;
    const bool ok = op.Finish(&mine, &broken);
    if (op.abandoned()) *leaked = true;
    if (!ok) {
      f->Add(mine.ToOutcome().detail + in);
      return;
    }
  }
  for (uint32_t root = 0; root < shape.size; ++root) {
    Operation op(ctx, comm, move_dtype);
    const uint64_t n = kBroadcastCount;
    const uint64_t bsalt = salt * 64 + root;
    const size_t b = op.AddBuffer(n, "buf");
    std::vector<uint8_t> want(n * ElementSize(move_dtype));
    FillMoveData(move_dtype, shape.members[root], bsalt, 0, n, want.data());
    // Every rank's buf starts as its own data would be: the root's is the
    // payload, and what a non-root ends with tells whose buf was sent.
    FillMoveData(move_dtype, shape.members[shape.rank], bsalt, 0, n, op.data(b));
    const std::vector<uint8_t> expected = want;
    op.ExpectResult(b, 0, n, std::move(want),
                    "broadcast from group rank " + std::to_string(root) + " (job rank " +
                        std::to_string(shape.members[root]) + ")");
    plexus_request* req = nullptr;
    op.Posted("broadcast",
              t.post(comm,
                     abi::Call{PLEXUS_COLL_BROADCAST, nullptr, op.data(b), n, move_dtype, 0, root,
                               nullptr},
                     &req),
              &req);
    Findings mine;
    bool broken = false;
    const bool ok = op.Finish(&mine, &broken);
    if (op.abandoned()) *leaked = true;
    if (ok) continue;
    std::string whose;
    if (!broken) {
      // It completed, with other data: whose were they?
      for (uint32_t g = 0; g < shape.size; ++g) {
        std::vector<uint8_t> theirs(expected.size());
        FillMoveData(move_dtype, shape.members[g], bsalt, 0, n, theirs.data());
        if (g == root || std::memcmp(op.data(b), theirs.data(), theirs.size()) != 0) continue;
        whose = g == shape.rank
                    ? "; buf still holds what it held before (nothing arrived)"
                    : "; the data are those of group rank " + std::to_string(g) + " (job rank " +
                          std::to_string(shape.members[g]) + "): the backend's rank " +
                          std::to_string(root) + " is not job rank " +
                          std::to_string(shape.members[root]) + " as the configuration says";
      }
    }
    f->Add(mine.ToOutcome().detail + whose + in);
    return;
  }
}

}  // namespace plexus::conformance
