// A rank that fails an operation tells every peer why, so that they fail at
// once with its words instead of timing out: the failure report. The
// transports that have a control channel beside their data (mpi, ucx) send
// and receive it; this is its encoding and what it means to the receiver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "plexus/algos/transport.hpp"

namespace plexus::kit {

struct FailureReport {
  int32_t code = 0;        // the sender's failure: PLEXUS_ERR_*
  algos::OpSignature sig;  // the operation it failed in
  std::string reason;      // its message, at most kMaxFailureReason bytes
};

// The reason's bytes a report carries at the most (longer ones are cut).
constexpr size_t kMaxFailureReason = 1024;
// The largest report: what a receive must make room for.
size_t MaxFailureReportBytes();

// The bytes of a report of why, in the operation sig (the reason cut to
// kMaxFailureReason).
std::vector<uint8_t> EncodeFailureReport(const algos::OpSignature& sig, const algos::Status& why);

// The report in bytes (received from anyone: believed only as far as its
// length and magic go). False, *out untouched, when they are not one: too
// short, or another magic. A reason longer than the bytes hold is cut to
// them.
bool DecodeFailureReport(std::span<const uint8_t> bytes, FailureReport* out);

// What peer's report means to rank me, which is in current (null: in no
// collective): REMOTE "collective mismatch: ..." when the peer failed in a
// collective of the same sequence number that differs, else REMOTE
// "rank P failed: <reason>". (While ranks agree on a root, roots may differ:
// the agreement says so itself.)
algos::Status DescribeFailureReport(uint32_t me, const algos::OpSignature* current, uint32_t peer,
                                    const FailureReport& report);

// Whether a report may wait while this rank waits for other peers: a peer's
// TIMEOUT that is not a mismatch, when this rank waits for none of that
// peer's transfers, is not news (whoever froze is further down the line,
// and this rank's own timeout names it). meaning: DescribeFailureReport's.
bool ReportCanWait(const FailureReport& report, const algos::Status& meaning,
                   bool waits_for_sender);

}  // namespace plexus::kit
