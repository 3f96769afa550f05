// The trainer's models. Both are torch::nn::Sequential so that parameter
// names ("0.weight", "2.bias", ...) are the ones Python's nn.Sequential gives
// the same layers: torch_ddp.py builds the same models and weights cross
// between the two by name.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "options.hpp"

namespace trainer {

// depth Linear layers, ReLU between them: in -> width -> ... -> width -> classes.
inline torch::nn::Sequential MakeMlp(int64_t in, int64_t width, int depth, int64_t classes) {
  torch::nn::Sequential net;
  int64_t prev = in;
  for (int i = 0; i + 1 < depth; ++i) {
    net->push_back(torch::nn::Linear(prev, width));
    net->push_back(torch::nn::ReLU());
    prev = width;
  }
  net->push_back(torch::nn::Linear(prev, classes));
  return net;
}

// For inputs of side x side pixels (flattened): two 3x3 convolutions, a 2x2
// max-pool, two Linear layers.
inline torch::nn::Sequential MakeCnn(int64_t in, int64_t classes) {
  const auto side = static_cast<int64_t>(std::lround(std::sqrt(double(in))));
  if (side * side != in || side < 2) {
    throw std::runtime_error("--model cnn needs square images; the data has " + std::to_string(in) +
                             " features");
  }
  namespace nn = torch::nn;
  return nn::Sequential(nn::Unflatten(nn::UnflattenOptions(1, {1, side, side})),
                        nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1)), nn::ReLU(),
                        nn::Conv2d(nn::Conv2dOptions(16, 32, 3).padding(1)), nn::ReLU(),
                        nn::MaxPool2d(2), nn::Flatten(),
                        nn::Linear(32 * (side / 2) * (side / 2), 128), nn::ReLU(),
                        nn::Linear(128, classes));
}

inline torch::nn::Sequential MakeModel(const TrainerOptions& o, int64_t in, int64_t classes) {
  return o.model == "cnn" ? MakeCnn(in, classes) : MakeMlp(in, o.width, o.depth, classes);
}

}  // namespace trainer
