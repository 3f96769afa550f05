#include "plexus_backend.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <utility>

#include "plexus/error.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/settings/environment.hpp"

namespace plexus_torch {
namespace {

using c10d::OpType;

// --- errors -------------------------------------------------------------------

// What went wrong at run time (a dead peer, a timeout, a mismatch) reaches
// Python as torch.distributed.DistBackendError, like NCCL's and Gloo's.
std::exception_ptr BackendError(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

std::exception_ptr ToTorch(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error&) {
    return e;
  } catch (const std::exception& x) {
    return BackendError(x.what());
  } catch (...) {
    return BackendError("plexus: unknown exception");
  }
}

// Posting: what the caller got wrong, or what the backend cannot do, is a
// RuntimeError (TORCH_CHECK) at once; anything else a DistBackendError.
template <class F>
auto Posting(F&& post) -> decltype(post()) {
  try {
    return post();
  } catch (const plexus::Error& e) {
    const int32_t s = e.status();
    if (s == PLEXUS_ERR_INVALID_ARGUMENT || s == PLEXUS_ERR_INVALID_USAGE ||
        s == PLEXUS_ERR_UNSUPPORTED) {
      TORCH_CHECK(false, e.what());
    }
    std::rethrow_exception(BackendError(e.what()));
  }
}

// --- the store ----------------------------------------------------------------

// PyTorch's c10d::Store (TCPStore, FileStore, PrefixStore, ...) as Plexus's
// rendezvous store. c10d stores throw; this returns a Status.
class C10dStore final : public plexus::RendezvousStore {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  plexus::Status Set(const std::string& key, const plexus::Bytes& value,
                     std::chrono::milliseconds) override {
    return Do("set " + key, [&] { store_->set(key, value); });
  }
  plexus::Status Get(const std::string& key, plexus::Bytes* value,
                     std::chrono::milliseconds timeout) override {
    plexus::Status st = Wait({key}, timeout);
    if (!st.ok()) return st;
    plexus::Bytes got;
    st = Do("get " + key, [&] { got = store_->get(key); });
    if (st.ok()) *value = std::move(got);
    return st;
  }
  plexus::Status Add(const std::string& key, int64_t delta, int64_t* new_value,
                     std::chrono::milliseconds) override {
    return Do("add " + key, [&] { *new_value = store_->add(key, delta); });
  }
  plexus::Status Wait(const std::vector<std::string>& keys,
                      std::chrono::milliseconds timeout) override {
    try {
      store_->wait(keys, timeout);
      return plexus::Status::Ok();
    } catch (const std::exception& e) {
      return plexus::Status::Timeout("the c10d store did not have " + keys.front() +
                                     (keys.size() > 1 ? " (and others)" : "") + " within " +
                                     std::to_string(timeout.count()) + " ms: " + e.what());
    }
  }

 private:
  template <class F>
  plexus::Status Do(const std::string& what, F&& f) {
    try {
      f();
      return plexus::Status::Ok();
    } catch (const std::exception& e) {
      return plexus::Status::Remote("c10d store " + what + ": " + e.what());
    }
  }
  c10::intrusive_ptr<c10d::Store> store_;
};

// --- tensors ------------------------------------------------------------------

std::optional<plexus::DType> DTypeOf(at::ScalarType s) {
  switch (s) {
    case at::kChar: return plexus::DType::Int8;
    case at::kByte: return plexus::DType::UInt8;
    case at::kBool: return plexus::DType::UInt8;
    case at::kShort: return plexus::DType::Int16;
    case at::kUInt16: return plexus::DType::UInt16;
    case at::kInt: return plexus::DType::Int32;
    case at::kUInt32: return plexus::DType::UInt32;
    case at::kLong: return plexus::DType::Int64;
    case at::kUInt64: return plexus::DType::UInt64;
    case at::kHalf: return plexus::DType::Float16;
    case at::kBFloat16: return plexus::DType::BFloat16;
    case at::kFloat: return plexus::DType::Float32;
    case at::kDouble: return plexus::DType::Float64;
    case at::kComplexFloat: return plexus::DType::Float32;   // as (re, im) pairs
    case at::kComplexDouble: return plexus::DType::Float64;  // as (re, im) pairs
    default: return std::nullopt;
  }
}

// A tensor as Plexus sees it: a dense buffer of count elements of dtype.
struct Flat {
  at::Tensor tensor;  // contiguous: the caller's, or a copy of it
  void* data = nullptr;
  uint64_t count = 0;
  plexus::DType dtype = plexus::DType::Float32;
  plexus_placement placement{};
  bool copied = false;  // tensor is a copy: results go back to the caller's
  const plexus_placement* where() const {
    return placement.memory_type == PLEXUS_MEMORY_HOST ? nullptr : &placement;
  }
};

Flat AsFlat(const at::Tensor& t, const char* op, const std::string& backend) {
  TORCH_CHECK(t.defined(), "plexus ", op, ": an undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "plexus ", op, ": ", t.layout(),
              " tensors are not supported (dense tensors only)");
  const auto dtype = DTypeOf(t.scalar_type());
  TORCH_CHECK(dtype.has_value(), "plexus ", op, ": ", t.scalar_type(),
              " tensors are not supported by Plexus (backend ", backend, ")");
  Flat f;
  f.copied = !t.is_contiguous();
  f.tensor = f.copied ? t.contiguous() : t;
  f.dtype = *dtype;
  f.count = uint64_t(t.numel()) * (t.is_complex() ? 2 : 1);
  f.data = f.tensor.data_ptr();
  f.placement.struct_size = sizeof f.placement;
  f.placement.device = -1;
  if (t.is_cuda()) {
    f.placement.memory_type = PLEXUS_MEMORY_CUDA;
    f.placement.device = t.device().index();
  } else {
    TORCH_CHECK(t.is_cpu(), "plexus ", op, ": ", t.device(),
                " tensors are not supported (cpu, and cuda on a backend with CUDA memory)");
    f.placement.memory_type = PLEXUS_MEMORY_HOST;
  }
  return f;
}

// An output that was not contiguous gets the result back after the operation.
void CopyBackLater(PlexusWork& w, const at::Tensor& caller, const Flat& f) {
  if (!f.copied) return;
  w.finishers.push_back([caller, copy = f.tensor]() mutable { caller.copy_(copy); });
}

const at::Tensor& OneTensor(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "plexus ", op, ": one tensor per call (got ", tensors.size(),
              "; one process per device)");
  return tensors[0];
}

uint32_t CheckedRank(int64_t r, int size, const char* what, const char* op) {
  TORCH_CHECK(r >= 0 && r < size, "plexus ", op, ": ", what, " ", r, " is not a rank of this ",
              "group (size ", size, ")");
  return uint32_t(r);
}

// --- reduce ops -----------------------------------------------------------------

// How torch's ReduceOp runs on Plexus: natively (op), as a multiply then a sum
// (PREMUL_SUM), or as an allgather folded here (bitwise ops, which the Plexus
// ABI does not have).
struct Reduction {
  enum Kind { kNative, kPremul, kFold } kind = kNative;
  plexus::ReduceOp op = plexus::ReduceOp::Sum;
  c10d::ReduceOp::RedOpType fold = c10d::ReduceOp::BAND;
};

const char* OpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "sum";
    case c10d::ReduceOp::AVG: return "avg";
    case c10d::ReduceOp::PRODUCT: return "product";
    case c10d::ReduceOp::MIN: return "min";
    case c10d::ReduceOp::MAX: return "max";
    case c10d::ReduceOp::BAND: return "band";
    case c10d::ReduceOp::BOR: return "bor";
    case c10d::ReduceOp::BXOR: return "bxor";
    case c10d::ReduceOp::PREMUL_SUM: return "premul_sum";
    default: return "unknown";
  }
}

