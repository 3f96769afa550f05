#include "plexus/reducer/reducer.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "gradient_math.hpp"
#include "plexus/error.hpp"
#include "plexus/log.hpp"
#include "size_math.hpp"

namespace plexus::reducer {

namespace {

using Clock = std::chrono::steady_clock;

double Micros(Clock::time_point from, Clock::time_point to) {
  return to > from ? std::chrono::duration<double, std::micro>(to - from).count() : 0.0;
}

[[noreturn]] void Throw(int32_t code, const std::string& message) {
  throw Error(code, "plexus", "reducer: " + message);
}

// A bucket's flat buffer in its BucketMemory, released there; or, for host
// memory, the communicator's (Communicator::mem_alloc), which `owned` holds.
struct BufferRelease {
  std::shared_ptr<BucketMemory> memory;
  std::shared_ptr<void> owned;
  void operator()(std::byte* p) const noexcept {
    if (!owned) memory->release(p);
  }
};
using Buffer = std::unique_ptr<std::byte, BufferRelease>;

struct Bucket {
  std::vector<size_t> parameters;
  std::vector<uint64_t> offsets;  // element offset of each parameter in the buffer
  uint64_t count = 0;
  DType dtype = DType::Float32;
  uint64_t size_limit = 0;
  Buffer storage;      // the flat buffer
  size_t pending = 0;  // parameters not yet ready this iteration
  bool launched = false;
  BucketFuture future;

  void* data() const { return storage.get(); }
};

// Without a hook, 16-bit gradients are divided by the world size on their
// way into the bucket and summed, as PyTorch does, so that the sum cannot
// overflow where the average would not; wider ones are summed undivided and
// averaged by the all-reduce itself (PLEXUS_OP_AVG), which divides once per
// element in the backend (a ring divides only the 1/n it reduces last)
// instead of in a pass of the training thread.
// Backends that lack Avg for a dtype get the divide-on-copy path too.
bool DividesOnCopy(DType t, const Communicator& comm) {
  if (t == DType::Float16 || t == DType::BFloat16) return true;
  const uint32_t avg = comm.capabilities().reduce_dtypes[PLEXUS_OP_AVG];
  return (avg & (1u << static_cast<uint32_t>(t))) == 0;
}

struct Slot {
  size_t bucket = 0;
  uint64_t offset = 0;  // elements
};

}  // namespace

struct Reducer::Impl {
  Communicator& comm;
  std::shared_ptr<BucketMemory> memory;  // before the buckets, which release into it
  // The memory is the reducer's own host memory (none was given): its
  // buckets then come from Communicator::mem_alloc (shared buffers).
  bool own_host_memory = false;
  bool host_control = true;  // the backend takes host memory for the control data
  std::vector<Parameter> params;
  ReducerOptions options;
  std::vector<Bucket> buckets;
  std::vector<Slot> slots;
  uint64_t generation = 0;
  CommHook hook;

  // The iteration in flight.
  bool require_sync = true;
  bool in_iteration = false;
  bool zero_iteration = false;
  std::vector<void*> grads;  // where to write each average back (null: nowhere)
  std::vector<uint8_t> ready;
  size_t next_bucket = 0;      // the next bucket to launch
  size_t next_unfinished = 0;  // the first launched bucket not seen complete
  std::vector<int32_t> local_used;
  std::vector<int32_t> global_used;
  Work used_work;

  // The rebuild by ready order, once, after the first synchronised iteration.
  bool rebuild_enabled = false;
  bool rebuild_first = false;  // ReducerOptions::ready_order given: before the first iteration
  bool rebuilt = false;
  std::vector<uint64_t> ready_order;
  std::vector<size_t> rebuilt_order;  // what the rebuild took (rank 0's)

  // Set by the first communication failure; every later call throws it.
  std::string broken;

  // Statistics.
  uint64_t iterations = 0;
  uint64_t recorded = 0;  // iterations in `sum`
  Clock::time_point start, first_launch, finalize_start;
  bool launched_any = false;
  IterationTimes last, sum;

