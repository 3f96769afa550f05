#include "mpi_schedule.hpp"

#include <algorithm>
#include <cstring>

#include "plexus/algos/dtype.hpp"

namespace plexus::mpi {
namespace {

uint32_t FloorPow2(uint32_t n) {
  uint32_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// Ring or recursive doubling, from the chunk's size alone (the same on every
// rank). The sizes come from bench/harness/mpi_paired_bench with
// PLEXUS_MPI_ALLREDUCE forcing each schedule; the figures are in
// docs/benchmarks.md.
// Recursive doubling sends one message of the whole vector, the ring two of
// half of it but reduces only half: the ring wins where the half fits TCP's
// 64 KiB eager limit and the whole does not (no rendezvous round trip), and
// from 512 KiB, where moving and reducing half the data outweighs the extra
// round. With more ranks the ring takes 2 (n - 1) rounds against about
// log2(n), so it starts at 64 KiB x n/2.
// On Open MPI's shared memory (vader: a 4 KiB eager limit, a rendezvous
// above it) the 2-rank ring wins from 16 KiB, and also where the whole vector
// is just over the eager limit while its halves are under it; with 3 ranks
// the rule for n >= 3 holds there too.
constexpr uint64_t kSharedMemoryEager = 4096 - 64;  // vader's eager limit less a header's room
bool UseRing(uint64_t count, size_t es, uint32_t size, AllreduceAlgorithm algorithm,
             bool shared_memory) {
  if (size < 2 || count < size) return false;  // the ring needs a block per rank
  if (algorithm == AllreduceAlgorithm::kRing) return true;
  if (algorithm == AllreduceAlgorithm::kRecursiveDoubling) return false;
  const uint64_t bytes = count * es;
  if (size == 2 && shared_memory) {
    return (bytes > kSharedMemoryEager && bytes <= 2 * kSharedMemoryEager) || bytes >= (16 << 10);
  }
  if (size == 2) return (bytes >= (64 << 10) && bytes < (128 << 10)) || bytes >= (512 << 10);
  return bytes >= (uint64_t(64) << 10) * (size / 2);
}

inline uint8_t* Bytes(void* p, uint64_t off) {
  return static_cast<uint8_t*>(p) + off;
}
inline const uint8_t* Bytes(const void* p, uint64_t off) {
  return static_cast<const uint8_t*>(p) + off;
}

}  // namespace

uint64_t AllreduceSchedule::ScratchBytes(uint64_t count, plexus_dtype_t dtype, uint32_t size,
                                         bool in_place, AllreduceAlgorithm algorithm,
                                         bool shared_memory) {
  const size_t es = algos::DtypeSize(dtype);
  if (size < 2 || count == 0) return 0;
  if (UseRing(count, es, size, algorithm, shared_memory)) {
    // In place, one block (the largest) receives the left neighbour's partial sums.
    return in_place ? (count / size + (count % size ? 1 : 0)) * es : 0;
  }
  return count * es;  // recursive doubling: a vector, on some ranks at least
}

AllreduceSchedule::AllreduceSchedule(const Args& args)
    : a_(args), es_(algos::DtypeSize(args.dtype)) {
  if (a_.size < 2 || a_.count == 0) return;
  if (UseRing(a_.count, es_, a_.size, a_.algorithm, a_.shared_memory)) {
    ring_ = true;
    PlanRing();
  } else {
    PlanRecursiveDoubling();
  }
}

// Recursive doubling with MPICH's fold: of the first 2 * rem ranks (rem = n -
// pof2), each even one hands its vector to the next odd one and gets the
// result back at the end; the remaining pof2 ranks exchange whole vectors
// with partner newrank ^ mask for every mask < pof2. Each exchange computes
// (lower rank's data) (op) (higher rank's data), the lower rank's being
// MPI_Reduce_local's in: the lower rank receives into a free buffer and
// reduces its own data into it; the higher one reduces what it received into
// its own data, which must be writable (out of place: a copy in recvbuf).
void AllreduceSchedule::PlanRecursiveDoubling() {
  const uint32_t r = a_.rank, n = a_.size;
  const uint32_t pof2 = FloorPow2(n), rem = n - pof2;
  const bool in_place = a_.send == a_.recv;
  void* const recv = a_.recv;
  void* const scratch = a_.scratch;
  const void* cur = a_.send;  // this rank's partial result: sendbuf, recvbuf or scratch
  bool cur_writable = in_place;
  auto free_buffer = [&]() -> void* { return cur == recv ? scratch : recv; };
  auto exchange = [&](uint32_t peer, bool send) {
    Step s;
    s.count = a_.count;
    if (peer > r) {  // lower: the result lands in the buffer received into
      s.recv_buf = free_buffer();
      s.in = cur;
      s.inout = s.recv_buf;
    } else {  // higher: reduce into own data
      if (!cur_writable) {
        copy_in_ = true;  // out of place: work on a copy of sendbuf in recvbuf
        cur = recv;
      }
      s.recv_buf = free_buffer();
      s.in = s.recv_buf;
      s.inout = const_cast<void*>(cur);
    }
    s.recv_from = int(peer);
    if (send) {
      s.send_to = int(peer);
      s.send_buf = cur;
      s.send_count = a_.count;
    }
    cur = s.inout;
    cur_writable = true;
    steps_.push_back(s);
  };

  int64_t newrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      Step s;  // hand the vector to the odd partner ...
      s.send_to = int(r + 1);
      s.send_buf = cur;
      s.send_count = a_.count;
      steps_.push_back(s);
      Step t;  // ... and get the result back into recvbuf
      t.count = a_.count;
      t.recv_from = int(r + 1);
      t.recv_buf = recv;
      steps_.push_back(t);
      return;
    }
    exchange(r - 1, false);  // receive the even partner's vector
    newrank = r / 2;
  } else {
    newrank = int64_t(r) - rem;
  }
  for (uint32_t mask = 1; mask < pof2; mask <<= 1) {
    const uint32_t np = uint32_t(newrank) ^ mask;
    exchange(np < rem ? np * 2 + 1 : np + rem, true);
  }
  if (r < 2 * rem) {  // odd: the result back to the even partner
    Step s;
    s.send_to = int(r - 1);
    s.send_buf = cur;
    s.send_count = a_.count;
    steps_.push_back(s);
  }
  if (cur != recv) copy_out_from_ = cur;
}

