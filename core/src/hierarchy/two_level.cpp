#include "hierarchy/two_level.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "comm_state.hpp"
#include "job.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/log.hpp"
#include "plexus/settings/environment.hpp"
#include "stall_report.hpp"
#include "store/store_protocol.hpp"

namespace plexus::detail {
namespace {

// Under auto, allreduces and reduces smaller than this stay flat: three
// operations in a row (and a thread's hand-over) cost more than the bytes
// saved on the links. The threshold comes from bench/netns-compare --time
// (tcp across hosts, the groups inside hosts on the kit's shared memory);
// the figures are in docs/benchmarks.md.
constexpr uint64_t kAutoMinBytes = 1 << 20;
// A broadcast copies, reduces nothing, and has no shared-memory path inside
// hosts, so two levels pay for it only from a larger size (the same runs).
constexpr uint64_t kAutoMinBroadcastBytes = 4 << 20;

// An allreduce is cut into pieces of about this many bytes (at most
// kMaxPieces), which go through the three parts as a pipeline.
constexpr uint64_t kPieceBytes = 4 << 20;
constexpr uint64_t kMaxPieces = 4;

// How often a rank waiting in a part looks whether another failed.
constexpr std::chrono::milliseconds kPoll{100};
// How long a rank that stopped for another's failure looks for the others'
// marks: every survivor stops within about kPoll of the first failure.
constexpr std::chrono::milliseconds kStoppedWindow{1000};

std::string Ranks(const std::vector<uint32_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

// An operation queued for the thread.
struct TwoLevel::Op {
  abi::Call call;  // (reduce: recvbuf may be NULL but on the root)
  PostedOp posted;
  std::shared_ptr<HostOp> done;
  const char* what() const { return algos::CollectiveName(call.coll); }
  DType dtype() const { return DType(call.dtype); }
  // AVG sums in both levels; the owner of a chunk divides at the end.
  ReduceOp sum_op() const { return call.op == PLEXUS_OP_AVG ? ReduceOp::Sum : ReduceOp(call.op); }
};

Status TwoLevel::Make(Communicator& flat, const HostLayout& layout,
                      const std::string& local_backend, std::unique_ptr<TwoLevel>* out) {
  std::unique_ptr<TwoLevel> t(new TwoLevel);
  t->flat_ = &flat.state();
  t->failed_key_ = t->flat_->name + "/two-level/failed";
  t->layout_ = layout;
  t->timeout_ = flat.timeout();
  const auto& host = layout.hosts[layout.my_host];
  const uint32_t L = uint32_t(host.size());
  try {
    // The host's group: a host of one rank has none (its chunks need no
    // reduce-scatter or allgather).
    t->local_ = flat.SplitOver(L > 1 ? layout.my_host : Communicator::kNoColor, layout.my_index,
                               local_backend);
    // The cross-host group of chunk c: on every host, the rank that owns c.
    for (uint32_t c = 0; c < layout.chunks; ++c) {
      std::vector<uint32_t> members;
      for (const auto& h : layout.hosts) members.push_back(h[c % h.size()]);
      std::optional<Communicator> g = flat.group(members);
      if (g) t->cross_.push_back(std::move(*g));
    }
  } catch (const Error& e) {
    return Status(e.status(), "making the two-level groups of " + std::to_string(flat.size()) +
                                  " ranks: " + e.message());
  }
  std::vector<uint32_t> watched;
  if (t->local_) watched = t->local_->job_ranks();
  for (Communicator& c : t->cross_) {
    watched.insert(watched.end(), c.job_ranks().begin(), c.job_ranks().end());
  }
  std::sort(watched.begin(), watched.end());
  watched.erase(std::unique(watched.begin(), watched.end()), watched.end());
  std::erase(watched, t->flat_->job_ranks[t->flat_->rank]);
  t->watched_ = std::move(watched);
  if (t->local_) t->local_->state().stall_reports = false;
  for (Communicator& c : t->cross_) c.state().stall_reports = false;
  if (t->cross_.size() != layout.chunks / L) {
    return Status::Internal("two-level: this rank is in " + std::to_string(t->cross_.size()) +
                            " cross-host groups, not " + std::to_string(layout.chunks / L));
  }
  t->description_ = "two-level over " + layout.reason + " (inside hosts " +
                    (t->local_ ? t->local_->backend_name() : flat.backend_name()) +
                    ", across hosts " + flat.backend_name() + ", " + std::to_string(layout.chunks) +
                    " chunks)";
  t->worker_ = std::thread([p = t.get()] { p->Run(); });
  *out = std::move(t);
  return Status::Ok();
}

TwoLevel::~TwoLevel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool TwoLevel::Takes(plexus_collective_t coll, uint64_t bytes) const {
  if (bytes == 0) return false;
  if (layout_.setting == HierarchySetting::kOn) return true;
  // Under auto, reduce_scatter and allgather stay flat: in two levels they
  // do not pay at 16 MiB, unlike allreduce (bench/netns-compare
  // --collective; the figures are in docs/benchmarks.md).
  if (coll == PLEXUS_COLL_REDUCE_SCATTER || coll == PLEXUS_COLL_ALLGATHER) return false;
  return bytes >= (coll == PLEXUS_COLL_BROADCAST ? kAutoMinBroadcastBytes : kAutoMinBytes);
}

std::shared_ptr<HostOp> TwoLevel::Post(const abi::Call& call, const PostedOp& posted,
                                       plexus_request* earlier) {
  auto done = std::make_shared<HostOp>();
  void (TwoLevel::*run)(const Op&) = nullptr;
  switch (call.coll) {
    case PLEXUS_COLL_ALLREDUCE:
    case PLEXUS_COLL_REDUCE:
      run = &TwoLevel::RunAllreduce;
      break;
    case PLEXUS_COLL_BROADCAST:
      run = &TwoLevel::RunBroadcast;
      break;
    case PLEXUS_COLL_REDUCE_SCATTER:
      run = &TwoLevel::RunReduceScatter;
      break;
    case PLEXUS_COLL_ALLGATHER:
      run = &TwoLevel::RunAllgather;
      break;
    default:
      if (earlier) flat_->AdoptOrphan(earlier);
      done->Complete(PLEXUS_ERR_INTERNAL,
                     std::string("two-level: no scheme for ") + algos::CollectiveName(call.coll));
      return done;
  }
  // The parts complete ran; done completes once earlier has too.
  auto ran = std::make_shared<HostOp>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back([this, run, a = Op{call, posted, ran}, ran, done, earlier] {
      (this->*run)(a);
      if (earlier) AwaitEarlier(earlier);
      done->Complete(ran->Test(), ran->Message());
    });
  }
  cv_.notify_one();
  return done;
}

// Completion in posting order: the flat operations posted before this one
// complete first (each one's own Work says how; a failure among them has
// broken the communicator, and so this request, already).
void TwoLevel::AwaitEarlier(plexus_request* earlier) {
  Backend& backend = *flat_->backend;
  (void)backend.Wait(earlier, timeout_.count());
  if (backend.Test(earlier) == PLEXUS_IN_PROGRESS) {
    flat_->AdoptOrphan(earlier);
  } else {
    (void)backend.FreeRequest(earlier);
  }
}

void TwoLevel::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_code_ == 0) {
      broken_code_ = PLEXUS_ERR_ABORTED;
      broken_message_ = "the communicator was aborted";
    }
  }
  AbortGroups();
}

