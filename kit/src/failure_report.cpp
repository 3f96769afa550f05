#include "plexus/kit/failure_report.hpp"

#include <algorithm>
#include <cstring>

#include "plexus/abi/collectives.hpp"
#include "plexus/algos/describe.hpp"

namespace plexus::kit {
namespace {

constexpr uint32_t kReportMagic = 0x52465850;  // "PXFR"

struct ReportHeader {
  uint32_t magic;
  uint32_t coll, dtype, op, root;
  uint32_t reason_bytes;
  int32_t code;
  uint32_t reserved;
  uint64_t seq, count;
};

}  // namespace

size_t MaxFailureReportBytes() {
  return sizeof(ReportHeader) + kMaxFailureReason;
}

std::vector<uint8_t> EncodeFailureReport(const algos::OpSignature& sig, const algos::Status& why) {
  const size_t text = std::min(why.message.size(), kMaxFailureReason);
  const ReportHeader h{kReportMagic,   sig.coll, sig.dtype, sig.op,  sig.root,
                       uint32_t(text), why.code, 0,         sig.seq, sig.count};
  std::vector<uint8_t> bytes(sizeof h + text);
  std::memcpy(bytes.data(), &h, sizeof h);
  std::memcpy(bytes.data() + sizeof h, why.message.data(), text);
  return bytes;
}

bool DecodeFailureReport(std::span<const uint8_t> bytes, FailureReport* out) {
  ReportHeader h{};
  if (bytes.size() < sizeof h) return false;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.magic != kReportMagic) return false;
  const size_t text =
      std::min<size_t>({h.reason_bytes, kMaxFailureReason, bytes.size() - sizeof h});
  out->code = h.code;
  out->sig = {h.seq, h.coll, h.dtype, h.op, h.count, h.root};
  out->reason.assign(reinterpret_cast<const char*>(bytes.data() + sizeof h), text);
  return true;
}

algos::Status DescribeFailureReport(uint32_t me, const algos::OpSignature* current, uint32_t peer,
                                    const FailureReport& report) {
  const algos::OpSignature& theirs = report.sig;
  if (current && abi::IsSequenced(theirs.coll) && theirs.seq == current->seq) {
    const bool agreeing =
        theirs.root == algos::kAgreeingRoot || current->root == algos::kAgreeingRoot;
    algos::OpSignature same_root = theirs;
    if (agreeing) same_root.root = current->root;
    if (!algos::SameOp(same_root, *current)) {
      return algos::CollectiveMismatch(me, *current, peer, theirs);
    }
  }
  return {PLEXUS_ERR_REMOTE, "rank " + std::to_string(peer) + " failed: " + report.reason};
}

bool ReportCanWait(const FailureReport& report, const algos::Status& meaning,
                   bool waits_for_sender) {
  return report.code == PLEXUS_ERR_TIMEOUT && !waits_for_sender &&
         meaning.message.rfind("collective mismatch", 0) != 0;
}

}  // namespace plexus::kit