// Ring reduce-scatter then ring allgather over n blocks. In reduce-scatter
// step s rank r sends block r - s to the right and receives block r - s - 1
// from the left, which it reduces with its own contribution; after n - 1
// steps it holds block r + 1 complete, and the allgather passes the complete
// blocks on around the ring.
void AllreduceSchedule::PlanRing() {
  const uint32_t r = a_.rank, n = a_.size;
  const bool in_place = a_.send == a_.recv;
  const uint64_t base = a_.count / n, extra = a_.count % n;
  auto off = [&](uint32_t b) { return (b * base + std::min<uint64_t>(b, extra)) * es_; };
  auto len = [&](uint32_t b) { return base + (b < extra ? 1 : 0); };
  const uint32_t left = (r + n - 1) % n, right = (r + 1) % n;
  for (uint32_t s = 0; s + 1 < n; ++s) {
    const uint32_t sb = (r + n - s) % n, rb = (r + 2 * n - s - 1) % n;
    Step st;
    st.send_to = int(right);
    st.send_buf = Bytes(s == 0 ? a_.send : a_.recv, off(sb));
    st.send_count = len(sb);
    st.recv_from = int(left);
    st.count = len(rb);
    // Block rb's partial result is reduced once per rank and then passed on,
    // so the ranks agree whichever operand each makes `in`.
    if (in_place) {  // partial (in scratch) into own data
      st.recv_buf = a_.scratch;
      st.in = a_.scratch;
      st.inout = Bytes(a_.recv, off(rb));
    } else {  // own data (sendbuf) into the partial, received into recvbuf
      st.recv_buf = Bytes(a_.recv, off(rb));
      st.in = Bytes(a_.send, off(rb));
      st.inout = st.recv_buf;
    }
    steps_.push_back(st);
  }
  for (uint32_t s = 0; s + 1 < n; ++s) {
    const uint32_t sb = (r + 1 + n - s) % n, rb = (r + n - s) % n;
    Step st;
    st.send_to = int(right);
    st.send_buf = Bytes(a_.recv, off(sb));
    st.send_count = len(sb);
    st.recv_from = int(left);
    st.recv_buf = Bytes(a_.recv, off(rb));
    st.count = len(rb);
    steps_.push_back(st);
  }
}

