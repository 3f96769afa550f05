#include "hierarchy/two_level.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "comm_state.hpp"
#include "job.hpp"
#include "stall_report.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/log.hpp"

namespace plexus::detail {
namespace {

// Under auto, allreduces smaller than this stay flat: three latencies in a
// row cost more than the bytes saved on the links.
constexpr uint64_t kAutoMinBytes = 64 << 10;

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

struct TwoLevel::Allreduce {
  const void* send;
  void* recv;
  uint64_t count;
  DType dtype;
  ReduceOp op;
  PostedOp posted;
  std::shared_ptr<HostOp> done;
};

Status TwoLevel::Make(Communicator& flat, const HostLayout& layout,
                      const std::string& local_backend, std::unique_ptr<TwoLevel>* out) {
  std::unique_ptr<TwoLevel> t(new TwoLevel);
  t->flat_ = &flat.state();
  t->failures_key_ = t->flat_->name + "/two-level/failures";
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
  if (t->local_) t->local_->state().stall_reports = false;
  for (Communicator& c : t->cross_) c.state().stall_reports = false;
  if (t->cross_.size() != layout.chunks / L) {
    return Status::Internal("two-level: this rank is in " + std::to_string(t->cross_.size()) +
                            " cross-host groups, not " + std::to_string(layout.chunks / L));
  }
  t->description_ = "two-level over " + layout.reason + " (inside hosts " +
                    (t->local_ ? t->local_->backend_name() : flat.backend_name()) +
                    ", across hosts " + flat.backend_name() + ", " +
                    std::to_string(layout.chunks) + " chunks)";
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

bool TwoLevel::TakesAllreduce(uint64_t bytes) const {
  if (bytes == 0) return false;
  return layout_.setting == HierarchySetting::kOn || bytes >= kAutoMinBytes;
}

std::shared_ptr<HostOp> TwoLevel::PostAllreduce(const void* send, void* recv, uint64_t count,
                                                DType dtype, ReduceOp op,
                                                const PostedOp& posted) {
  auto done = std::make_shared<HostOp>();
  Allreduce a{send, recv, count, dtype, op, posted, done};
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back([this, a] { RunAllreduce(a); });
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
  int64_t n = 0;
  (void)flat_->job->store->Add(failures_key_, 1, &n, std::chrono::seconds(2));
}

bool TwoLevel::FailedElsewhere() {
  if (!flat_->job->has_rendezvous) return false;
  Bytes value;
  return flat_->job->store->Get(failures_key_, &value, std::chrono::milliseconds(0)).ok();
}

void TwoLevel::WaitParts(std::vector<Work>& works) {
  for (Work& w : works) {
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

void TwoLevel::Fail(const Allreduce& a, int32_t code, const char* part, const std::string& where,
                    const std::string& what, const std::string& verdict) {
  const std::string seq = "#" + std::to_string(a.posted.seq - 1);
  std::string message = "allreduce " + seq + " (two-level) on rank " +
                        std::to_string(flat_->rank) + (verdict.empty() ? "" : ": " + verdict) +
                        "; it failed in " + part + (where.empty() ? "" : " (" + where + ")") +
                        ": " + what;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_code_ == 0) {
      broken_code_ = code;
      broken_message_ = "an earlier allreduce, " + seq + ", failed: " + message;
    }
  }
  a.done->Complete(code, std::move(message));
}

void TwoLevel::RunAllreduce(const Allreduce& a) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_code_ != 0) {
      a.done->Complete(broken_code_, "allreduce #" + std::to_string(a.posted.seq - 1) +
                                         " (two-level) not run: " + broken_message_);
      return;
    }
  }
  const auto& host = layout_.hosts[layout_.my_host];
  const uint64_t L = host.size(), j = layout_.my_index, P = layout_.chunks;
  const uint64_t B = (a.count + P - 1) / P;
  const size_t es = algos::DtypeSize(plexus_dtype_t(a.dtype));
  const ReduceOp op = a.op == ReduceOp::Avg ? ReduceOp::Sum : a.op;
  const auto* send = static_cast<const char*>(a.send);
  auto* recv = static_cast<char*>(a.recv);

