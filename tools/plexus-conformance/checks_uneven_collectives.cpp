// The collectives of ABI 1.2 and later: gather and scatter (every root),
// allgatherv, alltoallv and reduce_scatterv (1.4) (uneven per-rank counts,
// zero on some ranks, blocks placed out of rank order with gaps that must
// stay untouched), and allreduce_coalesced (several buffers, separate or
// views of one bucket, in place per buffer). Results are exact on every
// rank (data.hpp); every dtype the backend claims, and for the reductions
// every op's reduce_dtypes. The count and displacement arrays are borrowed for the
// post only: they are overwritten as soon as the post returns, so a backend
// that reads them later gets wrong data.
//
// A collective that is not claimed gets one SKIP line saying why (not
// claimed, or an older backend that has no such slot). A slot is read only
// when the table's minor has it and is long enough (Plugin::HasCollective).
#include "checks_uneven_collectives.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "check.hpp"
#include "data.hpp"
#include "operation.hpp"
#include "options.hpp"
#include "plexus/abi/call.hpp"
#include "plexus/abi/collectives.hpp"
#include "plugin.hpp"
#include "rank_record.hpp"

namespace plexus::conformance {
namespace {

// How the per-rank counts of allgatherv/alltoallv/reduce_scatterv and the buffers of
// allreduce_coalesced are chosen.
enum class Layout {
  kNone,              // gather, scatter
  kUneven,            // small uneven counts, zero on some ranks
  kLarge,             // large uneven counts, zero on some ranks
  kAllZero,           // every count 0
  kOneRank,           // allgatherv: only the last rank has elements
  kOverlappingSends,  // alltoallv: every send block starts at sendbuf
  kSeparate,          // coalesced: one allocation per buffer
  kBucket,            // coalesced: adjacent views of one allocation (a DDP bucket)
  kSingle,            // coalesced: one buffer
};

struct Case {
  plexus_collective_t coll;
  plexus_dtype_t dtype;
  plexus_reduce_op_t op;  // allreduce_coalesced, reduce_scatterv
  uint64_t count;         // gather, scatter: per rank
  uint32_t root;          // gather, scatter
  bool in_place;
  Layout layout;
};

std::string LayoutName(const Case& c, uint32_t size, uint64_t max_count);

std::string Capability(const Case& c) {
  std::string s = std::string(CollectiveName(c.coll)) + " " + DtypeName(c.dtype);
  if (abi::IsReduction(c.coll)) s += std::string(" ") + OpName(c.op);
  return s;
}

// Per-rank counts of allgatherv: what rank r contributes.
std::vector<uint64_t> GatherCounts(Layout layout, uint32_t size, uint64_t max_count) {
  std::vector<uint64_t> counts(size, 0);
  for (uint32_t r = 0; r < size; ++r) {
    const bool zero = r % 3 == 1;  // rank 1 (and 4, 7, ...) has nothing
    switch (layout) {
      case Layout::kUneven:
        counts[r] = zero ? 0 : 7 + 13 * uint64_t(r);
        break;
      case Layout::kLarge:
        counts[r] = zero ? 0 : std::max<uint64_t>(1, max_count / size) + r;
        break;
      case Layout::kOneRank:
        counts[r] = r == size - 1 ? 1009 : 0;
        break;
      default:
        counts[r] = 0;
    }
  }
  return counts;
}

// alltoallv: how many elements rank i sends to rank j.
uint64_t PairCount(Layout layout, uint32_t size, uint64_t max_count, uint32_t i, uint32_t j) {
  const bool zero = (i + 2 * j) % 3 == 1;
  switch (layout) {
    case Layout::kUneven:
    case Layout::kOverlappingSends:
      return zero ? 0 : 1 + 5 * uint64_t(i) + 3 * uint64_t(j);
    case Layout::kLarge:
      return zero ? 0 : std::max<uint64_t>(1, max_count / (uint64_t(size) * size)) + i + 2 * j;
    default:
      return 0;
  }
}

// allreduce_coalesced: the buffers' counts.
std::vector<uint64_t> CoalescedCounts(Layout layout, uint32_t size, uint64_t max_count) {
  switch (layout) {
    case Layout::kSeparate:
      return {1009, 0, 1, 4 * uint64_t(size) + 1, 3};
    case Layout::kBucket:
      return {std::max<uint64_t>(1, max_count / 4), 1, 0, max_count / 4 + 3};
    default:
      return {1009};
  }
}

std::string Join(const std::vector<uint64_t>& v) {
  std::string s;
  for (uint64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string LayoutName(const Case& c, uint32_t size, uint64_t max_count) {
  switch (c.layout) {
    case Layout::kUneven:
      return c.coll != PLEXUS_COLL_ALLTOALLV
                 ? "counts=" + Join(GatherCounts(c.layout, size, max_count))
                 : "uneven counts";
    case Layout::kLarge:
      return "large uneven counts";
    case Layout::kAllZero:
      return "all counts 0";
    case Layout::kOneRank:
      return c.coll == PLEXUS_COLL_ALLGATHERV ? "only the last rank sends"
                                              : "only the last rank's block";
    case Layout::kOverlappingSends:
      return "uneven counts, send blocks overlapping";
    case Layout::kSeparate:
      return "buffers=" + Join(CoalescedCounts(c.layout, size, max_count));
    case Layout::kBucket:
      return "views of one bucket=" + Join(CoalescedCounts(c.layout, size, max_count));
    case Layout::kSingle:
      return "one buffer=1009";
    default:
      return {};
  }
}

std::string CaseName(const Case& c, uint32_t size, uint64_t max_count) {
  std::string s = Capability(c);
  if (c.coll == PLEXUS_COLL_GATHER || c.coll == PLEXUS_COLL_SCATTER) {
    s += " count=" + std::to_string(c.count) + " root=" + std::to_string(c.root);
  } else {
    s += " " + LayoutName(c, size, max_count);
  }
  if (c.in_place) s += " in-place";
  return s;
}

std::vector<uint8_t> Bytes(uint64_t elements, plexus_dtype_t dtype) {
  return std::vector<uint8_t>(elements * ElementSize(dtype));
}

std::vector<uint8_t> MoveData(plexus_dtype_t dt, uint32_t rank, uint64_t salt, uint64_t first,
                              uint64_t count) {
  auto v = Bytes(count, dt);
  FillMoveData(dt, rank, salt, first, count, v.data());
  return v;
}

// Elements [0, extent) of buffer that no block covers must stay as they are.
void ExpectGapsUntouched(Operation& op, size_t buffer, uint64_t extent,
                         std::vector<std::pair<uint64_t, uint64_t>> blocks,
                         const std::string& what) {
  std::sort(blocks.begin(), blocks.end());
  uint64_t at = 0;
  for (const auto& [first, count] : blocks) {
    if (first > at) op.ExpectUntouched(buffer, at, first - at, what);
    at = std::max(at, first + count);
  }
  if (extent > at) op.ExpectUntouched(buffer, at, extent - at, what);
}

// Displacements of blocks placed in reverse rank order, each after a gap of
// gap elements; *extent is the elements the buffer needs.
std::vector<uint64_t> ReversedWithGaps(const std::vector<uint64_t>& counts, uint64_t gap,
                                       uint64_t* extent) {
  std::vector<uint64_t> displs(counts.size());
  uint64_t at = gap;
  for (size_t r = counts.size(); r-- > 0;) {
    displs[r] = at;
    at += counts[r] + gap;
  }
  *extent = at;
  return displs;
}

// Rank order, a gap before each block.
std::vector<uint64_t> InOrderWithGaps(const std::vector<uint64_t>& counts, uint64_t gap,
                                      uint64_t* extent) {
  std::vector<uint64_t> displs(counts.size());
  uint64_t at = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    at += gap;
    displs[r] = at;
    at += counts[r];
  }
  *extent = at + gap;
  return displs;
}

// The post has returned: the arrays were the backend's for the call only.
template <class T>
void Scribble(std::vector<T>& v) {
  std::fill(v.begin(), v.end(), T{});
}

void PostGather(Context& ctx, plexus_comm* comm, Operation& op, const Case& c, uint64_t salt) {
  const uint32_t rank = ctx.rank, size = ctx.size;
  const uint64_t n = c.count;
  const plexus_dtype_t dt = c.dtype;
  const void* send = nullptr;
  void* recv = nullptr;
  if (rank == c.root) {
    const size_t r = op.AddBuffer(n * size, "root's recvbuf");
    auto want = Bytes(n * size, dt);
    for (uint32_t j = 0; j < size; ++j) {
      FillMoveData(dt, j, salt, 0, n, want.data() + j * n * ElementSize(dt));
    }
    if (c.in_place) {
      FillMoveData(dt, rank, salt, 0, n, op.element(r, uint64_t(rank) * n));
      send = op.element(r, uint64_t(rank) * n);
    } else {
      const size_t s = op.AddBuffer(n, "sendbuf");
      FillMoveData(dt, rank, salt, 0, n, op.data(s));
      op.ExpectUntouched(s, 0, n, "sendbuf");
      send = op.data(s);
    }
    op.ExpectResult(r, 0, n * size, std::move(want), "root's recvbuf");
    recv = op.data(r);
  } else {
    const size_t s = op.AddBuffer(n, "sendbuf");
    FillMoveData(dt, rank, salt, 0, n, op.data(s));
    op.ExpectUntouched(s, 0, n, "sendbuf");
    send = op.data(s);
    if (!c.in_place) {  // in the in-place case a non-root passes NULL ("may be NULL")
      const size_t r = op.AddBuffer(n * size, "non-root recvbuf");
      op.ExpectUntouched(r, 0, n * size, "recvbuf of a non-root rank (the ABI says not touched)");
      recv = op.data(r);
    }
  }
  plexus_request* req = nullptr;
  op.Posted("gather",
            ctx.calls().post(
                comm, abi::Call{PLEXUS_COLL_GATHER, send, recv, n, dt, 0, c.root, nullptr}, &req),
            &req);
}

void PostScatter(Context& ctx, plexus_comm* comm, Operation& op, const Case& c, uint64_t salt) {
  const uint32_t rank = ctx.rank, size = ctx.size;
  const uint64_t n = c.count;
  const plexus_dtype_t dt = c.dtype;
  const void* send = nullptr;
  void* recv = nullptr;
  auto want = MoveData(dt, c.root, salt, uint64_t(rank) * n, n);
  if (rank == c.root) {
    const size_t s = op.AddBuffer(n * size, "root's sendbuf");
    FillMoveData(dt, rank, salt, 0, n * size, op.data(s));
    send = op.data(s);
    if (c.in_place) {
      // Root's own block stays where it is: the whole sendbuf is unchanged.
      op.ExpectUntouched(s, 0, n * size, "root's sendbuf (in place: its own block stays)");
      recv = op.element(s, uint64_t(rank) * n);
    } else {
      const size_t r = op.AddBuffer(n, "recvbuf");
      op.ExpectUntouched(s, 0, n * size, "root's sendbuf");
      op.ExpectResult(r, 0, n, std::move(want), "root's recvbuf");
      recv = op.data(r);
    }
  } else {
    const size_t r = op.AddBuffer(n, "recvbuf");
    op.ExpectResult(r, 0, n, std::move(want),
                    "recvbuf (block " + std::to_string(rank) + " of root's sendbuf)");
    recv = op.data(r);
    if (!c.in_place) {  // in the in-place case a non-root passes NULL ("not read")
      const size_t s = op.AddBuffer(n * size, "non-root sendbuf");
      FillMoveData(dt, rank, salt ^ 0xBADull, 0, n * size, op.data(s));
      op.ExpectUntouched(s, 0, n * size, "sendbuf of a non-root rank");
      send = op.data(s);
    }
  }
  plexus_request* req = nullptr;
  op.Posted("scatter",
            ctx.calls().post(
                comm, abi::Call{PLEXUS_COLL_SCATTER, send, recv, n, dt, 0, c.root, nullptr}, &req),
            &req);
}

void PostAllgatherv(Context& ctx, plexus_comm* comm, Operation& op, const Case& c, uint64_t salt) {
  const uint32_t rank = ctx.rank, size = ctx.size;
  const plexus_dtype_t dt = c.dtype;
  std::vector<uint64_t> counts = GatherCounts(c.layout, size, ctx.options.max_count);
  uint64_t extent = 0;
  std::vector<uint64_t> displs = ReversedWithGaps(counts, 3, &extent);
  const size_t r = op.AddBuffer(extent, "recvbuf");
  std::vector<std::pair<uint64_t, uint64_t>> blocks;
  for (uint32_t j = 0; j < size; ++j) {
    op.ExpectResult(r, displs[j], counts[j], MoveData(dt, j, salt, 0, counts[j]),
                    "recvbuf block of rank " + std::to_string(j) + " (displacement " +
                        std::to_string(displs[j]) + ")");
    blocks.emplace_back(displs[j], counts[j]);
  }
  ExpectGapsUntouched(op, r, extent, blocks, "recvbuf outside every rank's block");
  const void* send;
  if (c.in_place) {
    FillMoveData(dt, rank, salt, 0, counts[rank], op.element(r, displs[rank]));
    send = op.element(r, displs[rank]);
  } else {
    const size_t s = op.AddBuffer(counts[rank], "sendbuf");
    FillMoveData(dt, rank, salt, 0, counts[rank], op.data(s));
    op.ExpectUntouched(s, 0, counts[rank], "sendbuf");
    send = op.data(s);
  }
  plexus_request* req = nullptr;
  const int32_t rc = ctx.calls().post(comm,
                                      abi::Call{.coll = PLEXUS_COLL_ALLGATHERV,
                                                .sendbuf = send,
                                                .recvbuf = op.data(r),
                                                .count = counts[rank],
                                                .dtype = dt,
                                                .placement = nullptr,
                                                .recvcounts = counts.data(),
                                                .rdispls = displs.data()},
                                      &req);
  Scribble(counts);
  Scribble(displs);
  op.Posted("allgatherv", rc, &req);
}

// reduce_scatterv: the blocks of allgatherv's counts, in reverse rank order
// with gaps, in sendbuf; block j's element i is element (first of j) + i of
// the reduction's logical vector. In place: the result lands in this
// rank's block of sendbuf, and nothing else of sendbuf changes.
void PostReduceScatterv(Context& ctx, plexus_comm* comm, Operation& op, const Case& c,
                        uint64_t salt) {
  const uint32_t rank = ctx.rank, size = ctx.size;
  const plexus_dtype_t dt = c.dtype;
  std::vector<uint64_t> counts = GatherCounts(c.layout, size, ctx.options.max_count);
  uint64_t extent = 0;
  std::vector<uint64_t> displs = ReversedWithGaps(counts, 3, &extent);
  std::vector<uint64_t> first(size);
  for (uint32_t j = 1; j < size; ++j) first[j] = first[j - 1] + counts[j - 1];
  const size_t s = op.AddBuffer(extent, "sendbuf");
  std::vector<std::pair<uint64_t, uint64_t>> blocks;
  for (uint32_t j = 0; j < size; ++j) {
    FillReduceInput(dt, c.op, rank, size, salt, first[j], counts[j], op.element(s, displs[j]));
    if (!(c.in_place && j == rank)) {
      op.ExpectUntouched(s, displs[j], counts[j], "sendbuf block " + std::to_string(j));
    }
    blocks.emplace_back(displs[j], counts[j]);
  }
  ExpectGapsUntouched(op, s, extent, blocks, "sendbuf outside every rank's block");
  auto want = Bytes(counts[rank], dt);
  FillReduceResult(dt, c.op, size, salt, first[rank], counts[rank], want.data());
  void* recv;
  if (c.in_place) {
    recv = op.element(s, displs[rank]);
    op.ExpectResult(s, displs[rank], counts[rank], std::move(want),
                    "this rank's block of sendbuf (in place)");
  } else {
    const size_t r = op.AddBuffer(counts[rank], "recvbuf");
    op.ExpectResult(r, 0, counts[rank], std::move(want), "recvbuf");
    recv = op.data(r);
  }
  plexus_request* req = nullptr;
  const int32_t rc = ctx.calls().post(comm,
                                      abi::Call{.coll = PLEXUS_COLL_REDUCE_SCATTERV,
                                                .sendbuf = op.data(s),
                                                .recvbuf = recv,
                                                .count = counts[rank],
                                                .dtype = dt,
                                                .op = c.op,
                                                .placement = nullptr,
                                                .sendcounts = counts.data(),
                                                .sdispls = displs.data()},
                                      &req);
  Scribble(counts);
  Scribble(displs);
  op.Posted("reduce_scatterv", rc, &req);
}

void PostAlltoallv(Context& ctx, plexus_comm* comm, Operation& op, const Case& c, uint64_t salt) {
  const uint32_t rank = ctx.rank, size = ctx.size;
  const plexus_dtype_t dt = c.dtype;
  const uint64_t max_count = ctx.options.max_count;
  const bool shared_sends = c.layout == Layout::kOverlappingSends;
  std::vector<uint64_t> sendcounts(size), recvcounts(size);
  for (uint32_t j = 0; j < size; ++j) {
    sendcounts[j] = PairCount(c.layout, size, max_count, rank, j);
    recvcounts[j] = PairCount(c.layout, size, max_count, j, rank);
  }
  // What rank i sends to rank j: its own data, from an offset per receiver
  // (or, with overlapping send blocks, all from the start of sendbuf).
  auto first_for = [&](uint32_t j) { return shared_sends ? 0 : uint64_t(j) << 32; };
  uint64_t send_extent = 0;
  std::vector<uint64_t> sdispls;
  if (shared_sends) {
    sdispls.assign(size, 0);
    send_extent = *std::max_element(sendcounts.begin(), sendcounts.end());
  } else {
    sdispls = ReversedWithGaps(sendcounts, 2, &send_extent);
  }
  const size_t s = op.AddBuffer(send_extent, "sendbuf");
  if (shared_sends) {
    FillMoveData(dt, rank, salt, 0, send_extent, op.data(s));
  } else {
    for (uint32_t j = 0; j < size; ++j) {
      FillMoveData(dt, rank, salt, first_for(j), sendcounts[j], op.element(s, sdispls[j]));
    }
  }
  op.ExpectUntouched(s, 0, send_extent, "sendbuf");
  uint64_t recv_extent = 0;
  std::vector<uint64_t> rdispls = InOrderWithGaps(recvcounts, 1, &recv_extent);
  const size_t r = op.AddBuffer(recv_extent, "recvbuf");
  std::vector<std::pair<uint64_t, uint64_t>> blocks;
  for (uint32_t i = 0; i < size; ++i) {
    op.ExpectResult(r, rdispls[i], recvcounts[i],
                    MoveData(dt, i, salt, shared_sends ? 0 : uint64_t(rank) << 32, recvcounts[i]),
                    "recvbuf block from rank " + std::to_string(i) + " (displacement " +
                        std::to_string(rdispls[i]) + ")");
    blocks.emplace_back(rdispls[i], recvcounts[i]);
  }
  ExpectGapsUntouched(op, r, recv_extent, blocks, "recvbuf outside every rank's block");
  plexus_request* req = nullptr;
  const int32_t rc = ctx.calls().post(comm,
                                      abi::Call{.coll = PLEXUS_COLL_ALLTOALLV,
                                                .sendbuf = op.data(s),
                                                .recvbuf = op.data(r),
                                                .dtype = dt,
                                                .placement = nullptr,
                                                .sendcounts = sendcounts.data(),
                                                .sdispls = sdispls.data(),
                                                .recvcounts = recvcounts.data(),
                                                .rdispls = rdispls.data()},
                                      &req);
  Scribble(sendcounts);
  Scribble(sdispls);
  Scribble(recvcounts);
  Scribble(rdispls);
  op.Posted("alltoallv", rc, &req);
}

void PostCoalesced(Context& ctx, plexus_comm* comm, Operation& op, const Case& c, uint64_t salt) {
  const uint32_t rank = ctx.rank, size = ctx.size;
  const plexus_dtype_t dt = c.dtype;
  std::vector<uint64_t> counts = CoalescedCounts(c.layout, size, ctx.options.max_count);
  const uint32_t nb = uint32_t(counts.size());
  std::vector<const void*> sends(nb);
  std::vector<void*> recvs(nb);
  // Each buffer: where its input and its result live (buffer index, first element).
  struct Place {
    size_t buffer;
    uint64_t first;
  };
  std::vector<Place> send_at(nb), recv_at(nb);
  if (c.layout == Layout::kBucket) {
    uint64_t total = 0;
    for (uint64_t n : counts) total += n;
    const size_t sb = op.AddBuffer(total, "the bucket (sendbufs)");
    const size_t rb = c.in_place ? sb : op.AddBuffer(total, "the result bucket (recvbufs)");
    uint64_t at = 0;
    for (uint32_t i = 0; i < nb; ++i) {
      send_at[i] = {sb, at};
      recv_at[i] = {rb, at};
      at += counts[i];
    }
  } else {
    for (uint32_t i = 0; i < nb; ++i) {
      const std::string n = std::to_string(i);
      const size_t sb = op.AddBuffer(counts[i], "sendbufs[" + n + "]");
      // In place: every buffer (kSingle) or every other one (kSeparate).
      const bool same = c.in_place && (c.layout == Layout::kSingle || i % 2 == 0);
      const size_t rb = same ? sb : op.AddBuffer(counts[i], "recvbufs[" + n + "]");
      send_at[i] = {sb, 0};
      recv_at[i] = {rb, 0};
    }
  }
  for (uint32_t i = 0; i < nb; ++i) {
    const uint64_t bsalt = salt * 64 + i;  // different data per buffer
    FillReduceInput(dt, c.op, rank, size, bsalt, 0, counts[i],
                    op.element(send_at[i].buffer, send_at[i].first));
    sends[i] = op.element(send_at[i].buffer, send_at[i].first);
    recvs[i] = op.element(recv_at[i].buffer, recv_at[i].first);
  }
  for (uint32_t i = 0; i < nb; ++i) {
    const uint64_t bsalt = salt * 64 + i;
    const std::string n = std::to_string(i);
    auto want = Bytes(counts[i], dt);
    FillReduceResult(dt, c.op, size, bsalt, 0, counts[i], want.data());
    if (sends[i] != recvs[i]) {
      op.ExpectUntouched(send_at[i].buffer, send_at[i].first, counts[i], "sendbufs[" + n + "]");
    }
    op.ExpectResult(recv_at[i].buffer, recv_at[i].first, counts[i], std::move(want),
                    "recvbufs[" + n + "]" + (sends[i] == recvs[i] ? " (in place)" : ""));
  }
  plexus_request* req = nullptr;
  const int32_t rc = ctx.calls().post(comm,
                                      abi::Call{.coll = PLEXUS_COLL_ALLREDUCE_COALESCED,
                                                .dtype = dt,
                                                .op = c.op,
                                                .placement = nullptr,
                                                .sendbufs = sends.data(),
                                                .recvbufs = recvs.data(),
                                                .counts = counts.data(),
                                                .nbuffers = nb},
                                      &req);
  Scribble(sends);
  Scribble(recvs);
  Scribble(counts);
  op.Posted("allreduce_coalesced", rc, &req);
}

Outcome RunCase(Context& ctx, const Case& c, plexus_comm* comm) {
  if (!ctx.plugin().HasCollective(c.coll)) return Outcome::Skip(ctx.plugin().NoSlotReason(c.coll));
  Operation op(ctx, comm, c.dtype);
  SetPhase("backend collective post");
  const uint64_t salt = ctx.seq;
  switch (c.coll) {
    case PLEXUS_COLL_GATHER:
      PostGather(ctx, comm, op, c, salt);
      break;
    case PLEXUS_COLL_SCATTER:
      PostScatter(ctx, comm, op, c, salt);
      break;
    case PLEXUS_COLL_ALLGATHERV:
      PostAllgatherv(ctx, comm, op, c, salt);
      break;
    case PLEXUS_COLL_ALLTOALLV:
      PostAlltoallv(ctx, comm, op, c, salt);
      break;
    case PLEXUS_COLL_ALLREDUCE_COALESCED:
      PostCoalesced(ctx, comm, op, c, salt);
      break;
    case PLEXUS_COLL_REDUCE_SCATTERV:
      PostReduceScatterv(ctx, comm, op, c, salt);
      break;
    default:
      return Outcome::Fail("internal: not an uneven collective");
  }
  Findings f;
  bool broken = false;
  op.Finish(&f, &broken);
  Outcome o = f.ToOutcome();
  o.comm_broken = broken && comm == ctx.comm();
  return o;
}

void Add(std::vector<Check>* out, const Case& c, uint32_t size, uint64_t max_count) {
  Check check;
  check.name = CaseName(c, size, max_count);
  check.group = CollectiveName(c.coll);
  check.capability = Capability(c);
  check.run = [c](Context& ctx) { return RunCase(ctx, c, ctx.comm()); };
  out->push_back(std::move(check));
}

std::vector<plexus_dtype_t> DtypesIn(uint32_t mask) {
  std::vector<plexus_dtype_t> out;
  for (plexus_dtype_t d = 1; d <= PLEXUS_DTYPE_MAX_V1; ++d) {
    if (mask & (1u << d)) out.push_back(d);
  }
  return out;
}

// gather/scatter counts: 0, 1, a prime, the large per-rank block, and one
// the world size does not divide.
std::vector<uint64_t> RootedCounts(uint32_t size, uint64_t max_count) {
  std::vector<uint64_t> counts;
  for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(1009),
                     std::max<uint64_t>(1, max_count / size), uint64_t(4) * size + 1}) {
    if (std::find(counts.begin(), counts.end(), n) == counts.end()) counts.push_back(n);
  }
  return counts;
}

}  // namespace

