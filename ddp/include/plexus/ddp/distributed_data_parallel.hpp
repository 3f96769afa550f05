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
// A module with no parameter that requires a gradient is an INVALID_ARGUMENT
// error at construction (there would be nothing to synchronise).
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
// initialisers read like the keyword arguments: {.bucket_cap_mb = 25}. The
// defaults are PyTorch's. Every rank must pass the same options (buckets,
// unused-parameter handling and buffer broadcasts are collective); nothing
// checks that they agree.
struct DistributedDataParallelOptions {
  // The CUDA device this rank's module lives on: empty, or exactly one index.
  //  - CPU module: must be empty (a device here is an INVALID_ARGUMENT error
  //    that says to move the module first).
  //  - CUDA module: empty takes the module's own device (as PyTorch does for
  //    a single-device module; an INFO line notes a device other than
  //    cuda:LOCAL_RANK); a given index must be that device.
  //  - Several indices (one process driving several GPUs, which PyTorch has
  //    dropped too) are UNSUPPORTED: run one process per GPU.
  // A CUDA request in a process that sees no CUDA device is UNSUPPORTED,
  // naming the likely cause (no GPU, CUDA_VISIBLE_DEVICES, no libtorch_cuda).
  std::vector<int> device_ids{};

  // Where forward()'s output goes. PyTorch moves the output there; this
  // wrapper never moves it, so the only values accepted are: unset, or (CUDA)
  // device_ids[0]. Any other device is UNSUPPORTED: move the output after
  // forward(). A CPU module takes no output_device. Unset on a CUDA module is
  // resolved to device_ids[0] (logging_data() shows it).
  std::optional<int> output_device{};

  // At the start of each forward(), broadcast rank 0's buffers (BatchNorm
  // running statistics, any registered buffer) to every rank, so replicas
  // never drift. As in PyTorch, skipped when the previous forward() did not
  // synchronise (it ran under no_sync() or without grad mode, e.g. an
  // evaluation pass), and on a module without buffers or in a world of one.
  // Turning it off saves one broadcast per step when buffers are identical
  // by construction or deliberately per rank.
  bool broadcast_buffers = true;

  // Bucket size in MiB (2^20 bytes): gradients are grouped into buckets of
  // about this size, and each bucket is all-reduced as soon as all its
  // gradients are ready, while backward goes on. Unset: 25 MiB, with a first
  // bucket of 1 MiB (PyTorch's first bucket), so that communication starts
  // early. Smaller buckets start sooner and overlap more, at a fixed cost per
  // all-reduce; the last bucket to fill cannot overlap anything, so one huge
  // bucket means no overlap at all. Given, it is also the first bucket's
  // size (as in PyTorch). The first iteration runs on one bucket per dtype
  // in parameter order; the buckets are then rebuilt once, in the order
  // gradients became ready on rank 0 (logging_data().reducer says whether
  // and how). Not positive: INVALID_ARGUMENT at construction.
  std::optional<double> bucket_cap_mb{};

  // Set when some parameters that require a gradient get none in some
  // iterations (a branch not taken, a frozen head, a mixture of experts).
  // After each forward(), the autograd graph is walked from forward()'s
  // output tensors, and parameters it does not reach are marked ready at
  // once, so their buckets do not wait for gradients that never come.
  //  - Cost: the walk, each synchronised iteration; leave it off when every
  //    parameter always gets a gradient.
  //  - forward() must return the tensors the loss is computed from: a
  //    tensor, or a vector, tuple or pair of them. A module returning
  //    anything else gets an INVALID_USAGE error; call pre_forward(), the
  //    module, then post_forward({outputs}) yourself.
  //  - A parameter no rank used keeps its .grad untouched (as in PyTorch:
  //    not zeroed); one used on some ranks only gets the average over all
  //    ranks, the others contributing zero.
  //  - Without it, a parameter that gets no gradient is an error at the end
  //    of that backward, naming the parameter and what to do.
  bool find_unused_parameters = false;

  // .grad of every parameter becomes a view into its bucket (PyTorch's
  // option of the same name): no copy of gradients into buckets and back,
  // and the gradients' memory is the buckets' (one copy of the gradients
  // instead of two).
  //  - optimizer.zero_grad() (LibTorch's default set_to_none = true) drops
  //    the views; the next backward's fresh gradients are copied into the
  //    bucket and .grad points at the view again, which costs the copy the
  //    option exists to save. Call zero_grad(/*set_to_none=*/false) to zero
  //    the views in place and keep them.
  //  - The views are not autograd views: detach_(), zero_() and in-place
  //    arithmetic on .grad work (PyTorch's Python views refuse detach_()).
  //  - Do not keep a .grad tensor across iterations expecting it to stay
  //    fixed: the next all-reduce writes into it. When the buckets are
  //    rebuilt after the first iteration, .grad is moved to the new views
  //    with its values.
  //  - When the wrapper is destroyed, gradients that are still views are
  //    replaced by copies, so they outlive the buckets.
  bool gradient_as_bucket_view = false;

  // The set of parameters that get a gradient is the same every iteration.
  // The graph is walked once, at the first synchronised iteration, and that
  // iteration's unused parameters are taken as unused from then on, so an
  // unchanging unused set costs no walk after the first step (with or
  // without find_unused_parameters; find_unused_parameters alone walks every
  // iteration). It also allows the bucket rebuild when parameters are
  // unused. If the set does change, the result is wrong (a parameter
  // wrongly taken as unused keeps a stale .grad, or a used one arrives after
  // it was marked, an error): leave it off then.
  // As with find_unused_parameters, forward() must return tensors.
  bool static_graph = false;

  // At construction (collective): check that every rank has the same
  // parameters and buffers (names, shapes, dtypes, in order, frozen ones
  // too; the error names the differing ranks and the first difference) and
  // broadcast rank 0's values, so every replica starts from the same
  // weights. Off: neither happens; only for ranks that loaded identical
  // weights themselves (one checkpoint), where a mismatch then goes unseen.
  bool init_sync = true;

  // Not PyTorch's: the order gradients became ready in an earlier run of
  // this model (logging_data().reducer.ready_order, saved with a
  // checkpoint), so that the buckets start as that run's were after its
  // first iteration and a resumed run reduces every step bit for bit as the
  // uninterrupted one (see reducer::ReducerOptions::ready_order). Empty:
  // PyTorch's way (one bucket for the first iteration, then the rebuild).
  std::vector<size_t> ready_order{};
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
