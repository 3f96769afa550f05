#include <exception>
#include <unordered_set>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/cuda.h>

#include "plexus/ddp/distributed_data_parallel.hpp"
#include "plexus/ddp/torch_dtype.hpp"
#include "plexus/error.hpp"
#include "plexus/log.hpp"
#include "torch_bucket_memory.hpp"

namespace plexus::ddp {

namespace {

[[noreturn]] void Throw(int32_t code, const std::string& message) {
  throw Error(code, "plexus", "DDP: " + message);
}

reducer::Parameter Describe(const std::string& name, const torch::Tensor& t) {
  const auto dtype = DTypeOf(t.scalar_type());
  if (!dtype) {
    Throw(PLEXUS_ERR_UNSUPPORTED, "tensor '" + name + "' has dtype " +
                                      std::string(c10::toString(t.scalar_type())) +
                                      ", which Plexus cannot communicate");
  }
  if (!t.device().is_cpu() && !t.device().is_cuda()) {
    Throw(PLEXUS_ERR_UNSUPPORTED, "tensor '" + name + "' is on " + t.device().str() +
                                      "; plexus::ddp supports CPU and CUDA modules");
  }
  if (!t.is_contiguous()) {
    Throw(PLEXUS_ERR_UNSUPPORTED, "tensor '" + name + "' is not contiguous");
  }
  return {name, t.sizes().vec(), static_cast<uint64_t>(t.numel()), *dtype,
          t.device().is_cuda() ? static_cast<int>(t.device().index()) : -1};
}

std::string DeviceList(const std::vector<int>& ids) {
  std::string s;
  for (int d : ids) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

// The device every parameter and buffer of the module is on; throws naming
// two tensors on different devices.
c10::Device ModuleDevice(torch::nn::Module& module) {
  std::optional<c10::Device> device;
  std::string first;
  auto visit = [&](const std::string& name, const torch::Tensor& t) {
    if (!device) {
      device = t.device();
      first = name;
    } else if (t.device() != *device) {
      Throw(PLEXUS_ERR_INVALID_ARGUMENT,
            "the module is on more than one device: " + name + " is on " + t.device().str() + ", " +
                first + " on " + device->str() +
                ". DDP takes a module on one device (as PyTorch's single-device modules): move "
                "it with module->to(device)");
    }
  };
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    visit("parameter '" + item.key() + "'", item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    visit("buffer '" + item.key() + "'", item.value());
  }
  return device.value_or(c10::Device(c10::kCPU));
}

// Checks device_ids/output_device against the module's device (PyTorch's
// rules for single-device modules) and fills them in for a CUDA module.
void ResolveDevices(DistributedDataParallelOptions& o, c10::Device device,
                    const Communicator& comm) {
  if (o.device_ids.size() > 1) {
    Throw(PLEXUS_ERR_UNSUPPORTED,
          "device_ids = " + DeviceList(o.device_ids) +
              ": a module replicated over several devices of one process is not supported (nor, "
              "any longer, by PyTorch): run one process per GPU, each with device_ids = "
              "{LOCAL_RANK} (plexus-run and torchrun set LOCAL_RANK)");
  }
  if (!o.device_ids.empty() || (o.output_device && *o.output_device >= 0)) {
    const int wanted = o.device_ids.empty() ? *o.output_device : o.device_ids[0];
    if (!torch::cuda::is_available()) {
      Throw(PLEXUS_ERR_UNSUPPORTED,
            "device_ids = " + DeviceList(o.device_ids) +
                (o.output_device ? ", output_device = " + std::to_string(*o.output_device)
                                 : std::string()) +
                " asks for CUDA device " + std::to_string(wanted) +
                ", but no CUDA device is available to this process (torch::cuda::is_available() "
                "is false: no GPU or driver, CUDA_VISIBLE_DEVICES hides them, or the program "
                "does not link LibTorch's CUDA library libtorch_cuda). For a CPU module leave "
                "device_ids and output_device empty");
    }
    const auto count = static_cast<int>(torch::cuda::device_count());
    if (wanted < 0 || wanted >= count) {
      Throw(PLEXUS_ERR_INVALID_ARGUMENT, "CUDA device " + std::to_string(wanted) +
                                             " does not exist: this process sees " +
                                             std::to_string(count) + " CUDA device(s)");
    }
  }
  if (device.is_cpu()) {
    if (!o.device_ids.empty() || o.output_device) {
      Throw(PLEXUS_ERR_INVALID_ARGUMENT,
            "device_ids = " + DeviceList(o.device_ids) +
                " but the module is on the CPU: move it first (module->to(torch::Device("
                "torch::kCUDA, " +
                std::to_string(o.device_ids.empty() ? 0 : o.device_ids[0]) +
                "))), or leave device_ids and output_device empty for a CPU module");
    }
    return;
  }
  const int index = device.index();
  if (o.device_ids.empty()) {
    o.device_ids = {index};  // PyTorch: a single-device CUDA module's own device
    if (comm.local_rank() != static_cast<uint32_t>(index)) {
      LogLine(PLEXUS_LOG_INFO, "plexus",
              "DDP: rank " + std::to_string(comm.rank()) + " (local rank " +
                  std::to_string(comm.local_rank()) + ") trains on " + device.str() +
                  "; the usual choice is cuda:LOCAL_RANK");
    }
  } else if (o.device_ids[0] != index) {
    Throw(PLEXUS_ERR_INVALID_ARGUMENT,
          "device_ids = " + DeviceList(o.device_ids) + " but the module is on " + device.str() +
              ": move it with module->to(torch::Device(torch::kCUDA, " +
              std::to_string(o.device_ids[0]) + ")) or pass device_ids = {" +
              std::to_string(index) + "}");
  }
  if (!o.output_device) {
    o.output_device = o.device_ids[0];
  } else if (*o.output_device != o.device_ids[0]) {
    Throw(PLEXUS_ERR_UNSUPPORTED,
          "output_device = " + std::to_string(*o.output_device) +
              " differs from device_ids[0] = " + std::to_string(o.device_ids[0]) +
              ": the output stays on the module's device; move it after forward()");
  }
}

}  // namespace

struct DistributedDataParallelBase::Impl {
  std::shared_ptr<torch::nn::Module> module;
  Communicator& comm;
  DistributedDataParallelOptions options;
  std::vector<std::string> names;     // of the parameters the reducer handles
  std::vector<torch::Tensor> params;  // same order
  std::vector<torch::Tensor> buffers;
  c10::Device device{c10::kCPU};  // of every parameter and buffer
  // The buckets' memory: host memory for a CPU module (the reducer's own),
  // the module's device for a CUDA one.
  std::shared_ptr<reducer::BucketMemory> memory = std::make_shared<reducer::HostBucketMemory>();
  std::unique_ptr<reducer::Reducer> reducer;
  std::vector<c10::intrusive_ptr<torch::autograd::Node>> accumulators;  // holds the hooks
  std::vector<uintptr_t> hook_keys;
  std::vector<torch::Tensor> views;  // bucket views (gradient_as_bucket_view)
  uint64_t views_generation = 0;
  bool callback_queued = false;
  std::optional<std::vector<size_t>> static_unused;  // static_graph: the first walk's result
  std::vector<size_t> pending_unused;  // found by post_forward, handed over at backward's start
  bool join_enabled = false;
  bool joined = false;
  // The last forward prepared a synchronised backward: the next forward
  // broadcasts buffers (PyTorch's require_forward_param_sync).
  bool require_forward_param_sync = true;

