#include "stall_report.hpp"

#include "roll_call.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <sstream>
#include <vector>

#include "comm_state.hpp"
#include "fingerprint_check.hpp"
#include "plexus/algos/dtype.hpp"
#include "store/store_protocol.hpp"

namespace plexus::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long a rank that timed out waits for the others' marks. Healthy ranks
// post a collective within moments of each other, so their timeouts expire
// close together; a tenth of the timeout, between 0.2 and 1 s, leaves room
// for ranks that posted a little later, and keeps a frozen rank's detection
// (the timeout, then this) within the timeout + 1 s.
milliseconds Grace(milliseconds timeout) {
  return std::clamp(timeout / 10, milliseconds(200), milliseconds(1000));
}

// After another kind of failure (usually a peer's, relayed), how long to look
// for marks of ranks that posted something else: they time out first.
constexpr milliseconds kRelayedGrace{300};

// Store calls made after a failure must not add a timeout of their own.
constexpr milliseconds kStoreCallLimit{1000};

// Job-wide key of rank's stall line: "<communicator> <seq> <collective>".
// Marks and lines are the rank's own keys ("plexus/rank/R/..."), which the
// store accepts from that rank's connection only: nobody else can say that a
// rank reached a collective, or whom it waited for.
std::string LineKey(uint32_t rank) {
  return store::RankKey(rank, "stalled");
}

// Key of rank's mark of collective #seq (from 0) on comm: its Fingerprint.
// rank is the JOB rank (the store takes a key only from its own rank), also
// for a group's communicator.
std::string MarkKey(const std::string& comm, uint64_t seq, uint32_t rank) {
  return store::RankKey(rank, comm + "/stalled/" + std::to_string(seq));
}

// Which nodes `ranks` run on (" (node 1)"), in a job across hosts; "" on
// one host. The communicator's ranks are the job's (from_env), but say
// nothing if the sizes ever differ.
std::string Nodes(CommState& comm, const std::vector<uint32_t>& ranks) {
  if (comm.size != comm.job->launch.size || comm.job->launch.size == comm.job->launch.local_size) {
    return "";
  }
  return RankNodes(*comm.job->store, ranks, kStoreCallLimit);
}

// Ranks as comm numbers them and, in a group (whose rank 1 may be the
// job's rank 5), as the job does, then their nodes: "rank 0 (job rank 3,
// node 1)".
std::string Named(CommState& comm, const std::vector<uint32_t>& ranks) {
  if (comm.size == comm.job->launch.size) return RankList(ranks) + Nodes(comm, ranks);
  std::vector<uint32_t> job;
  for (uint32_t r : ranks) job.push_back(comm.job_ranks[r]);
  std::string nodes = comm.job->launch.size == comm.job->launch.local_size
                          ? ""
                          : RankNodes(*comm.job->store, job, kStoreCallLimit);
  // RankNodes gives " (node 1)" or " (nodes 0, 1)": folded into one bracket.
  if (nodes.size() > 3) nodes = ", " + nodes.substr(2, nodes.size() - 3);
  return RankList(ranks) + " (job " + RankList(job) + nodes + ")";
}

bool CanTell(const CommState& comm, const PostedOp& op) {
  return comm.size > 1 && op.seq != 0 && comm.job && comm.job->has_rendezvous && comm.job->store;
}

Fingerprint FingerprintOf(const CommState& comm, const PostedOp& op) {
  Fingerprint f;
  f.seq = op.seq - 1;  // counted from 0 in messages, as the backends and detail mode do
  f.count = op.count;
  f.coll = op.coll;
  f.dtype = op.dtype;
  f.op = op.op;
  f.root = op.root;
  f.rank = comm.rank;
  return f;
}

bool Mark(CommState& comm, const Fingerprint& f) {
  const auto* p = reinterpret_cast<const uint8_t*>(&f);
  return comm.job->store
      ->Set(MarkKey(comm.name, f.seq, comm.job_ranks[comm.rank]), Bytes(p, p + sizeof f),
            kStoreCallLimit)
      .ok();
}

// Rank r's mark, waiting up to `wait`: 1 found, 0 absent, -1 the store failed.
int ReadMark(RendezvousStore& store, const std::string& comm, uint64_t seq, uint32_t r,
             milliseconds wait, Fingerprint* out) {
  Bytes mark;
  const Status st = store.Get(MarkKey(comm, seq, r), &mark, wait);
  if (st.code() == PLEXUS_ERR_TIMEOUT) return 0;
  if (!st.ok()) return -1;
  *out = Fingerprint{};
  if (mark.size() == sizeof *out) std::memcpy(out, mark.data(), sizeof *out);
  out->rank = r;
  return 1;
}

