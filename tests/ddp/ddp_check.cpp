// Multi-rank checks of plexus::ddp::DistributedDataParallel, run under
// plexus-run (tcp) and mpirun (mpi). Every rank also trains a reference
// model in one process on the whole N-fold batch; after every step the DDP
// parameters must equal the reference's (float64, max |diff| <= 1e-12, or
// within the compression hooks' precision) and be bit-identical across ranks.
//
//   ddp_check equivalence [--bucket-cap-mb X] [--bucket-view] [--no-sync]
//                         [--unused] [--hook fp16|bf16]
//   ddp_check join [--first-batches K] [--bucket-view]
//                         ranks have K, K+1, ... batches (K = 3), with Join
//   ddp_check no-join     the same without Join: the ranks still training must
//                         fail with an error naming the bucket and join()
//   ddp_check mismatch    the last rank's model has another shape: every rank
//                         must fail at construction naming the difference
//   ddp_check mismatch-frozen   the last rank freezes a parameter the others train
//   ddp_check devices     device_ids/output_device and CUDA errors: every one a
//                         clear plexus::Error at construction, no crash, no hang
//   ddp_check load-cuda   loads LibTorch's CUDA library (plexus/ddp/torch_cuda.hpp)
//   ddp_check cuda-available    exits 0 when a CUDA device is visible, else
//                         prints why and exits 77 (cuda_run.sh asks first)
//   --device cuda         (equivalence) model, batches and reference on
//                         cuda:LOCAL_RANK; needs a backend with CUDA memory
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "plexus/ddp.hpp"
#include "plexus/plexus.hpp"

namespace {

uint32_t g_rank = 0, g_size = 1;
int g_failures = 0;
torch::Device g_device(torch::kCPU);  // --device

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank %u: FAILED: %s\n", g_rank, what.c_str());
    ++g_failures;
  }
}

struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t hidden = 16) {
    fc1 = register_module("fc1", torch::nn::Linear(8, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    head = register_module("head", torch::nn::Linear(hidden, 4));
    aux = register_module("aux", torch::nn::Linear(hidden, 4));        // the optional branch
    frozen = register_module("frozen", torch::nn::Linear(8, hidden));  // requires_grad = false
    for (auto& p : frozen->parameters()) p.set_requires_grad(false);
    scale = register_buffer("scale", torch::full({1}, 0.5, torch::kFloat64));
  }
  torch::Tensor forward(torch::Tensor x, bool use_aux = true) {
    auto h = torch::tanh(fc1(x) + frozen(x) * scale);
    h = torch::tanh(fc2(h));
    auto out = head(h);
    if (use_aux) out = out + aux(h);
    return out;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, head{nullptr}, aux{nullptr}, frozen{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(Net);

constexpr int64_t kBatch = 6;  // per rank

// Step s's batch of rank r (inputs, targets): the same on every rank.
std::pair<torch::Tensor, torch::Tensor> Batch(int step, uint32_t r) {
  auto gen = at::detail::createCPUGenerator(1000 + 97 * step + r);
  auto x = at::randn({kBatch, 8}, gen, torch::kFloat64);
  auto y = at::randn({kBatch, 4}, gen, torch::kFloat64);
  return {x, y};
}

Net MakeNet() {
  torch::manual_seed(g_rank == 0 ? 42 : 1000 + g_rank);  // init_sync must make them equal
  Net net;
  net->to(torch::kFloat64);
  net->to(g_device);
  return net;
}

uint64_t Hash(Net& net) {
  uint64_t h = 1469598103934665603ull;
  for (auto& p : net->parameters()) {
    auto c = p.contiguous().cpu();
    const auto* b = static_cast<const unsigned char*>(c.data_ptr());
    for (int64_t i = 0; i < c.numel() * 8; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

void BitIdentical(plexus::Communicator& comm, Net& net, const std::string& when) {
  uint64_t mine = Hash(net);
  std::vector<uint64_t> all(comm.size());
  comm.allgather(&mine, all.data(), 1, plexus::DType::UInt64).wait();
  for (uint32_t r = 1; r < comm.size(); ++r) {
    Check(all[r] == all[0],
          when + ": parameters of rank " + std::to_string(r) + " differ from rank 0's");
  }
}

double MaxDiff(Net& a, Net& b) {
  double m = 0;
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    m = std::max(m, (pa[i] - pb[i]).abs().max().item<double>());
  return m;
}

struct Flags {
  std::optional<double> bucket_cap_mb;
  bool bucket_view = false, no_sync = false, unused = false;
  std::string hook;
  int first_batches = 3;
  bool zero_grad_late = false;  // zero_grad() between forward and backward (ImageNet example)  //
                                // join: rank r has first_batches + r batches
  std::string device = "cpu";
};

void Equivalence(plexus::Communicator& comm, const Flags& f) {
  Net model = MakeNet();
  plexus::ddp::DistributedDataParallelOptions o;
  o.bucket_cap_mb = f.bucket_cap_mb;
  o.gradient_as_bucket_view = f.bucket_view;
  o.find_unused_parameters = f.unused;
  plexus::ddp::DistributedDataParallel ddp(model, comm, o);
  if (f.hook == "fp16") ddp.register_comm_hook(plexus::reducer::Fp16CompressHook());
  if (f.hook == "bf16") ddp.register_comm_hook(plexus::reducer::Bf16CompressHook());
  torch::manual_seed(42);
  Net reference = MakeNet();
  {  // the reference starts from rank 0's initial parameters
    torch::NoGradGuard g;
    auto src = model->parameters(), dst = reference->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1));
  const double tolerance = f.hook == "fp16" ? 2e-3 : f.hook == "bf16" ? 2e-2 : 1e-12;
  const int steps = f.no_sync ? 10 : 5;
  for (int s = 0; s < steps; ++s) {
    const bool use_aux = !f.unused || s % 2 == 0;  // the aux branch idles on odd steps
    const bool sync = !f.no_sync || s % 2 == 1;    // with --no-sync: accumulate on even steps
    auto [x, y] = Batch(s, g_rank);
    x = x.to(g_device);
    y = y.to(g_device);
    {
      std::optional<plexus::reducer::Reducer::NoSyncGuard> guard;
      if (!sync) guard.emplace(ddp.no_sync());
      auto loss = torch::mse_loss(ddp.forward(x, use_aux), y);
      if (f.zero_grad_late) {
        opt.zero_grad();
        ref_opt.zero_grad();
      }
      loss.backward();
    }
    // The reference: one process, the batches of every rank at once.
    std::vector<torch::Tensor> xs, ys;
    for (uint32_t r = 0; r < g_size; ++r) {
      auto [xr, yr] = Batch(s, r);
      xs.push_back(xr.to(g_device));
      ys.push_back(yr.to(g_device));
    }
    torch::mse_loss(reference->forward(torch::cat(xs), use_aux), torch::cat(ys)).backward();
    if (!sync) continue;
    opt.step();
    ref_opt.step();
    if (!f.zero_grad_late) {
      opt.zero_grad(/*set_to_none=*/!f.bucket_view);  // keep the views alive with bucket views
      ref_opt.zero_grad();
    }
    const double diff = MaxDiff(model, reference);
    Check(diff <= tolerance, "step " + std::to_string(s) + ": max |DDP - reference| = " +
                                 std::to_string(diff) + " > " + std::to_string(tolerance));
    BitIdentical(comm, model, "step " + std::to_string(s));
  }
  const auto data = ddp.logging_data();
  if (g_device.is_cuda()) {  // PyTorch's defaults for a single-device CUDA module
    Check(data.options.device_ids == std::vector<int>{g_device.index()} &&
              data.options.output_device == g_device.index(),
          "device_ids and output_device default to the module's device");
  }
  Check(data.reducer.iterations == uint64_t(f.no_sync ? steps / 2 : steps), "iterations counted");
  if (f.bucket_cap_mb && *f.bucket_cap_mb < 0.001) {
    Check(data.reducer.buckets.size() >= 4, "small bucket_cap_mb gives many buckets (" +
                                                std::to_string(data.reducer.buckets.size()) + ")");
  }
  if (g_rank == 0) {
    std::printf(
        "%zu bucket(s), rebuilt %d, last backward: compute %.0f us, comm %.0f us, not hidden %.0f "
        "us\n",
        data.reducer.buckets.size(), int(data.reducer.has_rebuilt_bucket),
        data.reducer.last.backward_compute_time, data.reducer.last.backward_comm_time,
        data.reducer.last.comm_not_hidden_time);
  }
}

// Rank r has first_batches + r batches; the reference divides by the full
// world size. With first_batches 1, rank 0 joins before the buckets are
// rebuilt (its zero iteration rebuilds them; with bucket views, its .grad
// must follow).
void Uneven(plexus::Communicator& comm, bool with_join, const Flags& f) {
  Net model = MakeNet();
  plexus::ddp::DistributedDataParallel ddp(
      model, comm, {.bucket_cap_mb = 0.0005, .gradient_as_bucket_view = f.bucket_view});
  torch::manual_seed(42);
  Net reference = MakeNet();
  {
    torch::NoGradGuard g;
    auto src = model->parameters(), dst = reference->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1));
  const int first = f.first_batches;
  const int mine = first + int(g_rank), most = first + int(g_size) - 1;
  if (!with_join) {
    try {
      for (int s = 0; s < mine; ++s) {
        auto [x, y] = Batch(s, g_rank);
        torch::mse_loss(ddp.forward(x), y).backward();
        opt.step();
        opt.zero_grad();
      }
    } catch (const std::exception& e) {
      const std::string m = e.what();
      std::printf("rank %u failed as expected: %s\n", g_rank, m.c_str());
      Check(m.find("join()") != std::string::npos && m.find("TIMEOUT") == std::string::npos
                ? true
                : m.find("join()") != std::string::npos,
            "the error names the collective and suggests join(): " + m);
      return;
    }
    // This rank ran out of data first. Stay alive past the others' timeout,
    // so that what they see is the timeout rather than a closed connection.
    if (g_rank == 0 && g_size > 1) {
      std::this_thread::sleep_for(comm.timeout() + std::chrono::seconds(3));
    } else if (g_size > 1) {
      Check(false, "rank " + std::to_string(g_rank) + " finished without an error");
    }
    return;
  }
  {
    auto join = ddp.join();
    for (int s = 0; s < mine; ++s) {
      auto [x, y] = Batch(s, g_rank);
      torch::mse_loss(ddp.forward(x), y).backward();
      opt.step();
      opt.zero_grad(/*set_to_none=*/!f.bucket_view);
    }
    join.finish();
  }
  for (int s = 0; s < most; ++s) {
    for (uint32_t r = 0; r < g_size; ++r) {
      if (s >= first + int(r)) continue;  // rank r has joined: contributes zeros
      auto [x, y] = Batch(s, r);
      (torch::mse_loss(reference->forward(x), y) / double(g_size)).backward();
    }
    ref_opt.step();
    ref_opt.zero_grad();
  }
  const double diff = MaxDiff(model, reference);
  Check(diff <= 1e-12, "join: max |DDP - reference| = " + std::to_string(diff));
  BitIdentical(comm, model, "after join");
  if (f.bucket_view) {  // the gradients still point into live buckets: a step more works
    auto [x, y] = Batch(99, g_rank);
    torch::mse_loss(ddp.forward(x), y).backward();
    opt.step();
    BitIdentical(comm, model, "a step after join");
  }
}

void Mismatch(plexus::Communicator& comm, bool frozen) {
  torch::manual_seed(1);
  const bool odd_one = g_rank + 1 == g_size && g_size > 1;
  Net model(odd_one && !frozen ? 17 : 16);
  model->to(torch::kFloat64);
  if (frozen && odd_one) model->fc2->weight.set_requires_grad(false);
  try {
    plexus::ddp::DistributedDataParallel ddp(model, comm);
    Check(g_size == 1, "construction succeeded although the last rank's model differs");
  } catch (const plexus::Error& e) {
    const std::string m = e.what();
    if (g_rank == 0) std::printf("every rank fails; rank 0 says: %s\n", m.c_str());
    const std::string last = std::to_string(g_size - 1);
    const std::string want =
        frozen ? "first difference, parameter #2: rank 0 has 'fc2.weight' float64 [16, 16], rank " +
                     last + " has 'fc2.weight (requires_grad=false)' float64 [16, 16]"
               : "first difference, parameter #0: rank 0 has 'fc1.weight' float64 [16, 8], rank " +
                     last + " has 'fc1.weight' float64 [17, 8]";
    Check(m.find(want) != std::string::npos, "the error names the first difference: " + m);
  }
}

template <typename F>
void ExpectError(const std::string& what, int32_t status, const std::string& needle, F&& f) {
  try {
    f();
    Check(false, what + ": no error");
  } catch (const plexus::Error& e) {
    const std::string m = e.what();
    if (g_rank == 0) std::printf("%s: %s\n", what.c_str(), m.c_str());
    Check(e.status() == status, what + ": status " + std::to_string(e.status()) + ": " + m);
    Check(m.find(needle) != std::string::npos, what + ": message lacks '" + needle + "': " + m);
  }
}

// Argument errors: thrown at construction, before any collective, on every rank.
void Devices(plexus::Communicator& comm) {
  using Options = plexus::ddp::DistributedDataParallelOptions;
  Net cpu_model = MakeNet();
  ExpectError("device_ids with two devices", PLEXUS_ERR_UNSUPPORTED,
              "device_ids = [0, 1]: a module replicated over several devices of one process is "
              "not supported",
              [&] {
                plexus::ddp::DistributedDataParallel d(cpu_model, comm, {.device_ids = {0, 1}});
              });
  const bool cuda = torch::cuda::is_available();
  const std::string no_cuda = "no CUDA device is available to this process";
  ExpectError(
      "device_ids = [0] for a CPU module",
      cuda ? PLEXUS_ERR_INVALID_ARGUMENT : PLEXUS_ERR_UNSUPPORTED,
      cuda ? "but the module is on the CPU"
           : "device_ids = [0] asks for CUDA device 0, but " + no_cuda,
      [&] { plexus::ddp::DistributedDataParallel d(cpu_model, comm, {.device_ids = {0}}); });
  Options out;
  out.output_device = 0;
  ExpectError("output_device = 0 for a CPU module",
              cuda ? PLEXUS_ERR_INVALID_ARGUMENT : PLEXUS_ERR_UNSUPPORTED,
              cuda ? "but the module is on the CPU" : no_cuda,
              [&] { plexus::ddp::DistributedDataParallel d(cpu_model, comm, out); });
  if (cuda) {
    ExpectError(
        "device_ids beyond the devices", PLEXUS_ERR_INVALID_ARGUMENT, "does not exist",
        [&] { plexus::ddp::DistributedDataParallel d(cpu_model, comm, {.device_ids = {4096}}); });
    const torch::Device gpu(torch::kCUDA, 0);
    Net split = MakeNet();
    split->fc2->to(gpu);
    ExpectError("a module on two devices", PLEXUS_ERR_INVALID_ARGUMENT,
                "the module is on more than one device: parameter 'fc2.weight' is on cuda:0, "
                "parameter 'fc1.weight' on cpu",
                [&] { plexus::ddp::DistributedDataParallel d(split, comm); });
    Net on_gpu = MakeNet();
    on_gpu->to(gpu);
    if ((comm.capabilities().memory_types & (1u << PLEXUS_MEMORY_CUDA)) == 0) {
      ExpectError("a CUDA module on a backend without CUDA memory", PLEXUS_ERR_UNSUPPORTED,
                  "the module is on cuda:0 but backend '" + comm.backend_name() +
                      "' cannot communicate CUDA memory: use a backend that can, e.g. NCCL "
                      "(PLEXUS_BACKEND=nccl)",
                  [&] { plexus::ddp::DistributedDataParallel d(on_gpu, comm); });
    }
  }
  // After those, a CPU DDP still trains: nothing was left half-done.
  plexus::ddp::DistributedDataParallel ddp(cpu_model, comm);
  auto [x, y] = Batch(0, g_rank);
  torch::mse_loss(ddp.forward(x), y).backward();
  BitIdentical(comm, cpu_model, "a CPU step after the refused constructions");
  Check(ddp.logging_data().options.device_ids.empty() && !ddp.logging_data().options.output_device,
        "a CPU module keeps device_ids and output_device empty");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "equivalence";
  Flags f;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bucket-cap-mb" && i + 1 < argc)
      f.bucket_cap_mb = std::stod(argv[++i]);
    else if (a == "--bucket-view")
      f.bucket_view = true;
    else if (a == "--no-sync")
      f.no_sync = true;
    else if (a == "--unused")
      f.unused = true;
    else if (a == "--hook" && i + 1 < argc)
      f.hook = argv[++i];
    else if (a == "--zero-grad-late")
      f.zero_grad_late = true;
    else if (a == "--first-batches" && i + 1 < argc)
      f.first_batches = std::stoi(argv[++i]);
    else if (a == "--device" && i + 1 < argc)
      f.device = argv[++i];
    else {
      std::fprintf(stderr, "ddp_check: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  torch::set_num_threads(1);
  if (mode == "load-cuda") {  // the on-demand load works where the wheel has CUDA
    std::string why;
    if (!plexus::ddp::load_torch_cuda(&why)) {
      std::printf("FAIL: %s\n", why.c_str());
      return 1;
    }
    std::printf("ok: LibTorch's CUDA library loaded; CUDA device here: %s\n",
                torch::cuda::is_available() ? "yes" : "no");
    return 0;
  }
  if (mode == "cuda-available" || mode == "devices" || f.device == "cuda") {
    // Before any CUDA question to LibTorch (it answers the first one for good).
    std::string why;
    if (!plexus::ddp::load_torch_cuda(&why) && mode != "devices") {
      std::printf("skipped: no CUDA support: %s\n", why.c_str());
      return 77;
    }
  }
  if (mode == "cuda-available" || f.device == "cuda") {
    if (!torch::cuda::is_available()) {
      std::printf("skipped: no CUDA device (torch::cuda::is_available() is false)\n");
      return 77;
    }
    if (mode == "cuda-available") return 0;
  }
  try {
    auto comm = plexus::Communicator::from_env();
    g_rank = comm.rank();
    g_size = comm.size();
    if (f.device == "cuda") {
      g_device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(
                                                 comm.local_rank() % torch::cuda::device_count()));
    }
    if (mode == "equivalence")
      Equivalence(comm, f);
    else if (mode == "join")
      Uneven(comm, true, f);
    else if (mode == "no-join")
      Uneven(comm, false, f);
    else if (mode == "mismatch")
      Mismatch(comm, false);
    else if (mode == "mismatch-frozen")
      Mismatch(comm, true);
    else if (mode == "devices")
      Devices(comm);
    else {
      std::fprintf(stderr, "ddp_check: unknown mode %s\n", mode.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %u: error: %s\n", g_rank, e.what());
    return 1;
  }
  if (g_failures) return 1;
  if (g_rank == 0) std::printf("ddp_check %s passed on %u rank(s)\n", mode.c_str(), g_size);
  return 0;
}