  Impl(std::shared_ptr<torch::nn::Module> m, Communicator& c, DistributedDataParallelOptions o)
      : module(std::move(m)), comm(c), options(std::move(o)) {}

  void BroadcastTensors(const std::vector<torch::Tensor>& tensors, uint32_t root) {
    torch::NoGradGuard no_grad;
    const bool stream_ordered = (comm.capabilities().flags & PLEXUS_CAP_STREAM_ORDERED) != 0;
    for (const torch::Tensor& t : tensors) {
      if (t.numel() == 0) continue;
      // A CUDA tensor: on its current stream ("done" may mean enqueued there,
      // which orders it before the ops that follow on the stream).
      const auto where = TorchBucketMemory::PlacementFor(t.device(), stream_ordered);
      comm.broadcast(t.data_ptr(), t.numel(), *DTypeOf(t.scalar_type()), root,
                     where ? &*where : nullptr)
          .wait();
    }
  }

  // A small host collective (Join's flags): staged through the module's
  // device when the backend takes device memory only.
  void AllreduceFlags(int64_t* flags, uint64_t count, ReduceOp op) {
    reducer::HostAllreduce(comm, *memory, flags, count, DType::Int64, op);
  }

  torch::Tensor& View(size_t i) {
    if (views_generation != reducer->buckets_generation() || views.empty()) {
      views.clear();
      for (size_t k = 0; k < params.size(); ++k) {
        views.push_back(torch::from_blob(reducer->bucket_view(k), params[k].sizes(),
                                         params[k].options().requires_grad(false)));
      }
      views_generation = reducer->buckets_generation();
    }
    return views[i];
  }