void TwoLevel::AbortGroups() {
  try {
    if (local_) local_->abort();
    for (Communicator& c : cross_) c.abort();
  } catch (const Error&) {
    // (an abort that fails leaves the operations to their timeout)
  }
}

void TwoLevel::SayFailed() {
  if (!flat_->job->has_rendezvous) return;
  (void)flat_->job->store->Set(store::RankKey(flat_->job_ranks[flat_->rank], failed_key_), Bytes{1},
                               std::chrono::seconds(2));
}

bool TwoLevel::FailedElsewhere() {
  if (!flat_->job->has_rendezvous) return false;
  for (uint32_t r : watched_) {
    Bytes value;
    const Status st = flat_->job->store->Get(store::RankKey(r, failed_key_), &value,
                                             std::chrono::milliseconds(0));
    if (st.ok()) return true;
  }
  return false;
}

void TwoLevel::WaitParts(std::vector<Part>& parts, const char** part, std::string* where) {
  for (Part& p : parts) {
    *part = p.part;
    *where = p.where;
    Work& w = p.work;
    // Short waits, so that a failure elsewhere is seen; a wait as long as the
    // timeout once the part has run that long (its error names whom it waited for).
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (!w.completed()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        w.wait();
        break;
      }
      try {
        w.wait(kPoll);
      } catch (const Error& e) {
        if (w.completed()) throw;  // the part's own failure
      }
      if (!w.completed() && FailedElsewhere()) {
        AbortGroups();
        throw PeerFailed{};
      }
    }
  }
}

