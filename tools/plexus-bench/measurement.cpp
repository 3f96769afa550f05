#include "measurement.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <new>
#include <vector>

#include "patterns.hpp"
#include "plexus/abi/call.hpp"

namespace plexus::bench {
namespace {

constexpr size_t kPage = 4096;
// The first batch's warm-up lasts at least this long (TimeBatch).
constexpr std::chrono::duration<double> kFirstWarmup{0.1};

bool CanReduce(const plexus_capabilities& caps, DType t, ReduceOp op) {
  return (caps.collectives & (1u << PLEXUS_COLL_ALLREDUCE)) &&
         (caps.reduce_dtypes[static_cast<uint32_t>(op)] & (1u << static_cast<uint32_t>(t)));
}

bool CanGather(const plexus_capabilities& caps, DType t) {
  return (caps.collectives & (1u << PLEXUS_COLL_ALLGATHER)) &&
         (caps.dtypes & (1u << static_cast<uint32_t>(t)));
}

}  // namespace

double BusFactor(Collective c, uint32_t n) {
  const double nd = n;
  switch (c) {
    case Collective::Allreduce:
    case Collective::AllreduceCoalesced:
      return 2.0 * (nd - 1) / nd;
    case Collective::Allgather:
    case Collective::ReduceScatter:
    case Collective::Alltoall:
    case Collective::Gather:
    case Collective::Scatter:
    case Collective::Allgatherv:
    case Collective::Alltoallv:
    case Collective::ReduceScatterv:
      return (nd - 1) / nd;
    case Collective::Broadcast:
    case Collective::Reduce:
    case Collective::SendRecv:
      return 1.0;
    case Collective::Barrier:
      return 0.0;
  }
  return 0.0;
}

AlignedBuffer::AlignedBuffer(uint64_t bytes, Communicator* shared_from) {
  const uint64_t rounded = std::max<uint64_t>(kPage, (bytes + kPage - 1) / kPage * kPage);
  if (shared_from) {
    shared_ = shared_from->mem_alloc(rounded);
    data_ = static_cast<unsigned char*>(shared_.get());
  } else {
    data_ = static_cast<unsigned char*>(std::aligned_alloc(kPage, size_t(rounded)));
  }
  if (!data_) throw std::bad_alloc();
  std::memset(data_, kSentinel, size_t(rounded));  // fault the pages in before timing
}

AlignedBuffer::~AlignedBuffer() {
  if (!shared_) std::free(data_);
}

Runner::Runner(Communicator& comm, const BenchArgs& args, RankTally& tally)
    : comm_(comm),
      args_(args),
      tally_(tally),
      rank_(comm.rank()),
      size_(comm.size()),
      send_(MovesData(args.collective) ? args.max_bytes : 0, args.mem_alloc ? &comm : nullptr),
      recv_(MovesData(args.collective) ? args.max_bytes : 0, args.mem_alloc ? &comm : nullptr) {}

double Runner::MaxOverRanks(double local) {
  if (size_ == 1) return local;
  const auto& caps = comm_.capabilities();
  if (CanReduce(caps, DType::Float64, ReduceOp::Max)) {
    double v = local;
    comm_.allreduce(&v, &v, 1, DType::Float64, ReduceOp::Max).wait();
    return v;
  }
  if (CanGather(caps, DType::Float64)) {
    std::vector<double> all(size_);
    comm_.allgather(&local, all.data(), 1, DType::Float64).wait();
    return *std::max_element(all.begin(), all.end());
  }
  return local;  // the backend can tell us nothing: rank 0's own time
}

uint64_t Runner::SumOverRanks(uint64_t local) {
  if (size_ == 1) return local;
  const auto& caps = comm_.capabilities();
  if (CanReduce(caps, DType::UInt64, ReduceOp::Sum)) {
    uint64_t v = local;
    comm_.allreduce(&v, &v, 1, DType::UInt64, ReduceOp::Sum).wait();
    return v;
  }
  if (CanGather(caps, DType::UInt64)) {
    std::vector<uint64_t> all(size_);
    comm_.allgather(&local, all.data(), 1, DType::UInt64).wait();
    uint64_t sum = 0;
    for (uint64_t v : all) sum += v;
    return sum;
  }
  return local;
}

void Runner::Sync() {
  if (size_ == 1) return;
  if (comm_.supports(PLEXUS_COLL_BARRIER)) {
    comm_.barrier().wait();
  } else {
    MaxOverRanks(0.0);
  }
}

Runner::Shape Runner::ShapeOf(DType t, uint64_t size) const {
  const uint64_t es = ElementSize(t);
  Shape s;
  switch (args_.collective) {
    case Collective::Allreduce:
    case Collective::Broadcast:
    case Collective::Reduce:
    case Collective::SendRecv:
    case Collective::AllreduceCoalesced:
      s.count = size / es;
      s.bytes = s.count * es;
      break;
    case Collective::Allgather:
    case Collective::ReduceScatter:
    case Collective::Alltoall:
    case Collective::Gather:
    case Collective::Scatter:
    case Collective::Allgatherv:
    case Collective::Alltoallv:
    case Collective::ReduceScatterv:
      s.count = size / (es * size_);  // per rank / per block
      s.bytes = s.count * es * size_;
      break;
    case Collective::Barrier:
      break;
  }
  return s;
}

bool Runner::HasPlacement(Placement p) const {
  const bool in_place_ok = (comm_.capabilities().flags & PLEXUS_CAP_IN_PLACE) != 0;
  switch (args_.collective) {
    case Collective::Allreduce:
    case Collective::Reduce:
    case Collective::Allgather:
    case Collective::ReduceScatter:
    case Collective::Gather:
    case Collective::Scatter:
    case Collective::Allgatherv:
    case Collective::AllreduceCoalesced:
    case Collective::ReduceScatterv:
      return p == Placement::OutOfPlace || in_place_ok;
    case Collective::Broadcast:
      return p == Placement::InPlace;  // one buffer: in place
    case Collective::Alltoall:
    case Collective::Alltoallv:
    case Collective::SendRecv:
    case Collective::Barrier:
      return p == Placement::OutOfPlace;
  }
  return false;
}

void Runner::Post(Placement p, DType t, ReduceOp op, const Shape& s, std::vector<Work>* works) {
  const bool in = p == Placement::InPlace;
  unsigned char* send = send_.data();
  unsigned char* recv = recv_.data();
  const uint64_t block = s.count * ElementSize(t);
  switch (args_.collective) {
    case Collective::Allreduce:
      works->push_back(comm_.allreduce(in ? recv : send, recv, s.count, t, op));
      break;
    case Collective::Broadcast:
      works->push_back(comm_.broadcast(recv, s.count, t, args_.root));
      break;
    case Collective::Reduce:
      works->push_back(comm_.reduce(in ? recv : send, recv, s.count, t, op, args_.root));
      break;
    case Collective::Allgather:
      works->push_back(comm_.allgather(in ? recv + rank_ * block : send, recv, s.count, t));
      break;
    case Collective::ReduceScatter:
      works->push_back(in ? comm_.reduce_scatter(recv, recv + rank_ * block, s.count, t, op)
                          : comm_.reduce_scatter(send, recv, s.count, t, op));
      break;
    case Collective::Alltoall:
      works->push_back(comm_.alltoall(send, recv, s.count, t));
      break;
    case Collective::SendRecv:
      works->push_back(comm_.send(send, s.count, t, (rank_ + 1) % size_));
      works->push_back(comm_.recv(recv, s.count, t, (rank_ + size_ - 1) % size_));
      break;
    case Collective::Barrier:
      works->push_back(comm_.barrier());
      break;
    case Collective::Gather:
      works->push_back(
          comm_.gather(in ? recv + rank_ * block : send, recv, s.count, t, args_.root));
      break;
    case Collective::Scatter:
      works->push_back(in ? comm_.scatter(recv, recv + rank_ * block, s.count, t, args_.root)
                          : comm_.scatter(send, recv, s.count, t, args_.root));
      break;
    case Collective::Allgatherv:
      works->push_back(comm_.allgatherv(in ? recv + rank_ * block : send, s.count, recv, v_.counts,
                                        v_.displs, t));
      break;
    case Collective::Alltoallv:
      works->push_back(comm_.alltoallv(send, v_.counts, v_.displs, recv, v_.counts, v_.displs, t));
      break;
    case Collective::ReduceScatterv: {
      // A collective of the list without a method of its own: Post.
      abi::Call call{PLEXUS_COLL_REDUCE_SCATTERV,
                     in ? recv : send,
                     in ? recv + rank_ * block : recv,
                     s.count,
                     static_cast<plexus_dtype_t>(t),
                     static_cast<plexus_reduce_op_t>(op),
                     0,
                     nullptr};
      call.sendcounts = v_.counts.data();
      call.sdispls = v_.displs.data();
      works->push_back(comm_.Post(call));
      break;
    }
    case Collective::AllreduceCoalesced: {
      // kCoalescedBuffers pieces of the one buffer (the last takes the rest).
      const void* sends[kCoalescedBuffers];
      void* recvs[kCoalescedBuffers];
      uint64_t counts[kCoalescedBuffers];
      const uint64_t piece = s.count / kCoalescedBuffers;
      for (uint32_t i = 0; i < kCoalescedBuffers; ++i) {
        counts[i] = i + 1 < kCoalescedBuffers ? piece : s.count - piece * i;
        recvs[i] = recv + i * piece * ElementSize(t);
        sends[i] = in ? recvs[i] : send + i * piece * ElementSize(t);
      }
      works->push_back(comm_.allreduce_coalesced(sends, recvs, counts, t, op));
      break;
    }
  }
}

double Runner::TimeBatch(Placement p, DType t, ReduceOp op, const Shape& s) {
  std::vector<Work> works;
  SetBlocks(s);
  auto warm_up = [&](int64_t iterations) {
    for (int64_t i = 0; i < iterations; ++i) {
      Post(p, t, op, s, &works);
      for (Work& w : works) w.wait();
      works.clear();
    }
  };
  const auto warm_start = std::chrono::steady_clock::now();
  warm_up(args_.warmup_iters);
  // The job's first milliseconds are not its speed: the kernel is still
  // placing the ranks' busy threads on cores (a few load-balancing periods)
  // and pages are first touched. Before the first batch, warm up for at
  // least kFirstWarmup: rank 0 counts how many more iterations that takes
  // and tells the others through the store (RankTally: never through the
  // backend under test, whose wrong results would leave the ranks counting
  // differently).
  if (!warmed_up_) {
    warmed_up_ = true;
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_start).count();
    const double each = took / std::max(1, args_.warmup_iters);
    uint64_t more = 0;
    if (rank_ == 0 && each > 0 && took < kFirstWarmup.count()) {
      more = std::min<uint64_t>(uint64_t((kFirstWarmup.count() - took) / each) + 1, 1 << 20);
    }
    warm_up(int64_t(tally_.Broadcast(more)));
  }
  // The backend may bound the requests in flight (max_outstanding); waiting
  // for the oldest before posting more keeps within it.
  const size_t per_post = args_.collective == Collective::SendRecv ? 2 : 1;
  const uint32_t max_out = comm_.capabilities().max_outstanding;
  const size_t window =
      max_out == 0 ? std::numeric_limits<size_t>::max() : std::max<size_t>(max_out, per_post);
  std::deque<Work> in_flight;
  Sync();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < args_.iters; ++i) {
    while (!in_flight.empty() && in_flight.size() + per_post > window) {
      in_flight.front().wait();
      in_flight.pop_front();
    }
    Post(p, t, op, s, &works);
    for (Work& w : works) in_flight.push_back(std::move(w));
    works.clear();
    if (args_.blocking) {
      for (Work& w : in_flight) w.wait();
      in_flight.clear();
    }
  }
  for (Work& w : in_flight) w.wait();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / args_.iters;
}