  // Autograd has accumulated parameter i's gradient into .grad.
  void OnGradientReady(size_t i) {
    if (!reducer->in_backward()) return;  // no_sync, or a backward DDP did not prepare
    if (!callback_queued) {
      callback_queued = true;
      torch::autograd::Engine::get_default_engine().queue_callback([this] { FinishBackward(); });
      // The parameters this backward will not reach, as PyTorch does at its
      // first hook: by now zero_grad() has run, so .grad is what this
      // iteration reduces. One that still holds a gradient (accumulated
      // under no_sync, or zeroed rather than reset) has it reduced.
      for (size_t u : std::exchange(pending_unused, {})) {
        if (params[u].grad().defined()) {
          MarkReady(u);
        } else {
          reducer->mark_unused(u);
        }
      }
    }
    MarkReady(i);
  }

  // Hands parameter i's .grad to the reducer (into its bucket view, with
  // gradient_as_bucket_view).
  void MarkReady(size_t i) {
    torch::Tensor& param = params[i];
    torch::Tensor grad = param.grad();
    if (!grad.defined()) {
      Throw(PLEXUS_ERR_INTERNAL, "parameter '" + names[i] + "' has no .grad after accumulation");
    }
    if (options.gradient_as_bucket_view) {
      torch::Tensor& view = View(i);
      if (!grad.is_same(view)) {
        view.copy_(grad);
        param.mutable_grad() = view;
      }
      reducer->mark_ready(i, view.data_ptr());
      return;
    }
    if (grad.numel() == 0) {
      reducer->mark_ready(i, View(i).data_ptr());
      return;
    }
    if (!grad.is_contiguous() || grad.scalar_type() != param.scalar_type()) {
      param.mutable_grad() = grad.to(param.scalar_type()).contiguous();
      grad = param.grad();
    }
    reducer->mark_ready(i, grad.data_ptr());
  }

  void FinishBackward() {
    callback_queued = false;
    reducer->finalize();
    if (!options.find_unused_parameters) return;
    // Unused here, used elsewhere: the average is in the bucket and no .grad holds it.
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!reducer->needs_gradient(i)) continue;
      torch::Tensor& view = View(i);
      if (options.gradient_as_bucket_view) {
        params[i].mutable_grad() = view;
      } else if (params[i].grad().defined()) {
        params[i].mutable_grad().copy_(view);
      } else {
        params[i].mutable_grad() = view.clone();
      }
    }
  }

