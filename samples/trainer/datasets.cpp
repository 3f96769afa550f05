#include "datasets.hpp"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "plexus/settings/environment.hpp"
#include "tensor_file.hpp"

#ifndef PLEXUS_TRAINER_DATA_DIRS
#define PLEXUS_TRAINER_DATA_DIRS ""
#endif

namespace trainer {
namespace {

// A fixed task, whatever --seed says: inputs from N(0, 1) labelled by the
// argmax of a random two-layer teacher, so that a wider student can learn it
// but not trivially.
constexpr uint64_t kSyntheticDataSeed = 20261202;
constexpr int64_t kSyntheticFeatures = 64;
constexpr int64_t kSyntheticClasses = 10;

DataSplits Synthetic(int64_t train_samples) {
  auto gen = at::detail::createCPUGenerator(kSyntheticDataSeed);
  const int64_t n = train_samples + train_samples / 8;
  auto x = at::randn({n, kSyntheticFeatures}, gen);
  auto w1 = at::randn({kSyntheticFeatures, 32}, gen) / std::sqrt(double(kSyntheticFeatures));
  auto w2 = at::randn({32, kSyntheticClasses}, gen);
  // float64 for the labels, so that they do not depend on the matmul kernel.
  auto y =
      at::matmul(at::tanh(at::matmul(x.to(at::kDouble), w1.to(at::kDouble))), w2.to(at::kDouble))
          .argmax(1);
  DataSplits d;
  d.name = "synthetic";
  d.train_x = x.slice(0, 0, train_samples).contiguous();
  d.train_y = y.slice(0, 0, train_samples).contiguous();
  d.test_x = x.slice(0, train_samples).contiguous();
  d.test_y = y.slice(0, train_samples).contiguous();
  d.classes = kSyntheticClasses;
  return d;
}

torch::ScalarType ToScalarType(ArrayType t) {
  switch (t) {
    case ArrayType::Float32:
      return torch::kFloat32;
    case ArrayType::Int64:
      return torch::kInt64;
    case ArrayType::Float64:
      return torch::kFloat64;
  }
  throw std::logic_error("array type");
}

torch::Tensor ToTensor(const NamedArray& a) {
  auto t = torch::empty(a.shape, torch::TensorOptions().dtype(ToScalarType(a.type)));
  std::memcpy(t.data_ptr(), a.data.data(), a.data.size());
  return t;
}

NamedArray ToArray(const std::string& name, const torch::Tensor& tensor) {
  auto t = tensor.detach().cpu().contiguous();
  NamedArray a;
  a.name = name;
  if (t.scalar_type() == torch::kInt64) {
    a.type = ArrayType::Int64;
  } else if (t.scalar_type() == torch::kFloat64) {
    a.type = ArrayType::Float64;
  } else {
    t = t.to(torch::kFloat32);
    a.type = ArrayType::Float32;
  }
  a.shape = t.sizes().vec();
  a.data.resize(t.nbytes());
  std::memcpy(a.data.data(), t.data_ptr(), t.nbytes());
  return a;
}

std::string FindDigits() {
  std::vector<std::string> dirs;
  if (const char* d = plexus::settings::Raw(plexus::settings::Id::kDataDir); d && *d) dirs.emplace_back(d);
  // The build tree's copy, then the installed one (meson passes both, ':'-separated).
  std::string compiled = PLEXUS_TRAINER_DATA_DIRS;
  for (size_t start = 0; start <= compiled.size();) {
    const size_t end = std::min(compiled.find(':', start), compiled.size());
    if (end > start) dirs.push_back(compiled.substr(start, end - start));
    start = end + 1;
  }
  std::string tried;
  for (const auto& d : dirs) {
    const auto p = std::filesystem::path(d) / "digits.ptf";
    if (std::filesystem::exists(p)) return p.string();
    tried += " " + p.string();
  }
  throw std::runtime_error(
      "--data digits: digits.ptf not found (tried:" + tried +
      "). It is written at build time from scikit-learn (scripts/install-torch.sh installs "
      "scikit-learn into .venv; then reconfigure), or by hand: samples/trainer/export_digits.py "
      "DIR/digits.ptf and PLEXUS_DATA_DIR=DIR");
}

DataSplits FromFile(const std::string& path, const std::string& name) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& a : ReadTensorFile(path)) by_name[a.name] = ToTensor(a);
  for (const char* need : {"train_x", "train_y", "test_x", "test_y"}) {
    if (!by_name.count(need)) throw std::runtime_error(path + ": no array '" + need + "'");
  }
  DataSplits d;
  d.name = name;
  d.train_x = by_name["train_x"].to(torch::kFloat32);
  d.train_y = by_name["train_y"].to(torch::kInt64);
  d.test_x = by_name["test_x"].to(torch::kFloat32);
  d.test_y = by_name["test_y"].to(torch::kInt64);
  if (d.train_x.dim() != 2 || d.test_x.dim() != 2 || d.train_x.size(1) != d.test_x.size(1) ||
      d.train_y.dim() != 1 || d.train_y.size(0) != d.train_x.size(0) ||
      d.test_y.size(0) != d.test_x.size(0) || d.train_x.size(0) == 0) {
    throw std::runtime_error(path + ": train_x/test_x must be [N, F] and *_y [N]");
  }
  const int64_t lo = std::min(d.train_y.min().item<int64_t>(), d.test_y.min().item<int64_t>());
  if (lo < 0) throw std::runtime_error(path + ": negative label");
  d.classes = std::max(d.train_y.max().item<int64_t>(), d.test_y.max().item<int64_t>()) + 1;
  return d;
}

}  // namespace

DataSplits LoadData(const TrainerOptions& options) {
  if (options.data == "synthetic") return Synthetic(options.samples);
  if (options.data == "digits") return FromFile(FindDigits(), "digits");
  return FromFile(options.data, options.data);
}

void SaveData(const DataSplits& d, const std::string& path) {
  WriteTensorFile(path, {ToArray("train_x", d.train_x), ToArray("train_y", d.train_y),
                         ToArray("test_x", d.test_x), ToArray("test_y", d.test_y)});
}

void SaveWeights(const torch::nn::Module& module, const std::string& path) {
  std::vector<NamedArray> arrays;
  for (const auto& p : module.named_parameters()) arrays.push_back(ToArray(p.key(), p.value()));
  WriteTensorFile(path, arrays);
}

void LoadWeights(torch::nn::Module& module, const std::string& path) {
  std::map<std::string, NamedArray> by_name;
  for (auto& a : ReadTensorFile(path)) by_name[a.name] = std::move(a);
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters()) {
    const auto it = by_name.find(p.key());
    if (it == by_name.end()) throw std::runtime_error(path + ": no weights for '" + p.key() + "'");
    auto t = ToTensor(it->second);
    if (t.sizes() != p.value().sizes()) {
      throw std::runtime_error(path + ": '" + p.key() + "' has shape " + c10::str(t.sizes()) +
                               ", the model's is " + c10::str(p.value().sizes()));
    }
    p.value().copy_(t);
  }
}

}  // namespace trainer