void TwoLevel::Run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void TwoLevel::Fail(const Op& a, int32_t code, const char* part, const std::string& where,
                    const std::string& what, const std::string& verdict) {
  const std::string seq = "#" + std::to_string(a.posted.seq - 1);
  std::string message = std::string(a.what()) + " " + seq + " (two-level) on rank " +
                        std::to_string(flat_->rank) + (verdict.empty() ? "" : ": " + verdict) +
                        "; it failed in " + part + (where.empty() ? "" : " (" + where + ")") +
                        ": " + what;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_code_ == 0) {
      broken_code_ = code;
      broken_message_ = std::string("an earlier ") + a.what() + ", " + seq + ", failed: " + message;
    }
  }
  a.done->Complete(code, std::move(message));
}

namespace {

// How many pieces an operation of this many bytes (its largest buffer) is
// cut into: about kPieceBytes each, at most kMaxPieces.
uint64_t PieceCount(uint64_t bytes) {
  return std::clamp<uint64_t>(bytes / kPieceBytes, 1, kMaxPieces);
}

// The host that holds rank, and rank's index there.
void Place(const HostLayout& layout, uint32_t rank, uint32_t* host, uint32_t* index) {
  for (uint32_t h = 0; h < layout.hosts.size(); ++h) {
    const auto& ranks = layout.hosts[h];
    const auto at = std::find(ranks.begin(), ranks.end(), rank);
    if (at != ranks.end()) {
      *host = h;
      *index = uint32_t(at - ranks.begin());
      return;
    }
  }
}

}  // namespace

// A piece of an allreduce: elements [begin, begin + count) of it, cut into
// P chunks of B elements, in rounds of L chunks (see the header).
struct TwoLevel::Piece {
  // Round k covers the piece's elements [k L B, (k+1) L B); one that runs
  // past the piece's count is done in a zeroed scratch buffer of L B.
  struct Round {
    uint64_t begin;  // first element, from the piece's
    uint64_t valid;  // elements of the round within the piece
    std::vector<char> scratch;
    char* base;  // the round's first element: in recv, or in scratch
  };
  uint64_t begin = 0, count = 0, B = 0;
  std::vector<Round> rounds;
};

void TwoLevel::Plan(const Op& a, std::vector<Piece>* pieces) const {
  const uint64_t L = layout_.hosts[layout_.my_host].size(), P = layout_.chunks;
  const uint64_t count = a.call.count;
  const size_t es = algos::DtypeSize(a.call.dtype);
  const auto* send = static_cast<const char*>(a.call.sendbuf);
  auto* recv = static_cast<char*>(a.call.recvbuf);
  // Pieces of a multiple of P elements (so that only the last needs scratch).
  const uint64_t n = PieceCount(count * es);
  const uint64_t per = ((count + n - 1) / n + P - 1) / P * P;
  for (uint64_t begin = 0; begin < count; begin += per) {
    Piece& piece = pieces->emplace_back();
    piece.begin = begin;
    piece.count = std::min(per, count - begin);
    piece.B = (piece.count + P - 1) / P;
    const uint64_t B = piece.B;
    piece.rounds.resize(P / L);
    for (uint64_t k = 0; k < piece.rounds.size(); ++k) {
      Piece::Round& r = piece.rounds[k];
      r.begin = k * L * B;
      r.valid = std::min(piece.count, r.begin + L * B) - std::min(piece.count, r.begin);
      if (r.valid == L * B) {
        r.base = recv + (begin + r.begin) * es;
      } else {
        r.scratch.assign(L * B * es, 0);
        if (r.valid) std::memcpy(r.scratch.data(), send + (begin + r.begin) * es, r.valid * es);
        r.base = r.scratch.data();
      }
    }
  }
}