  Impl(Communicator& c, std::vector<Parameter> p, ReducerOptions o, std::shared_ptr<BucketMemory> m)
      : comm(c),
        memory(m ? m : std::make_shared<HostBucketMemory>()),
        own_host_memory(!m),
        host_control(TakesHostMemory(c)),
        params(std::move(p)),
        options(o) {}

  // Operations still in flight use the buckets (and a hook's buffers): wait
  // for them, and keep what they use if they do not finish (a leak, not a
  // write into freed memory).
  ~Impl() {
    size_t kept = 0;
    bool waited_out = false;  // after one timeout, keep the rest without waiting again
    for (Bucket& b : buckets) {
      if (!b.future.in_flight()) continue;
      if (!waited_out) {
        try {
          b.future.wait();
        } catch (...) {
        }
        waited_out = b.future.in_flight();
      }
      if (b.future.in_flight()) {
        new Bucket(std::move(b));
        ++kept;
      }
    }
    if (!used_work.completed()) {
      if (!waited_out) {
        try {
          used_work.wait();
        } catch (...) {
        }
      }
      if (!used_work.completed()) {
        new std::vector<int32_t>(std::move(global_used));
        new Work(std::move(used_work));
        ++kept;
      }
    }
    if (kept > 0) {
      LogLine(PLEXUS_LOG_WARN, "plexus",
              "reducer destroyed with " + std::to_string(kept) +
                  " all-reduce(s) that did not finish; their buffers are kept");
    }
  }

  void CheckUsable() const {
    if (!broken.empty()) {
      Throw(PLEXUS_ERR_INVALID_USAGE, "unusable after an earlier failure: " + broken);
    }
  }

  // A communication failure: the ranks are out of step, so the reducer stops.
  bool StreamOrdered() const {
    return (comm.capabilities().flags & PLEXUS_CAP_STREAM_ORDERED) != 0;
  }

  [[noreturn]] void Fail(const Error& e, const std::string& context) {
    const std::string message = context + ": " + e.message();
    broken = message;
    throw Error(e.status(), e.backend(), message);
  }
  [[noreturn]] void Fail(const std::exception& e, const std::string& context) {
    const std::string message = context + ": " + e.what();
    broken = message;
    throw Error(PLEXUS_ERR_INTERNAL, "plexus", message);
  }

  std::vector<GradientShape> Shapes() const {
    std::vector<GradientShape> shapes;
    shapes.reserve(params.size());
    for (const Parameter& p : params) shapes.push_back({p.count, p.dtype, p.device});
    return shapes;
  }

  std::string Name(size_t i) const {
    return "'" + (params[i].name.empty() ? "#" + std::to_string(i) : params[i].name) + "'";
  }

  std::string NameList(std::span<const size_t> indices, size_t max = 8) const {
    std::string s;
    for (size_t k = 0; k < indices.size() && k < max; ++k) s += (k ? ", " : "") + Name(indices[k]);
    if (indices.size() > max) s += " and " + std::to_string(indices.size() - max) + " more";
    return s;
  }

  void* View(size_t i) {
    const Slot& s = slots[i];
    Bucket& b = buckets[s.bucket];
    return reinterpret_cast<std::byte*>(b.data()) + s.offset * ElementSize(b.dtype);
  }

  void Build(const BucketAssignment& a) {
    std::vector<Bucket> built(a.buckets.size());
    std::vector<Slot> placed(params.size());
    for (size_t b = 0; b < a.buckets.size(); ++b) {
      Bucket& bucket = built[b];
      bucket.parameters = a.buckets[b];
      bucket.size_limit = a.size_limits[b];
      bucket.dtype = params[bucket.parameters.front()].dtype;
      for (size_t i : bucket.parameters) {
        bucket.offsets.push_back(bucket.count);
        placed[i] = {b, bucket.count};
        bucket.count += params[i].count;
      }
      const uint64_t bytes = bucket.count * ElementSize(bucket.dtype);
      if (own_host_memory) {
        // Host buckets in the communicator's shared buffers where it has
        // them: on one host the allreduce then sums straight from every
        // rank's bucket (no copy in or out). Collective: every rank builds
        // the same buckets in the same order. (A BucketMemory given by the
        // caller allocates its own.)
        std::shared_ptr<void> shared = comm.mem_alloc(bytes);
        bucket.storage = Buffer(static_cast<std::byte*>(shared.get()), {memory, shared});
      } else {
        bucket.storage = Buffer(static_cast<std::byte*>(memory->allocate(bytes)), {memory, {}});
      }
    }
    buckets = std::move(built);
    slots = std::move(placed);
    ++generation;
  }

