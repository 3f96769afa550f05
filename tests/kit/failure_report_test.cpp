// kit::FailureReport: what the mpi and ucx transports send a peer when they
// fail, and what a received one means. The bytes come off the network from
// anyone, so malformed ones must be refused, never read past.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plexus/kit/failure_report.hpp"

namespace {

using plexus::algos::OpSignature;
using plexus::algos::Status;
using plexus::kit::DecodeFailureReport;
using plexus::kit::DescribeFailureReport;
using plexus::kit::EncodeFailureReport;
using plexus::kit::FailureReport;

const OpSignature kAllreduce{7, PLEXUS_COLL_ALLREDUCE, PLEXUS_DTYPE_INT32, PLEXUS_OP_SUM, 512, 0};

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a report survives its encoding") {
  const auto bytes = EncodeFailureReport(kAllreduce, Status{PLEXUS_ERR_TIMEOUT, "rank 3 froze"});
  FailureReport r;
  REQUIRE(DecodeFailureReport(bytes, &r));
  CHECK(r.code == PLEXUS_ERR_TIMEOUT);
  CHECK(r.reason == "rank 3 froze");
  CHECK(r.sig.seq == 7);
  CHECK(r.sig.count == 512);
  CHECK(r.sig.dtype == PLEXUS_DTYPE_INT32);
}

TEST_CASE("a long reason is cut, and fits the receive") {
  const auto bytes =
      EncodeFailureReport(kAllreduce, Status{PLEXUS_ERR_REMOTE, std::string(5000, 'x')});
  CHECK(bytes.size() == plexus::kit::MaxFailureReportBytes());
  FailureReport r;
  REQUIRE(DecodeFailureReport(bytes, &r));
  CHECK(r.reason.size() == plexus::kit::kMaxFailureReason);
}

TEST_CASE("bytes that are not a report are refused, and nothing is read past them") {
  auto bytes = EncodeFailureReport(kAllreduce, Status{PLEXUS_ERR_REMOTE, "why"});
  FailureReport r;
  r.reason = "untouched";
  SUBCASE("too short for the header") {
    CHECK_FALSE(DecodeFailureReport(std::span<const uint8_t>(bytes).first(10), &r));
    CHECK_FALSE(DecodeFailureReport({}, &r));
    CHECK(r.reason == "untouched");
  }
  SUBCASE("another magic") {
    bytes[0] ^= 0xFF;
    CHECK_FALSE(DecodeFailureReport(bytes, &r));
    CHECK(r.reason == "untouched");
  }
  SUBCASE("a reason longer than the bytes hold is cut to them") {
    bytes.resize(bytes.size() - 2);  // says 3 bytes of reason, holds 1
    REQUIRE(DecodeFailureReport(bytes, &r));
    CHECK(r.reason == "w");
  }
}

TEST_CASE("a peer that failed in another operation of the same number is a mismatch") {
  OpSignature theirs = kAllreduce;
  theirs.count = 1024;
  FailureReport r{PLEXUS_ERR_REMOTE, theirs, "whatever it says"};
  const Status st = DescribeFailureReport(0, &kAllreduce, 2, r);
  CHECK(st.code == PLEXUS_ERR_REMOTE);
  CHECK(st.message ==
        "collective mismatch: rank 2 posted allreduce(seq 7, count 1024, int32, sum) where rank 0 "
        "(this rank) posted allreduce(seq 7, count 512, int32, sum)");
  CHECK(plexus::kit::ReportCanWait({PLEXUS_ERR_TIMEOUT, theirs, ""}, st, false) == false);
}

TEST_CASE("a peer that failed in the same operation, or in no collective, says why") {
  FailureReport r{PLEXUS_ERR_TIMEOUT, kAllreduce, "rank 1 made no progress"};
  const Status same = DescribeFailureReport(0, &kAllreduce, 2, r);
  CHECK(same.message == "rank 2 failed: rank 1 made no progress");
  CHECK(DescribeFailureReport(0, nullptr, 2, r).message == same.message);
  // Its timeout is about someone else: it waits while this rank waits for a third.
  CHECK(plexus::kit::ReportCanWait(r, same, false));
  CHECK_FALSE(plexus::kit::ReportCanWait(r, same, true));
  r.code = PLEXUS_ERR_REMOTE;
  CHECK_FALSE(plexus::kit::ReportCanWait(r, same, false));
}

TEST_CASE("while ranks agree on a root, their roots may differ") {
  OpSignature mine{3, PLEXUS_COLL_BROADCAST, PLEXUS_DTYPE_INT8, 0, 8, plexus::algos::kAgreeingRoot};
  OpSignature theirs = mine;
  theirs.root = 1;
  const FailureReport r{PLEXUS_ERR_REMOTE, theirs, "ranks name different roots"};
  CHECK(Has(DescribeFailureReport(0, &mine, 1, r).message, "rank 1 failed: ranks name"));
  theirs.count = 9;  // but not their counts
  const FailureReport r2{PLEXUS_ERR_REMOTE, theirs, ""};
  CHECK(Has(DescribeFailureReport(0, &mine, 1, r2).message, "collective mismatch"));
}
