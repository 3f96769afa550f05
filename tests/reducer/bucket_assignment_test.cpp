// ComputeBucketAssignmentBySize against PyTorch's own results: each case's
// expectation was printed by torch.distributed._compute_bucket_assignment_by_size
// (torch 2.15.0) for the same tensors, limits and order.
#include <doctest/doctest.h>

#include "plexus/error.hpp"
#include "plexus/reducer/bucket_assignment.hpp"

using plexus::DType;
using plexus::reducer::ComputeBucketAssignmentBySize;
using plexus::reducer::GradientShape;

using Buckets = std::vector<std::vector<size_t>>;
using Limits = std::vector<uint64_t>;

namespace {
const GradientShape kF{50, DType::Float32, -1};    // 200 bytes
const GradientShape kD{25, DType::Float64, -1};    // 200 bytes
const GradientShape kTen{10, DType::Float32, -1};  // 40 bytes
}  // namespace

TEST_CASE("mixed float/double, limits [200, 400]") {
  const GradientShape t[] = {kF, kD, kF, kD, kF, kD};
  const uint64_t limits[] = {200, 400};
  auto a = ComputeBucketAssignmentBySize(t, limits);
  CHECK(a.buckets == Buckets{{0}, {1}, {2, 4}, {3, 5}});
  CHECK(a.size_limits == Limits{200, 200, 400, 400});
}

TEST_CASE("mixed float/double, limit [400]") {
  const GradientShape t[] = {kF, kD, kF, kD, kF, kD};
  const uint64_t limits[] = {400};
  auto a = ComputeBucketAssignmentBySize(t, limits);
  CHECK(a.buckets == Buckets{{0, 2}, {1, 3}, {4}, {5}});
  CHECK(a.size_limits == Limits{400, 400, 400, 400});
}

TEST_CASE("one dtype, limits [40, 80]: the first bucket is smaller") {
  const GradientShape t[] = {kTen, kTen, kTen, kTen, kTen, kTen};
  const uint64_t limits[] = {40, 80};
  auto a = ComputeBucketAssignmentBySize(t, limits);
  CHECK(a.buckets == Buckets{{0}, {1, 2}, {3, 4}, {5}});
  CHECK(a.size_limits == Limits{40, 80, 80, 80});
}

TEST_CASE("with a ready order the buckets follow it and are not sorted") {
  const GradientShape t[] = {kTen, kTen, kTen, kTen, kTen, kTen};
  const uint64_t limits[] = {80};
  const size_t order[] = {5, 3, 1, 0, 2, 4};
  auto a = ComputeBucketAssignmentBySize(t, limits, order);
  CHECK(a.buckets == Buckets{{5, 3}, {1, 0}, {2, 4}});
  const GradientShape mixed[] = {kF, kD, kF, kD, kF, kD};
  const uint64_t limits200[] = {200};
  auto b = ComputeBucketAssignmentBySize(mixed, limits200, order);
  CHECK(b.buckets == Buckets{{5}, {3}, {1}, {0}, {2}, {4}});
}

TEST_CASE("a gradient is never split; an empty limit list is refused") {
  const GradientShape t[] = {{1000, DType::Float32, -1}, kTen};
  const uint64_t limits[] = {16};
  auto a = ComputeBucketAssignmentBySize(t, limits);
  CHECK(a.buckets == Buckets{{0}, {1}});
  CHECK_THROWS_AS(ComputeBucketAssignmentBySize(t, {}), plexus::Error);
  const size_t bad_order[] = {0, 7};
  CHECK_THROWS_AS(ComputeBucketAssignmentBySize(t, limits, bad_order), plexus::Error);
}

TEST_CASE("devices are grouped apart like dtypes") {
  const GradientShape t[] = {
      {10, DType::Float32, 0}, {10, DType::Float32, 1}, {10, DType::Float32, 0}};
  const uint64_t limits[] = {1000};
  auto a = ComputeBucketAssignmentBySize(t, limits);
  CHECK(a.buckets == Buckets{{0, 2}, {1}});
}