  void Rebuild() {
    std::vector<uint64_t> order = ready_order;
    order.resize(params.size());
    try {
      HostBroadcast(comm, *memory, order.data(), order.size(), DType::UInt64, 0);
    } catch (const Error& e) {
      Fail(e, "reducer: broadcast of rank 0's gradient ready order (bucket rebuild), rank " +
                  std::to_string(comm.rank()));
    }
    std::vector<size_t> indices(order.begin(), order.end());
    std::vector<uint8_t> seen(params.size(), 0);
    for (size_t i : indices) {
      if (i >= params.size() || seen[i]++) {
        Throw(PLEXUS_ERR_INTERNAL, "rank 0's gradient ready order is not a permutation of the " +
                                       std::to_string(params.size()) + " parameters");
      }
    }
    const uint64_t limits[] = {options.first_bucket_bytes, options.bucket_cap_bytes};
    const std::vector<GradientShape> shapes = Shapes();
    BucketAssignment a = ComputeBucketAssignmentBySize(shapes, limits, indices);
    // Keep the values: with bucket views the gradients live in the buckets.
    std::vector<Bucket> old = std::move(buckets);
    std::vector<Slot> old_slots = std::move(slots);
    try {
      Build(a);
    } catch (const Error& e) {
      buckets = std::move(old);
      slots = std::move(old_slots);
      Fail(e, "reducer: allocating the rebuilt buckets (Communicator::mem_alloc), rank " +
                  std::to_string(comm.rank()));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const Bucket& from = old[old_slots[i].bucket];
      const size_t esize = ElementSize(params[i].dtype);
      memory->copy(View(i),
                   static_cast<const std::byte*>(from.data()) + old_slots[i].offset * esize,
                   params[i].count * esize);
    }
    rebuilt = true;
    rebuilt_order = std::move(indices);
  }

  void Launch(size_t b) {
    Bucket& bucket = buckets[b];
    if (!launched_any) {
      launched_any = true;
      first_launch = Clock::now();
    }
    GradBucket gb{
        b, buckets.size(), bucket.data(), bucket.count, bucket.dtype, bucket.parameters, memory};
    try {
      if (hook) {
        bucket.future = hook(comm, gb);
      } else {
        const std::optional<plexus_placement> where = memory->placement_for_post(StreamOrdered());
        bucket.future = BucketFuture(
            comm.allreduce(bucket.data(), bucket.data(), bucket.count, bucket.dtype,
                           DividesOnCopy(bucket.dtype, comm) ? ReduceOp::Sum : ReduceOp::Avg,
                           where ? &*where : nullptr));
      }
    } catch (const Error& e) {
      Fail(e, BucketContext(b));
    } catch (const std::exception& e) {
      Fail(e, BucketContext(b) + ": the comm hook threw");
    }
    bucket.launched = true;
  }

  std::string BucketContext(size_t b) const {
    return "reducer: all-reduce of bucket " + std::to_string(b) + " of " +
           std::to_string(buckets.size()) + " (" + std::to_string(buckets[b].parameters.size()) +
           " parameters: " + NameList(buckets[b].parameters, 4) + "), iteration " +
           std::to_string(iterations + 1) + ", rank " + std::to_string(comm.rank());
  }

  void LaunchReadyBuckets() {
    while (next_bucket < buckets.size() && buckets[next_bucket].pending == 0) {
      Launch(next_bucket);
      ++next_bucket;
    }
    if (next_bucket == buckets.size() && options.find_unused_parameters && used_work.completed() &&
        global_used.empty()) {
      global_used = local_used;
      try {
        if (host_control) {
          used_work = comm.allreduce(global_used.data(), global_used.data(), global_used.size(),
                                     DType::Int32, ReduceOp::Sum);
        } else {  // staged through device memory: done when it returns
          HostAllreduce(comm, *memory, global_used.data(), global_used.size(), DType::Int32,
                        ReduceOp::Sum);
        }
      } catch (const Error& e) {
        Fail(e, "reducer: all-reduce of the used-parameter bitmap, rank " +
                    std::to_string(comm.rank()));
      }
    }
  }

