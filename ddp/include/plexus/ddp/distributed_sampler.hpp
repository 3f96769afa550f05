// plexus::ddp::DistributedSampler — each rank's share of a data set, the same
// indices as Python's torch.utils.data.distributed.DistributedSampler for
// every (size, num_replicas, rank, shuffle, seed, epoch, drop_last):
//
//   - shuffle: randperm(size) from a CPU generator seeded seed + epoch;
//     otherwise 0, 1, ..., size - 1;
//   - without drop_last: padded to a multiple of num_replicas by repeating
//     from the start; with it: cut down to a multiple of num_replicas;
//   - then every num_replicas-th index, starting at rank.
//
// (LibTorch's own torch::data::samplers::DistributedRandomSampler shuffles
// differently, so a job moved from Python would see other batches.)
//
// It is a torch::data::samplers::Sampler<>, for make_data_loader:
//
//   plexus::ddp::DistributedSampler sampler(dataset.size().value(),
//       {.num_replicas = comm.size(), .rank = comm.rank(), .seed = 42});
//   auto loader = torch::data::make_data_loader(dataset, sampler, options);
//   for (epoch ...) { sampler.set_epoch(epoch); for (auto& batch : *loader) ... }
//
// make_data_loader takes its sampler by value; copies of a sampler share
// their epoch, so set_epoch on the original reaches the loader's copy (each
// copy keeps its own position). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <torch/data/samplers/base.h>

namespace plexus::ddp {

struct DistributedSamplerOptions {
  size_t num_replicas = 1;  // usually comm.size()
  size_t rank = 0;          // usually comm.rank(); < num_replicas
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler : public torch::data::samplers::Sampler<> {
 public:
  // Throws plexus::Error (INVALID_ARGUMENT) for num_replicas 0 or rank >= num_replicas.
  DistributedSampler(size_t dataset_size, DistributedSamplerOptions options);

  // Selects the permutation of the next epoch (for every copy of this sampler).
  void set_epoch(uint64_t epoch);
  uint64_t epoch() const;

  // This rank's indices for the current epoch, in order.
  std::vector<size_t> indices() const;
  // How many indices each rank gets per epoch (Python's num_samples / len(sampler)).
  size_t size() const;
  const DistributedSamplerOptions& options() const { return options_; }

  // torch::data::samplers::Sampler<>: reset() starts the current epoch over
  // (new_size replaces the data set size); next() hands out the next batch.
  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  size_t dataset_size_;
  DistributedSamplerOptions options_;
  std::shared_ptr<uint64_t> epoch_;  // shared by copies
  std::vector<size_t> current_;
  size_t position_ = 0;
};

}  // namespace plexus::ddp
