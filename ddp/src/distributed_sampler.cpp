#include "plexus/ddp/distributed_sampler.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>
#include <torch/serialize/archive.h>

#include "plexus/backend.h"
#include "plexus/error.hpp"

namespace plexus::ddp {

DistributedSampler::DistributedSampler(size_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options), epoch_(std::make_shared<uint64_t>(0)) {
  if (options_.num_replicas == 0) {
    throw Error(PLEXUS_ERR_INVALID_ARGUMENT, "plexus", "DistributedSampler: num_replicas is 0");
  }
  if (options_.rank >= options_.num_replicas) {
    throw Error(PLEXUS_ERR_INVALID_ARGUMENT, "plexus",
                "DistributedSampler: invalid rank " + std::to_string(options_.rank) +
                    ", rank should be in the interval [0, " +
                    std::to_string(options_.num_replicas - 1) + "]");
  }
}

void DistributedSampler::set_epoch(uint64_t epoch) {
  *epoch_ = epoch;
}
uint64_t DistributedSampler::epoch() const {
  return *epoch_;
}

size_t DistributedSampler::size() const {
  const size_t n = dataset_size_, r = options_.num_replicas;
  // Python: ceil((n - r) / r) with drop_last when r does not divide n, which is n / r.
  if (options_.drop_last) return n / r;
  return (n + r - 1) / r;
}

std::vector<size_t> DistributedSampler::indices() const {
  const size_t n = dataset_size_;
  std::vector<size_t> all(n);
  if (options_.shuffle && n > 0) {
    at::Generator gen = at::detail::createCPUGenerator(options_.seed + *epoch_);
    const at::Tensor perm = at::randperm(static_cast<int64_t>(n), gen, at::kLong);
    const int64_t* p = perm.data_ptr<int64_t>();
    for (size_t i = 0; i < n; ++i) all[i] = static_cast<size_t>(p[i]);
  } else {
    for (size_t i = 0; i < n; ++i) all[i] = i;
  }
  const size_t total = size() * options_.num_replicas;
  if (total > n) {  // pad by repeating from the start (n > 0 here)
    all.reserve(total);
    for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i % n]);
  } else {
    all.resize(total);
  }
  std::vector<size_t> mine;
  mine.reserve(size());
  for (size_t i = options_.rank; i < total; i += options_.num_replicas) mine.push_back(all[i]);
  return mine;
}

void DistributedSampler::reset(std::optional<size_t> new_size) {
  if (new_size) dataset_size_ = *new_size;
  current_ = indices();
  position_ = 0;
}

std::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  if (position_ >= current_.size() || batch_size == 0) return std::nullopt;
  const size_t end = std::min(current_.size(), position_ + batch_size);
  std::vector<size_t> batch(current_.begin() + position_, current_.begin() + end);
  position_ = end;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("epoch", at::tensor(static_cast<int64_t>(*epoch_)), /*is_buffer=*/true);
  archive.write("position", at::tensor(static_cast<int64_t>(position_)), /*is_buffer=*/true);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  at::Tensor epoch, position;
  archive.read("epoch", epoch, /*is_buffer=*/true);
  archive.read("position", position, /*is_buffer=*/true);
  *epoch_ = static_cast<uint64_t>(epoch.item<int64_t>());
  current_ = indices();
  position_ = std::min(current_.size(), static_cast<size_t>(position.item<int64_t>()));
}

}  // namespace plexus::ddp
