// Bad input the host must refuse with a clear error before any backend sees
// it (the hardening issue's probes): settings outside their range, and
// counts whose byte size cannot exist. Each case fails without its fix in
// core/src/communicator.cpp. The backend is a test double that accepts
// whatever it is given (tests/plugins/faulty_backend.c), so only the host's
// checks stand between a bad call and the backend.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "plexus/plexus.hpp"

namespace {

plexus::Communicator Open() {
  plexus::CommunicatorOptions o;
  o.backend = std::string(PLEXUS_TEST_PLUGIN_DIR) + "/libplexus-f-wait0inprogress.so";
  return plexus::Communicator::from_env(o);
}

// The status and message of what fn throws (0, "" when nothing).
template <typename Fn>
std::pair<int32_t, std::string> Thrown(Fn&& fn) {
  try {
    fn();
  } catch (const plexus::Error& e) {
    return {e.status(), e.what()};
  }
  return {0, ""};
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Sets PLEXUS_TIMEOUT for the scope.
struct TimeoutEnv {
  explicit TimeoutEnv(const char* value) { setenv("PLEXUS_TIMEOUT", value, 1); }
  ~TimeoutEnv() { setenv("PLEXUS_TIMEOUT", "30", 1); }
};

}  // namespace

TEST_CASE("PLEXUS_TIMEOUT outside 1 ms .. 10^7 s is refused, naming the range") {
  for (const char* value : {"1e-9", "0.0001", "1e15", "-5", "0", "inf"}) {
    CAPTURE(value);
    TimeoutEnv env(value);
    auto [code, text] = Thrown([] { Open(); });
    CHECK(code == PLEXUS_ERR_INVALID_ARGUMENT);
    CHECK(Has(text, std::string("PLEXUS_TIMEOUT='") + value + "' is out of range"));
    CHECK(Has(text, "(0.001-10000000 s)"));  // the settings table's range
  }
  for (const char* value : {"abc", "nan", "30s", ""}) {
    CAPTURE(value);
    TimeoutEnv env(value);
    auto [code, text] = Thrown([] { Open(); });
    if (*value == '\0') {  // empty means unset: the default
      CHECK(code == 0);
      continue;
    }
    CHECK(code == PLEXUS_ERR_INVALID_ARGUMENT);
    CHECK(Has(text, "is not a number"));
    // The host said it, before any backend: no name in brackets
    // ("plexus[plexus]" read as if a backend called plexus had failed).
    CHECK(text.rfind("plexus INVALID_ARGUMENT: PLEXUS_TIMEOUT=", 0) == 0);
  }
  TimeoutEnv ok("0.5");
  CHECK(Thrown([] { Open(); }).first == 0);
}

TEST_CASE("a count whose byte size does not fit in memory never reaches the backend") {
  auto comm = Open();
  float x = 0.0f;
  const uint64_t huge = uint64_t(1) << 62;  // x 4 bytes = 2^64: wraps to 0
  auto [code, text] =
      Thrown([&] { comm.allreduce(&x, &x, huge, plexus::DType::Float32, plexus::ReduceOp::Sum); });
  CHECK(code == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(Has(text, "allreduce: count 4611686018427387904 x 4 bytes (float32)"));
  CHECK(Has(text, "more memory than a process can address"));
  // 2^63 int8 elements: no wrap, but no object is that large either.
  std::tie(code, text) =
      Thrown([&] { comm.broadcast(&x, uint64_t(1) << 63, plexus::DType::Int8, 0); });
  CHECK(code == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(Has(text, "broadcast: count 9223372036854775808 x 1 bytes (int8)"));
  for (auto* coll : {"allgather", "alltoall", "reduce_scatter", "send", "recv"}) {
    CAPTURE(coll);
    std::tie(code, text) = Thrown([&] {
      const std::string c = coll;
      const uint64_t n = uint64_t(1) << 61;  // x 4 bytes = 2^63
      if (c == "allgather") comm.allgather(&x, &x, n, plexus::DType::Float32);
      if (c == "alltoall") comm.alltoall(&x, &x, n, plexus::DType::Float32);
      if (c == "reduce_scatter") {
        comm.reduce_scatter(&x, &x, n, plexus::DType::Float32, plexus::ReduceOp::Sum);
      }
      if (c == "send") comm.send(&x, n, plexus::DType::Float32, 0);
      if (c == "recv") comm.recv(&x, n, plexus::DType::Float32, 0);
    });
    CHECK(code == PLEXUS_ERR_INVALID_ARGUMENT);
    CHECK(Has(text, std::string(coll) + ": count 2305843009213693952 x 4 bytes"));
  }
  // A sane call still works afterwards.
  plexus::Work w = comm.allreduce(&x, &x, 1, plexus::DType::Float32, plexus::ReduceOp::Sum);
  w.wait();
  CHECK(x == 2.0f);
}