int AllreduceSchedule::TagOf(uint64_t count) const {
  return a_.tags.Tag({a_.slot, CountField(count), ring_, a_.kind});
}

bool AllreduceSchedule::ExpectsFrom(int peer, uint64_t count_field, bool ring) const {
  if (ring != ring_ || next_ == 0) return false;
  for (size_t i = next_ - 1; i < steps_.size(); ++i) {
    const Step s = steps_[i];
    if (s.recv_from == peer && CountField(s.count) == count_field) return true;
  }
  return false;
}

uint64_t AllreduceSchedule::ExpectedCount() const {
  if (finished_ || next_ == 0) return 0;
  const Step s = steps_[next_ - 1];
  return s.recv_from >= 0 ? s.count : 0;
}

int AllreduceSchedule::Post(const Step& s, const char** call) {
  const bool exact = s.recv_from >= 0 && CountField(s.count) != 0;
  plain_recv_ = false;
  if (s.recv_from >= 0 && !exact) matching_ = true;
  if (s.send_to >= 0) {
    const int rc = MPI_Isend(s.send_buf, int(s.send_count), a_.type, s.send_to, TagOf(s.send_count),
                             a_.comm, &reqs_[1]);
    if (rc != MPI_SUCCESS) {
      *call = "MPI_Isend";
      reqs_[1] = MPI_REQUEST_NULL;
      return rc;
    }
  }
  if (exact) {
    // The tag carries the count: only a message of exactly s.count elements
    // can match, so a plain receive cannot be overrun.
    const int rc = MPI_Irecv(s.recv_buf, int(s.count), a_.type, s.recv_from, TagOf(s.count),
                             a_.comm, &reqs_[0]);
    if (rc != MPI_SUCCESS) {
      *call = "MPI_Irecv";
      reqs_[0] = MPI_REQUEST_NULL;
      return rc;
    }
    plain_recv_ = true;
    return MPI_SUCCESS;
  }
  return matching_ ? Match(s, call) : MPI_SUCCESS;
}

int AllreduceSchedule::Match(const Step& s, const char** call) {
  int flag = 0;
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Status st;
  std::memset(&st, 0, sizeof st);
  int rc = MPI_Improbe(s.recv_from, TagOf(s.count), a_.comm, &flag, &msg, &st);
  if (rc != MPI_SUCCESS) {
    *call = "MPI_Improbe";
    return rc;
  }
  if (!flag) return MPI_SUCCESS;
  matching_ = false;
  int got = 0;
  if (MPI_Get_count(&st, a_.type, &got) == MPI_SUCCESS && got != MPI_UNDEFINED &&
      uint64_t(got) == s.count) {
    rc = MPI_Imrecv(s.recv_buf, int(s.count), a_.type, &msg, &reqs_[0]);
  } else {
    int bytes = 0;
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    if (bytes == MPI_UNDEFINED || bytes < 0) bytes = 0;
    discard_ = std::make_unique_for_overwrite<uint8_t[]>(size_t(bytes) + 1);
    error_ = "rank " + std::to_string(s.recv_from) + " sent " +
             std::to_string(uint64_t(bytes) / es_) + " " + algos::DtypeName(a_.dtype) +
             " elements where this rank expects " + std::to_string(s.count) + " (step " +
             std::to_string(next_) + " of " + std::to_string(steps_.size()) + ", " +
             algorithm_name() + "): the ranks passed different counts";
    rc = MPI_Imrecv(discard_.get(), bytes, MPI_BYTE, &msg, &reqs_[0]);
  }
  if (rc != MPI_SUCCESS) {
    *call = "MPI_Imrecv";
    reqs_[0] = MPI_REQUEST_NULL;
  }
  return rc;
}

