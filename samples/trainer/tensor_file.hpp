// The trainer's tensor file: named arrays in one little-endian file, written
// and read by the C++ trainer and by its Python scripts (export_digits.py,
// torch_ddp.py), so that data sets and weights cross between them without
// either depending on the other's serialisation. No LibTorch here.
//
//   "PLXTENS1"                       8 bytes
//   uint32 count
//   count x { uint32 name_bytes, name (UTF-8),
//             uint32 dtype (0 float32, 1 int64, 2 float64), uint32 ndim,
//             int64 dims[ndim], uint64 data_bytes, data (row-major) }
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

enum class ArrayType : uint32_t { Float32 = 0, Int64 = 1, Float64 = 2 };

struct NamedArray {
  std::string name;
  ArrayType type = ArrayType::Float32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> data;  // exactly elements(shape) x element size bytes
};

size_t ElementSize(ArrayType type);

// Throw std::runtime_error naming the file and what is wrong with it.
std::vector<NamedArray> ReadTensorFile(const std::string& path);
void WriteTensorFile(const std::string& path, const std::vector<NamedArray>& arrays);

}  // namespace trainer
