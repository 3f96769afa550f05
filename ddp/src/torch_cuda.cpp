// Finds libtorch_cpu.so among the loaded objects and loads its sibling
// libtorch_cuda.so. No LibTorch header: nothing here calls LibTorch.
#include "plexus/ddp/torch_cuda.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <mutex>

namespace plexus::ddp {
namespace {

int FindTorchCpu(dl_phdr_info* info, size_t, void* data) {
  const char* path = info->dlpi_name;
  if (!path || !*path) return 0;
  const char* slash = std::strrchr(path, '/');
  const char* base = slash ? slash + 1 : path;
  if (std::strncmp(base, "libtorch_cpu.so", 15) != 0) return 0;
  *static_cast<std::string*>(data) = slash ? std::string(path, size_t(slash - path)) : ".";
  return 1;
}

}  // namespace

bool load_torch_cuda(std::string* why) {
  // One attempt per process: a failed dlopen is not worth repeating, and the
  // handle stays open for the life of the process (LibTorch cannot unload).
  static std::once_flag once;
  static bool loaded = false;
  static std::string error;
  std::call_once(once, [] {
    std::string dir;
    dl_iterate_phdr(&FindTorchCpu, &dir);
    if (dir.empty()) {
      error =
          "libtorch_cpu.so is not loaded in this process, so where LibTorch's CUDA library "
          "lies is unknown";
      return;
    }
    const std::string path = dir + "/libtorch_cuda.so";
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      loaded = true;
      return;
    }
    const char* e = dlerror();
    error = "could not load " + path + ": " + (e ? e : "unknown reason") +
            " (a CPU-only LibTorch, or the torch wheel installed without its NVIDIA packages, "
            "e.g. PLEXUS_TORCH=cpu-libs)";
  });
  if (!loaded && why) *why = error;
  return loaded;
}

}  // namespace plexus::ddp
