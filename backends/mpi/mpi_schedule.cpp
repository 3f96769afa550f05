#include "mpi_schedule.hpp"

#include <algorithm>
#include <cstring>

#include "plexus/algos/dtype.hpp"

namespace plexus::mpi {
namespace {

// Recursive doubling up to this many bytes per chunk, ring above (and ring
// only when every rank gets a block of at least one element). Measured on
// loopback TCP with 2 ranks; at 4 or more ranks the ring's 2 (n - 1) rounds
// cost more latency, so its threshold grows with n.
constexpr uint64_t kRingMinBytes = 64 << 10;

uint32_t FloorPow2(uint32_t n) {
  uint32_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

bool UseRing(uint64_t count, size_t es, uint32_t size) {
  if (size < 2 || count < size) return false;
  return count * es >= kRingMinBytes * std::max<uint32_t>(1, size / 2);
}

inline uint8_t* Bytes(void* p, uint64_t off) { return static_cast<uint8_t*>(p) + off; }
inline const uint8_t* Bytes(const void* p, uint64_t off) {
  return static_cast<const uint8_t*>(p) + off;
}

}  // namespace

uint64_t AllreduceSchedule::ScratchBytes(uint64_t count, plexus_dtype_t dtype, uint32_t size,
                                         bool in_place) {
  const size_t es = algos::DtypeSize(dtype);
  if (size < 2 || count == 0) return 0;
  if (UseRing(count, es, size)) {
    // In place, one block (the largest) receives the left neighbour's partial sums.
    return in_place ? (count / size + (count % size ? 1 : 0)) * es : 0;
  }
  // Recursive doubling: out of place, the first exchange lands in recvbuf; a
  // second one (more than 2 ranks) or in place needs a vector of scratch.
  return in_place || size > 2 ? count * es : 0;
}

AllreduceSchedule::AllreduceSchedule(const Args& args) : a_(args), es_(algos::DtypeSize(args.dtype)) {
  if (a_.size < 2 || a_.count == 0) return;
  if (UseRing(a_.count, es_, a_.size)) {
    PlanRing();
  } else {
    PlanRecursiveDoubling();
  }
}

// Recursive doubling with MPICH's fold: of the first 2 * rem ranks (rem = n -
// pof2), each even one hands its vector to the next odd one and gets the
// result back at the end; the remaining pof2 ranks exchange whole vectors
// with partner newrank ^ mask for every mask < pof2.
void AllreduceSchedule::PlanRecursiveDoubling() {
  const uint32_t r = a_.rank, n = a_.size;
  const uint32_t pof2 = FloorPow2(n), rem = n - pof2;
  const bool in_place = a_.send == a_.recv;
  const void* cur = a_.send;  // where this rank's partial result is
  bool cur_in_recv = in_place;
  // Received data goes to recvbuf while it holds nothing, else to scratch.
  auto landing = [&]() -> void* { return cur_in_recv ? a_.scratch : a_.recv; };
  auto exchange = [&](uint32_t peer, bool send, bool recv) {
    Step s;
    s.count = a_.count;
    if (send) {
      s.send_to = int(peer);
      s.send_buf = cur;
      s.send_count = a_.count;
    }
    if (recv) {
      s.recv_from = int(peer);
      s.recv_buf = landing();
      s.out = a_.recv;
      // lower rank (op) higher rank, on every rank alike
      s.a = peer < r ? s.recv_buf : cur;
      s.b = peer < r ? cur : s.recv_buf;
      cur = a_.recv;
      cur_in_recv = true;
    }
    steps_.push_back(s);
  };

  int64_t newrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      exchange(r + 1, true, false);
      newrank = -1;
    } else {
      exchange(r - 1, false, true);
      newrank = r / 2;
    }
  } else {
    newrank = int64_t(r) - rem;
  }
  if (newrank < 0) {
    Step s;  // the result, from the odd partner
    s.count = a_.count;
    s.recv_from = int(r + 1);
    s.recv_buf = a_.recv;
    steps_.push_back(s);
    return;
  }
  for (uint32_t mask = 1; mask < pof2; mask <<= 1) {
    const uint32_t np = uint32_t(newrank) ^ mask;
    const uint32_t peer = np < rem ? np * 2 + 1 : np + rem;
    exchange(peer, true, true);
  }
  if (r < 2 * rem) {  // odd: the result back to the even partner
    Step s;
    s.send_count = a_.count;
    s.send_to = int(r - 1);
    s.send_buf = a_.recv;
    steps_.push_back(s);
  }
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
    st.recv_buf = in_place ? static_cast<void*>(a_.scratch) : Bytes(a_.recv, off(rb));
    st.count = len(rb);
    // partial sums from the left (op) this rank's contribution
    st.out = Bytes(a_.recv, off(rb));
    st.a = st.recv_buf;
    st.b = Bytes(in_place ? a_.recv : a_.send, off(rb));
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

int AllreduceSchedule::Post(const Step& s, const char** call) {
  if (s.recv_from >= 0) {
    const int rc = MPI_Irecv(s.recv_buf, int(s.count), a_.type, s.recv_from, a_.tag, a_.comm,
                             &reqs_[0]);
    if (rc != MPI_SUCCESS) {
      *call = "MPI_Irecv";
      reqs_[0] = MPI_REQUEST_NULL;
      return rc;
    }
  }
  if (s.send_to >= 0) {
    const int rc = MPI_Isend(s.send_buf, int(s.send_count), a_.type, s.send_to, a_.tag, a_.comm, &reqs_[1]);
    if (rc != MPI_SUCCESS) {
      *call = "MPI_Isend";
      reqs_[1] = MPI_REQUEST_NULL;
      return rc;
    }
  }
  return MPI_SUCCESS;
}

int AllreduceSchedule::Start(const char** call) {
  if (steps_.empty()) {
    // One rank (or nothing to reduce): the result is the input.
    if (a_.count > 0 && a_.send != a_.recv) std::memcpy(a_.recv, a_.send, a_.count * es_);
    finished_ = true;
    return MPI_SUCCESS;
  }
  next_ = 1;
  return Post(steps_[0], call);
}

int AllreduceSchedule::Advance(const char** call) {
  while (!finished_) {
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
    const Step done = steps_[next_ - 1];
    if (done.out) algos::ReduceTo(done.out, done.a, done.b, done.count, a_.dtype, a_.op);
    if (next_ == steps_.size()) {
      finished_ = true;
      return MPI_SUCCESS;
    }
    const int prc = Post(steps_[next_++], call);
    if (prc != MPI_SUCCESS) return prc;
  }
  return MPI_SUCCESS;
}

void AllreduceSchedule::TakeRequests(std::vector<MPI_Request>* out) {
  for (MPI_Request& r : reqs_) {
    if (r != MPI_REQUEST_NULL) out->push_back(r);
    r = MPI_REQUEST_NULL;
  }
  finished_ = true;
}

}  // namespace plexus::mpi