uint64_t Runner::CheckOnce(Placement p, DType t, ReduceOp op, const Shape& s) {
  const bool in = p == Placement::InPlace;
  const uint32_t n = size_, r = rank_;
  const size_t es = ElementSize(t);
  const uint64_t c = s.count, block = c * es;
  unsigned char* send = send_.data();
  unsigned char* recv = recv_.data();
  const Pattern data = DataPattern();
  // Output buffers start as the sentinel, so a missing write is caught.
  std::memset(recv, kSentinel, size_t(s.bytes));
  SetBlocks(s);
  const bool root = r == args_.root;
  switch (args_.collective) {
    case Collective::Allreduce:
    case Collective::AllreduceCoalesced:
    case Collective::Reduce:
      Fill(t, in ? recv : send, c, ReductionInput(t, op, r, n));
      break;
    case Collective::Broadcast:
      if (r == args_.root) Fill(t, recv, c, data, DataOffset(r));
      break;
    case Collective::Allgather:
    case Collective::Allgatherv:
    case Collective::Gather:
      Fill(t, in ? recv + r * block : send, c, data, DataOffset(r));
      break;
    case Collective::Scatter:
      if (root) Fill(t, in ? recv : send, c * n, data, DataOffset(0));
      break;
    case Collective::ReduceScatter:
    case Collective::ReduceScatterv:
      Fill(t, in ? recv : send, c * n, ReductionInput(t, op, r, n));
      break;
    case Collective::Alltoall:
    case Collective::Alltoallv:
      for (uint32_t d = 0; d < n; ++d) Fill(t, send + d * block, c, data, DataOffset(r * n + d));
      break;
    case Collective::SendRecv:
      Fill(t, send, c, data, DataOffset(r));
      break;
    case Collective::Barrier:
      return 0;
  }
  std::vector<Work> works;
  Post(p, t, op, s, &works);
  for (Work& w : works) w.wait();

  switch (args_.collective) {
    case Collective::Allreduce:
    case Collective::AllreduceCoalesced:
      return CountWrong(t, recv, c, ReductionResult(t, op, n));
    case Collective::Reduce:
      if (r == args_.root) return CountWrong(t, recv, c, ReductionResult(t, op, n));
      // Other ranks' recvbuf is not touched (ABI); in place it still holds the input.
      return in ? CountWrong(t, recv, c, ReductionInput(t, op, r, n)) : CountTouched(recv, c, es);
    case Collective::Broadcast:
      return CountWrong(t, recv, c, data, DataOffset(args_.root));
    case Collective::Gather:
      if (!root) return 0;  // (other ranks' recvbuf is not the operation's)
      [[fallthrough]];
    case Collective::Allgather:
    case Collective::Allgatherv: {
      uint64_t wrong = 0;
      for (uint32_t src = 0; src < n; ++src) {
        wrong += CountWrong(t, recv + src * block, c, data, DataOffset(src));
      }
      return wrong;
    }
    case Collective::ReduceScatter:
    case Collective::ReduceScatterv:
      return CountWrong(t, in ? recv + r * block : recv, c, ReductionResult(t, op, n), r * c);
    case Collective::Scatter:
      // Block r of the root's input: elements r * c.. of the pattern.
      return CountWrong(t, in ? recv + r * block : recv, c, data, DataOffset(0) + r * c);
    case Collective::Alltoall:
    case Collective::Alltoallv: {
      uint64_t wrong = 0;
      for (uint32_t src = 0; src < n; ++src) {
        wrong += CountWrong(t, recv + src * block, c, data, DataOffset(src * n + r));
      }
      return wrong;
    }
    case Collective::SendRecv:
      return CountWrong(t, recv, c, data, DataOffset((r + n - 1) % n));
    case Collective::Barrier:
      break;
  }
  return 0;
}