Reduction ReductionOf(const c10d::ReduceOp& rop, const at::Tensor& t, const char* op,
                      const std::string& backend) {
  const auto o = rop.op_;
  const bool is_bool = t.scalar_type() == at::kBool;
  const bool integral = at::isIntegralType(t.scalar_type(), /*includeBool=*/true);
  auto refuse = [&](const char* why) {
    TORCH_CHECK(false, "plexus ", op, ": ReduceOp.", OpName(o), " on ", t.scalar_type(),
                " tensors is not supported (", why, "; backend ", backend, ")");
  };
  if (t.is_complex() && o != c10d::ReduceOp::SUM && o != c10d::ReduceOp::AVG &&
      o != c10d::ReduceOp::PREMUL_SUM) {
    refuse("complex numbers have no order, and their product is not elementwise");
  }
  Reduction r;
  switch (o) {
    case c10d::ReduceOp::SUM:
      r.op = is_bool ? plexus::ReduceOp::Max : plexus::ReduceOp::Sum;  // bool: or
      return r;
    case c10d::ReduceOp::AVG:
      if (is_bool) refuse("a mean of booleans is not a boolean");
      r.op = plexus::ReduceOp::Avg;
      return r;
    case c10d::ReduceOp::PRODUCT:
      r.op = is_bool ? plexus::ReduceOp::Min : plexus::ReduceOp::Prod;  // bool: and
      return r;
    case c10d::ReduceOp::MIN:
      r.op = plexus::ReduceOp::Min;
      return r;
    case c10d::ReduceOp::MAX:
      r.op = plexus::ReduceOp::Max;
      return r;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (!integral) refuse("bitwise operations take integer and bool tensors");
      if (is_bool && o != c10d::ReduceOp::BXOR) {
        r.op = o == c10d::ReduceOp::BAND ? plexus::ReduceOp::Min : plexus::ReduceOp::Max;
        return r;
      }
      r.kind = Reduction::kFold;
      r.fold = o;
      return r;
    case c10d::ReduceOp::PREMUL_SUM:
      if (integral) refuse("the factor is a floating-point number");
      r.kind = Reduction::kPremul;
      return r;
    default:
      refuse("unknown ReduceOp");
  }
  return r;
}

// PREMUL_SUM's factor, applied to t in place.
void Premultiply(const c10d::ReduceOp& rop, at::Tensor& t) {
  auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(rop.supplement_.get());
  TORCH_CHECK(s != nullptr, "plexus: ReduceOp.PREMUL_SUM without its factor");
  if (s->tensor_factor.defined()) {
    t.mul_(s->tensor_factor.to(t.device()));
  } else {
    t.mul_(s->double_factor);
  }
}

// Folds rows [size, n] of gathered with the bitwise op into a tensor of n.
at::Tensor Fold(const at::Tensor& gathered, c10d::ReduceOp::RedOpType op) {
  at::Tensor acc = gathered[0].clone();
  for (int64_t r = 1; r < gathered.size(0); ++r) {
    if (op == c10d::ReduceOp::BAND) acc.bitwise_and_(gathered[r]);
    if (op == c10d::ReduceOp::BOR) acc.bitwise_or_(gathered[r]);
    if (op == c10d::ReduceOp::BXOR) acc.bitwise_xor_(gathered[r]);
  }
  return acc;
}

OpLabel Described(const char* op, const at::Tensor& t) {
  return {op, t.scalar_type(), t.numel()};
}