  // Lets backends without a progress thread move, and notes completions.
  void Poll() {
    try {
      while (next_unfinished < next_bucket && buckets[next_unfinished].future.test()) {
        ++next_unfinished;
      }
    } catch (const Error& e) {
      Fail(e, BucketContext(next_unfinished));
    }
  }

  void MarkReady(size_t i, void* grad) {
    if (ready[i]) {
      Throw(PLEXUS_ERR_INVALID_USAGE,
            "parameter " + Name(i) + " (index " + std::to_string(i) +
                ") was marked ready twice in iteration " + std::to_string(iterations + 1) +
                " on rank " + std::to_string(comm.rank()) +
                ". A parameter may produce one gradient per synchronised backward: it was "
                "probably used by several backward passes of one iteration (reentrant activation "
                "checkpointing, or backward() called twice before the next forward), or "
                "find_unused_parameters counted it unused although it got a gradient");
    }
    ready[i] = 1;
    void* view = View(i);
    const Parameter& p = params[i];
    const double divisor =
        hook || !DividesOnCopy(p.dtype, comm) ? 1.0 : static_cast<double>(comm.size());
    if (grad == nullptr) {
      memory->zero(view, p.count * ElementSize(p.dtype));
    } else {
      memory->copy_divided(view, grad, p.count, p.dtype, divisor);
      if (grad != view) grads[i] = grad;
    }
    if (rebuild_enabled && !rebuilt) ready_order.push_back(i);
    if (--buckets[slots[i].bucket].pending == 0) LaunchReadyBuckets();
  }

  void Begin(std::span<const size_t> unused) {
    if (in_iteration) {
      Throw(PLEXUS_ERR_INVALID_USAGE,
            "expected to have finished reduction in the prior iteration before starting a new "
            "one (rank " +
                std::to_string(comm.rank()) +
                "): finalize() was not called after the last backward");
    }
    if (!unused.empty() && !options.find_unused_parameters) {
      Throw(PLEXUS_ERR_INVALID_USAGE,
            "prepare_for_backward was given unused parameters but find_unused_parameters is off");
    }
    for (size_t i : unused) {
      if (i >= params.size()) {
        Throw(PLEXUS_ERR_INVALID_ARGUMENT, "unused parameter index " + std::to_string(i) +
                                               " out of range (" + std::to_string(params.size()) +
                                               " parameters)");
      }
    }
    if (rebuild_enabled && !rebuilt && (iterations >= 1 || rebuild_first)) Rebuild();
    start = Clock::now();
    launched_any = false;
    std::fill(grads.begin(), grads.end(), nullptr);
    std::fill(ready.begin(), ready.end(), 0);
    for (Bucket& b : buckets) {
      b.pending = b.parameters.size();
      b.launched = false;
    }
    next_bucket = next_unfinished = 0;
    local_used.assign(options.find_unused_parameters ? params.size() : 0, 1);
    global_used.clear();
    if (!rebuilt) ready_order.clear();
    in_iteration = true;
    for (size_t i : unused) {
      local_used[i] = 0;
      if (!ready[i]) MarkReady(i, nullptr);
    }
  }