// "rank 0 posted X, ranks 1, 2 posted Y": the marks grouped by what they say.
std::string Groups(const std::vector<Fingerprint>& marks, const RankLister& list_ranks = {}) {
  std::string text;
  std::vector<bool> told(marks.size(), false);
  for (size_t i = 0; i < marks.size(); ++i) {
    if (told[i]) continue;
    std::vector<uint32_t> group;
    for (size_t j = i; j < marks.size(); ++j) {
      if (!told[j] && SameFingerprint(marks[j], marks[i])) {
        group.push_back(marks[j].rank);
        told[j] = true;
      }
    }
    text += (text.empty() ? "" : ", ") + (list_ranks ? list_ranks(group) : RankList(group)) +
            " posted " + DescribeFingerprint(marks[i]);
  }
  return text;
}

// The marks of the other ranks within `wait` (one deadline for all).
struct Marks {
  std::vector<uint32_t> same, missing;
  std::vector<uint32_t> behind;  // failed in the collective before this one
  std::vector<Fingerprint> differing;
  bool ok = true;
};
Marks Collect(CommState& comm, const Fingerprint& mine, milliseconds wait) {
  Marks m;
  const auto deadline = Clock::now() + wait;
  for (uint32_t r = 0; r < comm.size; ++r) {
    if (r == comm.rank) continue;
    const auto left = std::max(milliseconds(0),
                               std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
    Fingerprint theirs;
    // Keys are the job rank's (a group's rank 1 may be the job's rank 5).
    const uint32_t job_rank = comm.job_ranks[r];
    const int found = ReadMark(*comm.job->store, comm.name, mine.seq, job_rank, left, &theirs);
    theirs.rank = r;
    if (found < 0) {
      m.ok = false;
      return m;
    }
    // A rank that already marked the next collective got past this one; one
    // that failed in the collective before is stuck there, waiting like this
    // one (in a ring, ranks may be a collective apart when a peer vanishes).
    if (found == 0 && ReadMark(*comm.job->store, comm.name, mine.seq + 1, job_rank, milliseconds(0),
                               &theirs) == 1) {
      m.same.push_back(r);
    } else if (found == 0 && mine.seq > 0 &&
               ReadMark(*comm.job->store, comm.name, mine.seq - 1, job_rank, milliseconds(0),
                        &theirs) == 1) {
      m.behind.push_back(r);
    } else if (found == 0) {
      m.missing.push_back(r);
    } else if (SameFingerprint(theirs, mine)) {
      m.same.push_back(r);
    } else {
      m.differing.push_back(theirs);
    }
  }
  return m;
}

// This rank's stall line, for plexus-run: which collective it failed in.
void WriteLine(CommState& comm, const Fingerprint& mine, const PostedOp& op) {
  const std::string line =
      comm.name + " " + std::to_string(mine.seq) + " " + algos::CollectiveName(op.coll);
  (void)comm.job->store->Set(LineKey(comm.job_ranks[comm.rank]), Bytes(line.begin(), line.end()),
                             kStoreCallLimit);
}

std::string Differ(const CommState& comm, const Fingerprint& mine,
                   const std::vector<Fingerprint>& differing) {
  return "the ranks posted different collectives on " + comm.name + ": this rank (" +
         std::to_string(comm.rank) + ") posted " + DescribeFingerprint(mine) + ", " +
         Groups(differing);
}

}  // namespace

std::string MarkReached(CommState& comm, const PostedOp& op, const std::string& error,
                        milliseconds window) try {
  if (!CanTell(comm, op)) return "";
  const Fingerprint mine = FingerprintOf(comm, op);
  if (!Mark(comm, mine)) return "";
  const Marks m = Collect(comm, mine, window.count() > 0 ? window : kRelayedGrace);
  if (!m.ok) return "";
  if (!m.differing.empty()) {
    WriteLine(comm, mine, op);  // so that plexus-run says it too
    return Differ(comm, mine, m.differing);
  }
  // A failure passed on from peer to peer names the peer that passed it; the
  // ranks that never reached the collective are the likelier cause (a link
  // down, a frozen rank). Named unless the error names them already.
  std::vector<uint32_t> unnamed;
  for (uint32_t r : m.missing) {
    const std::string name = "rank " + std::to_string(r);
    const size_t at = error.find(name);
    const bool named = at != std::string::npos &&
                       (at + name.size() == error.size() || !std::isdigit(error[at + name.size()]));
    if (!named) unnamed.push_back(r);
  }
  if (unnamed.empty()) return "";
  return Named(comm, m.missing) + (m.missing.size() == 1 ? " has" : " have") + " not reached " +
         DescribeFingerprint(mine) + " on " + comm.name +
         " (unreachable, frozen or dead?): the failure above may only have been passed on";
} catch (const std::exception&) {
  return "";
}

