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

// Python's constructor arguments, with its defaults except num_replicas and
// rank, which Python reads from the default process group and C++ has none
// to read: pass comm.size() and comm.rank().
struct DistributedSamplerOptions {
  // How many ranks share the data set (the world size). 0 is an error.
  size_t num_replicas = 1;
  // This rank's share, 0 <= rank < num_replicas (otherwise an error).
  size_t rank = 0;
  // Shuffle the whole data set each epoch, the same way on every rank (a
  // permutation seeded seed + epoch), before it is dealt out. Off: rank r
  // gets r, r + num_replicas, r + 2 num_replicas, ... (evaluation).
  bool shuffle = true;
  // The shuffle's seed: must be the same on every rank, or ranks see
  // overlapping shares and miss others. Change it to get other orders.
  uint64_t seed = 0;
  // When the data set size is not a multiple of num_replicas: false (the
  // default) pads by repeating indices from the start, so every rank gets
  // ceil(size / num_replicas) indices and a few samples count twice per
  // epoch; true drops the tail, so every rank gets floor(size /
  // num_replicas) and a few samples are skipped each epoch (different ones
  // each epoch when shuffled). Either way every rank runs the same number of
  // steps, so no rank waits in a collective for one that ran out.
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