std::string NotClaimedReason(const Context& ctx, plexus_collective_t coll) {
  const std::string why = ctx.plugin().NoSlotReason(coll);
  if (why.rfind("backend", 0) == 0) return why;  // an ABI 1.0/1.1 table: no such slot
  return std::string(CollectiveName(coll)) + " is not claimed (capabilities.collectives)";
}

const std::vector<plexus_collective_t>& Collectives12() {
  static const std::vector<plexus_collective_t> kList = {PLEXUS_COLL_GATHER,
                                                         PLEXUS_COLL_SCATTER,
                                                         PLEXUS_COLL_ALLGATHERV,
                                                         PLEXUS_COLL_ALLTOALLV,
                                                         PLEXUS_COLL_ALLREDUCE_COALESCED,
                                                         PLEXUS_COLL_REDUCE_SCATTERV};
  return kList;
}

Outcome RunSmall12(Context& ctx, plexus_collective_t coll, plexus_dtype_t dtype,
                   plexus_reduce_op_t op) {
  Case c{coll, dtype, op, 5, 0, false, Layout::kNone};
  if (coll == PLEXUS_COLL_ALLGATHERV || coll == PLEXUS_COLL_ALLTOALLV ||
      coll == PLEXUS_COLL_REDUCE_SCATTERV) {
    c.layout = Layout::kUneven;
  }
  if (coll == PLEXUS_COLL_ALLREDUCE_COALESCED) c.layout = Layout::kSeparate;
  return RunCase(ctx, c, ctx.comm());
}