// Packs tensors (each flattened) into one contiguous buffer of their dtype.
at::Tensor Pack(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of packed into each of tensors.
void Unpack(const at::Tensor& packed, std::vector<at::Tensor>& tensors) {
  int64_t at = 0;
  for (auto& t : tensors) {
    t.copy_(packed.narrow(0, at, t.numel()).view(t.sizes()));
    at += t.numel();
  }
}

void CheckSameKind(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "plexus ", op, ": tensors of ",
              a.scalar_type(), " and ", b.scalar_type(), " (one dtype per call)");
  TORCH_CHECK(a.device() == b.device(), "plexus ", op, ": tensors on ", a.device(), " and ",
              b.device());
}

// The world communicator plexus_torch.init_process_group() made, waiting
// for the creator call of the default group.
std::mutex g_world_mutex;
std::optional<plexus::Communicator> g_world;

// Every live backend, for ReleaseAll.
std::mutex g_live_mutex;
std::vector<PlexusBackend*> g_live;

std::chrono::milliseconds TimeoutFor(std::chrono::milliseconds torch_timeout) {
  // PLEXUS_TIMEOUT, when set, is what the user asked of Plexus; otherwise
  // the group's timeout from torch (init_process_group(timeout=...)).
  const char* v = plexus::settings::Raw(plexus::settings::Id::kTimeout);
  if (v && *v) return std::chrono::milliseconds(0);  // from_store/from_env read it
  return torch_timeout;
}

}  // namespace

// A blocking call (async_op=False) is run to completion before it returns:
// c10d waits for it at once anyway, and run here, right after its post, a
// small operation runs on this thread instead of being taken by the
// backend's worker while Python is between the post and the wait (which
// costs a thread switch each way). Failures stay in the work for wait().
template <class Options>
c10::intrusive_ptr<c10d::Work> Handed(const c10::intrusive_ptr<PlexusWork>& work,
                                      const Options& opts) {
  if (!opts.asyncOp) work->Settle();
  return work;
}

std::string OpLabel::Text() const {
  if (!dtype) return op;
  return std::string(op) + " (" + std::string(c10::toString(*dtype)) + ", " +
         std::to_string(numel) + " elements)";
}

// --- PlexusWork ------------------------------------------------------------------

PlexusWork::PlexusWork(int rank, c10d::OpType type, OpLabel what,
                       std::vector<at::Tensor> outputs,
                       std::shared_ptr<CompletionThread> completer,
                       std::chrono::milliseconds timeout)
    : c10d::Work(rank, type),
      what_(what),
      outputs_(std::move(outputs)),
      completer_(std::move(completer)),
      timeout_(timeout) {}

PlexusWork::~PlexusWork() = default;

void PlexusWork::Complete(std::exception_ptr error) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return;
    completed_ = true;
    exception_ = error;
    future = future_;
    if (recordFunctionEndCallback_) {
      recordFunctionEndCallback_();
      recordFunctionEndCallback_ = nullptr;
    }
  }
  cv_.notify_all();
  if (future) {
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(c10::IValue(outputs_));
    }
  }
}

void PlexusWork::Drive(std::chrono::milliseconds timeout, bool callers_timeout) {
  for (plexus::Work& w : posted) {
    try {
      w.wait(timeout);
    } catch (const plexus::Error& e) {
      if (e.status() == PLEXUS_ERR_TIMEOUT && callers_timeout) {
        // The caller's own limit: the operation goes on; wait again later.
        std::rethrow_exception(BackendError(what_.Text() + " did not complete within the " +
                                            std::to_string(timeout.count()) + " ms given to " +
                                            "wait(): " + e.what()));
      }
      Complete(BackendError(e.what()));
      return;
    } catch (...) {
      Complete(ToTorch(std::current_exception()));
      return;
    }
  }
  try {
    for (auto& f : finishers) f();
  } catch (...) {
    Complete(ToTorch(std::current_exception()));
    return;
  }
  Complete(nullptr);
}

bool PlexusWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
    if (on_thread_) return false;
  }
  std::unique_lock<std::mutex> drive(drive_mutex_, std::try_to_lock);
  if (!drive.owns_lock()) return false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
  }
  try {
    for (plexus::Work& w : posted) {
      if (!w.test()) return false;
    }
  } catch (const plexus::Error& e) {
    Complete(BackendError(e.what()));
    return true;
  }
  Drive(std::chrono::milliseconds(-1), false);  // every one is done: finish
  return true;
}

bool PlexusWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr PlexusWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

bool PlexusWork::wait(std::chrono::milliseconds timeout) {
  const bool callers = timeout.count() > 0;  // c10d's kNoTimeout is 0
  bool on_thread = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    on_thread = on_thread_ && !completed_;
  }
  if (on_thread) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (callers) {
      if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
        std::rethrow_exception(BackendError(what_.Text() + " did not complete within the " +
                                            std::to_string(timeout.count()) +
                                            " ms given to wait()"));
      }
    } else {
      cv_.wait(lock, [&] { return completed_; });
    }
  } else {
    std::lock_guard<std::mutex> drive(drive_mutex_);
    bool done = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done = completed_;
    }
    if (!done) Drive(callers ? timeout : std::chrono::milliseconds(-1), callers);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> PlexusWork::getFuture() {
  bool hand_over = false;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
      std::vector<c10::Device> devices;
      for (const auto& t : outputs_) {
        if (t.defined() && !t.is_cpu() &&
            std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
          devices.push_back(t.device());
        }
      }
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), devices);
      if (completed_) {
        if (exception_) {
          future_->setError(exception_);
        } else {
          future_->markCompleted(c10::IValue(outputs_));
        }
      } else if (!on_thread_) {
        on_thread_ = true;
        hand_over = true;
      }
    }
    future = future_;
  }
  if (hand_over && !completer_->Add(c10::intrusive_ptr<PlexusWork>::reclaim_copy(this))) {
    CompleteOnThread();  // the backend is gone: complete it here
  }
  return future;
}

std::vector<at::Tensor> PlexusWork::result() {
  return outputs_;
}

