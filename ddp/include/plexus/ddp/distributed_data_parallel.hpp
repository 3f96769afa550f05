// plexus::ddp::DistributedDataParallel — PyTorch's DistributedDataParallel
// for the LibTorch C++ frontend, on any Plexus backend.
//
//   auto comm = plexus::Communicator::from_env();
//   auto model = std::make_shared<Net>();
//   plexus::ddp::DistributedDataParallel ddp(model, comm, {.bucket_cap_mb = 25});
//   ...
//   auto loss = torch::nll_loss(ddp.forward(batch.data), batch.target);
//   loss.backward();        // buckets all-reduce while backward runs
//   optimizer.step();       // every rank applies the same averaged gradients
//
// What it does, as PyTorch does:
//  - construction (collective): checks that every rank has the same
//    parameters and buffers (names, shapes, dtypes; the error names the first
//    difference), broadcasts rank 0's parameters and buffers (init_sync),
//    buckets the gradients (plexus::reducer::Reducer) and hooks every
//    parameter that requires a gradient into autograd (parameters with
//    requires_grad = false are skipped);
//  - forward(): broadcasts rank 0's buffers first (broadcast_buffers), runs
//    the module, and, when gradients will be synchronised, starts the
//    reducer's iteration (with find_unused_parameters, after walking the
//    autograd graph from the outputs to find the parameters it does not reach);
//  - backward: as each gradient is accumulated into .grad, it goes into its
//    bucket; full buckets all-reduce while backward goes on; at the end of
//    backward every .grad holds the average over the ranks.
//
// The module and the communicator must outlive the wrapper; the wrapper must
// outlive every backward it takes part in. Tensors of float16, bfloat16,
// float32 or float64, on the CPU or on one CUDA device.
// Not thread-safe: one training thread.
//
// CUDA (one GPU per process, as PyTorch recommends): move the module to
// cuda:LOCAL_RANK first, pass device_ids = {LOCAL_RANK} or nothing (the
// module's device is taken, as PyTorch does), and use a backend with CUDA
// memory (PLEXUS_BACKEND=nccl). The buckets are then in that device's memory,
// gradients go in and out of them with torch ops on the current stream, and
// every all-reduce is posted on that stream: with a stream-ordered backend
// nothing waits on the host. Inputs must be on the device already (PyTorch
// moves them; this forward passes its arguments as they are). The program
// links LibTorch's CUDA library (libtorch_cuda); plexus-ddp itself does not.
// Errors, at construction: several device_ids, a module on several devices
// or on another device than device_ids[0], a CUDA request where no CUDA
// device is visible, a CUDA module on a backend without CUDA memory.
//
// Where we differ from PyTorch: errors name the parameters and ranks
// involved (a parameter without a gradient is reported at the end of the
// backward that missed it, not at the next forward); logging_data() shows
// how much communication backward hid.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "plexus/communicator.hpp"
#include "plexus/reducer/comm_hook.hpp"
#include "plexus/reducer/reducer.hpp"

namespace plexus::ddp {

// Fields in the order of PyTorch's constructor arguments, so that designated
// initialisers read like the keyword arguments: {.bucket_cap_mb = 25}.
struct DistributedDataParallelOptions {
  // CUDA device of this rank's module: one device, or empty (the module's
  // own device; empty for a CPU module). output_device: unset, or
  // device_ids[0]. logging_data() shows both as resolved.
  std::vector<int> device_ids{};
  std::optional<int> output_device{};
  // Broadcast rank 0's buffers (e.g. BatchNorm statistics) before each forward.
  bool broadcast_buffers = true;
  // Bucket size in MiB; unset means 25 with a first bucket of 1 MiB (as PyTorch).
  std::optional<double> bucket_cap_mb{};
  // Walk the autograd graph after each forward to find parameters that take
  // no part; needed when some parameters get no gradient in an iteration.
  bool find_unused_parameters = false;
  // .grad of every parameter becomes a view into its bucket: no copies, less memory.
  bool gradient_as_bucket_view = false;
  // The set of used parameters never changes: the graph is walked once.
  bool static_graph = false;
  // Check the model across ranks and broadcast rank 0's state at construction.
  bool init_sync = true;
};

// What logging_data() reports (PyTorch's DDPLoggingData, in part).
struct DDPLoggingData {
  reducer::ReducerStats reducer;             // buckets, rebuild, times (us)
  std::vector<std::string> parameter_names;  // index -> name, for reducer.buckets
  DistributedDataParallelOptions options;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  std::string backend;
};

class Join;

// The part that does not depend on the module's type (ddp/src/).
class DistributedDataParallelBase {
 public:
  DistributedDataParallelBase(std::shared_ptr<torch::nn::Module> module, Communicator& comm,
                              DistributedDataParallelOptions options);
  ~DistributedDataParallelBase();
  DistributedDataParallelBase(const DistributedDataParallelBase&) = delete;
  DistributedDataParallelBase& operator=(const DistributedDataParallelBase&) = delete;