  void Finish() {
    finalize_start = Clock::now();
    std::vector<size_t> missing;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!ready[i]) missing.push_back(i);
    }
    // Reduce with zeros in their place, so that every rank's collectives still match.
    for (size_t i : missing) {
      if (!local_used.empty()) local_used[i] = 0;
      MarkReady(i, nullptr);
    }
    in_iteration = false;  // from here on, a failure leaves the reducer ready for a new iteration
    for (size_t b = next_unfinished; b < buckets.size(); ++b) {
      try {
        buckets[b].future.wait();
      } catch (const Error& e) {
        Fail(e, BucketContext(b) +
                    (e.status() == PLEXUS_ERR_TIMEOUT || e.status() == PLEXUS_ERR_REMOTE
                         ? " (if ranks run different numbers of iterations, i.e. uneven inputs, "
                           "the ranks that ran out must keep joining in: DDP's join())"
                         : ""));
      }
    }
    if (options.find_unused_parameters) {
      try {
        used_work.wait();
      } catch (const Error& e) {
        Fail(e, "reducer: all-reduce of the used-parameter bitmap, rank " +
                    std::to_string(comm.rank()));
      }
    }
    const auto done = Clock::now();
    for (size_t i = 0; i < params.size(); ++i) {
      if (grads[i] != nullptr) {
        memory->copy(grads[i], View(i), params[i].count * ElementSize(params[i].dtype));
      }
    }
    if (!zero_iteration) Record(done);
    ++iterations;
    if (!missing.empty() && !zero_iteration) {
      Throw(PLEXUS_ERR_INVALID_USAGE,
            "rank " + std::to_string(comm.rank()) + ": " + std::to_string(missing.size()) +
                " parameter(s) produced no gradient in iteration " + std::to_string(iterations) +
                ": " + NameList(missing) +
                (options.find_unused_parameters
                     ? ". They are reachable from the outputs of forward() but the loss does not "
                       "use them: make the loss use every output, or detach the outputs it does "
                       "not use"
                     : ". Every parameter must take part in computing the loss; if some "
                       "legitimately do not (conditional branches, frozen heads), construct DDP "
                       "with find_unused_parameters = true, or set requires_grad = false on those "
                       "that never train") +
                ". Their buckets were reduced with zeros so that the ranks stay in step");
    }
  }

  void Record(Clock::time_point done) {
    IterationTimes t;
    t.backward_compute_time = Micros(start, finalize_start);
    if (launched_any) {
      t.backward_comm_time = Micros(first_launch, done);
      t.backward_compute_comm_overlap_time = Micros(first_launch, finalize_start);
    }
    t.comm_not_hidden_time = Micros(finalize_start, done);
    last = t;
    if (iterations >= 1) {  // the first iteration (one big bucket, warm-up) is left out
      ++recorded;
      sum.backward_compute_time += t.backward_compute_time;
      sum.backward_comm_time += t.backward_comm_time;
      sum.backward_compute_comm_overlap_time += t.backward_compute_comm_overlap_time;
      sum.comm_not_hidden_time += t.comm_not_hidden_time;
    }
  }
};

