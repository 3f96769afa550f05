// The meaning of a collective, read from its traits: rank d's receive block
// b holds the send block meant for d (block d of a per-rank send side, else
// the one block) of rank b (a per-rank receive side), of the root, or, for
// a reduction, of every rank reduced. Every input is a function of (rank,
// element of the logical vector, salt) (data.hpp), so each rank computes
// every other rank's input and hence its own exact result.
//
// Per-rank blocks of the v-collectives are placed in reverse rank order
// with gaps that must stay untouched, and their count and displacement
// arrays are overwritten as soon as the post returns: they are the
// backend's for the post only.
#include "collective_case.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "data.hpp"
#include "operation.hpp"
#include "options.hpp"
#include "plexus/abi/call.hpp"
#include "plexus/abi/collectives.hpp"
#include "plugin.hpp"
#include "rank_record.hpp"

namespace plexus::conformance {
namespace {

using abi::Call;
using abi::InPlace;
using abi::Layout;
using abi::TakesArgument;
using abi::TraitsOf;

// Per-rank counts when they are the same on every rank (allgatherv): what
// block r holds.
std::vector<uint64_t> AlikeCounts(Pattern p, uint32_t size, uint64_t max_count) {
  std::vector<uint64_t> counts(size, 0);
  for (uint32_t r = 0; r < size; ++r) {
    const bool zero = r % 3 == 1;  // rank 1 (and 4, 7, ...) has nothing
    if (p == Pattern::kUneven) counts[r] = zero ? 0 : 7 + 13 * uint64_t(r);
    if (p == Pattern::kLarge) counts[r] = zero ? 0 : std::max<uint64_t>(1, max_count / size) + r;
    if (p == Pattern::kOneRank) counts[r] = r == size - 1 ? 1009 : 0;
  }
  return counts;
}

// Counts that differ per pair (alltoallv): how many elements rank i sends j.
uint64_t PairCount(Pattern p, uint32_t size, uint64_t max_count, uint32_t i, uint32_t j) {
  const bool zero = (i + 2 * j) % 3 == 1;
  if (p == Pattern::kUneven || p == Pattern::kOverlappingSends)
    return zero ? 0 : 1 + 5 * uint64_t(i) + 3 * uint64_t(j);
  if (p == Pattern::kLarge)
    return zero ? 0 : std::max<uint64_t>(1, max_count / (uint64_t(size) * size)) + i + 2 * j;
  return 0;
}

// A buffer list's counts.
std::vector<uint64_t> ListCounts(Pattern p, uint32_t size, uint64_t max_count) {
  if (p == Pattern::kSeparate) return {1009, 0, 1, 4 * uint64_t(size) + 1, 3};
  if (p == Pattern::kBucket) return {std::max<uint64_t>(1, max_count / 4), 1, 0, max_count / 4 + 3};
  return {1009};
}

std::string Join(const std::vector<uint64_t>& v) {
  std::string s;
  for (uint64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::vector<uint8_t> Bytes(uint64_t elements, plexus_dtype_t dtype) {
  return std::vector<uint8_t>(elements * ElementSize(dtype));
}

// One block of a side: where it sits in the buffer, its elements, and the
// element of the sender's logical vector it starts at.
struct Block {
  uint64_t displ, count, first;
};

// The blocks of one side (send or receive) of a rank, and the elements the
// buffer needs.
struct Side {
  std::vector<Block> blocks;
  uint64_t extent = 0;
  bool per_rank_arrays = false;  // described by count and displacement arrays
};

Side SideOf(const CollectiveCase& c, bool send, uint32_t rank, uint32_t size, uint64_t max_count) {
  const abi::Traits t = TraitsOf(c.coll);
  const bool per_rank = send ? t.send_per_rank : t.recv_per_rank;
  std::vector<uint64_t> counts;
  if (t.layout == Layout::kCount) {
    counts.assign(per_rank ? size : 1, c.count);
  } else if (t.counts_alike) {
    counts = AlikeCounts(c.pattern, size, max_count);
    if (!per_rank) counts = {counts[rank]};
  } else {
    for (uint32_t j = 0; j < size; ++j)
      counts.push_back(send ? PairCount(c.pattern, size, max_count, rank, j)
                            : PairCount(c.pattern, size, max_count, j, rank));
  }
  Side s;
  s.per_rank_arrays = t.layout == Layout::kPerRankCounts && per_rank;
  const bool overlapping = send && c.pattern == Pattern::kOverlappingSends;
  // Logical vectors: a prefix sum where every rank's blocks are alike (a
  // reduction's must be); else each receiver's data from its own offset.
  const bool alike = t.layout == Layout::kCount || t.counts_alike;
  uint64_t logical = 0, at = s.per_rank_arrays ? (send ? 2 : 3) : 0;
  const uint64_t gap = at;
  s.blocks.resize(counts.size());
  for (size_t k = counts.size(); k-- > 0;) {  // reverse rank order, gaps between
    s.blocks[k].displ = overlapping ? 0 : at;
    if (!overlapping) at += counts[k] + gap;
  }
  for (size_t j = 0; j < counts.size(); ++j) {
    Block& b = s.blocks[j];
    b.count = counts[j];
    b.first = alike ? logical : overlapping ? 0 : uint64_t(j) << 32;
    logical += counts[j];
    if (!s.per_rank_arrays) b.displ = b.first;  // packed in rank order
    s.extent =
        std::max(s.extent, b.displ + b.count + (s.per_rank_arrays && !overlapping ? gap : 0));
  }
  return s;
}

// Elements [0, extent) of buffer that no block covers must stay as they are.
void ExpectGapsUntouched(Operation& op, size_t buffer, const Side& side, const std::string& what) {
  std::vector<std::pair<uint64_t, uint64_t>> blocks;
  for (const Block& b : side.blocks) blocks.emplace_back(b.displ, b.count);
  std::sort(blocks.begin(), blocks.end());
  uint64_t at = 0;
  for (const auto& [first, count] : blocks) {
    if (first > at) op.ExpectUntouched(buffer, at, first - at, what);
    at = std::max(at, first + count);
  }
  if (side.extent > at) op.ExpectUntouched(buffer, at, side.extent - at, what);
}

// The post has returned: the arrays were the backend's for the call only.
template <class T>
void Scribble(std::vector<T>& v) {
  std::fill(v.begin(), v.end(), T{});
}

// Posts c (Layout::kCount or kPerRankCounts) on op.
void PostBlocks(Context& ctx, plexus_comm* comm, Operation& op, const CollectiveCase& c,
                uint64_t salt) {
  const abi::Traits t = TraitsOf(c.coll);
  const uint32_t rank = ctx.rank, size = ctx.size;
  const uint64_t M = ctx.options.max_count;
  const plexus_dtype_t dt = c.dtype;
  const bool is_root = t.root != abi::Root::kRoot || rank == c.root;
  const bool takes_send = TakesArgument(c.coll, &Call::sendbuf);
  // Whether this rank's call has each side; the other side of a rooted
  // collective's other ranks is a buffer that must stay untouched, or NULL
  // in the in-place form ("not read / may be NULL").
  const bool has_send = takes_send && (!t.send_on_root_only || is_root);
  const bool has_recv = !t.recv_on_root_only || is_root;
  const bool in_place = c.in_place && has_send && has_recv;
  const Side send = SideOf(c, true, rank, size, M);
  const Side recv = SideOf(c, false, rank, size, M);
  auto fill = [&](uint32_t from, const Block& b, uint8_t* at) {
    if (t.reduces) {
      FillReduceInput(dt, c.op, from, size, salt, b.first, b.count, at);
    } else {
      FillMoveData(dt, from, salt, b.first, b.count, at);
    }
  };

  const std::string base = takes_send ? "recvbuf" : "buf";
  const std::string recv_name = t.recv_on_root_only ? "root's " + base : base;
  size_t r = 0, s = 0;
  void* recvbuf = nullptr;
  const void* sendbuf = nullptr;
  const bool into_send = in_place && t.in_place == InPlace::kSendBlock;
  if (!into_send && (has_recv || !c.in_place)) {
    r = op.AddBuffer(recv.extent, has_recv ? recv_name : "non-root " + base);
    recvbuf = op.data(r);
    if (!has_recv) op.ExpectUntouched(r, 0, recv.extent, "recvbuf of a non-root rank");
  }
  if (!takes_send && is_root) {
    fill(rank, send.blocks[0], op.data(r));  // broadcast: the root's buf is the input
  } else if (in_place && (t.in_place == InPlace::kEqual || t.in_place == InPlace::kRecvBlock)) {
    // The input where this rank's result goes: the buffer, or its block.
    const Block& own = recv.blocks[t.in_place == InPlace::kEqual ? 0 : rank];
    fill(rank, send.blocks[0], op.element(r, own.displ));
    sendbuf = op.element(r, own.displ);
  } else if (takes_send && (has_send || !c.in_place)) {
    s = op.AddBuffer(send.extent, has_send ? "sendbuf" : "non-root sendbuf");
    for (const Block& b : send.blocks) {
      if (has_send) fill(rank, b, op.element(s, b.displ));
    }
    if (!has_send) FillMoveData(dt, rank, salt ^ 0xBADull, 0, send.extent, op.data(s));
    sendbuf = op.data(s);
    if (in_place) {  // InPlace::kSendBlock: the result lands on this rank's own block
      recvbuf = op.element(s, send.blocks[rank].displ);
      r = s;
    }
    // A reduction in place may use the other blocks as scratch.
    if (!(in_place && t.reduces)) {
      op.ExpectUntouched(s, 0, send.extent, has_send ? "sendbuf" : "sendbuf of a non-root rank");
    }
  }

  if (has_recv) {
    const uint64_t shift = into_send ? send.blocks[rank].displ : 0;
    for (uint32_t b = 0; b < recv.blocks.size(); ++b) {
      const Block& got = recv.blocks[b];
      // The send block meant for this rank, of the rank it comes from.
      const uint32_t from = t.recv_per_rank ? b : c.root;
      const Side& theirs = t.reduces ? send : SideOf(c, true, from, size, M);
      const Block& src = theirs.blocks[t.send_per_rank ? rank : 0];
      auto want = Bytes(got.count, dt);
      if (t.reduces) {
        FillReduceResult(dt, c.op, size, salt, src.first, got.count, want.data());
      } else {
        FillMoveData(dt, from, salt, src.first, got.count, want.data());
      }
      std::string what = into_send ? "this rank's block of sendbuf (in place)" : recv_name;
      if (t.recv_per_rank) what += " block from rank " + std::to_string(b);
      if (recv.per_rank_arrays) what += " (displacement " + std::to_string(got.displ) + ")";
      op.ExpectResult(r, shift + got.displ, got.count, std::move(want), what);
    }
    if (!into_send) ExpectGapsUntouched(op, r, recv, recv_name + " outside every rank's block");
  }

  Call call{.coll = c.coll, .sendbuf = sendbuf, .recvbuf = recvbuf, .dtype = dt};
  if (t.reduces) call.op = c.op;
  if (t.root == abi::Root::kRoot) call.root = c.root;
  std::vector<uint64_t> sendcounts, sdispls, recvcounts, rdispls;
  for (const Block& b : send.blocks) {
    sendcounts.push_back(b.count);
    sdispls.push_back(b.displ);
  }
  for (const Block& b : recv.blocks) {
    recvcounts.push_back(b.count);
    rdispls.push_back(b.displ);
  }
  if (t.layout == Layout::kCount) {
    call.count = c.count;
  } else {
    // count is this rank's own block, where one side has a single block.
    if (!t.send_per_rank) call.count = send.blocks[0].count;
    if (!t.recv_per_rank) call.count = recv.blocks[0].count;
    if (send.per_rank_arrays) {
      call.sendcounts = sendcounts.data();
      call.sdispls = sdispls.data();
    }
    if (recv.per_rank_arrays) {
      call.recvcounts = recvcounts.data();
      call.rdispls = rdispls.data();
    }
  }
  plexus_request* req = nullptr;
  const int32_t rc = ctx.calls().post(comm, call, &req);
  for (auto* v : {&sendcounts, &sdispls, &recvcounts, &rdispls}) Scribble(*v);
  op.Posted(CollectiveName(c.coll), rc, &req);
}

// Posts c (Layout::kBufferList: a reduction of several buffers) on op.
void PostBufferList(Context& ctx, plexus_comm* comm, Operation& op, const CollectiveCase& c,
                    uint64_t salt) {
  const uint32_t rank = ctx.rank, size = ctx.size;
  const plexus_dtype_t dt = c.dtype;
  std::vector<uint64_t> counts = ListCounts(c.pattern, size, ctx.options.max_count);
  const uint32_t nb = uint32_t(counts.size());
  std::vector<const void*> sends(nb);
  std::vector<void*> recvs(nb);
  // Each buffer: where its input and its result live (buffer index, first element).
  struct Place {
    size_t buffer;
    uint64_t first;
  };
  std::vector<Place> send_at(nb), recv_at(nb);
  if (c.pattern == Pattern::kBucket) {
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
      const bool same = c.in_place && (c.pattern == Pattern::kSingle || i % 2 == 0);
      const size_t rb = same ? sb : op.AddBuffer(counts[i], "recvbufs[" + n + "]");
      send_at[i] = {sb, 0};
      recv_at[i] = {rb, 0};
    }
  }
  for (uint32_t i = 0; i < nb; ++i) {
    const uint64_t bsalt = salt * 64 + i;  // different data per buffer
    const std::string n = std::to_string(i);
    FillReduceInput(dt, c.op, rank, size, bsalt, 0, counts[i],
                    op.element(send_at[i].buffer, send_at[i].first));
    sends[i] = op.element(send_at[i].buffer, send_at[i].first);
    recvs[i] = op.element(recv_at[i].buffer, recv_at[i].first);
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
                                      Call{.coll = c.coll,
                                           .dtype = dt,
                                           .op = c.op,
                                           .sendbufs = sends.data(),
                                           .recvbufs = recvs.data(),
                                           .counts = counts.data(),
                                           .nbuffers = nb},
                                      &req);
  Scribble(sends);
  Scribble(recvs);
  Scribble(counts);
  op.Posted(CollectiveName(c.coll), rc, &req);
}

}  // namespace

std::vector<Pattern> PatternsOf(plexus_collective_t coll, plexus_reduce_op_t op) {
  const abi::Traits t = TraitsOf(coll);
  const bool sum = !t.reduces || op == PLEXUS_OP_SUM;
  switch (t.layout) {
    case Layout::kCount:
      return {Pattern::kNone};
    case Layout::kPerRankCounts:
      if (!sum) return {Pattern::kUneven};
      return {Pattern::kUneven, Pattern::kLarge, Pattern::kAllZero,
              t.counts_alike ? Pattern::kOneRank : Pattern::kOverlappingSends};
    case Layout::kBufferList:
      if (!sum) return {Pattern::kSeparate, Pattern::kBucket};
      return {Pattern::kSeparate, Pattern::kBucket, Pattern::kSingle};
  }
  return {};
}

std::string CaseCapability(const CollectiveCase& c) {
  std::string s = std::string(CollectiveName(c.coll)) + " " + DtypeName(c.dtype);
  if (abi::IsReduction(c.coll)) s += std::string(" ") + OpName(c.op);
  return s;
}

std::string CaseName(const CollectiveCase& c, uint32_t size, uint64_t max_count) {
  std::string s = CaseCapability(c);
  switch (c.pattern) {
    case Pattern::kNone:
      s += " count=" + std::to_string(c.count);
      if (TraitsOf(c.coll).root == abi::Root::kRoot) s += " root=" + std::to_string(c.root);
      break;
    case Pattern::kUneven:
      s += TraitsOf(c.coll).counts_alike
               ? " counts=" + Join(AlikeCounts(c.pattern, size, max_count))
               : " uneven counts";
      break;
    case Pattern::kLarge:
      s += " large uneven counts";
      break;
    case Pattern::kAllZero:
      s += " all counts 0";
      break;
    case Pattern::kOneRank:
      s += " only the last rank's block";
      break;
    case Pattern::kOverlappingSends:
      s += " uneven counts, send blocks overlapping";
      break;
    case Pattern::kSeparate:
      s += " buffers=" + Join(ListCounts(c.pattern, size, max_count));
      break;
    case Pattern::kBucket:
      s += " views of one bucket=" + Join(ListCounts(c.pattern, size, max_count));
      break;
    case Pattern::kSingle:
      s += " one buffer=1009";
      break;
  }
  if (c.in_place) s += " in-place";
  return s;
}

Outcome RunCollectiveCase(Context& ctx, const CollectiveCase& c, plexus_comm* comm) {
  if (!ctx.plugin().HasCollective(c.coll)) return Outcome::Skip(ctx.plugin().NoSlotReason(c.coll));
  Operation op(ctx, comm, c.dtype);
  SetPhase("backend collective post");
  if (TraitsOf(c.coll).layout == Layout::kBufferList) {
    PostBufferList(ctx, comm, op, c, ctx.seq);
  } else {
    PostBlocks(ctx, comm, op, c, ctx.seq);
  }
  Findings f;
  bool broken = false;
  op.Finish(&f, &broken);
  Outcome o = f.ToOutcome();
  o.comm_broken = broken && comm == ctx.comm();
  return o;
}

Outcome RunSmall(Context& ctx, plexus_collective_t coll, plexus_dtype_t dtype,
                 plexus_reduce_op_t op) {
  const CollectiveCase c{
      .coll = coll, .dtype = dtype, .op = op, .count = 5, .pattern = PatternsOf(coll, op).front()};
  return RunCollectiveCase(ctx, c, ctx.comm());
}

std::string NotClaimedReason(const Context& ctx, plexus_collective_t coll) {
  const std::string why = ctx.plugin().NoSlotReason(coll);
  if (why.rfind("backend", 0) == 0) return why;  // an older table: no such slot
  return std::string(CollectiveName(coll)) + " is not claimed (capabilities.collectives)";
}

}  // namespace plexus::conformance