// Reduce goes the same way, but across hosts each chunk is reduced to the
// root's host (its rank there owns the chunk), only that host gathers, and
// ranks other than the root work in a scratch copy of the vector (their
// recv is not theirs to write).
void TwoLevel::RunAllreduce(const Op& given) {
  if (Broken(given)) return;
  Op a = given;
  const bool to_root = a.call.coll == PLEXUS_COLL_REDUCE;
  const uint64_t j = layout_.my_index;
  const size_t es = algos::DtypeSize(a.call.dtype);
  const DType dtype = a.dtype();
  const ReduceOp op = a.sum_op();
  uint32_t root_host = 0, root_index = 0;
  if (to_root) Place(layout_, a.call.root, &root_host, &root_index);
  const bool gathers = !to_root || root_host == layout_.my_host;
  std::vector<char> whole;
  if (to_root && flat_->rank != a.call.root) {
    whole.resize(a.call.count * es);
    a.call.recvbuf = whole.data();
  }
  const auto* send = static_cast<const char*>(a.call.sendbuf);
  auto* recv = static_cast<char*>(a.call.recvbuf);
  std::vector<Piece> pieces;
  Plan(a, &pieces);
  auto mine = [&](const Piece& p, const Piece::Round& r) { return r.base + j * p.B * es; };

  // 1. Reduce-scatter inside the host (a host of one rank only copies).
  auto reduce_scatter = [&](Piece& p, std::vector<Part>& parts) {
    for (Piece::Round& r : p.rounds) {
      const void* from = r.scratch.empty() ? send + (p.begin + r.begin) * es : r.base;
      if (local_) {
        parts.push_back({local_->reduce_scatter(from, mine(p, r), p.B, dtype, op),
                         "part 1 of 3, reduce_scatter inside the host", HostGroup()});
      } else if (from != mine(p, r)) {
        std::memcpy(mine(p, r), from, p.B * es);
      }
    }
  };
  // 2. Allreduce (reduce) of each owned chunk across hosts.
  auto across = [&](Piece& p, std::vector<Part>& parts) {
    for (size_t k = 0; k < p.rounds.size(); ++k) {
      char* chunk = mine(p, p.rounds[k]);
      parts.push_back(
          {to_root ? cross_[k].reduce(chunk, gathers ? chunk : nullptr, p.B, dtype, op, root_host)
                   : cross_[k].allreduce(chunk, chunk, p.B, dtype, op),
           to_root ? "part 2 of 3, reduce across hosts" : "part 2 of 3, allreduce across hosts",
           CrossGroup(k)});
    }
  };
  // 3. Allgather inside the host, in place (after AVG's division, by the
  // chunk's owner).
  auto allgather = [&](Piece& p, std::vector<Part>& parts) {
    if (!gathers) return;
    for (Piece::Round& r : p.rounds) {
      if (a.call.op == PLEXUS_OP_AVG) {
        algos::FinishAverage(mine(p, r), p.B, a.call.dtype, flat_->size);
      }
      if (local_) {
        parts.push_back({local_->allgather(mine(p, r), r.base, p.B, dtype),
                         "part 3 of 3, allgather inside the host", HostGroup()});
      }
    }
  };

  // The pieces go through the three parts as a pipeline: at step t, piece t
  // is reduce-scattered while piece t-1 goes across hosts and piece t-2 is
  // gathered, posted in that order on every rank (so the host's group sees
  // its operations in one order everywhere).
  const size_t n = pieces.size();
  auto post = [&](size_t t, std::vector<Part>& parts) {
    if (t < n) reduce_scatter(pieces[t], parts);
    if (t >= 1 && t <= n) across(pieces[t - 1], parts);
    if (t >= 2) allgather(pieces[t - 2], parts);
  };
  auto after = [&](size_t t) {
    if (t < 2) return;
    for (Piece::Round& r : pieces[t - 2].rounds) {
      if (!r.scratch.empty() && r.valid) {
        std::memcpy(recv + (pieces[t - 2].begin + r.begin) * es, r.scratch.data(), r.valid * es);
      }
    }
  };
  RunSteps(a, n + 2, post, after);
}

// Broadcast from root r (host h_r, its j_r-th rank): the cross-host group of
// chunk j_r holds r and, on every host, its (j_r mod L)-th rank; that group
// broadcasts from r (its rank h_r), then each of them broadcasts inside its
// host. In pieces, as a pipeline: piece t goes across hosts while piece
// t-1 is broadcast inside them.
void TwoLevel::RunBroadcast(const Op& a) {
  if (Broken(a)) return;
  const uint64_t L = layout_.hosts[layout_.my_host].size(), j = layout_.my_index;
  uint32_t root_host = 0, root_index = 0;
  Place(layout_, a.call.root, &root_host, &root_index);
  const uint64_t sender = root_index % L;  // this host's rank that gets it across
  const size_t k_root = (root_index - j) / L;
  Communicator* cross = sender == j ? &cross_[k_root] : nullptr;
  const size_t es = algos::DtypeSize(a.call.dtype);
  const uint64_t count = a.call.count;
  auto* buf = static_cast<char*>(a.call.recvbuf);
  const uint64_t n = PieceCount(count * es);
  const uint64_t per = (count + n - 1) / n;
  auto piece = [&](size_t t, uint64_t* begin, uint64_t* size) {
    *begin = t * per;
    *size = std::min(per, count - std::min(count, *begin));
  };
  auto post = [&](size_t t, std::vector<Part>& parts) {
    uint64_t begin, size;
    if (t < n && cross) {
      piece(t, &begin, &size);
      parts.push_back({cross->broadcast(buf + begin * es, size, a.dtype(), root_host),
                       "part 1 of 2, broadcast across hosts", CrossGroup(k_root)});
    }
    if (t >= 1 && local_) {
      piece(t - 1, &begin, &size);
      parts.push_back({local_->broadcast(buf + begin * es, size, a.dtype(), uint32_t(sender)),
                       "part 2 of 2, broadcast inside the host", HostGroup()});
    }
  };
  RunSteps(a, n + 1, post, [](size_t) {});
}

