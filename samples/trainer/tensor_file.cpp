#include "tensor_file.hpp"

#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace trainer {
namespace {

constexpr char kMagic[8] = {'P', 'L', 'X', 'T', 'E', 'N', 'S', '1'};
// Limits that keep a damaged file from asking for absurd allocations.
constexpr uint32_t kMaxArrays = 1 << 16;
constexpr uint32_t kMaxName = 4096;
constexpr uint32_t kMaxDims = 8;

using File = std::unique_ptr<FILE, int (*)(FILE*)>;

struct Reader {
  FILE* f;
  const std::string& path;
  void Read(void* out, size_t n, const char* what) {
    if (n != 0 && std::fread(out, 1, n, f) != n) {
      throw std::runtime_error(path + ": truncated tensor file (while reading " + what + ")");
    }
  }
  template <typename T>
  T Get(const char* what) {
    T v;
    Read(&v, sizeof v, what);
    return v;
  }
};

}  // namespace

size_t ElementSize(ArrayType type) {
  return type == ArrayType::Float32 ? 4 : 8;
}

std::vector<NamedArray> ReadTensorFile(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
  Reader r{f.get(), path};
  char magic[8];
  r.Read(magic, sizeof magic, "the header");
  if (std::memcmp(magic, kMagic, sizeof magic) != 0) {
    throw std::runtime_error(path + ": not a trainer tensor file (no PLXTENS1 header)");
  }
  const auto count = r.Get<uint32_t>("the array count");
  if (count > kMaxArrays) throw std::runtime_error(path + ": implausible array count");
  std::vector<NamedArray> arrays(count);
  for (auto& a : arrays) {
    const auto name_bytes = r.Get<uint32_t>("a name length");
    if (name_bytes > kMaxName) throw std::runtime_error(path + ": implausible name length");
    a.name.resize(name_bytes);
    r.Read(a.name.data(), name_bytes, "a name");
    const auto type = r.Get<uint32_t>("a dtype");
    if (type > 2) {
      throw std::runtime_error(path + ": array '" + a.name + "' has unknown dtype " +
                               std::to_string(type));
    }
    a.type = static_cast<ArrayType>(type);
    const auto ndim = r.Get<uint32_t>("a rank");
    if (ndim > kMaxDims) throw std::runtime_error(path + ": array '" + a.name + "' has ndim > 8");
    a.shape.resize(ndim);
    uint64_t elements = 1;
    for (auto& d : a.shape) {
      d = r.Get<int64_t>("a dimension");
      if (d < 0 || (d != 0 && elements > UINT64_MAX / static_cast<uint64_t>(d))) {
        throw std::runtime_error(path + ": array '" + a.name + "' has a bad dimension");
      }
      elements *= static_cast<uint64_t>(d);
    }
    const auto bytes = r.Get<uint64_t>("a data length");
    if (elements > UINT64_MAX / ElementSize(a.type) || bytes != elements * ElementSize(a.type)) {
      throw std::runtime_error(path + ": array '" + a.name + "' says " + std::to_string(bytes) +
                               " bytes, its shape needs another size");
    }
    a.data.resize(bytes);
    r.Read(a.data.data(), bytes, "array data");
  }
  return arrays;
}

void WriteTensorFile(const std::string& path, const std::vector<NamedArray>& arrays) {
  // Written beside the target and renamed into place, so that a reader never
  // sees half a file (checkpoints are rewritten while a job may be killed).
  const std::string tmp = path + ".tmp";
  {
    File f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
    if (!f) throw std::runtime_error(tmp + ": cannot create (" + std::strerror(errno) + ")");
    auto put = [&](const void* p, size_t n) {
      if (n != 0 && std::fwrite(p, 1, n, f.get()) != n) {
        throw std::runtime_error(tmp + ": write failed (" + std::strerror(errno) + ")");
      }
    };
    const auto count = static_cast<uint32_t>(arrays.size());
    put(kMagic, sizeof kMagic);
    put(&count, sizeof count);
    for (const auto& a : arrays) {
      const auto name_bytes = static_cast<uint32_t>(a.name.size());
      const auto type = static_cast<uint32_t>(a.type);
      const auto ndim = static_cast<uint32_t>(a.shape.size());
      const uint64_t bytes = a.data.size();
      put(&name_bytes, sizeof name_bytes);
      put(a.name.data(), name_bytes);
      put(&type, sizeof type);
      put(&ndim, sizeof ndim);
      put(a.shape.data(), ndim * sizeof(int64_t));
      put(&bytes, sizeof bytes);
      put(a.data.data(), bytes);
    }
    if (std::fflush(f.get()) != 0) {
      throw std::runtime_error(tmp + ": write failed (" + std::strerror(errno) + ")");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + tmp + " to " + path + " (" + std::strerror(errno) +
                             ")");
  }
}

}  // namespace trainer
