// Bucket assignment: which gradients share one all-reduce.
//
// ComputeBucketAssignmentBySize follows PyTorch's
// compute_bucket_assignment_by_size (torch/csrc/distributed/c10d/reducer.cpp)
// rule for rule, so that a model is bucketed here as it is by PyTorch DDP:
//
//  - gradients are grouped by (dtype, device); each group fills its own bucket;
//  - each group walks a list of size limits: its first bucket closes once its
//    bytes reach limits[0], the next at limits[1], ...; the last limit repeats;
//  - a gradient is never split: a bucket closes after the gradient that made
//    it reach its limit, so buckets may exceed their limit;
//  - with no explicit order (`order` empty) the gradients are taken in index
//    order and the buckets are sorted by the smallest index they hold; with an
//    order (the order gradients became ready, for a rebuild) they are taken in
//    that order and the buckets are left in the order they closed, the
//    partly-filled ones last (in the order their group first appeared).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "plexus/types.hpp"

namespace plexus::reducer {

// What bucketing needs to know of one gradient.
struct GradientShape {
  uint64_t count = 0;  // elements
  DType dtype = DType::Float32;
  int device = -1;  // -1 = host memory; >= 0 = a device ordinal
};

struct BucketAssignment {
  std::vector<std::vector<size_t>> buckets;  // gradient indices, in bucket order
  std::vector<uint64_t> size_limits;         // the limit each bucket was filled against
};

// `limits` must not be empty (INVALID_ARGUMENT otherwise, as plexus::Error);
// `order`, when given, must list indices of `gradients` (each once).
BucketAssignment ComputeBucketAssignmentBySize(std::span<const GradientShape> gradients,
                                               std::span<const uint64_t> limits,
                                               std::span<const size_t> order = {});

}  // namespace plexus::reducer
