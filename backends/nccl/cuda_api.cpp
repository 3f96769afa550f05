#include "cuda_api.hpp"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <vector>

#ifndef PLEXUS_CUDA_LIBDIR
#define PLEXUS_CUDA_LIBDIR ""
#endif

namespace plexus::nccl {
namespace {

// The soname of the CUDA runtime major this plugin was compiled against
// (cudart keeps its ABI within a major).
std::string CudartSoname() {
  return "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
}

// dlopen of each candidate in turn; the first that loads wins. RTLD_LOCAL:
// the libraries' symbols stay out of the global scope, as this plugin's own
// do (the host loads it RTLD_LOCAL); a copy some other library already loaded
// (RTLD_GLOBAL or not) is found by its soname and shared.
void* OpenFirst(const std::vector<std::string>& candidates, std::string* tried) {
  for (const std::string& c : candidates) {
    if (c.empty()) continue;
    dlerror();
    if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* err = dlerror();
    *tried += (tried->empty() ? "" : "; ") + std::string(err ? err : c + ": unknown dlopen error");
  }
  return nullptr;
}

std::string LoadedFrom(void* symbol) {
  Dl_info info{};
  if (symbol && dladdr(symbol, &info) && info.dli_fname) return info.dli_fname;
  return "?";
}

template <typename Fn>
bool Bind(void* lib, const char* name, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!*slot) *missing += (missing->empty() ? "" : ", ") + std::string(name);
  return *slot != nullptr;
}

struct Loaded {
  CudaApi api;
  std::string error;  // non-empty: loading failed for good
};

Loaded Load() {
  Loaded out;
  CudaApi& a = out.api;
  const std::string toolkit = PLEXUS_CUDA_LIBDIR;
  std::string tried;
  void* rt =
      OpenFirst({CudartSoname(), toolkit.empty() ? "" : toolkit + "/" + CudartSoname()}, &tried);
  if (!rt) {
    out.error = CudartSoname() + " (the CUDA runtime) not found: " + tried;
    return out;
  }
  std::string missing;
  Bind(rt, "cudaGetDeviceCount", &a.GetDeviceCount, &missing);
  Bind(rt, "cudaGetErrorString", &a.GetErrorString, &missing);
  Bind(rt, "cudaGetErrorName", &a.GetErrorName, &missing);
  Bind(rt, "cudaGetLastError", &a.GetLastError, &missing);
  Bind(rt, "cudaSetDevice", &a.SetDevice, &missing);
  Bind(rt, "cudaGetDevice", &a.GetDevice, &missing);
  Bind(rt, "cudaRuntimeGetVersion", &a.RuntimeGetVersion, &missing);
  Bind(rt, "cudaDriverGetVersion", &a.DriverGetVersion, &missing);
  Bind(rt, "cudaStreamCreateWithFlags", &a.StreamCreateWithFlags, &missing);
  Bind(rt, "cudaStreamDestroy", &a.StreamDestroy, &missing);
  Bind(rt, "cudaEventCreateWithFlags", &a.EventCreateWithFlags, &missing);
  Bind(rt, "cudaEventDestroy", &a.EventDestroy, &missing);
  Bind(rt, "cudaEventRecord", &a.EventRecord, &missing);
  Bind(rt, "cudaEventQuery", &a.EventQuery, &missing);
  Bind(rt, "cudaPointerGetAttributes", &a.PointerGetAttributes, &missing);
  Bind(rt, "cudaMalloc", &a.Malloc, &missing);
  Bind(rt, "cudaFree", &a.Free, &missing);
  Bind(rt, "cudaMemset", &a.Memset, &missing);
  Bind(rt, "cudaDeviceGetPCIBusId", &a.DeviceGetPCIBusId, &missing);
  a.StreamGetDevice =
      reinterpret_cast<decltype(a.StreamGetDevice)>(dlsym(rt, "cudaStreamGetDevice"));
  if (!missing.empty()) {
    out.error = LoadedFrom(reinterpret_cast<void*>(a.GetDeviceCount)) + " lacks " + missing;
    return out;
  }
  a.cudart_path = LoadedFrom(reinterpret_cast<void*>(a.GetDeviceCount));

  tried.clear();
  void* nc = OpenFirst({"libnccl.so.2", toolkit.empty() ? "" : toolkit + "/libnccl.so.2"}, &tried);
  if (!nc) {
    out.error = "libnccl.so.2 not found: " + tried;
    return out;
  }
  Bind(nc, "ncclGetVersion", &a.GetVersion, &missing);
  Bind(nc, "ncclGetUniqueId", &a.GetUniqueId, &missing);
  Bind(nc, "ncclCommInitRankConfig", &a.CommInitRankConfig, &missing);
  Bind(nc, "ncclCommGetAsyncError", &a.CommGetAsyncError, &missing);
  Bind(nc, "ncclCommAbort", &a.CommAbort, &missing);
  Bind(nc, "ncclCommDestroy", &a.CommDestroy, &missing);
  Bind(nc, "ncclCommFinalize", &a.CommFinalize, &missing);
  Bind(nc, "ncclGetErrorString", &a.GetNcclErrorString, &missing);
  Bind(nc, "ncclGetLastError", &a.GetNcclLastError, &missing);
  Bind(nc, "ncclAllReduce", &a.AllReduce, &missing);
  Bind(nc, "ncclBroadcast", &a.Broadcast, &missing);
  Bind(nc, "ncclReduce", &a.Reduce, &missing);
  Bind(nc, "ncclAllGather", &a.AllGather, &missing);
  Bind(nc, "ncclReduceScatter", &a.ReduceScatter, &missing);
  Bind(nc, "ncclSend", &a.Send, &missing);
  Bind(nc, "ncclRecv", &a.Recv, &missing);
  Bind(nc, "ncclGroupStart", &a.GroupStart, &missing);
  Bind(nc, "ncclGroupEnd", &a.GroupEnd, &missing);
  Bind(nc, "ncclCommCount", &a.CommCount, &missing);
  Bind(nc, "ncclCommUserRank", &a.CommUserRank, &missing);
#if PLEXUS_NCCL_HAS_SPLIT
  Bind(nc, "ncclCommSplit", &a.CommSplit, &missing);
#endif
  a.nccl_path = LoadedFrom(reinterpret_cast<void*>(a.GetVersion));
  if (!missing.empty()) {
    out.error = a.nccl_path + " lacks " + missing + " (this backend needs NCCL >= 2.18)";
    return out;
  }
  // This runs in the entry function, which the host also calls in its
  // probe: a child fork()ed without exec. If the parent had initialised CUDA
  // (LibTorch does), CUDA in that child is undefined and may hang, and a hang
  // there makes the host refuse the backend. ncclGetVersion and
  // cudaRuntimeGetVersion only report the library's own version. The
  // driver's version needs libcuda.so.1: asked here only when no libcuda is
  // in the process yet (nobody, in this process or a parent it was forked
  // from, can have initialised CUDA then); otherwise DriverVersion() asks at
  // init, which the probe's host (no out-of-band functions) never gets past.
  if (a.GetVersion(&a.nccl_version) != ncclSuccess) a.nccl_version = 0;
  if (a.RuntimeGetVersion(&a.runtime_version) != cudaSuccess) a.runtime_version = 0;
  if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD)) {
    dlclose(driver);
    a.driver_version = -1;  // not asked
  } else if (a.DriverGetVersion(&a.driver_version) != cudaSuccess) {
    a.GetLastError();
    a.driver_version = 0;
  }
  // NCCL's ncclConfig_t grew over time; 2.18 is the oldest this code's
  // config (blocking, cgaClusterSize, ...) was checked against.
  if (a.nccl_version < 21800) {
    out.error = a.nccl_path + " is NCCL " + NcclVersionText(a.nccl_version) +
                "; this backend needs NCCL >= 2.18";
  }
  return out;
}

}  // namespace