void Runner::SetBlocks(const Shape& s) {
  v_.counts.assign(size_, s.count);
  v_.displs.resize(size_);
  for (uint32_t j = 0; j < size_; ++j) v_.displs[j] = j * s.count;
}

Cell Runner::MeasureCell(Placement p, DType t, ReduceOp op, const Shape& s) {
  Cell cell;
  if (!HasPlacement(p)) return cell;
  cell.present = true;
  const double seconds = MaxOverRanks(TimeBatch(p, t, op, s));
  cell.time_us = seconds * 1e6;
  cell.algbw_gbs = seconds > 0 ? double(s.bytes) / seconds / 1e9 : 0.0;
  cell.busbw_gbs = cell.algbw_gbs * BusFactor(args_.collective, size_);
  if (args_.check && args_.collective != Collective::Barrier) {
    const std::vector<uint64_t> all = tally_.Gather(CheckOnce(p, t, op, s));
    uint64_t total = 0;
    for (uint64_t w : all) total += w;
    cell.wrong = int64_t(total);
    if (rank_ == 0) cell.wrong_by_rank = all;
  }
  return cell;
}

Row Runner::Measure(DType t, ReduceOp op, uint64_t size) {
  const Collective c = args_.collective;
  const Shape s = ShapeOf(t, size);
  Row row;
  row.size = s.bytes;
  row.count = MovesData(c) ? s.bytes / ElementSize(t) : 0;
  row.type = MovesData(c) ? ToString(t) : "none";
  row.redop = IsReduction(c) ? ToString(op) : "none";
  row.root = HasRoot(c) ? int64_t(args_.root) : -1;
  row.out_of_place = MeasureCell(Placement::OutOfPlace, t, op, s);
  row.in_place = MeasureCell(Placement::InPlace, t, op, s);
  return row;
}

}  // namespace plexus::bench
