// plexus-ddp-quickstart: the smallest complete data-parallel LibTorch
// program, the one in the README. Any backend, any launcher:
//
//   PLEXUS_BACKEND=tcp plexus-run -n 2 ./plexus-ddp-quickstart [EPOCHS]
//   PLEXUS_BACKEND=mpi mpirun -np 2 ./plexus-ddp-quickstart [EPOCHS]
//
// Data: 2048 points in 10 dimensions, labelled (3 classes) by a fixed random
// teacher network, generated in memory: nothing is downloaded.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>

#include "plexus/ddp.hpp"
#include "plexus/plexus.hpp"

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(10, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 3));
  }
  torch::Tensor forward(torch::Tensor x) {
    return torch::log_softmax(fc2(torch::relu(fc1(x))), /*dim=*/1);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// Points labelled by a fixed random teacher: the same on every rank.
struct TeacherData : torch::data::datasets::Dataset<TeacherData> {
  TeacherData() {
    auto gen = at::detail::createCPUGenerator(7);
    inputs = at::randn({2048, 10}, gen);
    targets = at::matmul(inputs, at::randn({10, 3}, gen)).argmax(1);
  }
  torch::data::Example<> get(size_t i) override { return {inputs[i], targets[i]}; }
  std::optional<size_t> size() const override { return inputs.size(0); }
  torch::Tensor inputs, targets;
};

int main(int argc, char** argv) try {
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 10;
  auto comm = plexus::Communicator::from_env();  // rank and size from the launcher
  torch::manual_seed(0);  // the same initial model on every run (rank 0's is broadcast)
  auto model = std::make_shared<Net>();
  plexus::ddp::DistributedDataParallel ddp(model, comm, {.bucket_cap_mb = 25});
  auto dataset = TeacherData().map(torch::data::transforms::Stack<>());
  plexus::ddp::DistributedSampler sampler(
      dataset.size().value(), {.num_replicas = comm.size(), .rank = comm.rank(), .seed = 42});
  auto loader = torch::data::make_data_loader(dataset, sampler, torch::data::DataLoaderOptions(32));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    sampler.set_epoch(epoch);
    double loss_sum = 0;
    int batches = 0;
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      auto loss = torch::nll_loss(ddp.forward(batch.data), batch.target);
      loss.backward();  // buckets all-reduce while backward runs
      optimizer.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    if (comm.rank() == 0) {
      std::printf("epoch %d: mean loss %.4f over %d batches per rank, %u ranks on %s\n", epoch,
                  loss_sum / batches, batches, comm.size(), comm.backend_name().c_str());
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "plexus-ddp-quickstart: %s\n", e.what());
  return 1;
}
