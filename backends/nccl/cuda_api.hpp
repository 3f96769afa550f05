// The CUDA runtime and NCCL functions this backend calls, resolved with
// dlopen/dlsym at init instead of being linked.
//
// Why dlopen: the host loads a plugin with RTLD_NOW, so a plugin linked
// against libnccl.so.2 would not load at all where NCCL is missing, and the
// user would see a dynamic-linker message instead of this backend's reason.
// Resolved at run time, the plugin always loads, and init() says
// "libnccl.so.2 not found (...)". It also lets a process that already holds
// an NCCL (LibTorch brings its own) share that one copy: dlopen by soname
// returns the library already loaded under that soname.
//
// The headers are included for their types only; nothing here is linked.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

// ncclCommSplit came with NCCL 2.18, the oldest NCCL the backend runs on (it
// checks the library's version at load); built against older headers the
// backend has no comm_split slot.
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
#define PLEXUS_NCCL_HAS_SPLIT 1
#else
#define PLEXUS_NCCL_HAS_SPLIT 0
#endif

namespace plexus::nccl {

// One table per process, filled once; never unloaded (NCCL keeps threads and
// the CUDA runtime keeps contexts that outlive any one backend context).
struct CudaApi {
  // CUDA runtime
  decltype(&::cudaGetDeviceCount) GetDeviceCount = nullptr;
  decltype(&::cudaGetErrorString) GetErrorString = nullptr;
  decltype(&::cudaGetErrorName) GetErrorName = nullptr;
  decltype(&::cudaGetLastError) GetLastError = nullptr;
  decltype(&::cudaSetDevice) SetDevice = nullptr;
  decltype(&::cudaGetDevice) GetDevice = nullptr;
  decltype(&::cudaRuntimeGetVersion) RuntimeGetVersion = nullptr;
  decltype(&::cudaDriverGetVersion) DriverGetVersion = nullptr;
  decltype(&::cudaStreamCreateWithFlags) StreamCreateWithFlags = nullptr;
  decltype(&::cudaStreamDestroy) StreamDestroy = nullptr;
  decltype(&::cudaEventCreateWithFlags) EventCreateWithFlags = nullptr;
  decltype(&::cudaEventDestroy) EventDestroy = nullptr;
  decltype(&::cudaEventRecord) EventRecord = nullptr;
  decltype(&::cudaEventQuery) EventQuery = nullptr;
  decltype(&::cudaPointerGetAttributes) PointerGetAttributes = nullptr;
  cudaError_t (*Malloc)(void** ptr, size_t size) = nullptr;  // cudaMalloc (overloaded in C++)
  decltype(&::cudaFree) Free = nullptr;
  decltype(&::cudaMemset) Memset = nullptr;
  decltype(&::cudaDeviceGetPCIBusId) DeviceGetPCIBusId = nullptr;
  // Optional (CUDA >= 12.8): checks that a caller's stream is on the communicator's device.
  decltype(&::cudaStreamGetDevice) StreamGetDevice = nullptr;
  // NCCL
  decltype(&::ncclGetVersion) GetVersion = nullptr;
  decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&::ncclCommAbort) CommAbort = nullptr;
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclCommFinalize) CommFinalize = nullptr;
  decltype(&::ncclGetErrorString) GetNcclErrorString = nullptr;
  decltype(&::ncclGetLastError) GetNcclLastError = nullptr;
  decltype(&::ncclAllReduce) AllReduce = nullptr;
  decltype(&::ncclBroadcast) Broadcast = nullptr;
  decltype(&::ncclReduce) Reduce = nullptr;
  decltype(&::ncclAllGather) AllGather = nullptr;
  decltype(&::ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&::ncclSend) Send = nullptr;
  decltype(&::ncclRecv) Recv = nullptr;
  decltype(&::ncclGroupStart) GroupStart = nullptr;
  decltype(&::ncclGroupEnd) GroupEnd = nullptr;
  decltype(&::ncclCommCount) CommCount = nullptr;
  decltype(&::ncclCommUserRank) CommUserRank = nullptr;
#if PLEXUS_NCCL_HAS_SPLIT
  decltype(&::ncclCommSplit) CommSplit = nullptr;  // comm_split (NCCL >= 2.18, as required)
#endif

  std::string cudart_path;  // where each library was found (dladdr), for the log
  std::string nccl_path;
  int nccl_version = 0;     // ncclGetVersion, e.g. 22809
  int runtime_version = 0;  // cudaRuntimeGetVersion, e.g. 13000
  // cudaDriverGetVersion; 0 when no driver (libcuda) is installed; -1 when
  // not asked at load because libcuda was already loaded (cuda_api.cpp says
  // why): DriverVersion() asks then.
  int driver_version = 0;
};

// The driver's CUDA version, asked now if loading did not (not in a forked
// child: call only from init or later).
int DriverVersion(const CudaApi& api);

// Loads both libraries once per process (thread-safe) and returns the table,
// or nullptr with *why set ("libnccl.so.2 not found: ..."). Each library is
// looked for by its soname through the dynamic linker's search (a copy
// already loaded into the process, LD_LIBRARY_PATH, ld.so.cache), then in the
// toolkit directory this plugin was built against. Touches no device, does
// not initialise the driver, and calls into libcuda only where no libcuda was
// loaded before (safe in the host's forked probe). Non-blocking apart from
// the dlopen itself.
const CudaApi* LoadCudaApi(std::string* why);

// Whether the calling thread has a current CUDA context, asked of the driver
// (cuCtxGetCurrent, found with dlsym in the libcuda.so.1 the runtime already
// loaded: never loads it). 1 yes, 0 no, -1 unknown (no libcuda in the
// process, or the call failed). Only call after the runtime has been used.
int ThreadHasCudaContext();

// Makes `device` current on the calling thread for a scope, and afterwards
// gives the thread back the device it had -- but only where the thread had a
// context. Why: cudaGetDevice says 0 on a thread that never used CUDA, and
// "restoring" 0 with cudaSetDevice(0) would create a context on GPU 0 in
// every rank (hundreds of MiB of GPU 0's memory, and the wrong device for the
// next CUDA call of that thread). A thread without a context keeps ours,
// which is also the device it touched last. Costs one cudaGetDevice (a
// thread-local read) when the device is already current.
class DeviceGuard {
 public:
  DeviceGuard(const CudaApi& api, int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t result() const { return result_; }

 private:
  const CudaApi& api_;
  int previous_ = -1;
  bool restore_ = false;
  cudaError_t result_ = cudaSuccess;
};

// "12.4" from 12040; "none" for 0; "not asked yet" for -1.
std::string CudaVersionText(int version);
// "2.28.9" from 22809 (NCCL >= 2.9 codes).
std::string NcclVersionText(int code);

}  // namespace plexus::nccl