std::vector<Check> CollectiveChecks12(const plexus_capabilities& caps, uint32_t size,
                                      const Options& options) {
  std::vector<Check> out;
  const bool in_place = caps.flags & PLEXUS_CAP_IN_PLACE;
  const uint64_t M = options.max_count;
  for (plexus_collective_t coll : Collectives12()) {
    if (!(caps.collectives & (1u << coll))) {
      Check skip;
      skip.name =
          std::string(CollectiveName(coll)) + " (ABI 1." + std::to_string(abi::MinorOf(coll)) + ")";
      skip.group = CollectiveName(coll);
      skip.run = [coll](Context& ctx) { return Outcome::Skip(NotClaimedReason(ctx, coll)); };
      out.push_back(std::move(skip));
      continue;
    }
    std::vector<bool> placements = {false};
    if (in_place && coll != PLEXUS_COLL_ALLTOALLV) placements.push_back(true);
    if (coll == PLEXUS_COLL_GATHER || coll == PLEXUS_COLL_SCATTER) {
      // Every count at roots 0 and size-1; every other root with one count.
      for (plexus_dtype_t dt : DtypesIn(caps.dtypes)) {
        for (uint32_t root = 0; root < size; ++root) {
          const bool edge = root == 0 || root == size - 1;
          const std::vector<uint64_t> counts =
              edge ? RootedCounts(size, M) : std::vector<uint64_t>{1009};
          for (uint64_t n : counts) {
            for (bool ip : placements)
              Add(&out, {coll, dt, 0, n, root, ip, Layout::kNone}, size, M);
          }
        }
      }
    } else if (coll == PLEXUS_COLL_ALLGATHERV) {
      for (plexus_dtype_t dt : DtypesIn(caps.dtypes)) {
        for (Layout l : {Layout::kUneven, Layout::kLarge, Layout::kAllZero, Layout::kOneRank}) {
          for (bool ip : placements) Add(&out, {coll, dt, 0, 0, 0, ip, l}, size, M);
        }
      }
    } else if (coll == PLEXUS_COLL_ALLTOALLV) {
      for (plexus_dtype_t dt : DtypesIn(caps.dtypes)) {
        for (Layout l :
             {Layout::kUneven, Layout::kLarge, Layout::kAllZero, Layout::kOverlappingSends}) {
          Add(&out, {coll, dt, 0, 0, 0, false, l}, size, M);
        }
      }
    } else if (coll == PLEXUS_COLL_REDUCE_SCATTERV) {
      // reduce_dtypes per op; the large layout with sum only.
      for (plexus_reduce_op_t rop = PLEXUS_OP_SUM; rop <= PLEXUS_OP_MAX_V1; ++rop) {
        for (plexus_dtype_t dt : DtypesIn(caps.reduce_dtypes[rop])) {
          for (Layout l : {Layout::kUneven, Layout::kLarge, Layout::kAllZero, Layout::kOneRank}) {
            if (l != Layout::kUneven && rop != PLEXUS_OP_SUM) continue;
            for (bool ip : placements) Add(&out, {coll, dt, rop, 0, 0, ip, l}, size, M);
          }
        }
      }
    } else {  // allreduce_coalesced: reduce_dtypes per op
      for (plexus_reduce_op_t rop = PLEXUS_OP_SUM; rop <= PLEXUS_OP_MAX_V1; ++rop) {
        for (plexus_dtype_t dt : DtypesIn(caps.reduce_dtypes[rop])) {
          for (Layout l : {Layout::kSeparate, Layout::kBucket}) {
            for (bool ip : placements) Add(&out, {coll, dt, rop, 0, 0, ip, l}, size, M);
          }
          if (rop == PLEXUS_OP_SUM)
            Add(&out, {coll, dt, rop, 0, 0, false, Layout::kSingle}, size, M);
        }
      }
    }
  }
  return out;
}

}  // namespace plexus::conformance