void PlexusWork::Settle() {
  CompleteOnThread();
}

void PlexusWork::CompleteOnThread() {
  std::lock_guard<std::mutex> drive(drive_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return;
  }
  Drive(std::chrono::milliseconds(-1), false);
}

// --- CompletionThread ---------------------------------------------------------------

namespace {
// Every completion thread's queue, for StopAllAndWait; expired ones are
// dropped as new threads are added.
std::mutex g_queues_mutex;
std::vector<std::weak_ptr<void>> g_queues;
}  // namespace

CompletionThread::CompletionThread(std::chrono::milliseconds timeout)
    : queue_(std::make_shared<Queue>()), thread_(&CompletionThread::Loop, queue_) {
  queue_->timeout = timeout;  // (read only by StopAllAndWait, after the registration below)
  std::lock_guard<std::mutex> lock(g_queues_mutex);
  std::erase_if(g_queues, [](const std::weak_ptr<void>& q) { return q.expired(); });
  g_queues.push_back(queue_);
}

CompletionThread::~CompletionThread() {
  Stop();
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the last owner was a work completed on it; the loop ends by itself
  } else if (thread_.joinable()) {
    thread_.join();
  }
}

bool CompletionThread::Add(c10::intrusive_ptr<PlexusWork> work) {
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    if (queue_->stop) return false;
    queue_->works.push_back(std::move(work));
  }
  queue_->cv.notify_one();
  return true;
}

void CompletionThread::Stop() {
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    queue_->stop = true;
  }
  queue_->cv.notify_one();
}

void CompletionThread::Loop(std::shared_ptr<Queue> q) {
  for (;;) {
    c10::intrusive_ptr<PlexusWork> work;
    {
      std::unique_lock<std::mutex> lock(q->mutex);
      q->cv.wait(lock, [&] { return q->stop || !q->works.empty(); });
      if (q->works.empty()) {  // stopping, nothing left
        q->finished = true;
        q->cv.notify_all();
        return;
      }
      work = std::move(q->works.front());
      q->works.pop_front();
    }
    work->CompleteOnThread();  // never throws: failures complete the work
    // `work` goes here, its future and the future's callbacks with it
    // (Python's included), before the loop can report finished.
  }
}

int CompletionThread::StopAllAndWait(std::chrono::milliseconds* bound) {
  std::vector<std::shared_ptr<Queue>> queues;
  std::chrono::milliseconds longest{0};
  {
    std::lock_guard<std::mutex> lock(g_queues_mutex);
    for (const auto& weak : g_queues) {
      if (auto q = weak.lock()) {
        queues.push_back(std::static_pointer_cast<Queue>(q));
        longest = std::max(longest, queues.back()->timeout);
      }
    }
  }
  *bound = longest + std::chrono::seconds(5);
  const auto deadline = std::chrono::steady_clock::now() + *bound;
  int running = 0;
  for (const auto& q : queues) {
    std::unique_lock<std::mutex> lock(q->mutex);
    q->stop = true;
    q->cv.notify_all();
    if (!q->cv.wait_until(lock, deadline, [&] { return q->finished; })) ++running;
  }
  return running;
}

// --- PlexusBackend ---------------------------------------------------------------

c10::intrusive_ptr<PlexusBackend> PlexusBackend::Create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  plexus::CommunicatorOptions options;
  options.timeout = TimeoutFor(timeout);
  {
    std::lock_guard<std::mutex> lock(g_world_mutex);
    if (g_world && int(g_world->rank()) == rank && int(g_world->size()) == size) {
      plexus::Communicator world = std::move(*g_world);
      g_world.reset();
      const auto t = world.timeout();
      return c10::make_intrusive<PlexusBackend>(std::move(world), t);
    }
  }
  TORCH_CHECK(store, "plexus: no store to meet the other ranks through");
  try {
    plexus::Communicator comm = plexus::Communicator::from_store(
        std::make_shared<C10dStore>(store), uint32_t(rank), uint32_t(size), options);
    const auto t = comm.timeout();
    return c10::make_intrusive<PlexusBackend>(std::move(comm), t);
  } catch (const plexus::Error& e) {
    std::rethrow_exception(BackendError(e.what()));
  }
}

std::tuple<int, int, int> PlexusBackend::PrepareWorldFromEnv() {
  std::lock_guard<std::mutex> lock(g_world_mutex);
  if (!g_world) {
    try {
      g_world.emplace(plexus::Communicator::from_env());
    } catch (const plexus::Error& e) {
      std::rethrow_exception(BackendError(e.what()));
    }
  }
  return {int(g_world->rank()), int(g_world->size()), int(g_world->local_rank())};
}

std::string PlexusBackend::BroadcastFromRankZero(const std::string& bytes) {
  std::lock_guard<std::mutex> lock(g_world_mutex);
  TORCH_CHECK(g_world, "plexus: no world communicator (call plexus_torch.init_process_group)");
  try {
    uint64_t n = bytes.size();
    g_world->broadcast(&n, 1, plexus::DType::UInt64, 0).wait();
    std::string out = g_world->rank() == 0 ? bytes : std::string(n, '\0');
    g_world->broadcast(out.data(), n, plexus::DType::UInt8, 0).wait();
    return out;
  } catch (const plexus::Error& e) {
    std::rethrow_exception(BackendError(e.what()));
  }
}

PlexusBackend::PlexusBackend(plexus::Communicator comm, std::chrono::milliseconds timeout)
    : c10d::Backend(int(comm.rank()), int(comm.size())),
      comm_(std::move(comm)),
      timeout_(timeout),
      completer_(std::make_shared<CompletionThread>(timeout)) {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  g_live.push_back(this);
}