// A piece of a reduce_scatter or allgather: elements [begin, begin + count)
// of every rank's block. On host g (L_g ranks) each block's part of the
// piece is cut into P / L_g sub-pieces of s_g = ceil(count L_g / P) elements;
// chunk c of host g is sub-piece c / L_g of the block of its rank c mod L_g.
// packed holds chunk c of host g at element (c H + g) s, s = max s_g (the
// rest of each slot is padding), so that round k of the host's rounds of L
// chunks is the contiguous range from k L H s.
struct TwoLevel::Blocks {
  uint64_t begin = 0, count = 0, s = 0;
  std::vector<char> packed;  // P H s elements
  // For each of this rank's chunks, round by round: reduce_scatter, the
  // chunk of every host summed over this host (H s each) and then the
  // result (s each, after them); allgather, this rank's sub-piece (s each).
  std::vector<char> own;
};

void TwoLevel::ChunkOf(const Blocks& p, uint32_t g, uint64_t c, uint32_t* rank, uint64_t* offset,
                       uint64_t* valid) const {
  const auto& host = layout_.hosts[g];
  const uint64_t Lg = host.size(), P = layout_.chunks;
  const uint64_t sg = (p.count * Lg + P - 1) / P, q = c / Lg;
  *rank = host[c % Lg];
  *offset = p.begin + std::min(p.count, q * sg);
  *valid = std::min(p.count, (q + 1) * sg) - std::min(p.count, q * sg);
}

void TwoLevel::ForEachChunk(
    const Blocks& p,
    const std::function<void(uint64_t, uint32_t, uint32_t, uint64_t, uint64_t)>& fn) const {
  for (uint64_t c = 0; c < layout_.chunks; ++c) {
    for (uint32_t g = 0; g < layout_.hosts.size(); ++g) {
      uint32_t rank;
      uint64_t offset, valid;
      ChunkOf(p, g, c, &rank, &offset, &valid);
      fn(c, g, rank, offset, valid);
    }
  }
}

void TwoLevel::CutBlocks(const Op& a, std::vector<Blocks>* pieces) const {
  const uint64_t P = layout_.chunks, count = a.call.count;
  uint64_t Lmax = 0;
  for (const auto& h : layout_.hosts) Lmax = std::max<uint64_t>(Lmax, h.size());
  const uint64_t n = PieceCount(count * flat_->size * algos::DtypeSize(a.call.dtype));
  const uint64_t per = (count + n - 1) / n;
  for (uint64_t begin = 0; begin < count; begin += per) {
    Blocks& p = pieces->emplace_back();
    p.begin = begin;
    p.count = std::min(per, count - begin);
    p.s = (p.count * Lmax + P - 1) / P;
  }
}

