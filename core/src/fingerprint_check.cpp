#include "fingerprint_check.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "plexus/algos/dtype.hpp"
#include "plexus/log.hpp"
#include "plexus/settings/environment.hpp"

namespace plexus::detail {

std::string DescribeFingerprint(const Fingerprint& f) {
  std::string s = algos::CollectiveName(f.coll);
  s += "(#" + std::to_string(f.seq);
  if (f.coll != PLEXUS_COLL_BARRIER) s += ", count " + std::to_string(f.count);
  if (f.dtype) s += std::string(", ") + algos::DtypeName(f.dtype);
  if (f.op) s += std::string(", ") + algos::ReduceOpName(f.op);
  if (f.coll == PLEXUS_COLL_BROADCAST || f.coll == PLEXUS_COLL_REDUCE) {
    s += ", root " + std::to_string(f.root);
  }
  return s + ")";
}

bool SameFingerprint(const Fingerprint& a, const Fingerprint& b) {
  return a.seq == b.seq && a.count == b.count && a.coll == b.coll && a.dtype == b.dtype &&
         a.op == b.op && a.root == b.root;
}

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

bool DetailDebugEnabled() {
  static const bool enabled = [] {
    const char* v = plexus::settings::Raw(plexus::settings::Id::kDebug);
    return v && std::string(v) == "detail";
  }();
  return enabled;
}

PostingGuard::PostingGuard(CommState& s) {
  if (!s.debug_detail) return;
  if (s.posting.exchange(true)) {
    status_ = Status(PLEXUS_ERR_INVALID_USAGE,
                     "two threads posted operations on communicator " + s.name +
                         " at the same time (PLEXUS_DEBUG=detail): each rank must post its "
                         "collectives in one order, so post from one thread, or give each "
                         "thread its own communicator");
    return;
  }
  s_ = &s;
}

PostingGuard::~PostingGuard() {
  if (s_) s_->posting.store(false);
}

Status CheckFingerprints(CommState& s, Fingerprint mine) {
  mine.seq = s.fingerprint_seq++;
  mine.rank = s.rank;
  std::vector<Fingerprint> all(s.size);
  const plexus_capabilities& caps = s.backend->capabilities();
  if (!(caps.collectives >> PLEXUS_COLL_ALLGATHER & 1u) ||
      !(caps.dtypes >> PLEXUS_DTYPE_UINT8 & 1u)) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      LogLine(PLEXUS_LOG_WARN, "plexus",
              "PLEXUS_DEBUG=detail: backend '" + s.backend->name() +
                  "' has no uint8 allgather; collectives are not compared across ranks");
    });
    return Status::Ok();
  }
  plexus_request* req = nullptr;
  Status st = s.backend->Post(
      s.comm, {PLEXUS_COLL_ALLGATHER, &mine, all.data(), sizeof mine, PLEXUS_DTYPE_UINT8}, &req);
  if (!st.ok())
    return st.WithContext("PLEXUS_DEBUG=detail: comparing " + DescribeFingerprint(mine));
  const int32_t rc = s.backend->Wait(req, s.timeout.count());
  if (rc != PLEXUS_OK) {
    st = s.backend->Describe(s.comm, rc,
                             "PLEXUS_DEBUG=detail: comparing " + DescribeFingerprint(mine));
    if (rc == PLEXUS_ERR_TIMEOUT) {
      s.AdoptOrphan(req);  // still running: freed once it completes
    } else {
      s.backend->FreeRequest(req);
    }
    return st;
  }
  s.backend->FreeRequest(req);

  // Everybody saw the same table, so every rank reports the same split:
  // the ranks that agree with rank 0, and each group that does not.
  std::vector<uint32_t> differ;
  for (uint32_t r = 0; r < s.size; ++r) {
    if (!SameFingerprint(all[r], all[0])) differ.push_back(r);
  }
  if (differ.empty()) return Status::Ok();
  std::vector<uint32_t> agree;
  for (uint32_t r = 0; r < s.size; ++r) {
    if (SameFingerprint(all[r], all[0])) agree.push_back(r);
  }
  std::string text = "collectives differ across ranks on " + s.name +
                     " (PLEXUS_DEBUG=detail): " + RankList(agree) + " posted " +
                     DescribeFingerprint(all[0]);
  std::vector<bool> told(s.size, false);
  for (uint32_t r : differ) {
    if (told[r]) continue;
    std::vector<uint32_t> group;
    for (uint32_t q : differ) {
      if (!told[q] && SameFingerprint(all[q], all[r])) {
        group.push_back(q);
        told[q] = true;
      }
    }
    text += "; " + RankList(group) + " posted " + DescribeFingerprint(all[r]);
  }
  text += "; this rank is " + std::to_string(s.rank) + ". Nothing was posted.";
  return Status(PLEXUS_ERR_INVALID_USAGE, text);
}

}  // namespace plexus::detail