PlexusBackend::~PlexusBackend() {
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    std::erase(g_live, this);
  }
  completer_->Stop();
}

void PlexusBackend::ReleaseAll() {
  // First every completion thread finishes what it holds (the works keep
  // their communicators alive, so releasing those first would not end them
  // sooner), with nothing posting through a communicator being moved out
  // from under it; a future's callbacks may post.
  std::chrono::milliseconds bound{0};
  if (int running = CompletionThread::StopAllAndWait(&bound); running > 0) {
    std::fprintf(stderr,
                 "plexus_torch: at exit, %d completion thread(s) still running a future's "
                 "callback after %lld ms; Python may end them in the middle\n",
                 running, static_cast<long long>(bound.count()));
  }
  std::vector<plexus::Communicator> released;
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    for (PlexusBackend* b : g_live) released.push_back(std::move(b->comm_));
  }
  {
    std::lock_guard<std::mutex> lock(g_world_mutex);
    if (g_world) released.push_back(std::move(*g_world));
    g_world.reset();
  }
  released.clear();  // each waits (bounded) for what it still runs
}

// A coalesced call is one work of several posts: each part is posted as
// its own call would be (asynchronously), then handed over whole.
template <class Options>
Options Part(const Options& opts) {
  Options part = opts;
  part.asyncOp = true;
  return part;
}

void PlexusBackend::Absorb(PlexusWork& work, const c10::intrusive_ptr<c10d::Work>& part) {
  auto& one = static_cast<PlexusWork&>(*part);
  --seq_;  // the parts are one operation of the sequence
  for (auto& p : one.posted) work.posted.push_back(std::move(p));
  for (auto& f : one.finishers) work.finishers.push_back(std::move(f));
  for (auto& k : one.keep) work.keep.push_back(std::move(k));
  one.posted.clear();
  one.finishers.clear();
}

c10::intrusive_ptr<PlexusWork> PlexusBackend::NewWork(c10d::OpType type, OpLabel what,
                                                      std::vector<at::Tensor> outputs) {
  ++seq_;
  return c10::make_intrusive<PlexusWork>(getRank(), type, what, std::move(outputs),
                                         completer_, timeout_);
}

