// DistributedSampler checks.
//
//   sampler_check cases          prints one line per case: the indices of
//                                every rank for a grid of (size, replicas,
//                                shuffle, seed, epoch, drop_last), for
//                                sampler_vs_python.py to compare with Python
//   sampler_check loader         make_data_loader over the sampler: across
//                                ranks every index once per epoch (padded
//                                ones twice), and set_epoch reaches the
//                                loader's copy
#include <torch/data.h>

#include <cstdio>
#include <map>
#include <string>

#include "plexus/ddp.hpp"

using plexus::ddp::DistributedSampler;
using plexus::ddp::DistributedSamplerOptions;

namespace {

int Cases() {
  for (size_t size : {0, 1, 5, 10, 17, 100, 1001}) {
    for (size_t replicas : {1, 2, 3, 4, 7}) {
      for (bool shuffle : {false, true}) {
        for (uint64_t seed : {0, 42}) {
          for (uint64_t epoch : {0, 3}) {
            for (bool drop_last : {false, true}) {
              if (!shuffle && (seed != 0 || epoch != 0)) continue;
              std::printf("%zu %zu %d %llu %llu %d", size, replicas, int(shuffle),
                          (unsigned long long)seed, (unsigned long long)epoch, int(drop_last));
              for (size_t rank = 0; rank < replicas; ++rank) {
                DistributedSampler s(size, {.num_replicas = replicas,
                                            .rank = rank,
                                            .shuffle = shuffle,
                                            .seed = seed,
                                            .drop_last = drop_last});
                s.set_epoch(epoch);
                const auto idx = s.indices();
                if (idx.size() != s.size()) {
                  std::fprintf(stderr, "size() %zu but %zu indices\n", s.size(), idx.size());
                  return 1;
                }
                std::printf(" |");
                for (size_t i : idx) std::printf(" %zu", i);
              }
              std::printf("\n");
            }
          }
        }
      }
    }
  }
  return 0;
}

// A data set of `n` samples whose data is the index.
struct Indices : torch::data::datasets::Dataset<Indices, torch::data::Example<>> {
  explicit Indices(size_t n) : n_(n) {}
  torch::data::Example<> get(size_t i) override {
    return {torch::tensor(int64_t(i)), torch::tensor(int64_t(0))};
  }
  std::optional<size_t> size() const override { return n_; }
  size_t n_;
};

int Loader() {
  const size_t n = 23, replicas = 4;
  int failures = 0;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::map<int64_t, int> seen;
    std::vector<size_t> first_of_rank0;
    for (size_t rank = 0; rank < replicas; ++rank) {
      DistributedSampler sampler(n, {.num_replicas = replicas, .rank = rank, .seed = 7});
      auto loader =
          torch::data::make_data_loader(Indices(n).map(torch::data::transforms::Stack<>()), sampler,
                                        torch::data::DataLoaderOptions(4));
      sampler.set_epoch(epoch);  // after make_data_loader copied it, as in the usual loop
      size_t k = 0;
      const auto expected = sampler.indices();
      for (auto& batch : *loader) {
        for (int64_t j = 0; j < batch.data.size(0); ++j, ++k) {
          const int64_t i = batch.data[j].item<int64_t>();
          ++seen[i];
          if (k >= expected.size() || size_t(i) != expected[k]) {
            std::fprintf(stderr, "epoch %llu rank %zu: loader gave %lld at %zu, sampler says %zu\n",
                         (unsigned long long)epoch, rank, (long long)i, k,
                         k < expected.size() ? expected[k] : size_t(-1));
            ++failures;
          }
        }
      }
      if (k != sampler.size()) ++failures;
    }
    // 23 samples over 4 ranks: 24 slots, so exactly one index comes twice.
    int twice = 0;
    for (size_t i = 0; i < n; ++i) {
      if (seen[int64_t(i)] == 2)
        ++twice;
      else if (seen[int64_t(i)] != 1)
        ++failures;
    }
    if (twice != 1 || seen.size() != n) ++failures;
  }
  DistributedSampler a(10, {.num_replicas = 2, .rank = 0, .seed = 1});
  DistributedSampler b = a;  // copies share the epoch
  a.set_epoch(5);
  if (b.epoch() != 5) ++failures;
  try {
    DistributedSampler bad(10, {.num_replicas = 2, .rank = 2});
    ++failures;
  } catch (const std::exception& e) {
    std::printf("rank 2 of 2 refused: %s\n", e.what());
  }
  if (failures) {
    std::fprintf(stderr, "sampler loader check: %d failure(s)\n", failures);
    return 1;
  }
  std::printf("sampler with make_data_loader: every index once per epoch (one padded twice)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "cases") return Cases();
  if (mode == "loader") return Loader();
  std::fprintf(stderr, "usage: sampler_check cases|loader\n");
  return 2;
}