// Reduce_scatter, in pieces as a pipeline: at step t, piece t is packed and
// reduce-scattered inside the host while piece t-1 is reduce-scattered
// across hosts; then piece t-1's result goes to recv.
void TwoLevel::RunReduceScatter(const Op& a) {
  if (Broken(a)) return;
  const uint64_t L = layout_.hosts[layout_.my_host].size(), j = layout_.my_index;
  const uint64_t H = layout_.hosts.size(), P = layout_.chunks, rounds = P / L;
  const size_t es = algos::DtypeSize(a.call.dtype);
  const uint64_t count = a.call.count;
  const auto* send = static_cast<const char*>(a.call.sendbuf);
  auto* recv = static_cast<char*>(a.call.recvbuf);
  std::vector<Blocks> pieces;
  CutBlocks(a, &pieces);
  // Round k's sums (this rank's chunk of every host), and its result.
  auto sums = [&](Blocks& p, uint64_t k) {
    return local_ ? p.own.data() + k * H * p.s * es : p.packed.data() + k * H * p.s * es;
  };
  auto result = [&](Blocks& p, uint64_t k) { return p.own.data() + (rounds * H + k) * p.s * es; };

  auto inside = [&](Blocks& p, std::vector<Part>& parts) {
    p.packed.assign(P * H * p.s * es, 0);
    p.own.assign(rounds * (H + 1) * p.s * es, 0);
    ForEachChunk(p, [&](uint64_t c, uint32_t g, uint32_t rank, uint64_t offset, uint64_t valid) {
      std::memcpy(p.packed.data() + (c * H + g) * p.s * es, send + (rank * count + offset) * es,
                  valid * es);
    });
    if (!local_) return;
    for (uint64_t k = 0; k < rounds; ++k) {
      parts.push_back({local_->reduce_scatter(p.packed.data() + k * L * H * p.s * es, sums(p, k),
                                              H * p.s, a.dtype(), a.sum_op()),
                       "part 1 of 2, reduce_scatter inside the host", HostGroup()});
    }
  };
  auto across = [&](Blocks& p, std::vector<Part>& parts) {
    for (uint64_t k = 0; k < rounds; ++k) {
      parts.push_back(
          {cross_[k].reduce_scatter(sums(p, k), result(p, k), p.s, a.dtype(), a.sum_op()),
           "part 2 of 2, reduce_scatter across hosts", CrossGroup(k)});
    }
  };
  auto done = [&](Blocks& p) {
    for (uint64_t k = 0; k < rounds; ++k) {
      uint32_t rank;
      uint64_t offset, valid;
      ChunkOf(p, layout_.my_host, k * L + j, &rank, &offset, &valid);
      if (a.call.op == PLEXUS_OP_AVG) {
        algos::FinishAverage(result(p, k), valid, a.call.dtype, flat_->size);
      }
      std::memcpy(recv + offset * es, result(p, k), valid * es);
    }
    p.packed = {};
    p.own = {};
  };
  const size_t n = pieces.size();
  auto post = [&](size_t t, std::vector<Part>& parts) {
    if (t < n) inside(pieces[t], parts);
    if (t >= 1) across(pieces[t - 1], parts);
  };
  RunSteps(a, n + 1, post, [&](size_t t) {
    if (t >= 1) done(pieces[t - 1]);
  });
}

// Allgather, the mirror: at step t, this rank's sub-pieces of piece t go
// across hosts while piece t-1 is gathered inside the host (in place, round
// by round); then piece t-1's blocks are copied to recv.
void TwoLevel::RunAllgather(const Op& a) {
  if (Broken(a)) return;
  const uint64_t L = layout_.hosts[layout_.my_host].size(), j = layout_.my_index;
  const uint64_t H = layout_.hosts.size(), P = layout_.chunks, rounds = P / L;
  const size_t es = algos::DtypeSize(a.call.dtype);
  const uint64_t count = a.call.count;
  const auto* send = static_cast<const char*>(a.call.sendbuf);
  auto* recv = static_cast<char*>(a.call.recvbuf);
  std::vector<Blocks> pieces;
  CutBlocks(a, &pieces);
  auto chunk = [&](Blocks& p, uint64_t c) { return p.packed.data() + c * H * p.s * es; };

  auto across = [&](Blocks& p, std::vector<Part>& parts) {
    p.packed.assign(P * H * p.s * es, 0);
    p.own.assign(rounds * p.s * es, 0);
    for (uint64_t k = 0; k < rounds; ++k) {
      uint32_t rank;
      uint64_t offset, valid;
      ChunkOf(p, layout_.my_host, k * L + j, &rank, &offset, &valid);
      char* mine = p.own.data() + k * p.s * es;
      std::memcpy(mine, send + offset * es, valid * es);
      parts.push_back({cross_[k].allgather(mine, chunk(p, k * L + j), p.s, a.dtype()),
                       "part 1 of 2, allgather across hosts", CrossGroup(k)});
    }
  };
  auto inside = [&](Blocks& p, std::vector<Part>& parts) {
    if (!local_) return;
    for (uint64_t k = 0; k < rounds; ++k) {
      parts.push_back({local_->allgather(chunk(p, k * L + j), chunk(p, k * L), H * p.s, a.dtype()),
                       "part 2 of 2, allgather inside the host", HostGroup()});
    }
  };
  auto done = [&](Blocks& p) {
    ForEachChunk(p, [&](uint64_t c, uint32_t g, uint32_t rank, uint64_t offset, uint64_t valid) {
      std::memcpy(recv + (rank * count + offset) * es, chunk(p, c) + g * p.s * es, valid * es);
    });
    p.packed = {};
    p.own = {};
  };
  const size_t n = pieces.size();
  auto post = [&](size_t t, std::vector<Part>& parts) {
    if (t < n) across(pieces[t], parts);
    if (t >= 1) inside(pieces[t - 1], parts);
  };
  RunSteps(a, n + 1, post, [&](size_t t) {
    if (t >= 1) done(pieces[t - 1]);
  });
}