Reducer::Reducer(Communicator& comm, std::vector<Parameter> parameters, ReducerOptions options,
                 std::shared_ptr<BucketMemory> memory)
    : impl_(std::make_unique<Impl>(comm, std::move(parameters), options, std::move(memory))) {
  Impl& m = *impl_;
  if (m.params.empty()) Throw(PLEXUS_ERR_INVALID_ARGUMENT, "no parameters to reduce");
  if (options.bucket_cap_bytes == 0 || options.first_bucket_bytes == 0) {
    Throw(PLEXUS_ERR_INVALID_ARGUMENT, "bucket_cap_bytes and first_bucket_bytes must be positive");
  }
  for (size_t i = 0; i < m.params.size(); ++i) {
    const Parameter& p = m.params[i];
    if (!IsGradientDType(p.dtype)) {
      Throw(PLEXUS_ERR_INVALID_ARGUMENT,
            "parameter " + m.Name(i) + " has dtype " + ToString(p.dtype) +
                "; gradients must be float16, bfloat16, float32 or float64");
    }
    if (p.device != m.memory->device()) {
      Throw(PLEXUS_ERR_INVALID_ARGUMENT,
            "parameter " + m.Name(i) + " is on " +
                (p.device < 0 ? std::string("host memory") : "device " + std::to_string(p.device)) +
                " but the buckets are in " + m.memory->describe() +
                "; every parameter must be where the buckets are");
    }
    if (SaturatingMul(p.count, ElementSize(p.dtype)) > (uint64_t{1} << 48)) {
      Throw(PLEXUS_ERR_INVALID_ARGUMENT, "parameter " + m.Name(i) + " has an impossible size (" +
                                             std::to_string(p.count) + " elements)");
    }
  }
  if ((comm.capabilities().memory_types & (1u << m.memory->memory_type())) == 0) {
    Throw(PLEXUS_ERR_UNSUPPORTED,
          "backend '" + comm.backend_name() + "' cannot communicate " + m.memory->describe() +
              ", where the buckets are" +
              (m.memory->memory_type() == PLEXUS_MEMORY_CUDA
                   ? ": use a backend with CUDA memory, e.g. NCCL (PLEXUS_BACKEND=nccl)"
                   : ""));
  }
  // PyTorch's choice (DistributedDataParallel._ddp_init_helper): without
  // find_unused_parameters the first iteration runs on one bucket per dtype,
  // then the buckets are rebuilt in the order gradients really arrive.
  std::vector<uint64_t> limits;
  if (options.static_graph || !options.find_unused_parameters) {
    limits = {std::numeric_limits<uint64_t>::max()};
  } else if (options.first_bucket_bytes < options.bucket_cap_bytes) {
    limits = {options.first_bucket_bytes, options.bucket_cap_bytes};
  } else {
    limits = {options.bucket_cap_bytes};
  }
  m.rebuild_enabled = options.static_graph || !options.find_unused_parameters;
  if (m.rebuild_enabled && !options.ready_order.empty()) {
    if (options.ready_order.size() != m.params.size()) {
      Throw(PLEXUS_ERR_INVALID_ARGUMENT,
            "ready_order has " + std::to_string(options.ready_order.size()) +
                " entries; the model has " + std::to_string(m.params.size()) + " parameters");
    }
    m.ready_order.assign(options.ready_order.begin(), options.ready_order.end());
    m.rebuild_first = true;
  }
  const std::vector<GradientShape> shapes = m.Shapes();
  BucketAssignment a = ComputeBucketAssignmentBySize(shapes, limits);
  std::reverse(a.buckets.begin(), a.buckets.end());
  std::reverse(a.size_limits.begin(), a.size_limits.end());
  m.Build(a);
  m.grads.assign(m.params.size(), nullptr);
  m.ready.assign(m.params.size(), 0);
}

Reducer::~Reducer() = default;

void Reducer::prepare_for_backward(std::span<const size_t> unused) {
  if (!impl_->require_sync) return;
  impl_->CheckUsable();
  impl_->zero_iteration = false;
  impl_->Begin(unused);
}

void Reducer::mark_ready(size_t index, void* grad) {
  Impl& m = *impl_;
  if (!m.require_sync) return;
  m.CheckUsable();
  if (!m.in_iteration) {
    Throw(PLEXUS_ERR_INVALID_USAGE, "mark_ready(" + std::to_string(index) +
                                        ") outside an iteration: call prepare_for_backward first");
  }
  if (index >= m.params.size()) {
    Throw(PLEXUS_ERR_INVALID_ARGUMENT, "mark_ready: parameter index " + std::to_string(index) +
                                           " out of range (" + std::to_string(m.params.size()) +
                                           " parameters)");
  }
  if (grad == nullptr && m.params[index].count > 0) {
    Throw(PLEXUS_ERR_INVALID_ARGUMENT, "mark_ready: null gradient for parameter " + m.Name(index));
  }
  if (grad == nullptr) grad = m.View(index);  // zero elements: nothing to read or write
  m.MarkReady(index, grad);
  m.Poll();
}

void Reducer::mark_unused(size_t index) {
  Impl& m = *impl_;
  if (!m.require_sync) return;
  m.CheckUsable();
  if (!m.in_iteration || !m.options.find_unused_parameters || index >= m.params.size()) {
    Throw(PLEXUS_ERR_INVALID_USAGE, "mark_unused(" + std::to_string(index) +
                                        ") needs an iteration, find_unused_parameters and a "
                                        "parameter index in range");
  }
  m.local_used[index] = 0;
  m.MarkReady(index, nullptr);
  m.Poll();
}

void Reducer::finalize() {
  Impl& m = *impl_;
  if (!m.require_sync) return;
  m.CheckUsable();
  if (!m.in_iteration) {
    Throw(PLEXUS_ERR_INVALID_USAGE, "finalize() without prepare_for_backward()");
  }
  m.Finish();
}