  // Runs `prepare` (which may rebuild the buckets, moving the views), then
  // points the gradients that were views into the old buckets at the new ones
  // (the reducer carried their values over).
  template <typename F>
  void KeepingViews(F&& prepare) {
    std::vector<const void*> old_views;
    if (options.gradient_as_bucket_view && !views.empty()) {
      for (const torch::Tensor& v : views) old_views.push_back(v.data_ptr());
    }
    const uint64_t generation = reducer->buckets_generation();
    prepare();
    if (old_views.empty() || generation == reducer->buckets_generation()) return;
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& g = params[i].grad();
      if (g.defined() && g.data_ptr() == old_views[i]) params[i].mutable_grad() = View(i);
    }
  }

  void BroadcastBuffersBeforeForward() {
    if (!options.broadcast_buffers || buffers.empty() || comm.size() == 1 ||
        !require_forward_param_sync) {
      return;
    }
    try {
      BroadcastTensors(buffers, 0);
    } catch (const Error& e) {
      throw Error(e.status(), e.backend(),
                  "DDP: broadcast of rank 0's buffers before forward() on rank " +
                      std::to_string(comm.rank()) + " failed: " + e.message() +
                      ". If ranks run different numbers of iterations (uneven inputs), the "
                      "ranks that ran out must keep joining in (DDP's join())");
    }
  }

  // The parameters the autograd graph of `outputs` does not reach.
  std::vector<size_t> FindUnused(const std::vector<torch::Tensor>& outputs) {
    std::unordered_set<const torch::autograd::Node*> seen;
    std::vector<const torch::autograd::Node*> stack;
    auto push = [&](const torch::autograd::Node* n) {
      if (n && seen.insert(n).second) stack.push_back(n);
    };
    for (const torch::Tensor& t : outputs) {
      if (!t.defined() || !t.requires_grad()) continue;
      if (t.grad_fn()) {
        push(t.grad_fn().get());
      } else {
        push(torch::autograd::impl::try_get_grad_accumulator(t).get());
      }
    }
    while (!stack.empty()) {
      const torch::autograd::Node* n = stack.back();
      stack.pop_back();
      for (const torch::autograd::Edge& e : n->next_edges()) push(e.function.get());
    }
    std::vector<size_t> unused;
    for (size_t i = 0; i < accumulators.size(); ++i) {
      if (!seen.count(accumulators[i].get())) unused.push_back(i);
    }
    return unused;
  }
};

namespace {

// Fires after AccumulateGrad has written a parameter's .grad.
class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> ready) : ready_(std::move(ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ready_();
    return outputs;
  }

 private:
  std::function<void()> ready_;
};

}  // namespace