std::string TwoLevel::HostGroup() const {
  return local_ ? "its host's group, whose ranks 0.. are job ranks " + Ranks(local_->job_ranks())
                : "";
}

std::string TwoLevel::CrossGroup(size_t k) const {
  return "the group of chunk " +
         std::to_string(k * layout_.hosts[layout_.my_host].size() + layout_.my_index) +
         ", whose ranks 0.. are job ranks " + Ranks(cross_[k].job_ranks());
}

bool TwoLevel::Broken(const Op& a) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_code_ == 0) return false;
  a.done->Complete(broken_code_, std::string(a.what()) + " #" + std::to_string(a.posted.seq - 1) +
                                     " (two-level) not run: " + broken_message_);
  return true;
}

void TwoLevel::RunSteps(const Op& a, size_t steps,
                        const std::function<void(size_t, std::vector<Part>&)>& post,
                        const std::function<void(size_t)>& after) {
  const char* part = "";
  std::string where;
  std::vector<Part> parts;
  try {
    for (size_t t = 0; t < steps; ++t) {
      post(t, parts);
      WaitParts(parts, &part, &where);
      parts.clear();
      after(t);
    }
  } catch (const PeerFailed&) {
    SayFailed();  // for the ranks of its other groups, which may wait for it
    Drain(parts);
    Fail(a, PLEXUS_ERR_REMOTE, part, where,
         "stopped: another rank failed in it (the groups here were aborted)",
         MarkReached(*flat_, a.posted, "", kStoppedWindow));
    return;
  } catch (const Error& e) {
    // The rank at fault, told at the level of the whole communicator (the
    // part's own report names ranks of its group, and a rank of this host
    // stuck in part 1 looks, from across hosts, like the one at fault).
    SayFailed();
    std::string verdict;
    if (e.status() == PLEXUS_ERR_TIMEOUT) {
      verdict = ReportStall(*flat_, a.posted);
    } else if (e.status() == PLEXUS_ERR_REMOTE || e.status() == PLEXUS_ERR_ABORTED) {
      verdict = MarkReached(*flat_, a.posted, "", kStoppedWindow);
    }
    Drain(parts);
    Fail(a, e.status(), part, where, e.what(), verdict);
    return;
  } catch (const std::exception& e) {
    Drain(parts);
    a.done->Complete(PLEXUS_ERR_INTERNAL, std::string(a.what()) + " (two-level): " + e.what());
    return;
  }
  a.done->Complete(PLEXUS_OK, "");
}

// After a failure: the parts still running may write into the pieces'
// scratch and the user's buffers, so they are ended (the groups aborted: the
// communicator is broken anyway) and waited for before either goes.
void TwoLevel::Drain(std::vector<Part>& parts) {
  AbortGroups();
  for (Part& p : parts) {
    try {
      p.work.wait();
    } catch (const Error&) {
    }
  }
  parts.clear();
}

// Every rank's entry. Through the store where there is one, in O(size)
// requests: each rank writes its own, rank 0 reads them all and writes them
// back as one value (under its own key, which no other process may write),
// which each rank reads. Otherwise (plain mpirun) through the backend's
// allgather, or, without one, nothing: *all stays empty on every rank.
Status TwoLevel::ExchangeLayout(Communicator& flat, const LayoutEntry& mine,
                                std::vector<LayoutEntry>* all) {
  CommState& s = flat.state();
  if (!s.job->has_rendezvous) {
    if (!flat.supports(PLEXUS_COLL_ALLGATHER)) return Status::Ok();
    all->resize(s.size);
    try {
      flat.allgather(&mine, all->data(), sizeof mine, DType::UInt8).wait();
    } catch (const Error& e) {
      return Status(e.status(), e.message());
    }
    return Status::Ok();
  }
  RendezvousStore& store = *s.job->store;
  const std::string base = s.name + "/layout";
  const auto* p = reinterpret_cast<const uint8_t*>(&mine);
  Status st = store.Set(store::RankKey(s.job_ranks[s.rank], base + "/entry"),
                        Bytes(p, p + sizeof mine), s.timeout);
  const std::string all_key = store::RankKey(s.job_ranks[0], base + "/all");
  Bytes blob;
  if (st.ok() && s.rank == 0) {
    for (uint32_t r = 0; st.ok() && r < s.size; ++r) {
      Bytes entry;
      st = store.Get(store::RankKey(s.job_ranks[r], base + "/entry"), &entry, s.timeout);
      if (st.ok() && entry.size() != sizeof(LayoutEntry)) {
        st = Status::Remote("rank " + std::to_string(r) + " told " + std::to_string(entry.size()) +
                            " bytes, not a layout entry");
      }
      blob.insert(blob.end(), entry.begin(), entry.end());
    }
    if (st.ok()) st = store.Set(all_key, blob, s.timeout);
  } else if (st.ok()) {
    st = store.Get(all_key, &blob, s.timeout);
    if (st.ok() && blob.size() != sizeof(LayoutEntry) * s.size) {
      st = Status::Remote("rank 0 told " + std::to_string(blob.size()) + " bytes of layout, not " +
                          std::to_string(sizeof(LayoutEntry) * s.size));
    }
  }
  if (!st.ok()) return st;
  all->resize(s.size);
  std::memcpy(all->data(), blob.data(), blob.size());
  return Status::Ok();
}