const CudaApi* LoadCudaApi(std::string* why) {
  // Once per process, never unloaded.
  static std::once_flag once;
  static Loaded* loaded = nullptr;
  std::call_once(once, [] { loaded = new Loaded(Load()); });
  if (!loaded->error.empty()) {
    *why = loaded->error;
    return nullptr;
  }
  return &loaded->api;
}

int DriverVersion(const CudaApi& api) {
  if (api.driver_version >= 0) return api.driver_version;
  int v = 0;
  if (api.DriverGetVersion(&v) != cudaSuccess) {
    api.GetLastError();
    v = 0;
  }
  return v;
}

int ThreadHasCudaContext() {
  // cuCtxGetCurrent(CUcontext*), declared here to keep cuda.h out. Looked up
  // until found: before the runtime's first call no libcuda is loaded (and
  // then no thread can have a context anyway).
  using CtxGetCurrent = int (*)(void**);
  static std::atomic<CtxGetCurrent> fn{nullptr};
  CtxGetCurrent f = fn.load(std::memory_order_acquire);
  if (!f) {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (!driver) return -1;
    f = reinterpret_cast<CtxGetCurrent>(dlsym(driver, "cuCtxGetCurrent"));
    // The handle is kept (NOLOAD took a reference): libcuda stays loaded
    // for the life of the process anyway, and f must stay valid.
    if (!f) return -1;
    fn.store(f, std::memory_order_release);
  }
  void* ctx = nullptr;
  if (f(&ctx) != 0) return -1;  // CUDA_SUCCESS is 0
  return ctx ? 1 : 0;
}

DeviceGuard::DeviceGuard(const CudaApi& api, int device) : api_(api) {
  int current = -1;
  if (api_.GetDevice(&current) != cudaSuccess) {
    api_.GetLastError();
    current = -1;
  }
  if (current == device) return;  // the common case: nothing to do or undo
  // Unknown (-1) counts as "had one": the thread keeps its device then, as
  // it did before this check existed.
  restore_ = current >= 0 && ThreadHasCudaContext() != 0;
  previous_ = current;
  result_ = api_.SetDevice(device);
  if (result_ != cudaSuccess) {
    api_.GetLastError();
    restore_ = false;  // nothing was changed
  }
}

DeviceGuard::~DeviceGuard() {
  if (restore_ && api_.SetDevice(previous_) != cudaSuccess) api_.GetLastError();
}

std::string CudaVersionText(int version) {
  if (version < 0) return "not asked yet";
  if (version == 0) return "none";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string NcclVersionText(int code) {
  if (code <= 0) return "unknown";
  if (code < 10000) {  // before 2.9: major*1000 + minor*100 + patch
    return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 100) + "." +
           std::to_string(code % 100);
  }
  return std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100) + "." +
         std::to_string(code % 100);
}

}  // namespace plexus::nccl