int AllreduceSchedule::Start(const char** call) {
  if (steps_.empty()) {
    // One rank (or nothing to reduce): the result is the input.
    if (a_.count > 0 && a_.send != a_.recv) std::memcpy(a_.recv, a_.send, a_.count * es_);
    finished_ = true;
    return MPI_SUCCESS;
  }
  // Before anything is received: the steps only read sendbuf meanwhile.
  if (copy_in_) std::memcpy(a_.recv, a_.send, a_.count * es_);
  next_ = 1;
  return Post(steps_[0], call);
}

int AllreduceSchedule::Advance(const char** call) {
  while (!finished_) {
    if (matching_) {
      const int rc = Match(steps_[next_ - 1], call);
      if (rc != MPI_SUCCESS) return rc;
      if (matching_) return MPI_SUCCESS;
    }
    int flag = 0;
    MPI_Status st[2];
    std::memset(st, 0, sizeof st);
    const int rc = MPI_Testall(2, reqs_, &flag, st);
    if (rc != MPI_SUCCESS) {
      *call = "MPI_Testall";
      if (rc == MPI_ERR_IN_STATUS) {
        for (const MPI_Status& s : st) {
          if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) return s.MPI_ERROR;
        }
      }
      return rc;
    }
    if (!flag) return MPI_SUCCESS;
    if (discard_) {  // the mismatched message is in; nothing of this step is left in MPI
      discard_.reset();
      *call = "MPI_Improbe";
      return MPI_ERR_TRUNCATE;
    }
    const Step done = steps_[next_ - 1];
    if (done.inout) {
      const int rrc = MPI_Reduce_local(done.in, done.inout, int(done.count), a_.type, a_.op_mpi);
      if (rrc != MPI_SUCCESS) {
        *call = "MPI_Reduce_local";
        return rrc;
      }
    }
    if (next_ == steps_.size()) {
      if (copy_out_from_) std::memcpy(a_.recv, copy_out_from_, a_.count * es_);
      finished_ = true;
      return MPI_SUCCESS;
    }
    const int prc = Post(steps_[next_++], call);
    if (prc != MPI_SUCCESS) return prc;
  }
  return MPI_SUCCESS;
}

void AllreduceSchedule::TakeRequests(std::vector<MPI_Request>* out,
                                     std::vector<std::unique_ptr<uint8_t[]>>* keep) {
  if (plain_recv_ && reqs_[0] != MPI_REQUEST_NULL) (void)MPI_Cancel(&reqs_[0]);
  plain_recv_ = false;
  for (MPI_Request& r : reqs_) {
    if (r != MPI_REQUEST_NULL) out->push_back(r);
    r = MPI_REQUEST_NULL;
  }
  if (discard_) keep->push_back(std::move(discard_));
  matching_ = false;
  finished_ = true;
}

int AllreduceSchedule::WaitingFor(bool* receiving) const {
  if (finished_ || next_ == 0) return -1;
  const Step s = steps_[next_ - 1];
  if (s.recv_from >= 0 && (matching_ || reqs_[0] != MPI_REQUEST_NULL)) {
    *receiving = true;
    return s.recv_from;
  }
  *receiving = false;
  return s.send_to;
}

const char* AllreduceSchedule::algorithm_name() const {
  return ring_ ? "ring" : "recursive doubling";
}

}  // namespace plexus::mpi
