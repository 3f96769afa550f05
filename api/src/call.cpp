#include "plexus/abi/call.hpp"

#include <algorithm>
#include <cstdio>

#include "plexus/abi/collectives.hpp"
#include "plexus/abi/types.hpp"

namespace plexus::abi {
namespace {

static_assert(
    [] {
      for (plexus_collective_t c = 0; c < kCollectiveCount; ++c) {
        if (SlotEnd(c) == 0) return false;
      }
      return true;
    }(),
    "the codes of collectives.def are not 0 .. kCollectiveCount - 1");

Status Invalid(const Call& c, const std::string& why) {
  return {PLEXUS_ERR_INVALID_ARGUMENT, std::string(CollectiveName(c.coll)) + ": " + why};
}

bool Overlap(const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes) {
  if (!a || !b || a_bytes == 0 || b_bytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

const char* MemoryName(plexus_memory_type_t m) {
  return m == PLEXUS_MEMORY_HOST ? "host" : m == PLEXUS_MEMORY_CUDA ? "CUDA" : "unknown";
}

}  // namespace

bool IsReduction(plexus_collective_t coll) {
  return TraitsOf(coll).reduces;
}

uint64_t CallBytes(const Call& call, uint64_t blocks) {
  return call.count * DtypeSize(call.dtype) * blocks;
}

VCounts VCounts::Of(const Call& call, uint32_t size) {
  VCounts v;
  auto copy = [size](const uint64_t* a) {
    return a ? std::vector<uint64_t>(a, a + size) : std::vector<uint64_t>();
  };
  const Traits r = TraitsOf(call.coll);
  if (r.send_per_rank) {
    v.sendcounts = copy(call.sendcounts);
    v.sdispls = copy(call.sdispls);
  }
  if (r.recv_per_rank) {
    v.recvcounts = copy(call.recvcounts);
    v.rdispls = copy(call.rdispls);
  }
  return v;
}

OwnedCall OwnedCall::Of(const Call& call, uint32_t size) {
  OwnedCall o;
  o.call = call;
  o.v = VCounts::Of(call, size);
  o.Point();
  return o;
}

void OwnedCall::Point() {
  auto at = [](const std::vector<uint64_t>& a) { return a.empty() ? nullptr : a.data(); };
  call.sendcounts = at(v.sendcounts);
  call.sdispls = at(v.sdispls);
  call.recvcounts = at(v.recvcounts);
  call.rdispls = at(v.rdispls);
}

namespace {

constexpr uint64_t kMaxBytes = uint64_t(1) << 62;

// One block of a v-collective: [displ, displ + count) elements of a buffer.
struct Block {
  uint64_t begin, end;  // bytes from the buffer's start
  uint32_t rank;
};

// Checks the size blocks described by counts and displs (elements of elem
// bytes): each one inside 2^62 bytes. Fills blocks (non-empty ones only) and
// *extent (the bytes the buffer must hold).
Status BlocksOf(const Call& c, const char* what, const uint64_t* counts, const uint64_t* displs,
                uint32_t size, size_t elem, std::vector<Block>* blocks, uint64_t* extent) {
  *extent = 0;
  for (uint32_t j = 0; j < size; ++j) {
    uint64_t end = 0, bytes = 0;
    if (__builtin_add_overflow(counts[j], displs[j], &end) ||
        __builtin_mul_overflow(end, uint64_t(elem), &bytes) || bytes > kMaxBytes) {
      return Invalid(c, std::string(what) + " block of rank " + std::to_string(j) + " (count " +
                            std::to_string(counts[j]) + ", displacement " +
                            std::to_string(displs[j]) + ") ends beyond 2^62 bytes");
    }
    if (counts[j] == 0) continue;
    blocks->push_back({displs[j] * elem, bytes, j});
    *extent = std::max(*extent, bytes);
  }
  return {};
}

// Receive blocks may not share an element: the result would depend on
// which rank's data landed last.
Status Disjoint(const Call& c, const char* what, std::vector<Block> blocks) {
  std::sort(blocks.begin(), blocks.end(),
            [](const Block& a, const Block& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < blocks.size(); ++i) {
    if (blocks[i].begin < blocks[i - 1].end) {
      return Invalid(c, std::string(what) + " blocks of ranks " +
                            std::to_string(blocks[i - 1].rank) + " and " +
                            std::to_string(blocks[i].rank) + " overlap");
    }
  }
  return {};
}

// The v-collectives: each per-rank side (traits send_per_rank,
// recv_per_rank) is described by arrays; a side that is not per rank is
// count elements, which must be this rank's block of the other side.
Status CheckV(const Call& c, const Traits& r, CommShape comm, size_t elem) {
  const bool all = r.send_per_rank && r.recv_per_rank;
  if ((r.recv_per_rank && (!c.recvcounts || !c.rdispls)) ||
      (r.send_per_rank && (!c.sendcounts || !c.sdispls))) {
    return Invalid(c, all               ? "NULL counts or displacements array"
                      : r.recv_per_rank ? "NULL recvcounts or displs"
                                        : "NULL sendcounts or displs");
  }
  std::vector<Block> recv_blocks, send_blocks;
  uint64_t recv_extent = 0, send_extent = 0;
  Status st;
  if (r.recv_per_rank) {
    st = BlocksOf(c, "receive", c.recvcounts, c.rdispls, comm.size, elem, &recv_blocks,
                  &recv_extent);
  }
  if (st.ok() && r.send_per_rank) {
    st = BlocksOf(c, "send", c.sendcounts, c.sdispls, comm.size, elem, &send_blocks, &send_extent);
  }
  if (!st.ok()) return st;
  const std::string at = "[" + std::to_string(comm.rank) + "] = ";
  if (all) {
    // The block a rank sends itself has no peer to check its size against.
    if (c.sendcounts[comm.rank] != c.recvcounts[comm.rank]) {
      return Invalid(c, "sendcounts" + at + std::to_string(c.sendcounts[comm.rank]) +
                            " differs from recvcounts" + at +
                            std::to_string(c.recvcounts[comm.rank]) +
                            " (the block this rank sends itself)");
    }
  } else {
    // One side is count elements: this rank's block of the other side.
    const uint64_t block = r.recv_per_rank ? c.recvcounts[comm.rank] : c.sendcounts[comm.rank];
    const char* name = r.recv_per_rank ? "sendcount " : "recvcount ";
    if (c.count != block) {
      return Invalid(c, name + std::to_string(c.count) + " differs from " +
                            (r.recv_per_rank ? "recvcounts" : "sendcounts") + at +
                            std::to_string(block));
    }
    uint64_t& extent = r.recv_per_rank ? send_extent : recv_extent;
    if (__builtin_mul_overflow(c.count, uint64_t(elem), &extent) || extent > kMaxBytes) {
      return Invalid(c, name + std::to_string(c.count) + " exceeds 2^62 bytes");
    }
  }
  // The blocks written (receive), or reduced into one rank's result
  // (reduce_scatterv's sends), may not share an element.
  if (r.recv_per_rank) st = Disjoint(c, "receive", recv_blocks);
  if (st.ok() && r.send_per_rank && !all) st = Disjoint(c, "send", send_blocks);
  if (!st.ok()) return st;
  if (recv_extent > 0 && !c.recvbuf) return Invalid(c, "NULL buffer (recvbuf)");
  if (send_extent > 0 && !c.sendbuf) return Invalid(c, "NULL buffer (sendbuf)");
  const auto* send = static_cast<const uint8_t*>(c.sendbuf);
  const auto* recv = static_cast<const uint8_t*>(c.recvbuf);
  if (!all) {
    if (!Overlap(send, send_extent, recv, recv_extent)) return {};
    if (r.recv_per_rank && send == recv + c.rdispls[comm.rank] * elem) return {};
    if (r.send_per_rank && recv == send + c.sdispls[comm.rank] * elem) return {};
    return Invalid(c, r.recv_per_rank ? "sendbuf lies in recvbuf but not at the in-place "
                                        "position (recvbuf + displs[rank] elements)"
                                      : "recvbuf lies in sendbuf but not at the in-place "
                                        "position (sendbuf + sdispls[rank] elements)");
  }
  // Not in place: no send block may share memory with a receive block.
  for (const Block& sb : send_blocks) {
    for (const Block& rb : recv_blocks) {
      if (Overlap(send + sb.begin, sb.end - sb.begin, recv + rb.begin, rb.end - rb.begin)) {
        return Invalid(c, "send block of rank " + std::to_string(sb.rank) +
                              " overlaps receive block of rank " + std::to_string(rb.rank) + " (" +
                              CollectiveName(c.coll) + " is not in place)");
      }
    }
  }
  return {};
}

Status CheckCoalesced(const Call& c, size_t elem) {
  if (c.nbuffers == 0) return Invalid(c, "nbuffers is 0");
  if (!c.sendbufs || !c.recvbufs || !c.counts) return Invalid(c, "NULL buffer or count array");
  uint64_t total = 0;
  struct Span {
    const uint8_t* begin;
    uint64_t bytes;
    uint32_t index;
  };
  std::vector<Span> spans;
  for (uint32_t i = 0; i < c.nbuffers; ++i) {
    uint64_t bytes = 0;
    if (__builtin_add_overflow(total, c.counts[i], &total) ||
        __builtin_mul_overflow(total, uint64_t(elem), &bytes) || bytes > kMaxBytes) {
      return Invalid(
          c, "the counts add up to more than 2^62 bytes (at buffer " + std::to_string(i) + ")");
    }
    if (c.counts[i] == 0) continue;
    if (!c.sendbufs[i] || !c.recvbufs[i]) {
      return Invalid(
          c, "NULL buffer " + std::to_string(i) + " (count " + std::to_string(c.counts[i]) + ")");
    }
    const uint64_t n = c.counts[i] * elem;
    const auto* send = static_cast<const uint8_t*>(c.sendbufs[i]);
    const auto* recv = static_cast<const uint8_t*>(c.recvbufs[i]);
    if (send != recv && Overlap(send, n, recv, n)) {
      return Invalid(c, "sendbufs[" + std::to_string(i) + "] and recvbufs[" + std::to_string(i) +
                            "] overlap without being equal");
    }
    spans.push_back({recv, n, i});
    if (send != recv) spans.push_back({send, n, i});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t k = 1; k < spans.size(); ++k) {
    const Span &a = spans[k - 1], &b = spans[k];
    if (b.begin < a.begin + a.bytes && a.index != b.index) {
      return Invalid(
          c, "buffers " + std::to_string(a.index) + " and " + std::to_string(b.index) + " overlap");
    }
  }
  if (total != c.count) {
    return Invalid(c, "count " + std::to_string(c.count) + " is not the sum of counts (" +
                          std::to_string(total) + ")");
  }
  return {};
}

}  // namespace

Status CheckCall(const Call& c, CommShape comm, uint32_t memory_types) {
  if (c.coll >= kCollectiveCount) {
    return {PLEXUS_ERR_INVALID_ARGUMENT, "unknown collective code " + std::to_string(c.coll)};
  }
  const Traits r = TraitsOf(c.coll);
  if (!r.typed) return {};
  const size_t elem = DtypeSize(c.dtype);
  if (elem == 0) return Invalid(c, "unknown dtype code " + std::to_string(c.dtype));
  if (r.reduces && !CanReduce(c.dtype, c.op)) {
    return Invalid(c, "unknown reduce op code " + std::to_string(c.op));
  }
  if (r.root == Root::kPeer && (c.root >= comm.size || c.root == comm.rank)) {
    return Invalid(c, "peer " + std::to_string(c.root) + " is not another rank (rank " +
                          std::to_string(comm.rank) + ", size " + std::to_string(comm.size) + ")");
  }
  if (r.root == Root::kRoot && c.root >= comm.size) {
    return Invalid(c, "root " + std::to_string(c.root) + " is not a rank (size " +
                          std::to_string(comm.size) + ")");
  }
  // No placement is host memory.
  const plexus_memory_type_t m = c.placement ? c.placement->memory_type : PLEXUS_MEMORY_HOST;
  if (m != PLEXUS_MEMORY_HOST && m != PLEXUS_MEMORY_CUDA) {
    return Invalid(c, "unknown memory type " + std::to_string(m));
  }
  if (!(memory_types & (1u << m))) {
    std::string takes;
    for (plexus_memory_type_t t : {PLEXUS_MEMORY_HOST, PLEXUS_MEMORY_CUDA}) {
      if (memory_types & (1u << t))
        takes += (takes.empty() ? "" : " and ") + std::string(MemoryName(t));
    }
    return {PLEXUS_ERR_UNSUPPORTED, std::string(CollectiveName(c.coll)) + ": " + MemoryName(m) +
                                        " memory is not supported by this backend" +
                                        (takes.empty() ? std::string(" (it takes no memory here)")
                                                       : " (it takes " + takes + " memory only)")};
  }
  if (r.layout == Layout::kPerRankCounts) return CheckV(c, r, comm, elem);
  if (r.layout == Layout::kBufferList) return CheckCoalesced(c, elem);
  // Every buffer's byte size must fit well inside the address space.
  // (Every post passes here: multiplications, not divisions.)
  const uint64_t send_blocks = r.send_per_rank ? comm.size : 1;
  const uint64_t recv_blocks = r.recv_per_rank ? comm.size : 1;
  const uint64_t blocks = std::max(send_blocks, recv_blocks);
  uint64_t total = 0;
  if (__builtin_mul_overflow(c.count, uint64_t(elem) * blocks, &total) ||
      total > (uint64_t(1) << 62)) {
    return Invalid(c, "count " + std::to_string(c.count) + " is too large: count x " +
                          std::to_string(elem) + " bytes" +
                          (blocks > 1 ? " x " + std::to_string(blocks) + " ranks" : "") +
                          " exceeds 2^62 bytes");
  }
  if (c.count == 0) return {};  // no buffer is touched
  const bool is_root = r.root == Root::kRoot && c.root == comm.rank;
  const bool recv_needed = r.needs_recv && (!r.recv_on_root_only || is_root);
  const bool send_needed = r.needs_send && (!r.send_on_root_only || is_root);
  if (send_needed && !c.sendbuf) {
    return Invalid(
        c, r.send_on_root_only ? "NULL buffer (sendbuf on the root)" : "NULL buffer (sendbuf)");
  }
  if (recv_needed && !c.recvbuf) {
    return Invalid(c, is_root ? "NULL buffer (recvbuf on the root)" : "NULL buffer (recvbuf)");
  }
  const uint64_t block = c.count * elem;
  const uint64_t send_bytes = block * send_blocks;
  const uint64_t recv_bytes = block * recv_blocks;
  const auto* send = static_cast<const uint8_t*>(c.sendbuf);
  const auto* recv = static_cast<const uint8_t*>(c.recvbuf);
  if (!recv_needed || !send_needed || !Overlap(send, send_bytes, recv, recv_bytes)) return {};
  switch (r.in_place) {
    case InPlace::kEqual:
      if (send == recv) return {};
      return Invalid(c,
                     "sendbuf and recvbuf overlap without being equal (in place is sendbuf == "
                     "recvbuf)");
    case InPlace::kRecvBlock:
      if (send == recv + comm.rank * block) return {};
      return Invalid(c, c.coll == PLEXUS_COLL_GATHER
                            ? "sendbuf lies in recvbuf but not at the in-place position "
                              "(recvbuf + root x count elements)"
                            : "sendbuf lies in recvbuf but not at the in-place position "
                              "(recvbuf + rank x count elements)");
    case InPlace::kSendBlock:
      if (recv == send + comm.rank * block) return {};
      return Invalid(c, c.coll == PLEXUS_COLL_SCATTER
                            ? "recvbuf lies in sendbuf but not at the in-place position "
                              "(sendbuf + root x count elements)"
                            : "recvbuf lies in sendbuf but not at the in-place position "
                              "(sendbuf + rank x count elements)");
    case InPlace::kDisjoint:
      return Invalid(c, "sendbuf and recvbuf overlap (" + std::string(CollectiveName(c.coll)) +
                            " is not in place)");
    case InPlace::kNone:
      break;
  }
  return {};
}

std::string DescribeCall(const Call& c) {
  auto pointer = [](const void* p) {
    if (!p) return std::string("NULL");
    char text[32];
    std::snprintf(text, sizeof text, "%p", p);
    return std::string(text);
  };
  std::string s = std::string(CollectiveName(c.coll)) + "(";
  if (c.coll == PLEXUS_COLL_BARRIER) return s + ")";
  if (c.coll == PLEXUS_COLL_BROADCAST || c.coll == PLEXUS_COLL_RECV) {
    s += "buf " + pointer(c.recvbuf);
  } else if (c.coll == PLEXUS_COLL_SEND) {
    s += "buf " + pointer(c.sendbuf);
  } else if (c.coll == PLEXUS_COLL_ALLREDUCE_COALESCED) {
    s += "sendbufs " + pointer(c.sendbufs) + ", recvbufs " + pointer(c.recvbufs);
  } else {
    s += "sendbuf " + pointer(c.sendbuf) + ", recvbuf " + pointer(c.recvbuf);
  }
  if (c.coll == PLEXUS_COLL_ALLREDUCE_COALESCED) {
    s += ", " + std::to_string(c.nbuffers) + " buffers";
  }
  const Traits r = TraitsOf(c.coll);
  if (r.layout != Layout::kPerRankCounts) {
    s += ", count " + std::to_string(c.count);
  } else if (!(r.send_per_rank && r.recv_per_rank)) {
    s += std::string(r.recv_per_rank ? ", sendcount " : ", recvcount ") + std::to_string(c.count);
  }
  s += std::string(", ") + DtypeName(c.dtype);
  if (IsReduction(c.coll)) s += std::string(", ") + ReduceOpName(c.op);
  if (r.root == Root::kRoot) s += ", root " + std::to_string(c.root);
  if (c.coll == PLEXUS_COLL_SEND || c.coll == PLEXUS_COLL_RECV) {
    s += ", peer " + std::to_string(c.root);
  }
  if (c.placement) {
    s += std::string(", ") + MemoryName(c.placement->memory_type) + " memory";
    if (c.placement->memory_type == PLEXUS_MEMORY_CUDA) {
      s += " of device " + std::to_string(c.placement->device);
    }
    if (c.placement->stream) s += ", stream " + pointer(c.placement->stream);
  }
  return s + ")";
}

}  // namespace plexus::abi