DistributedDataParallelBase::DistributedDataParallelBase(std::shared_ptr<torch::nn::Module> module,
                                                         Communicator& comm,
                                                         DistributedDataParallelOptions options)
    : impl_(std::make_unique<Impl>(std::move(module), comm, std::move(options))) {
  Impl& m = *impl_;
  if (!m.module) Throw(PLEXUS_ERR_INVALID_ARGUMENT, "the module is null");
  m.device = ModuleDevice(*m.module);
  ResolveDevices(m.options, m.device, comm);
  if (m.device.is_cuda()) {
    if ((comm.capabilities().memory_types & (1u << PLEXUS_MEMORY_CUDA)) == 0) {
      Throw(PLEXUS_ERR_UNSUPPORTED,
            "the module is on " + m.device.str() + " but backend '" + comm.backend_name() +
                "' cannot communicate CUDA memory: use a backend that can, e.g. NCCL "
                "(PLEXUS_BACKEND=nccl), or train on the CPU");
    }
    m.memory = std::make_shared<TorchBucketMemory>(m.device);
  }
  if (m.options.bucket_cap_mb && !(*m.options.bucket_cap_mb > 0)) {
    Throw(PLEXUS_ERR_INVALID_ARGUMENT, "bucket_cap_mb must be positive");
  }
  // Everything that is communicated, checked across ranks: parameters (all,
  // also the frozen ones, which init_sync broadcasts) and buffers.
  std::vector<reducer::Parameter> everything;
  std::vector<reducer::Parameter> trained;
  std::vector<torch::Tensor> all_params;
  for (const auto& item : m.module->named_parameters(/*recurse=*/true)) {
    everything.push_back(Describe(
        item.key() + (item.value().requires_grad() ? "" : " (requires_grad=false)"), item.value()));
    all_params.push_back(item.value());
    if (!item.value().requires_grad()) continue;
    trained.push_back(everything.back());
    m.names.push_back(item.key());
    m.params.push_back(item.value());
  }
  for (const auto& item : m.module->named_buffers(/*recurse=*/true)) {
    everything.push_back(Describe("buffer " + item.key(), item.value()));
    m.buffers.push_back(item.value());
  }
  if (trained.empty()) {
    Throw(PLEXUS_ERR_INVALID_ARGUMENT, "the module has no parameter that requires a gradient");
  }
  if (m.options.init_sync) {
    reducer::VerifyReplicas(comm, everything, *m.memory);
    m.BroadcastTensors(all_params, 0);
    m.BroadcastTensors(m.buffers, 0);
  }
  reducer::ReducerOptions ro;
  if (m.options.bucket_cap_mb) {
    const double bytes = *m.options.bucket_cap_mb * 1024 * 1024;
    ro.bucket_cap_bytes = bytes >= 9e18 ? uint64_t{1} << 62 : static_cast<uint64_t>(bytes);
    if (ro.bucket_cap_bytes == 0) ro.bucket_cap_bytes = 1;
    ro.first_bucket_bytes = ro.bucket_cap_bytes;  // as PyTorch when bucket_cap_mb is given
  }
  // static_graph finds the unused parameters once, on the first iteration.
  ro.find_unused_parameters = m.options.find_unused_parameters || m.options.static_graph;
  ro.static_graph = m.options.static_graph;
  ro.ready_order = m.options.ready_order;
  m.reducer = std::make_unique<reducer::Reducer>(
      comm, std::move(trained), ro,
      m.device.is_cuda() ? m.memory : std::shared_ptr<reducer::BucketMemory>());
  for (size_t i = 0; i < m.params.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(m.params[i]);
    m.hook_keys.push_back(
        acc->add_post_hook(std::make_unique<GradientReadyHook>([&m, i] { m.OnGradientReady(i); })));
    m.accumulators.push_back(std::move(acc));
  }
}

DistributedDataParallelBase::~DistributedDataParallelBase() {
  Impl& m = *impl_;
  for (size_t i = 0; i < m.accumulators.size(); ++i)
    m.accumulators[i]->del_post_hook(m.hook_keys[i]);
  // Gradients that are views into the buckets must not outlive them.
  if (m.options.gradient_as_bucket_view) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < m.params.size() && !m.views.empty(); ++i) {
      if (m.params[i].grad().defined() && m.params[i].grad().is_same(m.views[i])) {
        m.params[i].mutable_grad() = m.views[i].clone();
      }
    }
  }
}

reducer::Reducer::NoSyncGuard DistributedDataParallelBase::no_sync() {
  return impl_->reducer->no_sync();
}

Join DistributedDataParallelBase::join() {
  return Join(*this);
}

void DistributedDataParallelBase::register_comm_hook(reducer::CommHook hook) {
  impl_->reducer->register_comm_hook(std::move(hook));
}

Communicator& DistributedDataParallelBase::communicator() const {
  return impl_->comm;
}

DDPLoggingData DistributedDataParallelBase::logging_data() const {
  const Impl& m = *impl_;
  DDPLoggingData d;
  d.reducer = m.reducer->stats();
  d.parameter_names = m.names;
  d.options = m.options;
  d.rank = m.comm.rank();
  d.world_size = m.comm.size();
  d.backend = m.comm.backend_name();
  return d;
}

void DistributedDataParallelBase::pre_forward() {
  Impl& m = *impl_;
  if (m.reducer->in_backward()) {
    Throw(PLEXUS_ERR_INVALID_USAGE,
          "forward() on rank " + std::to_string(m.comm.rank()) +
              " while the previous iteration's backward has not finished: expected to have "
              "finished reduction in the prior iteration before starting a new one. Either "
              "backward() was not called on the output of the last forward() taken with "
              "gradients (run evaluation under torch::NoGradGuard), or that backward failed "
              "part-way, which leaves the ranks out of step");
  }
  if (m.join_enabled) {
    // This rank still has inputs: count it, and say whether it synchronises.
    const bool sync =
        m.reducer->require_backward_grad_sync() && torch::autograd::GradMode::is_enabled();
    int64_t flags[2] = {1, sync ? 1 : 0};
    m.AllreduceFlags(flags, 2, ReduceOp::Sum);
  }
  m.BroadcastBuffersBeforeForward();
}

