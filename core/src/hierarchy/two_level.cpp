#include "hierarchy/two_level.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "comm_state.hpp"
#include "job.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/log.hpp"
#include "stall_report.hpp"
#include "store/store_protocol.hpp"

namespace plexus::detail {
namespace {

// Under auto, allreduces smaller than this stay flat: three operations in a
// row (and a thread's hand-over) cost more than the bytes saved on the
// links. Measured on 3 namespace hosts x 2 ranks of a 2-core machine (tcp
// across, ucx inside; plexus-bench --blocking): two-level 2.75 ms at 1 MiB
// against flat 2.22, 10.97 at 4 MiB against 11.69, 43.2 at 16 MiB against
// 50.7; with tcp inside too it did not pay below 16 MiB there.
constexpr uint64_t kAutoMinBytes = 4 << 20;

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

// An operation queued for the thread: allreduce, reduce (to root; recv may
// be NULL elsewhere) or broadcast (recv is the buffer, send is recv; op
// unused).
struct TwoLevel::Op {
  const char* what;
  bool to_root;  // reduce
  const void* send;
  void* recv;
  uint64_t count;
  DType dtype;
  ReduceOp op;
  uint32_t root;
  PostedOp posted;
  std::shared_ptr<HostOp> done;
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

bool TwoLevel::Takes(uint64_t bytes) const {
  if (bytes == 0) return false;
  return layout_.setting == HierarchySetting::kOn || bytes >= kAutoMinBytes;
}

std::shared_ptr<HostOp> TwoLevel::PostAllreduce(const void* send, void* recv, uint64_t count,
                                                DType dtype, ReduceOp op, const PostedOp& posted) {
  auto done = std::make_shared<HostOp>();
  Op a{"allreduce", false, send, recv, count, dtype, op, 0, posted, done};
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back([this, a] { RunAllreduce(a); });
  }
  cv_.notify_one();
  return done;
}

std::shared_ptr<HostOp> TwoLevel::PostReduce(const void* send, void* recv, uint64_t count,
                                             DType dtype, ReduceOp op, uint32_t root,
                                             const PostedOp& posted) {
  auto done = std::make_shared<HostOp>();
  Op a{"reduce", true, send, recv, count, dtype, op, root, posted, done};
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back([this, a] { RunAllreduce(a); });
  }
  cv_.notify_one();
  return done;
}

std::shared_ptr<HostOp> TwoLevel::PostBroadcast(void* buf, uint64_t count, DType dtype,
                                                uint32_t root, const PostedOp& posted) {
  auto done = std::make_shared<HostOp>();
  Op a{"broadcast", false, buf, buf, count, dtype, ReduceOp::Sum, root, posted, done};
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back([this, a] { RunBroadcast(a); });
  }
  cv_.notify_one();
  return done;
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
  std::string message = std::string(a.what) + " " + seq + " (two-level) on rank " +
                        std::to_string(flat_->rank) + (verdict.empty() ? "" : ": " + verdict) +
                        "; it failed in " + part + (where.empty() ? "" : " (" + where + ")") +
                        ": " + what;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_code_ == 0) {
      broken_code_ = code;
      broken_message_ = std::string("an earlier ") + a.what + ", " + seq + ", failed: " + message;
    }
  }
  a.done->Complete(code, std::move(message));
}

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
  const size_t es = algos::DtypeSize(plexus_dtype_t(a.dtype));
  const auto* send = static_cast<const char*>(a.send);
  auto* recv = static_cast<char*>(a.recv);
  // Pieces of a multiple of P elements (so that only the last needs scratch).
  const uint64_t n = std::clamp<uint64_t>(a.count * es / kPieceBytes, 1, kMaxPieces);
  const uint64_t per = ((a.count + n - 1) / n + P - 1) / P * P;
  for (uint64_t begin = 0; begin < a.count; begin += per) {
    Piece& piece = pieces->emplace_back();
    piece.begin = begin;
    piece.count = std::min(per, a.count - begin);
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

// Reduce (a.to_root) goes the same way, but across hosts each chunk is
// reduced to the root's host (its rank there owns the chunk), only that host
// gathers, and ranks other than the root work in a scratch copy of the
// vector (their recv is not theirs to write).
void TwoLevel::RunAllreduce(const Op& given) {
  if (Broken(given)) return;
  Op a = given;
  const uint64_t L = layout_.hosts[layout_.my_host].size(), j = layout_.my_index;
  const size_t es = algos::DtypeSize(plexus_dtype_t(a.dtype));
  const ReduceOp op = a.op == ReduceOp::Avg ? ReduceOp::Sum : a.op;
  uint32_t root_host = 0;
  for (uint32_t h = 0; h < layout_.hosts.size(); ++h) {
    const auto& ranks = layout_.hosts[h];
    if (std::find(ranks.begin(), ranks.end(), a.root) != ranks.end()) root_host = h;
  }
  const bool gathers = !a.to_root || root_host == layout_.my_host;
  std::vector<char> whole;
  if (a.to_root && flat_->rank != a.root) {
    whole.resize(a.count * es);
    a.recv = whole.data();
  }
  const auto* send = static_cast<const char*>(a.send);
  auto* recv = static_cast<char*>(a.recv);
  std::vector<Piece> pieces;
  Plan(a, &pieces);
  auto mine = [&](const Piece& p, const Piece::Round& r) { return r.base + j * p.B * es; };
  const std::string host_group =
      local_ ? "its host's group, whose ranks 0.. are job ranks " + Ranks(local_->job_ranks()) : "";

  // 1. Reduce-scatter inside the host (a host of one rank only copies).
  auto reduce_scatter = [&](Piece& p, std::vector<Part>& parts) {
    for (Piece::Round& r : p.rounds) {
      const void* from = r.scratch.empty() ? send + (p.begin + r.begin) * es : r.base;
      if (local_) {
        parts.push_back({local_->reduce_scatter(from, mine(p, r), p.B, a.dtype, op),
                         "part 1 of 3, reduce_scatter inside the host", host_group});
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
          {a.to_root
               ? cross_[k].reduce(chunk, gathers ? chunk : nullptr, p.B, a.dtype, op, root_host)
               : cross_[k].allreduce(chunk, chunk, p.B, a.dtype, op),
           a.to_root ? "part 2 of 3, reduce across hosts" : "part 2 of 3, allreduce across hosts",
           "the group of chunk " + std::to_string(k * L + j) + ", whose ranks 0.. are job ranks " +
               Ranks(cross_[k].job_ranks())});
    }
  };
  // 3. Allgather inside the host, in place (after AVG's division, by the
  // chunk's owner).
  auto allgather = [&](Piece& p, std::vector<Part>& parts) {
    if (!gathers) return;
    for (Piece::Round& r : p.rounds) {
      if (a.op == ReduceOp::Avg) {
        algos::FinishAverage(mine(p, r), p.B, plexus_dtype_t(a.dtype), flat_->size);
      }
      if (local_) {
        parts.push_back({local_->allgather(mine(p, r), r.base, p.B, a.dtype),
                         "part 3 of 3, allgather inside the host", host_group});
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
  for (uint32_t h = 0; h < layout_.hosts.size(); ++h) {
    const auto& ranks = layout_.hosts[h];
    const auto at = std::find(ranks.begin(), ranks.end(), a.root);
    if (at != ranks.end()) root_host = h, root_index = uint32_t(at - ranks.begin());
  }
  const uint64_t sender = root_index % L;  // this host's rank that gets it across
  Communicator* cross = sender == j ? &cross_[(root_index - j) / L] : nullptr;
  const size_t es = algos::DtypeSize(plexus_dtype_t(a.dtype));
  auto* buf = static_cast<char*>(a.recv);
  const uint64_t n = std::clamp<uint64_t>(a.count * es / kPieceBytes, 1, kMaxPieces);
  const uint64_t per = (a.count + n - 1) / n;
  auto piece = [&](size_t t, uint64_t* begin, uint64_t* count) {
    *begin = t * per;
    *count = std::min(per, a.count - std::min(a.count, *begin));
  };
  const std::string host_group =
      local_ ? "its host's group, whose ranks 0.. are job ranks " + Ranks(local_->job_ranks()) : "";
  auto post = [&](size_t t, std::vector<Part>& parts) {
    uint64_t begin, count;
    if (t < n && cross) {
      piece(t, &begin, &count);
      parts.push_back({cross->broadcast(buf + begin * es, count, a.dtype, root_host),
                       "part 1 of 2, broadcast across hosts",
                       "the group of chunk " + std::to_string(root_index) +
                           ", whose ranks 0.. are job ranks " + Ranks(cross->job_ranks())});
    }
    if (t >= 1 && local_) {
      piece(t - 1, &begin, &count);
      parts.push_back({local_->broadcast(buf + begin * es, count, a.dtype, uint32_t(sender)),
                       "part 2 of 2, broadcast inside the host", host_group});
    }
  };
  RunSteps(a, n + 1, post, [](size_t) {});
}

bool TwoLevel::Broken(const Op& a) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_code_ == 0) return false;
  a.done->Complete(broken_code_, std::string(a.what) + " #" + std::to_string(a.posted.seq - 1) +
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
    a.done->Complete(PLEXUS_ERR_INTERNAL, std::string(a.what) + " (two-level): " + e.what());
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
  Status st = ParseHierarchySetting(std::getenv("PLEXUS_HIERARCHY"), &setting);
  if (!st.ok()) return st;
  const char* lb = std::getenv("PLEXUS_LOCAL_BACKEND");
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
  const std::string who = "communicator of " + std::to_string(flat.size()) + " ranks";
  if (!layout.two_level) {
    if (flat.rank() == 0 && setting != HierarchySetting::kOff) {
      LogLine(PLEXUS_LOG_INFO, "plexus",
              who + ": collectives flat (PLEXUS_HIERARCHY=" + HierarchySettingName(setting) +
                  "): " + layout.reason);
    }
    return Status::Ok();
  }
  st = TwoLevel::Make(flat, layout, local_backend, out);
  if (!st.ok()) return st;
  if (flat.rank() == 0) {
    LogLine(PLEXUS_LOG_INFO, "plexus",
            who + ": allreduce, reduce and broadcast " + (*out)->description() +
                ", PLEXUS_HIERARCHY=" + HierarchySettingName(setting) +
                (setting == HierarchySetting::kOn
                     ? " (every size)"
                     : " (from " + std::to_string(kAutoMinBytes >> 20) + " MiB; smaller: flat)"));
  }
  return Status::Ok();
}

}  // namespace plexus::detail