void PlexusBackend::PostAllreduce(PlexusWork& work, const at::Tensor& t,
                                  const c10d::ReduceOp& rop, const char* name) {
  const std::string& backend = comm_.backend_name();
  const Reduction r = ReductionOf(rop, t, name, backend);
  Flat f = AsFlat(t, name, backend);
  if (r.kind == Reduction::kPremul) Premultiply(rop, f.tensor);
  if (r.kind == Reduction::kFold) {
    at::Tensor gathered = at::empty({int64_t(getSize()), t.numel()}, f.tensor.options());
    work.posted.push_back(
        comm_.allgather(f.data, gathered.data_ptr(), f.count, f.dtype, f.where()));
    work.keep.push_back(gathered);
    work.finishers.push_back([gathered, flat = f.tensor, fold = r.fold]() mutable {
      flat.view({-1}).copy_(Fold(gathered, fold));
    });
  } else {
    const plexus::ReduceOp op = r.kind == Reduction::kPremul ? plexus::ReduceOp::Sum : r.op;
    work.posted.push_back(comm_.allreduce(f.data, f.data, f.count, f.dtype, op, f.where()));
  }
  work.keep.push_back(f.tensor);
  CopyBackLater(work, t, f);
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  return Posting([&] {
    const at::Tensor& t = OneTensor(tensors, "allreduce");
    auto work = NewWork(OpType::ALLREDUCE, Described("allreduce", t), tensors);
    PostAllreduce(*work, t, opts.reduceOp, "allreduce");
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return Posting([&] {
    TORCH_CHECK(!tensors.empty(), "plexus allreduce_coalesced: no tensors");
    for (const auto& t : tensors) CheckSameKind(tensors[0], t, "allreduce_coalesced");
    auto work = NewWork(OpType::ALLREDUCE_COALESCED,
                        Described("allreduce_coalesced", tensors[0]), tensors);
    const Reduction r = ReductionOf(opts.reduceOp, tensors[0], "allreduce_coalesced",
                                    comm_.backend_name());
    if (r.kind != Reduction::kNative) {
      for (const auto& t : tensors) PostAllreduce(*work, t, opts.reduceOp, "allreduce_coalesced");
      return Handed(work, opts);
    }
    std::vector<const void*> sends;
    std::vector<void*> recvs;
    std::vector<uint64_t> counts;
    std::vector<Flat> flats;
    for (const auto& t : tensors) {
      flats.push_back(AsFlat(t, "allreduce_coalesced", comm_.backend_name()));
      sends.push_back(flats.back().data);
      recvs.push_back(flats.back().data);
      counts.push_back(flats.back().count);
    }
    work->posted.push_back(comm_.allreduce_coalesced(sends, recvs, counts, flats[0].dtype, r.op,
                                                     flats[0].where()));
    for (size_t i = 0; i < tensors.size(); ++i) {
      work->keep.push_back(flats[i].tensor);
      CopyBackLater(*work, tensors[i], flats[i]);
    }
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  return Posting([&] {
    const at::Tensor& t = OneTensor(tensors, "broadcast");
    const uint32_t root = CheckedRank(opts.rootRank, getSize(), "root", "broadcast");
    auto work = NewWork(OpType::BROADCAST, Described("broadcast", t), tensors);
    Flat f = AsFlat(t, "broadcast", comm_.backend_name());
    work->posted.push_back(comm_.broadcast(f.data, f.count, f.dtype, root, f.where()));
    work->keep.push_back(f.tensor);
    CopyBackLater(*work, t, f);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  return Posting([&] {
    const at::Tensor& t = OneTensor(tensors, "reduce");
    const uint32_t root = CheckedRank(opts.rootRank, getSize(), "root", "reduce");
    const std::string& backend = comm_.backend_name();
    const Reduction r = ReductionOf(opts.reduceOp, t, "reduce", backend);
    if (r.kind == Reduction::kFold) {
      // Every rank folds; only the root's result is kept, as reduce promises.
      auto work = NewWork(OpType::REDUCE, Described("reduce", t), tensors);
      if (getRank() == int(root)) {
        PostAllreduce(*work, t, opts.reduceOp, "reduce");
      } else {
        at::Tensor scratch = t.clone();
        PostAllreduce(*work, scratch, opts.reduceOp, "reduce");
      }
      return Handed(work, opts);
    }
    auto work = NewWork(OpType::REDUCE, Described("reduce", t), tensors);
    Flat f = AsFlat(t, "reduce", backend);
    if (r.kind == Reduction::kPremul) Premultiply(opts.reduceOp, f.tensor);
    const plexus::ReduceOp op = r.kind == Reduction::kPremul ? plexus::ReduceOp::Sum : r.op;
    work->posted.push_back(comm_.reduce(f.data, f.data, f.count, f.dtype, op, root, f.where()));
    work->keep.push_back(f.tensor);
    if (getRank() == int(root)) CopyBackLater(*work, t, f);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  return Posting([&] {
    CheckSameKind(output, input, "allgather_into_tensor");
    TORCH_CHECK(output.numel() == input.numel() * getSize(), "plexus allgather_into_tensor: ",
                "the output holds ", output.numel(), " elements, not size x input = ",
                input.numel() * getSize());
    auto work = NewWork(OpType::_ALLGATHER_BASE, Described("allgather_into_tensor", input),
                        {output});
    Flat in = AsFlat(input, "allgather_into_tensor", comm_.backend_name());
    Flat out = AsFlat(output, "allgather_into_tensor", comm_.backend_name());
    work->posted.push_back(comm_.allgather(in.data, out.data, in.count, in.dtype, in.where()));
    work->keep = {in.tensor, out.tensor};
    CopyBackLater(*work, output, out);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return Posting([&] {
    TORCH_CHECK(outputs.size() == inputs.size(), "plexus allgather_into_tensor_coalesced: ",
                outputs.size(), " outputs for ", inputs.size(), " inputs");
    TORCH_CHECK(!inputs.empty(), "plexus allgather_into_tensor_coalesced: no tensors");
    auto work = NewWork(OpType::COALESCED,
                        Described("allgather_into_tensor_coalesced", inputs[0]), outputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      Absorb(*work, _allgather_base(outputs[i], inputs[i], Part(opts)));
    }
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return Posting([&] {
    const at::Tensor& in = OneTensor(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1 && int(outputs[0].size()) == getSize(),
                "plexus allgather: one list of size() output tensors");
    for (const auto& o : outputs[0]) {
      CheckSameKind(o, in, "allgather");
      TORCH_CHECK(o.numel() == in.numel(), "plexus allgather: an output of ", o.numel(),
                  " elements for an input of ", in.numel());
    }
    auto work = NewWork(OpType::ALLGATHER, Described("allgather", in), outputs[0]);
    Flat f = AsFlat(in, "allgather", comm_.backend_name());
    at::Tensor gathered = at::empty({int64_t(getSize()) * in.numel()}, in.options());
    work->posted.push_back(
        comm_.allgather(f.data, gathered.data_ptr(), f.count, f.dtype, f.where()));
    work->keep = {f.tensor, gathered};
    work->finishers.push_back([gathered, outs = outputs[0]]() mutable { Unpack(gathered, outs); });
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return Posting([&] {
    TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
                "plexus allgather_coalesced: one output list per input");
    std::vector<at::Tensor> all_outputs;
    for (const auto& l : outputs) all_outputs.insert(all_outputs.end(), l.begin(), l.end());
    auto work = NewWork(OpType::ALLGATHER_COALESCED, Described("allgather_coalesced", inputs[0]),
                        all_outputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::vector<std::vector<at::Tensor>> o{outputs[i]};
      std::vector<at::Tensor> in{inputs[i]};
      Absorb(*work, allgather(o, in, Part(opts)));
    }
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::GatherOptions& opts) {
  return Posting([&] {
    const at::Tensor& in = OneTensor(inputs, "gather");
    const uint32_t root = CheckedRank(opts.rootRank, getSize(), "root", "gather");
    const bool is_root = getRank() == int(root);
    if (is_root) {
      TORCH_CHECK(outputs.size() == 1 && int(outputs[0].size()) == getSize(),
                  "plexus gather: the root needs one list of size() output tensors");
      for (const auto& o : outputs[0]) {
        CheckSameKind(o, in, "gather");
        TORCH_CHECK(o.numel() == in.numel(), "plexus gather: an output of ", o.numel(),
                    " elements for an input of ", in.numel());
      }
    } else {
      TORCH_CHECK(outputs.empty() || outputs[0].empty(),
                  "plexus gather: only the root (rank ", root, ") takes output tensors");
    }
    auto work = NewWork(OpType::GATHER, Described("gather", in),
                        is_root ? outputs[0] : std::vector<at::Tensor>{});
    Flat f = AsFlat(in, "gather", comm_.backend_name());
    at::Tensor gathered;
    if (is_root) gathered = at::empty({int64_t(getSize()) * in.numel()}, in.options());
    work->posted.push_back(comm_.gather(f.data, is_root ? gathered.data_ptr() : nullptr, f.count,
                                        f.dtype, root, f.where()));
    work->keep = {f.tensor};
    if (is_root) {
      work->keep.push_back(gathered);
      work->finishers.push_back(
          [gathered, outs = outputs[0]]() mutable { Unpack(gathered, outs); });
    }
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  return Posting([&] {
    const at::Tensor& out = OneTensor(outputs, "scatter");
    const uint32_t root = CheckedRank(opts.rootRank, getSize(), "root", "scatter");
    const bool is_root = getRank() == int(root);
    at::Tensor packed;
    if (is_root) {
      TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == getSize(),
                  "plexus scatter: the root needs one list of size() input tensors");
      for (const auto& i : inputs[0]) {
        CheckSameKind(i, out, "scatter");
        TORCH_CHECK(i.numel() == out.numel(), "plexus scatter: an input of ", i.numel(),
                    " elements for an output of ", out.numel());
      }
      packed = Pack(inputs[0]);
    } else {
      TORCH_CHECK(inputs.empty() || inputs[0].empty(),
                  "plexus scatter: only the root (rank ", root, ") takes input tensors");
    }
    auto work = NewWork(OpType::SCATTER, Described("scatter", out), outputs);
    Flat f = AsFlat(out, "scatter", comm_.backend_name());
    work->posted.push_back(comm_.scatter(is_root ? packed.data_ptr() : nullptr, f.data, f.count,
                                         f.dtype, root, f.where()));
    work->keep = {f.tensor};
    if (is_root) work->keep.push_back(packed);
    CopyBackLater(*work, out, f);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  return Posting([&] {
    CheckSameKind(output, input, "reduce_scatter_tensor");
    TORCH_CHECK(input.numel() == output.numel() * getSize(), "plexus reduce_scatter_tensor: ",
                "the input holds ", input.numel(), " elements, not size x output = ",
                output.numel() * getSize());
    const std::string& backend = comm_.backend_name();
    const Reduction r = ReductionOf(opts.reduceOp, input, "reduce_scatter_tensor", backend);
    auto work = NewWork(OpType::_REDUCE_SCATTER_BASE, Described("reduce_scatter_tensor", output),
                        {output});
    Flat out = AsFlat(output, "reduce_scatter_tensor", backend);
    if (r.kind == Reduction::kFold) {
      at::Tensor gathered = at::empty({int64_t(getSize()), input.numel()}, input.options());
      Flat in = AsFlat(input, "reduce_scatter_tensor", backend);
      work->posted.push_back(
          comm_.allgather(in.data, gathered.data_ptr(), in.count, in.dtype, in.where()));
      const int64_t n = output.numel(), at = int64_t(getRank()) * n;
      work->finishers.push_back([gathered, dst = out.tensor, n, at, fold = r.fold]() mutable {
        dst.view({-1}).copy_(Fold(gathered.narrow(1, at, n), fold));
      });
      work->keep = {in.tensor, gathered, out.tensor};
    } else {
      // PREMUL_SUM scales a copy: the input is not the caller's output.
      Flat in = AsFlat(r.kind == Reduction::kPremul ? input.clone() : input,
                       "reduce_scatter_tensor", backend);
      if (r.kind == Reduction::kPremul) Premultiply(opts.reduceOp, in.tensor);
      const plexus::ReduceOp op = r.kind == Reduction::kPremul ? plexus::ReduceOp::Sum : r.op;
      work->posted.push_back(
          comm_.reduce_scatter(in.data, out.data, out.count, out.dtype, op, out.where()));
      work->keep = {in.tensor, out.tensor};
    }
    CopyBackLater(*work, output, out);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return Posting([&] {
    at::Tensor& out = const_cast<at::Tensor&>(OneTensor(outputs, "reduce_scatter"));
    TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == getSize(),
                "plexus reduce_scatter: one list of size() input tensors");
    for (const auto& i : inputs[0]) {
      CheckSameKind(i, out, "reduce_scatter");
      TORCH_CHECK(i.numel() == out.numel(), "plexus reduce_scatter: an input of ", i.numel(),
                  " elements for an output of ", out.numel());
    }
    at::Tensor packed = Pack(inputs[0]);
    auto work = c10::static_intrusive_pointer_cast<PlexusWork>(
        _reduce_scatter_base(out, packed, opts));
    work->keep.push_back(packed);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return Posting([&] {
    TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
                "plexus reduce_scatter_tensor_coalesced: one output per input");
    auto work = NewWork(OpType::COALESCED,
                        Described("reduce_scatter_tensor_coalesced", inputs[0]), outputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      Absorb(*work, _reduce_scatter_base(outputs[i], inputs[i], Part(opts)));
    }
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  return Posting([&] {
    CheckSameKind(output, input, "all_to_all_single");
    const std::string& backend = comm_.backend_name();
    auto work = NewWork(OpType::ALLTOALL_BASE, Described("all_to_all_single", input), {output});
    Flat in = AsFlat(input, "all_to_all_single", backend);
    Flat out = AsFlat(output, "all_to_all_single", backend);
    work->keep = {in.tensor, out.tensor};
    const uint64_t n = uint64_t(getSize());
    if (output_split_sizes.empty() && input_split_sizes.empty()) {
      TORCH_CHECK(input.numel() == output.numel() && uint64_t(input.numel()) % n == 0,
                  "plexus all_to_all_single: input and output must both hold size() equal "
                  "blocks (", input.numel(), " and ", output.numel(), " elements, size ", n, ")");
      work->posted.push_back(comm_.alltoall(in.data, out.data, in.count / n, in.dtype, in.where()));
    } else {
      // Split sizes count rows (dim 0); Plexus counts elements.
      auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const Flat& f,
                        const char* side) {
        std::vector<uint64_t> c(n);
        const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
        const uint64_t per_row = rows > 0 ? f.count / uint64_t(rows) : 0;
        if (splits.empty()) {
          TORCH_CHECK(rows % int64_t(n) == 0, "plexus all_to_all_single: ", side, " has ", rows,
                      " rows, not a multiple of size ", n, " (give split sizes)");
          for (auto& x : c) x = uint64_t(rows) / n * per_row;
        } else {
          TORCH_CHECK(splits.size() == n, "plexus all_to_all_single: ", splits.size(), " ",
                      side, " split sizes for ", n, " ranks");
          int64_t sum = 0;
          for (size_t j = 0; j < n; ++j) {
            TORCH_CHECK(splits[j] >= 0, "plexus all_to_all_single: a negative split size");
            sum += splits[j];
            c[j] = uint64_t(splits[j]) * per_row;
          }
          TORCH_CHECK(sum == rows, "plexus all_to_all_single: ", side, " split sizes add up ",
                      "to ", sum, ", not its ", rows, " rows");
        }
        return c;
      };
      const auto send_counts = counts(input, input_split_sizes, in, "the input");
      const auto recv_counts = counts(output, output_split_sizes, out, "the output");
      std::vector<uint64_t> sd(n), rd(n);
      std::exclusive_scan(send_counts.begin(), send_counts.end(), sd.begin(), uint64_t{0});
      std::exclusive_scan(recv_counts.begin(), recv_counts.end(), rd.begin(), uint64_t{0});
      work->posted.push_back(comm_.alltoallv(in.data, send_counts, sd, out.data, recv_counts, rd,
                                             in.dtype, in.where()));
    }
    CopyBackLater(*work, output, out);
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  return Posting([&] {
    const size_t n = size_t(getSize());
    TORCH_CHECK(outputs.size() == n && inputs.size() == n,
                "plexus all_to_all: size() input and size() output tensors");
    for (size_t j = 0; j < n; ++j) {
      CheckSameKind(inputs[0], inputs[j], "all_to_all");
      CheckSameKind(inputs[0], outputs[j], "all_to_all");
    }
    const std::string& backend = comm_.backend_name();
    auto work = NewWork(OpType::ALLTOALL, Described("all_to_all", inputs[0]), outputs);
    at::Tensor packed_in = Pack(inputs);
    int64_t total_out = 0;
    for (const auto& o : outputs) total_out += o.numel();
    at::Tensor packed_out = at::empty({total_out}, outputs[0].options());
    Flat in = AsFlat(packed_in, "all_to_all", backend);
    Flat out = AsFlat(packed_out, "all_to_all", backend);
    const uint64_t mult = inputs[0].is_complex() ? 2 : 1;
    std::vector<uint64_t> sc(n), rc(n), sd(n), rd(n);
    for (size_t j = 0; j < n; ++j) {
      sc[j] = uint64_t(inputs[j].numel()) * mult;
      rc[j] = uint64_t(outputs[j].numel()) * mult;
    }
    std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), uint64_t{0});
    std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), uint64_t{0});
    work->posted.push_back(
        comm_.alltoallv(in.data, sc, sd, out.data, rc, rd, in.dtype, in.where()));
    work->keep = {in.tensor, out.tensor};
    work->finishers.push_back([packed_out, outs = outputs]() mutable { Unpack(packed_out, outs); });
    return Handed(work, opts);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::send(std::vector<at::Tensor>& tensors, int dst,
                                                   int tag) {
  return Posting([&] {
    const at::Tensor& t = OneTensor(tensors, "send");
    TORCH_CHECK(tag == 0, "plexus send: tag ", tag, " is not supported: Plexus matches the ",
                "messages between two ranks in the order they are posted (use tag 0)");
    const uint32_t peer = CheckedRank(dst, getSize(), "destination", "send");
    auto work = NewWork(OpType::SEND, Described("send", t), tensors);
    Flat f = AsFlat(t, "send", comm_.backend_name());
    work->posted.push_back(comm_.send(f.data, f.count, f.dtype, peer, f.where()));
    work->keep = {f.tensor};
    return c10::intrusive_ptr<c10d::Work>(work);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::recv(std::vector<at::Tensor>& tensors, int src,
                                                   int tag) {
  return Posting([&] {
    const at::Tensor& t = OneTensor(tensors, "recv");
    TORCH_CHECK(tag == 0, "plexus recv: tag ", tag, " is not supported: Plexus matches the ",
                "messages between two ranks in the order they are posted (use tag 0)");
    const uint32_t peer = CheckedRank(src, getSize(), "source", "recv");
    auto work = NewWork(OpType::RECV, Described("recv", t), tensors);
    Flat f = AsFlat(t, "recv", comm_.backend_name());
    work->posted.push_back(comm_.recv(f.data, f.count, f.dtype, peer, f.where()));
    work->keep = {f.tensor};
    CopyBackLater(*work, t, f);
    return c10::intrusive_ptr<c10d::Work>(work);
  });
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false, "plexus recv without a source (recvAnysource) is not supported: the ",
              "Plexus ABI receives from a named rank only (backend ", comm_.backend_name(), ")");
}

c10::intrusive_ptr<c10d::Work> PlexusBackend::barrier(const c10d::BarrierOptions& opts) {
  return Posting([&] {
    auto work = NewWork(OpType::BARRIER, OpLabel{"barrier", std::nullopt, 0}, {});
    work->posted.push_back(comm_.barrier());
    return Handed(work, opts);
  });
}

double PlexusBackend::RawAllreduceSeconds(const at::Tensor& t, int calls) {
  TORCH_CHECK(t.is_contiguous() && t.is_cpu(), "a contiguous cpu tensor");
  return Posting([&] {
    Flat f = AsFlat(t, "allreduce", comm_.backend_name());
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) {
      comm_.allreduce(f.data, f.data, f.count, f.dtype, plexus::ReduceOp::Sum).wait();
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
}

void PlexusBackend::abort() {
  comm_.abort();
}

void PlexusBackend::shutdown() {
  completer_->Stop();
}

}  // namespace plexus_torch