void Reducer::run_zero_iteration() {
  Impl& m = *impl_;
  m.CheckUsable();
  m.zero_iteration = true;
  std::vector<size_t> all;
  if (m.options.find_unused_parameters) {
    for (size_t i = 0; i < m.params.size(); ++i) all.push_back(i);
  }
  try {
    m.Begin(all);
    for (size_t i = m.params.size(); i-- > 0;) {
      if (!m.ready[i]) m.MarkReady(i, nullptr);
    }
    m.Finish();
  } catch (...) {
    m.zero_iteration = false;
    throw;
  }
  m.zero_iteration = false;
}

bool Reducer::in_backward() const {
  return impl_->in_iteration;
}

bool Reducer::needs_gradient(size_t index) const {
  const Impl& m = *impl_;
  return !m.in_iteration && m.options.find_unused_parameters && index < m.local_used.size() &&
         m.local_used[index] == 0 && index < m.global_used.size() && m.global_used[index] > 0;
}

bool Reducer::globally_used(size_t index) const {
  const Impl& m = *impl_;
  if (!m.options.find_unused_parameters) return true;
  return index < m.global_used.size() && m.global_used[index] > 0;
}

void* Reducer::bucket_view(size_t index) {
  if (index >= impl_->params.size()) {
    Throw(PLEXUS_ERR_INVALID_ARGUMENT,
          "bucket_view: parameter index " + std::to_string(index) + " out of range");
  }
  return impl_->View(index);
}

uint64_t Reducer::buckets_generation() const {
  return impl_->generation;
}

void Reducer::register_comm_hook(CommHook hook) {
  Impl& m = *impl_;
  if (m.iterations > 0 || m.in_iteration) {
    Throw(PLEXUS_ERR_INVALID_USAGE, "register_comm_hook must be called before the first iteration");
  }
  if (m.hook) Throw(PLEXUS_ERR_INVALID_USAGE, "register_comm_hook: a hook is already registered");
  m.hook = std::move(hook);
}

Reducer::NoSyncGuard::NoSyncGuard(Reducer& r) : reducer_(&r), previous_(r.impl_->require_sync) {
  if (r.impl_->in_iteration) {
    Throw(PLEXUS_ERR_INVALID_USAGE, "no_sync() inside a backward pass");
  }
  r.impl_->require_sync = false;
}

Reducer::NoSyncGuard::NoSyncGuard(NoSyncGuard&& other) noexcept
    : reducer_(std::exchange(other.reducer_, nullptr)), previous_(other.previous_) {}

Reducer::NoSyncGuard::~NoSyncGuard() {
  if (reducer_) reducer_->impl_->require_sync = previous_;
}

bool Reducer::require_backward_grad_sync() const {
  return impl_->require_sync;
}

const std::vector<Parameter>& Reducer::parameters() const {
  return impl_->params;
}

ReducerStats Reducer::stats() const {
  const Impl& m = *impl_;
  ReducerStats s;
  for (const Bucket& b : m.buckets) {
    s.buckets.push_back({b.count * ElementSize(b.dtype), b.dtype, b.size_limit, b.parameters,
                         m.comm.allreduce_scheme(b.count, b.dtype)});
  }
  s.has_rebuilt_bucket = m.rebuilt;
  s.ready_order = m.rebuilt_order;
  s.iterations = m.iterations;
  s.last = m.last;
  if (m.recorded > 0) {
    const double n = static_cast<double>(m.recorded);
    s.average = {m.sum.backward_compute_time / n, m.sum.backward_comm_time / n,
                 m.sum.backward_compute_comm_overlap_time / n, m.sum.comm_not_hidden_time / n};
  }
  s.bucket_cap_bytes = m.options.bucket_cap_bytes;
  s.first_bucket_bytes = m.options.first_bucket_bytes;
  s.find_unused_parameters = m.options.find_unused_parameters;
  s.comm_hook = static_cast<bool>(m.hook);
  s.backend = m.comm.backend_name();
  s.world_size = m.comm.size();
  return s;
}

}  // namespace plexus::reducer