Status MakeTwoLevel(Communicator& flat, const std::string& local_address,
                    uint32_t launch_local_rank, uint32_t launch_local_size,
                    std::unique_ptr<TwoLevel>* out) {
  HierarchySetting setting;
  Status st = ParseHierarchySetting(plexus::settings::Raw(plexus::settings::Id::kHierarchy), &setting);
  if (!st.ok()) return st;
  const char* lb = plexus::settings::Raw(plexus::settings::Id::kLocalBackend);
  const std::string local_backend = lb ? lb : "";
  if (flat.size() == 1) return Status::Ok();
  LayoutEntry mine;
  mine.host = HostIdentity(local_address);
  mine.local_backend = Fnv1a(local_backend.data(), local_backend.size());
  mine.launch_local_rank = launch_local_rank;
  mine.launch_local_size = launch_local_size;
  mine.setting = uint32_t(setting);
  // Every rank tells its entry, even with PLEXUS_HIERARCHY=off: the
  // settings must be compared (ranks that disagree would hang in the groups).
  std::vector<LayoutEntry> all;
  st = TwoLevel::ExchangeLayout(flat, mine, &all);
  if (!st.ok()) return st.WithContext("exchanging where each rank runs");
  if (all.empty()) return Status::Ok();  // no way to tell: flat
  HostLayout layout;
  st = DecideLayout(all, flat.rank(), &layout);
  if (!st.ok()) return st;
  // The parts are these collectives of the groups (the cross-host ones on
  // flat's backend): a backend without one stays flat (alike on every rank).
  bool lacks = false;  // (under on, said as a warning)
  for (plexus_collective_t c : {PLEXUS_COLL_ALLREDUCE, PLEXUS_COLL_REDUCE, PLEXUS_COLL_BROADCAST,
                                PLEXUS_COLL_REDUCE_SCATTER, PLEXUS_COLL_ALLGATHER}) {
    if (layout.two_level && !flat.supports(c)) {
      layout.two_level = false;
      lacks = true;
      layout.reason = "backend '" + flat.backend_name() + "' has no " + algos::CollectiveName(c) +
                      ", which the two-level scheme is made of";
    }
  }
  const std::string who = "communicator of " + std::to_string(flat.size()) + " ranks";
  if (!layout.two_level) {
    if (flat.rank() == 0 && setting != HierarchySetting::kOff) {
      LogLine(lacks && setting == HierarchySetting::kOn ? PLEXUS_LOG_WARN : PLEXUS_LOG_INFO,
              "plexus",
              who + ": collectives flat (PLEXUS_HIERARCHY=" + HierarchySettingName(setting) +
                  "): " + layout.reason);
    }
    return Status::Ok();
  }
  st = TwoLevel::Make(flat, layout, local_backend, out);
  if (!st.ok()) return st;
  if (flat.rank() == 0) {
    LogLine(
        PLEXUS_LOG_INFO, "plexus",
        who + ": allreduce, reduce, broadcast, reduce_scatter and allgather " +
            (*out)->description() + ", PLEXUS_HIERARCHY=" + HierarchySettingName(setting) +
            (setting == HierarchySetting::kOn
                 ? " (every size)"
                 : " (allreduce and reduce from " + std::to_string(kAutoMinBytes >> 20) +
                       " MiB, broadcast from " + std::to_string(kAutoMinBroadcastBytes >> 20) +
                       " MiB; smaller ones, reduce_scatter and allgather: flat)"));
  }
  return Status::Ok();
}

}  // namespace plexus::detail