void DistributedDataParallelBase::post_forward(const std::vector<torch::Tensor>& outputs) {
  Impl& m = *impl_;
  m.require_forward_param_sync =
      torch::autograd::GradMode::is_enabled() && m.reducer->require_backward_grad_sync();
  if (!m.require_forward_param_sync) return;
  const bool walk = m.options.find_unused_parameters || m.options.static_graph;
  std::vector<size_t> unused;
  if (walk) {
    if (outputs.empty()) {
      Throw(PLEXUS_ERR_INVALID_USAGE,
            "forward() returned no tensor DDP can see (it looks into a Tensor, and vectors, "
            "tuples and pairs of them), so it cannot find the unused parameters: call "
            "pre_forward(), the module, then post_forward() with the output tensors yourself");
    }
    if (m.options.static_graph && m.static_unused) {
      unused = *m.static_unused;
    } else {
      unused = m.FindUnused(outputs);
      if (m.options.static_graph) m.static_unused = unused;
    }
  }
  // The unused parameters are handed to the reducer at the first gradient
  // of backward (OnGradientReady), not now: the user may zero_grad() in
  // between, and nothing may be posted between forward and backward.
  m.KeepingViews([&] { m.reducer->prepare_for_backward(); });
  m.pending_unused = std::move(unused);
}

Join::Join(DistributedDataParallelBase& ddp) : ddp_(&ddp), uncaught_(std::uncaught_exceptions()) {
  auto& m = *ddp.impl_;
  if (m.join_enabled) Throw(PLEXUS_ERR_INVALID_USAGE, "join(): this DDP is already in a Join");
  m.join_enabled = true;
  m.joined = false;
}

Join::Join(Join&& other) noexcept
    : ddp_(std::exchange(other.ddp_, nullptr)), uncaught_(other.uncaught_) {}

Join::~Join() {
  if (!ddp_) return;
  if (std::uncaught_exceptions() > uncaught_) {
    ddp_->impl_->join_enabled = false;  // unwinding: no collectives from a destructor
    return;
  }
  try {
    finish();
  } catch (const std::exception& e) {
    LogLine(PLEXUS_LOG_ERROR, "plexus", std::string("DDP join: ") + e.what());
  } catch (...) {
    LogLine(PLEXUS_LOG_ERROR, "plexus", "DDP join: failed with an unknown exception");
  }
}

void Join::finish() {
  if (!ddp_) return;
  auto& m = *std::exchange(ddp_, nullptr)->impl_;
  m.joined = true;
  bool first = true, last_joiner = false;
  try {
    while (true) {
      int64_t flags[2] = {0, 0};  // {ranks with inputs, of which synchronising}
      m.AllreduceFlags(flags, 2, ReduceOp::Sum);
      if (flags[0] == 0) {
        last_joiner = first;
        break;
      }
      first = false;
      // Shadow one iteration of the ranks that still train.
      m.BroadcastBuffersBeforeForward();
      m.require_forward_param_sync = flags[1] > 0;
      if (flags[1] > 0) m.KeepingViews([&] { m.reducer->run_zero_iteration(); });
    }
    // Everyone takes the model of a rank that trained to the end.
    int64_t authority = last_joiner ? static_cast<int64_t>(m.comm.rank()) : int64_t{-1};
    m.AllreduceFlags(&authority, 1, ReduceOp::Max);
    std::vector<torch::Tensor> state;
    for (const auto& p : m.module->parameters(true)) state.push_back(p);
    m.BroadcastTensors(state, static_cast<uint32_t>(authority));
    m.BroadcastTensors(m.buffers, static_cast<uint32_t>(authority));
  } catch (...) {
    m.join_enabled = false;
    throw;
  }
  m.join_enabled = false;
}

}  // namespace plexus::ddp
