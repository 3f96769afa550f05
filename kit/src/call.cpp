#include "plexus/kit/call.hpp"

#include <algorithm>
#include <cstdio>

#include "plexus/algos/dtype.hpp"

namespace plexus::kit {
namespace {

// How a collective's buffers may share memory (the ABI's in-place forms).
enum class InPlace {
  kNone,       // one buffer, or none
  kEqual,      // sendbuf == recvbuf (allreduce; reduce on the root)
  kRecvBlock,  // sendbuf == recvbuf + rank * count (allgather)
  kSendBlock,  // recvbuf == sendbuf + rank * count (reduce_scatter)
  kDisjoint,   // no overlap at all (alltoall)
};

// What the ABI says of each collective's arguments.
struct Rules {
  bool reduces = false;
  bool rooted = false;  // root is a rank
  bool peer = false;    // root is another rank (send, recv)
  bool needs_send = false;
  bool needs_recv = false;            // (reduce: on the root only)
  uint64_t send_blocks_per_rank = 0;  // 1: count elements; size: count per rank
  uint64_t recv_blocks_per_rank = 0;
  InPlace in_place = InPlace::kNone;
};

Rules RulesOf(plexus_collective_t coll, uint32_t size) {
  Rules r;
  switch (coll) {
    case PLEXUS_COLL_ALLREDUCE:
      r.reduces = r.needs_send = r.needs_recv = true;
      r.in_place = InPlace::kEqual;
      break;
    case PLEXUS_COLL_BROADCAST:
      r.rooted = r.needs_recv = true;
      break;
    case PLEXUS_COLL_REDUCE:
      r.reduces = r.rooted = r.needs_send = r.needs_recv = true;
      r.in_place = InPlace::kEqual;
      break;
    case PLEXUS_COLL_ALLGATHER:
      r.needs_send = r.needs_recv = true;
      r.recv_blocks_per_rank = size;
      r.in_place = InPlace::kRecvBlock;
      break;
    case PLEXUS_COLL_REDUCE_SCATTER:
      r.reduces = r.needs_send = r.needs_recv = true;
      r.send_blocks_per_rank = size;
      r.in_place = InPlace::kSendBlock;
      break;
    case PLEXUS_COLL_ALLTOALL:
      r.needs_send = r.needs_recv = true;
      r.send_blocks_per_rank = r.recv_blocks_per_rank = size;
      r.in_place = InPlace::kDisjoint;
      break;
    case PLEXUS_COLL_SEND:
      r.peer = r.needs_send = true;
      break;
    case PLEXUS_COLL_RECV:
      r.peer = r.needs_recv = true;
      break;
    default:  // barrier: no buffers
      break;
  }
  return r;
}

algos::Status Invalid(const Call& c, const std::string& why) {
  return {PLEXUS_ERR_INVALID_ARGUMENT, std::string(algos::CollectiveName(c.coll)) + ": " + why};
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
  return RulesOf(coll, 1).reduces;
}

uint64_t CallBytes(const Call& call, uint64_t blocks) {
  return call.count * algos::DtypeSize(call.dtype) * blocks;
}

algos::Status CheckCall(const Call& c, CommShape comm, uint32_t memory_types) {
  if (c.coll >= PLEXUS_COLL_COUNT_V1) {
    return {PLEXUS_ERR_INVALID_ARGUMENT, "unknown collective code " + std::to_string(c.coll)};
  }
  const Rules r = RulesOf(c.coll, comm.size);
  if (c.coll == PLEXUS_COLL_BARRIER) return {};
  const size_t elem = algos::DtypeSize(c.dtype);
  if (elem == 0) return Invalid(c, "unknown dtype code " + std::to_string(c.dtype));
  if (r.reduces && !algos::CanReduce(c.dtype, c.op)) {
    return Invalid(c, "unknown reduce op code " + std::to_string(c.op));
  }
  if (r.peer && (c.root >= comm.size || c.root == comm.rank)) {
    return Invalid(c, "peer " + std::to_string(c.root) + " is not another rank (rank " +
                          std::to_string(comm.rank) + ", size " + std::to_string(comm.size) + ")");
  }
  if (r.rooted && c.root >= comm.size) {
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
    return {PLEXUS_ERR_UNSUPPORTED, std::string(algos::CollectiveName(c.coll)) + ": " +
                                        MemoryName(m) + " memory is not supported by this backend" +
                                        (takes.empty() ? std::string(" (it takes no memory here)")
                                                       : " (it takes " + takes + " memory only)")};
  }
  // Every buffer's byte size must fit well inside the address space.
  // (Every post passes here: multiplications, not divisions.)
  const uint64_t blocks = std::max<uint64_t>({1, r.send_blocks_per_rank, r.recv_blocks_per_rank});
  uint64_t total = 0;
  if (__builtin_mul_overflow(c.count, uint64_t(elem) * blocks, &total) ||
      total > (uint64_t(1) << 62)) {
    return Invalid(c, "count " + std::to_string(c.count) + " is too large: count x " +
                          std::to_string(elem) + " bytes" +
                          (blocks > 1 ? " x " + std::to_string(blocks) + " ranks" : "") +
                          " exceeds 2^62 bytes");
  }
  if (c.count == 0) return {};  // no buffer is touched
  const bool is_root = r.rooted && c.root == comm.rank;
  const bool recv_needed = r.needs_recv && (c.coll != PLEXUS_COLL_REDUCE || is_root);
  if (r.needs_send && !c.sendbuf) return Invalid(c, "NULL buffer (sendbuf)");
  if (recv_needed && !c.recvbuf) {
    return Invalid(c, is_root ? "NULL buffer (recvbuf on the root)" : "NULL buffer (recvbuf)");
  }
  const uint64_t block = c.count * elem;
  const uint64_t send_bytes = block * std::max<uint64_t>(1, r.send_blocks_per_rank);
  const uint64_t recv_bytes = block * std::max<uint64_t>(1, r.recv_blocks_per_rank);
  const auto* send = static_cast<const uint8_t*>(c.sendbuf);
  const auto* recv = static_cast<const uint8_t*>(c.recvbuf);
  if (!recv_needed || !Overlap(send, send_bytes, recv, recv_bytes)) return {};
  switch (r.in_place) {
    case InPlace::kEqual:
      if (send == recv) return {};
      return Invalid(c,
                     "sendbuf and recvbuf overlap without being equal (in place is sendbuf == "
                     "recvbuf)");
    case InPlace::kRecvBlock:
      if (send == recv + comm.rank * block) return {};
      return Invalid(c,
                     "sendbuf lies in recvbuf but not at the in-place position (recvbuf + "
                     "rank x count elements)");
    case InPlace::kSendBlock:
      if (recv == send + comm.rank * block) return {};
      return Invalid(c,
                     "recvbuf lies in sendbuf but not at the in-place position (sendbuf + "
                     "rank x count elements)");
    case InPlace::kDisjoint:
      return Invalid(c, "sendbuf and recvbuf overlap (" +
                            std::string(algos::CollectiveName(c.coll)) + " is not in place)");
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
  std::string s = std::string(algos::CollectiveName(c.coll)) + "(";
  if (c.coll == PLEXUS_COLL_BARRIER) return s + ")";
  if (c.coll == PLEXUS_COLL_BROADCAST || c.coll == PLEXUS_COLL_RECV) {
    s += "buf " + pointer(c.recvbuf);
  } else if (c.coll == PLEXUS_COLL_SEND) {
    s += "buf " + pointer(c.sendbuf);
  } else {
    s += "sendbuf " + pointer(c.sendbuf) + ", recvbuf " + pointer(c.recvbuf);
  }
  s += ", count " + std::to_string(c.count) + ", " + algos::DtypeName(c.dtype);
  if (IsReduction(c.coll)) s += std::string(", ") + algos::ReduceOpName(c.op);
  if (c.coll == PLEXUS_COLL_BROADCAST || c.coll == PLEXUS_COLL_REDUCE) {
    s += ", root " + std::to_string(c.root);
  }
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

}  // namespace plexus::kit