  // Round k covers elements [k L B, (k+1) L B); one that runs past count is
  // done in a zeroed scratch buffer of L B elements.
  struct Round {
    uint64_t begin;  // first element
    uint64_t valid;  // elements of the round within count
    std::vector<char> scratch;
    char* base;  // the round's first element: in recv, or in scratch
  };
  std::vector<Round> rounds(P / L);
  for (uint64_t k = 0; k < rounds.size(); ++k) {
    Round& r = rounds[k];
    r.begin = k * L * B;
    r.valid = std::min(a.count, r.begin + L * B) - std::min(a.count, r.begin);
    if (r.valid == L * B) {
      r.base = recv + r.begin * es;
    } else {
      r.scratch.assign(L * B * es, 0);
      if (r.valid) std::memcpy(r.scratch.data(), send + r.begin * es, r.valid * es);
      r.base = r.scratch.data();
    }
  }
  auto mine = [&](Round& r) { return r.base + j * B * es; };

  const char* part = "";
  std::string where;
  try {
    // 1. Reduce-scatter inside the host (a host of one rank only copies).
    part = "part 1 of 3, reduce_scatter inside the host";
    where = local_ ? "its host's group, whose ranks 0.. are job ranks " + Ranks(local_->job_ranks())
                   : "";
    std::vector<Work> works;
    for (Round& r : rounds) {
      const bool in_scratch = !r.scratch.empty();
      const void* from = in_scratch ? r.base : send + r.begin * es;
      if (local_) {
        works.push_back(local_->reduce_scatter(from, mine(r), B, a.dtype, op));
      } else if (from != mine(r)) {
        std::memcpy(mine(r), from, B * es);
      }
    }
    WaitParts(works);
    works.clear();

    // 2. Allreduce of each owned chunk across hosts.
    part = "part 2 of 3, allreduce across hosts";
    for (size_t k = 0; k < rounds.size(); ++k) {
      where = "the group of chunk " + std::to_string(k * L + j) + ", whose ranks 0.. are job ranks " +
              Ranks(cross_[k].job_ranks());
      works.push_back(cross_[k].allreduce(mine(rounds[k]), mine(rounds[k]), B, a.dtype, op));
    }
    where = rounds.size() == 1 ? where : "the groups of chunks " + std::to_string(j) + ", " +
                                              std::to_string(j + L) + ", ...";
    WaitParts(works);
    works.clear();
    if (a.op == ReduceOp::Avg) {
      for (Round& r : rounds) {
        algos::FinishAverage(mine(r), B, plexus_dtype_t(a.dtype), flat_->size);
      }
    }

    // 3. Allgather inside the host, in place.
    part = "part 3 of 3, allgather inside the host";
    where = local_ ? "its host's group, whose ranks 0.. are job ranks " + Ranks(local_->job_ranks())
                   : "";
    if (local_) {
      for (Round& r : rounds) works.push_back(local_->allgather(mine(r), r.base, B, a.dtype));
      WaitParts(works);
    }
    for (Round& r : rounds) {
      if (!r.scratch.empty() && r.valid) {
        std::memcpy(recv + r.begin * es, r.scratch.data(), r.valid * es);
      }
    }
  } catch (const PeerFailed&) {
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
    Fail(a, e.status(), part, where, e.what(), verdict);
    return;
  } catch (const std::exception& e) {
    a.done->Complete(PLEXUS_ERR_INTERNAL, std::string("allreduce (two-level): ") + e.what());
    return;
  }
  a.done->Complete(PLEXUS_OK, "");
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
  // Every rank exchanges its entry, even with PLEXUS_HIERARCHY=off: the
  // settings must be compared (ranks that disagree would hang in the groups).
  std::vector<LayoutEntry> all(flat.size());
  try {
    flat.allgather(&mine, all.data(), sizeof mine, DType::UInt8).wait();
  } catch (const Error& e) {
    return Status(e.status(), "exchanging where each rank runs: " + e.message());
  }
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
            who + ": allreduce " + (*out)->description() + ", PLEXUS_HIERARCHY=" +
                HierarchySettingName(setting) +
                (setting == HierarchySetting::kOn
                     ? " (every size)"
                     : " (from " + std::to_string(kAutoMinBytes >> 10) + " KiB; smaller: flat)"));
  }
  return Status::Ok();
}

}  // namespace plexus::detail
