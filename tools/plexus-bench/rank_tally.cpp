#include "rank_tally.hpp"

#include <cstring>
#include <string>

#include "job.hpp"
#include "store/store_protocol.hpp"

namespace plexus::bench {
namespace {

Bytes Encode(uint64_t v) {
  Bytes b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

uint64_t Decode(const Bytes& b, uint32_t rank) {
  if (b.size() != sizeof(uint64_t)) {
    throw Error(PLEXUS_ERR_REMOTE, "plexus-bench",
                "rank " + std::to_string(rank) + " posted a malformed tally");
  }
  uint64_t v = 0;
  std::memcpy(&v, b.data(), sizeof v);
  return v;
}

void Check(const Status& st, const std::string& what) {
  if (!st.ok()) throw Error(st.code(), "plexus-bench", what + ": " + st.message());
}

}  // namespace

RankTally::RankTally(Communicator& comm) : comm_(comm), timeout_(comm.timeout()) {
  std::shared_ptr<Job> job;
  if (comm.size() > 1 && GetJob(timeout_, &job).ok() && job->has_rendezvous) job_ = job;
}

std::string RankTally::Key(uint64_t seq, uint32_t rank) const {
  // The rank's own key: nobody but that rank can post its tally.
  return store::RankKey(rank, "plexus-bench/tally/" + std::to_string(seq));
}

std::vector<uint64_t> RankTally::Gather(uint64_t local) {
  const uint32_t n = comm_.size(), me = comm_.rank();
  if (n == 1) return {local};
  if (!job_) {  // fallback: the backend's allgather, else rank 0's own only
    std::vector<uint64_t> all(n, 0);
    const auto& caps = comm_.capabilities();
    if (comm_.supports(PLEXUS_COLL_ALLGATHER) && (caps.dtypes >> PLEXUS_DTYPE_UINT64 & 1u)) {
      comm_.allgather(&local, all.data(), 1, DType::UInt64).wait();
    } else {
      all[me] = local;
    }
    return me == 0 ? all : std::vector<uint64_t>{local};
  }
  const uint64_t seq = seq_++;
  Check(job_->store->Set(Key(seq, me), Encode(local), timeout_), "posting this rank's tally");
  if (me != 0) return {local};
  std::vector<uint64_t> all(n, 0);
  for (uint32_t r = 0; r < n; ++r) {
    Bytes value;
    Check(job_->store->Get(Key(seq, r), &value, timeout_),
          "waiting for rank " + std::to_string(r) + "'s tally");
    all[r] = Decode(value, r);
  }
  return all;
}

uint64_t RankTally::Broadcast(uint64_t value_on_rank0) {
  if (comm_.size() == 1) return value_on_rank0;
  if (!job_) {
    uint64_t v = value_on_rank0;
    if (comm_.supports(PLEXUS_COLL_BROADCAST) &&
        (comm_.capabilities().dtypes >> PLEXUS_DTYPE_UINT64 & 1u)) {
      comm_.broadcast(&v, 1, DType::UInt64, 0).wait();
    }
    return v;
  }
  const std::string key =
      store::RankKey(0, "plexus-bench/tally/" + std::to_string(seq_++) + "/from0");
  if (comm_.rank() == 0) {
    Check(job_->store->Set(key, Encode(value_on_rank0), timeout_), "posting rank 0's verdict");
    return value_on_rank0;
  }
  Bytes value;
  Check(job_->store->Get(key, &value, timeout_), "waiting for rank 0's verdict");
  return Decode(value, 0);
}

}  // namespace plexus::bench