  // While the guard lives, backward accumulates gradients locally; the next
  // synchronised backward reduces the sum (PyTorch's `with ddp.no_sync():`).
  reducer::Reducer::NoSyncGuard no_sync();

  // Uneven inputs (PyTorch's `with Join([ddp]):`): every rank creates a Join
  // before its loop and calls finish() after it; see Join below.
  Join join();

  // Replaces the default averaging; before the first backward only.
  void register_comm_hook(reducer::CommHook hook);

  DDPLoggingData logging_data() const;
  Communicator& communicator() const;

  // The steps around a forward that forward() does; for callers that run
  // the module themselves: pre_forward(); out = module(...); post_forward({out}).
  void pre_forward();
  void post_forward(const std::vector<torch::Tensor>& outputs);

 private:
  friend class Join;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Uneven inputs. Ranks that run out of batches call finish(): until every
// rank has, it shadows the others' iterations (all-reducing zero gradients,
// taking part in the buffer broadcasts), then every rank takes the model of
// a rank that trained to the end. Gradients are divided by the full world
// size throughout (PyTorch's divide_by_initial_world_size = True).
//
//   auto join = ddp.join();
//   for (auto& batch : *loader) { ... }
//   join.finish();
//
// Collective: every rank must create a Join before its loop and finish it.
// Without one, the ranks that still train fail when their all-reduce times
// out (PLEXUS_TIMEOUT), with an error naming the bucket and suggesting join().
class Join {
 public:
  explicit Join(DistributedDataParallelBase& ddp);
  // Finishes if finish() was not called, unless an exception is unwinding.
  ~Join();
  Join(Join&&) noexcept;
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;
  Join& operator=(Join&&) = delete;
  void finish();

 private:
  DistributedDataParallelBase* ddp_;
  int uncaught_;
};

namespace detail {

inline void CollectTensors(const torch::Tensor& t, std::vector<torch::Tensor>& out) {
  out.push_back(t);
}
inline void CollectTensors(const std::vector<torch::Tensor>& v, std::vector<torch::Tensor>& out) {
  out.insert(out.end(), v.begin(), v.end());
}
template <typename A, typename B>
void CollectTensors(const std::pair<A, B>& p, std::vector<torch::Tensor>& out) {
  CollectTensors(p.first, out);
  CollectTensors(p.second, out);
}
template <typename... Ts>
void CollectTensors(const std::tuple<Ts...>& t, std::vector<torch::Tensor>& out) {
  std::apply([&](const auto&... e) { (CollectTensors(e, out), ...); }, t);
}
// Other results hold no tensor DDP can see (find_unused_parameters then
// asks for post_forward to be called by hand).
template <typename T>
void CollectTensors(const T&, std::vector<torch::Tensor>&) {}

}  // namespace detail

template <typename ModuleT>
class DistributedDataParallel : public DistributedDataParallelBase {
 public:
  DistributedDataParallel(std::shared_ptr<ModuleT> module, Communicator& comm,
                          DistributedDataParallelOptions options = {})
      : DistributedDataParallelBase(module, comm, std::move(options)), module_(std::move(module)) {}
  DistributedDataParallel(torch::nn::ModuleHolder<ModuleT> module, Communicator& comm,
                          DistributedDataParallelOptions options = {})
      : DistributedDataParallel(module.ptr(), comm, std::move(options)) {}

  // Runs the module's forward between pre_forward and post_forward. The
  // tensors of the result (a tensor, a vector or a tuple of them) are where
  // find_unused_parameters starts its walk of the graph.
  template <typename... Args>
  auto forward(Args&&... args) {
    pre_forward();
    auto out = module_->forward(std::forward<Args>(args)...);
    std::vector<torch::Tensor> tensors;
    detail::CollectTensors(out, tensors);
    post_forward(tensors);
    return out;
  }

  const std::shared_ptr<ModuleT>& module() const { return module_; }
  ModuleT* operator->() const { return module_.get(); }

 private:
  std::shared_ptr<ModuleT> module_;
};

template <typename M>
DistributedDataParallel(std::shared_ptr<M>, Communicator&) -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(std::shared_ptr<M>, Communicator&, DistributedDataParallelOptions)
    -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(torch::nn::ModuleHolder<M>, Communicator&) -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(torch::nn::ModuleHolder<M>, Communicator&, DistributedDataParallelOptions)
    -> DistributedDataParallel<M>;

}  // namespace plexus::ddp
