// The trainer's data: a synthetic task generated in memory, or a tensor file
// (the digits set export_digits.py writes), and the weights files.
#pragma once

#include <torch/torch.h>

#include <string>

#include "options.hpp"

namespace trainer {

struct DataSplits {
  std::string name;                                // "synthetic", "digits" or the file's path
  torch::Tensor train_x, train_y, test_x, test_y;  // float32 [N, F], int64 [N]
  int64_t classes = 0;
};

// Loads or generates what --data names. Throws std::runtime_error.
DataSplits LoadData(const TrainerOptions& options);
void SaveData(const DataSplits& data, const std::string& path);

// Every parameter by its named_parameters() name, float32.
void SaveWeights(const torch::nn::Module& module, const std::string& path);
// Copies the file's arrays into the parameters of the same names; every
// parameter must be there with its shape.
void LoadWeights(torch::nn::Module& module, const std::string& path);

// A map-style dataset over two tensors, for make_data_loader.
class TensorPairDataset : public torch::data::datasets::Dataset<TensorPairDataset> {
 public:
  TensorPairDataset(torch::Tensor x, torch::Tensor y) : x_(std::move(x)), y_(std::move(y)) {}
  torch::data::Example<> get(size_t i) override { return {x_[i], y_[i]}; }
  std::optional<size_t> size() const override { return static_cast<size_t>(x_.size(0)); }

 private:
  torch::Tensor x_, y_;
};

}  // namespace trainer