void MarkStalled(CommState& comm, const PostedOp& op) try {
  if (!CanTell(comm, op)) return;
  const Fingerprint mine = FingerprintOf(comm, op);
  if (Mark(comm, mine)) WriteLine(comm, mine, op);
} catch (const std::exception&) {
}

std::string ReportStall(CommState& comm, const PostedOp& op) try {
  if (!CanTell(comm, op)) return "";
  const Fingerprint mine = FingerprintOf(comm, op);
  if (!Mark(comm, mine)) return "";
  // The line first: plexus-run may stop this rank during the grace below,
  // and works out whom it waited for from the marks.
  WriteLine(comm, mine, op);

  const Marks m = Collect(comm, mine, Grace(comm.timeout));
  if (!m.ok) return "";
  const std::string posted = DescribeFingerprint(mine);
  std::vector<std::string> parts;
  if (!m.differing.empty()) parts.push_back(Differ(comm, mine, m.differing));
  // When ranks disagree that is the cause; a rank without a mark may then
  // simply have completed its version (a reduce's leaf sends and is done).
  if (!m.missing.empty() && m.differing.empty()) {
    parts.push_back(Named(comm, m.missing) + (m.missing.size() == 1 ? " has" : " have") +
                    " not reached " + posted + " on " + comm.name +
                    " or stopped making progress (frozen, dead, or busy outside Plexus)");
  }
  if (!m.behind.empty() && m.differing.empty()) {
    parts.push_back(Named(comm, m.behind) + (m.behind.size() == 1 ? " has" : " have") +
                    " failed in the collective before it, waiting too");
  }
  if (parts.empty()) {
    return "every rank reached " + posted + " on " + comm.name +
           " and timed out in it (a slow or broken network, or the backend)";
  }
  if (!m.same.empty()) parts.push_back(RankList(m.same) + " reached it too");
  std::string text;
  for (const std::string& p : parts) text += (text.empty() ? "" : "; ") + p;
  return text;
} catch (const std::exception&) {
  return "";  // a diagnosis must never replace the error it explains
}

namespace {

struct Line {
  std::string comm, coll;
  uint64_t seq = 0;
};

std::map<uint32_t, Line> ReadLines(RendezvousStore& store, uint32_t world_size) {
  std::map<uint32_t, Line> lines;
  for (uint32_t r = 0; r < world_size; ++r) {
    Bytes value;
    if (!store.Get(LineKey(r), &value, milliseconds(0)).ok()) continue;
    std::istringstream in(std::string(value.begin(), value.end()));
    Line l;
    if (in >> l.comm >> l.seq >> l.coll) lines[r] = l;
  }
  return lines;
}

}  // namespace

std::vector<std::string> StallLines(RendezvousStore& store, uint32_t world_size) try {
  std::vector<std::string> out(world_size);
  for (const auto& [rank, l] : ReadLines(store, world_size)) {
    std::string text = l.comm + " " + std::to_string(l.seq) + " " + l.coll;
    for (uint32_t r = 0; r < world_size; ++r) {
      Fingerprint f;
      // Not waited for: ranks that reached it, got past it (marked the next
      // one) or failed in the one before (stuck there, waiting too).
      if (r == rank || ReadMark(store, l.comm, l.seq, r, milliseconds(0), &f) != 0 ||
          ReadMark(store, l.comm, l.seq + 1, r, milliseconds(0), &f) != 0 ||
          (l.seq > 0 && ReadMark(store, l.comm, l.seq - 1, r, milliseconds(0), &f) != 0)) {
        continue;
      }
      text += " " + std::to_string(r);
    }
    out[rank] = text;
  }
  return out;
} catch (const std::exception&) {
  return {};
}

std::string StallMismatch(RendezvousStore& store, uint32_t world_size,
                          const RankLister& list_ranks) try {
  for (const auto& [rank, l] : ReadLines(store, world_size)) {
    std::vector<Fingerprint> marks;
    for (uint32_t r = 0; r < world_size; ++r) {
      Fingerprint f;
      if (ReadMark(store, l.comm, l.seq, r, milliseconds(0), &f) == 1) marks.push_back(f);
    }
    for (const Fingerprint& f : marks) {
      if (!SameFingerprint(f, marks.front())) {
        return "the ranks posted different collectives on " + l.comm + ": " +
               Groups(marks, list_ranks);
      }
    }
  }
  return "";
} catch (const std::exception&) {
  return "";
}

}  // namespace plexus::detail
