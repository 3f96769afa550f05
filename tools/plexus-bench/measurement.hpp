// Measurement of one collective at one size, out of place and in place, the
// way nccl-tests does it (see --help): warm-up, a barrier, a timed batch of
// back-to-back operations, the per-rank time reduced with max over ranks, and
// a separate checked operation whose wrong elements are gathered from every
// rank through the rendezvous store (RankTally), not the backend under test.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "plexus/plexus.hpp"
#include "rank_tally.hpp"

namespace plexus::bench {

// One placement's measurement. present == false: no such placement (N/A).
struct Cell {
  bool present = false;
  double time_us = 0;
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  int64_t wrong = -1;  // on rank 0 summed over ranks, elsewhere this rank's; -1 = not checked
  std::vector<uint64_t> wrong_by_rank;  // rank 0 only: each rank's count
};

struct Row {
  uint64_t size = 0;   // bytes, nccl-tests' convention (see --help)
  uint64_t count = 0;  // size in elements
  std::string type;    // dtype name, "none" for barrier
  std::string redop;   // op name, "none" when the collective does not reduce
  int64_t root = -1;   // -1 when the collective has no root
  Cell out_of_place;
  Cell in_place;
};

// busbw / algbw for collective c on n ranks (DESIGN.md, nccl-tests).
double BusFactor(Collective c, uint32_t n);

// Memory for the benchmark buffers: page-aligned, pre-touched, freed on
// destruction; from comm's mem_alloc when given one (collective then).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(uint64_t bytes, Communicator* shared_from = nullptr);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  unsigned char* data() const { return data_; }

 private:
  unsigned char* data_ = nullptr;
  std::shared_ptr<void> shared_;  // the mem_alloc buffer, when data_ is one
};

// Runs the measurements of one collective on comm. Collective: every rank
// must call Measure with the same arguments in the same order. Does not take
// ownership of comm or args. Throws plexus::Error when an operation fails.
class Runner {
 public:
  // Does not take ownership of tally either.
  Runner(Communicator& comm, const BenchArgs& args, RankTally& tally);

  // One row: `size` bytes (rounded down as --help says) of dtype t with op.
  Row Measure(DType t, ReduceOp op, uint64_t size);

  // Collective helpers on the benchmark's communicator (also used by main).
  double MaxOverRanks(double local);
  uint64_t SumOverRanks(uint64_t local);
  void Sync();  // a barrier, or the nearest thing the backend offers

 private:
  enum class Placement { OutOfPlace, InPlace };
  struct Shape {
    uint64_t count = 0;  // the `count` argument of the ABI call
    uint64_t bytes = 0;  // the row's size
  };

  Shape ShapeOf(DType t, uint64_t size) const;
  bool HasPlacement(Placement p) const;
  // Posts one operation (two for sendrecv) and appends its Work(s).
  void Post(Placement p, DType t, ReduceOp op, const Shape& s, std::vector<Work>* works);
  // Average seconds per operation on this rank over a batch of args_.iters.
  double TimeBatch(Placement p, DType t, ReduceOp op, const Shape& s);
  // Wrong output elements of one operation on fresh inputs, on this rank.
  uint64_t CheckOnce(Placement p, DType t, ReduceOp op, const Shape& s);
  Cell MeasureCell(Placement p, DType t, ReduceOp op, const Shape& s);
  // The per-rank arrays of allgatherv and alltoallv for shape s (equal
  // blocks of s.count elements, packed in rank order).
  void SetBlocks(const Shape& s);

  Communicator& comm_;
  const BenchArgs& args_;
  RankTally& tally_;
  bool warmed_up_ = false;  // the first batch's longer warm-up is done
  const uint32_t rank_;
  const uint32_t size_;
  AlignedBuffer send_;
  AlignedBuffer recv_;
  struct {
    std::vector<uint64_t> counts, displs;
  } v_;
};

}  // namespace plexus::bench
