#include "plexus/reducer/bucket_assignment.hpp"

#include <algorithm>
#include <string>

#include "plexus/error.hpp"
#include "size_math.hpp"

namespace plexus::reducer {

namespace {

struct OpenBucket {
  DType dtype;
  int device;
  std::vector<size_t> indices;
  uint64_t bytes = 0;
  size_t limit_index = 0;  // into limits; stays at the last one
};

}  // namespace

BucketAssignment ComputeBucketAssignmentBySize(std::span<const GradientShape> gradients,
                                               std::span<const uint64_t> limits,
                                               std::span<const size_t> order) {
  if (limits.empty()) {
    throw Error(PLEXUS_ERR_INVALID_ARGUMENT, "plexus",
                "bucket assignment: the list of bucket size limits is empty");
  }
  if (!order.empty() && order.size() != gradients.size()) {
    throw Error(PLEXUS_ERR_INVALID_ARGUMENT, "plexus",
                "bucket assignment: the order lists " + std::to_string(order.size()) +
                    " gradients, there are " + std::to_string(gradients.size()));
  }
  BucketAssignment out;
  // One open bucket per (dtype, device), in the order the groups first appear.
  std::vector<OpenBucket> open;
  for (size_t i = 0; i < gradients.size(); ++i) {
    const size_t index = order.empty() ? i : order[i];
    if (index >= gradients.size()) {
      throw Error(PLEXUS_ERR_INVALID_ARGUMENT, "plexus",
                  "bucket assignment: order names gradient " + std::to_string(index) + " of " +
                      std::to_string(gradients.size()));
    }
    const GradientShape& g = gradients[index];
    auto it = std::find_if(open.begin(), open.end(), [&](const OpenBucket& b) {
      return b.dtype == g.dtype && b.device == g.device;
    });
    if (it == open.end()) it = open.insert(open.end(), OpenBucket{g.dtype, g.device, {}, 0, 0});
    it->indices.push_back(index);
    it->bytes = SaturatingAdd(it->bytes, SaturatingMul(g.count, ElementSize(g.dtype)));
    const uint64_t limit = limits[it->limit_index];
    if (it->bytes >= limit) {
      out.buckets.push_back(std::move(it->indices));
      out.size_limits.push_back(limit);
      it->indices.clear();
      it->bytes = 0;
      if (it->limit_index + 1 < limits.size()) ++it->limit_index;
    }
  }
  for (OpenBucket& b : open) {
    if (b.indices.empty()) continue;
    out.buckets.push_back(std::move(b.indices));
    out.size_limits.push_back(limits[b.limit_index]);
  }
  if (order.empty()) {
    // Each bucket's indices are increasing, so its smallest is its first.
    std::vector<size_t> perm(out.buckets.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
    std::sort(perm.begin(), perm.end(),
              [&](size_t a, size_t b) { return out.buckets[a].front() < out.buckets[b].front(); });
    BucketAssignment sorted;
    for (size_t p : perm) {
      sorted.buckets.push_back(std::move(out.buckets[p]));
      sorted.size_limits.push_back(out.size_limits[p]);
    }
    return sorted;
  }
  return out;
}

}  // namespace plexus::reducer
