// plexus-trainer: trains one model data-parallel on any Plexus backend. It is
// also the example to copy: the parts a LibTorch trainer needs are, in order,
//   1. a Communicator from the launcher's environment,
//   2. the model wrapped in DistributedDataParallel,
//   3. a DistributedSampler feeding make_data_loader, set_epoch each epoch,
//   4. the usual zero_grad / forward / backward / step loop (no_sync for
//      gradient accumulation),
//   5. evaluation with results all-reduced, checkpoints written by rank 0.
// Everything else here is measurement and output. See --help.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "datasets.hpp"
#include "models.hpp"
#include "options.hpp"
#include "plexus/ddp.hpp"
#include "plexus/launch_env.hpp"
#include "plexus/plexus.hpp"
#include "plexus/settings/environment.hpp"
#include "tensor_file.hpp"

namespace trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

// Where one step's time went, in milliseconds.
struct StepTime {
  double step = 0, forward = 0, backward = 0, optimizer = 0;
  double comm = 0, comm_not_hidden = 0;  // from the reducer's statistics
};

struct EpochRecord {
  int epoch = 0;
  int64_t steps = 0;
  double train_loss = 0, test_loss = 0, test_accuracy = 0;
  double step_ms_median = 0, samples_per_s = 0;
  double forward_ms = 0, backward_ms = 0, comm_not_hidden_ms = 0, optimizer_ms = 0, comm_ms = 0;
};

struct Eval {
  double loss = 0, accuracy = 0;
};

// Sums over the ranks, in place. On a GPU they go through device memory: a
// backend with CUDA memory may take no host memory (NCCL).
void AllreduceSums(plexus::Communicator& comm, std::vector<double>& sums,
                   const torch::Device& device) {
  if (device.is_cpu()) {
    comm.allreduce(std::span(sums), plexus::ReduceOp::Sum).wait();
    return;
  }
  auto t = torch::tensor(sums, torch::kFloat64).to(device);
  plexus::ddp::allreduce(comm, t).wait();  // on the current stream: .cpu() below follows it
  t = t.cpu();
  std::memcpy(sums.data(), t.data_ptr(), sums.size() * sizeof(double));
}

// Each rank scores a contiguous slice of the test set; the sums are all-reduced.
Eval Evaluate(torch::nn::Sequential& model, const DataSplits& data, plexus::Communicator& comm,
              const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const int64_t n = data.test_x.size(0);
  const int64_t begin = n * comm.rank() / comm.size(), end = n * (comm.rank() + 1) / comm.size();
  std::vector<double> sums(3, 0.0);  // loss, correct, count
  for (int64_t at = begin; at < end; at += 4096) {
    const int64_t stop = std::min(end, at + 4096);
    auto logits = model->forward(data.test_x.slice(0, at, stop).to(device));
    auto y = data.test_y.slice(0, at, stop).to(device);
    sums[0] +=
        torch::nn::functional::cross_entropy(
            logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    sums[1] += logits.argmax(1).eq(y).sum().item<double>();
    sums[2] += static_cast<double>(stop - at);
  }
  AllreduceSums(comm, sums, device);
  return {sums[0] / sums[2], sums[1] / sums[2]};
}

// How many times a launcher started this job's ranks again after a failure:
// PLEXUS_RESTART_COUNT (plexus-run), or torchrun's TORCHELASTIC_RESTART_COUNT.
int RestartCount() {
  for (const char* name : {"PLEXUS_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}) {
    const char* v = plexus::settings::RawByName(name);
    if (v && *v) return std::atoi(v);
  }
  return 0;
}

// Checkpoints: DIR/epoch-N.model.pt and DIR/epoch-N.optimizer.pt, then
// DIR/state.ptf naming N (written last, renamed into place), so that a job
// killed while saving leaves the previous checkpoint whole.
struct Progress {
  int epochs_done = 0;
  int64_t global_step = 0;
  std::vector<double> step_losses;
  // DDP's bucket order (logging_data().reducer.ready_order): a resumed run
  // starts with the buckets the uninterrupted one had, and so sums alike.
  std::vector<int64_t> ready_order;
};

// --elastic: model, optimizer and progress at a step, in memory, alike on
// every rank (taken at the same step everywhere, after the same updates).
struct ElasticCommit {
  std::vector<torch::Tensor> tensors;  // parameters, then buffers
  std::string optimizer;               // its state, serialised
  Progress progress;
  int epoch = 0;  // the epoch it is in, and how far
  int64_t step_in_epoch = 0;
  int64_t world = 0;  // the ranks it was taken on (steps are counted over them)

  void Take(torch::nn::Sequential& model, torch::optim::Optimizer& opt, const Progress& p, int e,
            int64_t s, int64_t w) {
    torch::NoGradGuard no_grad;
    tensors.clear();
    for (const auto& t : model->parameters()) tensors.push_back(t.detach().clone());
    for (const auto& t : model->buffers()) tensors.push_back(t.detach().clone());
    std::ostringstream out;
    torch::serialize::OutputArchive archive;
    opt.save(archive);
    archive.save_to(out);
    optimizer = out.str();
    progress = p;
    epoch = e;
    step_in_epoch = s;
    world = w;
  }
  // After Communicator::grow(): the ranks that held the commit send it to
  // the ones that joined (their joined() is true), from the lowest that
  // held it. Collective over comm.
  void Share(plexus::Communicator& comm) {
    int64_t root = comm.joined() ? comm.size() : comm.rank();
    comm.allreduce(&root, &root, 1, plexus::DType::Int64, plexus::ReduceOp::Min).wait();
    const auto from = static_cast<uint32_t>(root);
    // Counters and sizes, then the bytes they size, then the tensors (the
    // same model everywhere: their shapes are known).
    int64_t head[7] = {progress.epochs_done,
                       progress.global_step,
                       epoch,
                       step_in_epoch,
                       world,
                       static_cast<int64_t>(progress.step_losses.size()),
                       static_cast<int64_t>(progress.ready_order.size())};
    int64_t optimizer_bytes = static_cast<int64_t>(optimizer.size());
    comm.broadcast(head, 7, plexus::DType::Int64, from).wait();
    comm.broadcast(&optimizer_bytes, 1, plexus::DType::Int64, from).wait();
    progress.epochs_done = static_cast<int>(head[0]);
    progress.global_step = head[1];
    epoch = static_cast<int>(head[2]);
    step_in_epoch = head[3];
    world = head[4];
    progress.step_losses.resize(static_cast<size_t>(head[5]));
    progress.ready_order.resize(static_cast<size_t>(head[6]));
    optimizer.resize(static_cast<size_t>(optimizer_bytes));
    comm.broadcast(optimizer.data(), optimizer.size(), plexus::DType::UInt8, from).wait();
    comm.broadcast(progress.step_losses.data(), progress.step_losses.size(), plexus::DType::Float64,
                   from)
        .wait();
    comm.broadcast(progress.ready_order.data(), progress.ready_order.size(), plexus::DType::Int64,
                   from)
        .wait();
    for (auto& t : tensors) {
      comm.broadcast(t.data_ptr(), static_cast<uint64_t>(t.nbytes()), plexus::DType::UInt8, from)
          .wait();
    }
  }
  void Restore(torch::nn::Sequential& model, torch::optim::Optimizer& opt, Progress* p) const {
    torch::NoGradGuard no_grad;
    size_t i = 0;
    for (auto& t : model->parameters()) t.copy_(tensors[i++]);
    for (auto& t : model->buffers()) t.copy_(tensors[i++]);
    std::istringstream in(optimizer);
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    opt.load(archive);
    *p = progress;
    p->epochs_done = epoch;
  }
};

std::string CheckpointFile(const std::string& dir, int epoch, const char* what) {
  return (std::filesystem::path(dir) / ("epoch-" + std::to_string(epoch) + "." + what + ".pt"))
      .string();
}

void SaveCheckpoint(const std::string& dir, torch::nn::Sequential& model,
                    torch::optim::Optimizer& optimizer, const Progress& p) {
  std::filesystem::create_directories(dir);
  torch::save(model, CheckpointFile(dir, p.epochs_done, "model"));
  torch::save(optimizer, CheckpointFile(dir, p.epochs_done, "optimizer"));
  NamedArray counters{"progress", ArrayType::Int64, {2}, {}};
  const int64_t values[2] = {p.epochs_done, p.global_step};
  counters.data.assign(reinterpret_cast<const unsigned char*>(values),
                       reinterpret_cast<const unsigned char*>(values) + sizeof values);
  NamedArray losses{"step_losses", ArrayType::Float64, {int64_t(p.step_losses.size())}, {}};
  losses.data.assign(reinterpret_cast<const unsigned char*>(p.step_losses.data()),
                     reinterpret_cast<const unsigned char*>(p.step_losses.data()) +
                         p.step_losses.size() * sizeof(double));
  NamedArray order{"ready_order", ArrayType::Int64, {int64_t(p.ready_order.size())}, {}};
  order.data.assign(reinterpret_cast<const unsigned char*>(p.ready_order.data()),
                    reinterpret_cast<const unsigned char*>(p.ready_order.data()) +
                        p.ready_order.size() * sizeof(int64_t));
  WriteTensorFile((std::filesystem::path(dir) / "state.ptf").string(), {counters, losses, order});
  for (const char* what : {"model", "optimizer"}) {
    std::filesystem::remove(CheckpointFile(dir, p.epochs_done - 1, what));
  }
}

Progress LoadCheckpoint(const std::string& dir, torch::nn::Sequential& model,
                        torch::optim::Optimizer& optimizer) {
  const auto state = (std::filesystem::path(dir) / "state.ptf").string();
  if (!std::filesystem::exists(state)) {
    throw std::runtime_error("--resume: no checkpoint in " + dir + " (" + state + " is missing)");
  }
  Progress p;
  for (const auto& a : ReadTensorFile(state)) {
    if (a.name == "progress" && a.data.size() == 2 * sizeof(int64_t)) {
      int64_t v[2];
      std::memcpy(v, a.data.data(), sizeof v);
      p.epochs_done = static_cast<int>(v[0]);
      p.global_step = v[1];
    } else if (a.name == "step_losses") {
      p.step_losses.resize(a.data.size() / sizeof(double));
      std::memcpy(p.step_losses.data(), a.data.data(), a.data.size());
    } else if (a.name == "ready_order") {
      p.ready_order.resize(a.data.size() / sizeof(int64_t));
      std::memcpy(p.ready_order.data(), a.data.data(), p.ready_order.size() * sizeof(int64_t));
    }
  }
  torch::load(model, CheckpointFile(dir, p.epochs_done, "model"));
  torch::load(optimizer, CheckpointFile(dir, p.epochs_done, "optimizer"));
  return p;
}

int DefaultThreads(const plexus::Communicator& comm) {
  plexus::LaunchInfo info;
  uint32_t local = comm.size();
  if (plexus::DiscoverLaunch(plexus::ProcessEnv(), &info).ok()) local = info.local_size;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::max(1u, cores / std::max(1u, local)));
}

std::string FormatEta(double seconds) {
  const auto s = static_cast<long>(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string JsonNumbers(const std::vector<double>& v) {
  std::string out = "[";
  char buf[40];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.9g", i ? ", " : "", v[i]);
    out += buf;
  }
  return out + "]";
}

int Train(const TrainerOptions& opt) {
  // Before anything touches LibTorch's CUDA state (manual_seed seeds the CUDA
  // generators too): LibTorch decides once whether CUDA is there.
  if (opt.device == "cuda") {
    std::string why;
    if (!plexus::ddp::load_torch_cuda(&why)) {
      throw std::runtime_error("--device cuda: LibTorch's CUDA support is missing: " + why);
    }
  }
  DataSplits data = LoadData(opt);
  torch::manual_seed(opt.seed);  // the same initial model for the same seed, on every backend
  const int64_t features = data.train_x.size(1);
  auto model = MakeModel(opt, features, data.classes);
  if (!opt.init.empty()) LoadWeights(*model, opt.init);
  if (!opt.export_dir.empty()) {  // no communicator: data and weights for torch_ddp.py
    std::filesystem::create_directories(opt.export_dir);
    SaveData(data, (std::filesystem::path(opt.export_dir) / "data.ptf").string());
    SaveWeights(*model, (std::filesystem::path(opt.export_dir) / "init.ptf").string());
    std::printf("plexus-trainer: wrote %s/data.ptf and %s/init.ptf\n", opt.export_dir.c_str(),
                opt.export_dir.c_str());
    return 0;
  }

  // 1. The communicator: rank, size and rendezvous from the launcher.
  if (!opt.trace.empty()) ::setenv("PLEXUS_TRACE_DIR", opt.trace.c_str(), 1);
  auto comm = plexus::Communicator::from_env();
  bool root = comm.rank() == 0;  // (rank 0 of the ranks left, --elastic)
  const int threads = opt.threads ? opt.threads : DefaultThreads(comm);
  torch::set_num_threads(threads);
  // --device cuda: cuda:LOCAL_RANK, one GPU per rank (PyTorch's usual setup).
  torch::Device device(torch::kCPU);
  if (opt.device == "cuda") {
    if (!torch::cuda::is_available()) {
      throw std::runtime_error("--device cuda: no CUDA device is available to this process");
    }
    const auto gpus = static_cast<uint32_t>(torch::cuda::device_count());
    if (comm.local_rank() >= gpus) {
      throw std::runtime_error("--device cuda: local rank " + std::to_string(comm.local_rank()) +
                               " has no GPU of its own (" + std::to_string(gpus) +
                               " visible on this host)");
    }
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(comm.local_rank()));
    model->to(device);  // before the optimizer takes the parameters
  }

  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (opt.optimizer == "adam") {
    optimizer = std::make_unique<torch::optim::Adam>(model->parameters(),
                                                     torch::optim::AdamOptions(opt.lr));
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(
        model->parameters(), torch::optim::SGDOptions(opt.lr).momentum(opt.momentum));
  }
  // Started again after a failure (plexus-run or torchrun --max-restarts,
  // which count the starts) with a checkpoint saved: go on from it, as
  // --resume would. Every rank sees the same directory, so all decide alike.
  const int restart = RestartCount();
  const bool resume =
      opt.resume || (restart > 0 && !opt.checkpoint.empty() && opt.device == "cpu" &&
                     std::filesystem::exists(std::filesystem::path(opt.checkpoint) / "state.ptf"));
  Progress progress;
  if (resume) progress = LoadCheckpoint(opt.checkpoint, model, *optimizer);

  // 2. DDP: checks the model across ranks and broadcasts rank 0's weights.
  // (Made again over the ranks left when one leaves, --elastic.)
  auto make_ddp = [&] {
    auto d = std::make_unique<plexus::ddp::DistributedDataParallel<torch::nn::SequentialImpl>>(
        model, comm,
        plexus::ddp::DistributedDataParallelOptions{
            .device_ids = device.is_cuda() ? std::vector<int>{device.index()} : std::vector<int>{},
            .bucket_cap_mb = opt.bucket_cap_mb,
            .find_unused_parameters = opt.find_unused_parameters,
            .gradient_as_bucket_view = opt.gradient_as_bucket_view,
            .ready_order =
                std::vector<size_t>(progress.ready_order.begin(), progress.ready_order.end())});
    if (opt.hook == "fp16") d->register_comm_hook(plexus::reducer::Fp16CompressHook());
    if (opt.hook == "bf16") d->register_comm_hook(plexus::reducer::Bf16CompressHook());
    return d;
  };
  // A rank plexus-run --elastic started again joins ranks under way: DDP
  // is made once it has their state (its making is collective).
  const bool newcomer = opt.elastic && comm.joined();
  std::unique_ptr<plexus::ddp::DistributedDataParallel<torch::nn::SequentialImpl>> ddp;
  if (!newcomer) ddp = make_ddp();

  // 3. Each rank sees its own shard, reshuffled every epoch (the sampler's
  // copies share the epoch).
  const auto dataset =
      TensorPairDataset(data.train_x, data.train_y).map(torch::data::transforms::Stack<>());
  std::unique_ptr<plexus::ddp::DistributedSampler> sampler;
  auto make_loader = [&] {
    sampler.reset(new plexus::ddp::DistributedSampler(
        dataset.size().value(),
        {.num_replicas = comm.size(), .rank = comm.rank(), .seed = opt.seed}));
    return torch::data::make_data_loader(dataset, *sampler,
                                         torch::data::DataLoaderOptions(opt.batch_size));
  };
  auto loader = make_loader();

  const int epochs = opt.epochs ? opt.epochs : (data.name == "synthetic" ? 3 : 20);
  const int64_t k = opt.no_sync_steps;
  int64_t batches_per_epoch = 0, steps_per_epoch = 0, total_steps = 0, log_every = 0;
  auto count_steps = [&] {  // (again after a rank left: the shards grew)
    batches_per_epoch = (sampler->size() + opt.batch_size - 1) / opt.batch_size;
    steps_per_epoch = (batches_per_epoch + k - 1) / k;
    total_steps = steps_per_epoch * (epochs - progress.epochs_done);
    if (opt.max_steps) total_steps = std::min(total_steps, opt.max_steps - progress.global_step);
    log_every = opt.log_every > 0 ? opt.log_every : std::max<int64_t>(1, steps_per_epoch / 10);
  };
  count_steps();
  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  if (root) {
    std::printf(
        "plexus-trainer: %s (%lld parameters, %.1f MB of gradients) on %s, %u rank(s) x batch "
        "%d, %s lr %g, %d thread(s) per rank, %s data (%lld train / %lld test)\n",
        opt.model == "mlp"
            ? ("mlp " + std::to_string(opt.depth) + " x " + std::to_string(opt.width)).c_str()
            : "cnn",
        static_cast<long long>(parameters), parameters * 4 / 1e6, comm.backend_name().c_str(),
        comm.size(), opt.batch_size, opt.optimizer.c_str(), opt.lr, threads, data.name.c_str(),
        static_cast<long long>(data.train_x.size(0)), static_cast<long long>(data.test_x.size(0)));
    if (resume) {
      std::printf("plexus-trainer: resumed from %s after epoch %d (step %lld)%s\n",
                  opt.checkpoint.c_str(), progress.epochs_done,
                  static_cast<long long>(progress.global_step),
                  opt.resume ? "" : (", restart " + std::to_string(restart)).c_str());
    }
    if (device.is_cuda()) std::printf("plexus-trainer: model and batches on cuda:LOCAL_RANK\n");
    std::fflush(stdout);
  }

  std::vector<EpochRecord> records;
  std::vector<double> all_step_ms;
  const auto run_start = Clock::now();
  auto last_log = run_start;
  int64_t steps_run = 0;
  bool stop = opt.max_steps && progress.global_step >= opt.max_steps;
  // --elastic needs a backend that goes on after a peer died: Open MPI
  // without ULFM cannot (a dead rank ends the MPI job).
  bool elastic = opt.elastic;
  if (elastic && comm.backend_name() == "mpi") {
    elastic = false;
    if (root) {
      std::printf(
          "plexus-trainer: --elastic is off on the mpi backend (MPI cannot go on without a "
          "rank); a failure ends the job: restart it (mpirun, or plexus-run --max-restarts with "
          "another backend) and --checkpoint resumes it\n");
    }
  }
  // --elastic: the state every rank holds alike at a step, to go back to.
  ElasticCommit commit;
  int64_t skip_steps = 0;  // after a rank left: steps of the epoch done before
  if (elastic) commit.Take(model, *optimizer, progress, progress.epochs_done, 0, comm.size());
  // --elastic: after Communicator::grow() (the others) or from_env() (a
  // newcomer): the commit from the ranks that held it, the data
  // re-partitioned over every rank, DDP made again.
  std::optional<plexus::Communicator> grown;
  struct Regroup {};  // thrown from a commit to leave the epoch's loop
  // Once the ranks changed (one left, or joined): the last commit on the new
  // communicator, the learning rate scaled if asked (the commit's lr and
  // steps are those of the ranks it was taken on), DDP and the sampler made
  // again; the commit's epoch goes on where it was, as many samples done,
  // now over another number of ranks. Returns the lr's description.
  auto go_on_from_commit = [&] {
    commit.Restore(model, *optimizer, &progress);
    const double factor = static_cast<double>(comm.size()) / commit.world;
    if (opt.elastic_lr == "linear") {
      for (auto& group : optimizer->param_groups()) {
        group.options().set_lr(group.options().get_lr() * factor);
      }
    }
    ddp = make_ddp();
    loader = make_loader();
    count_steps();
    skip_steps = commit.step_in_epoch * commit.world / comm.size();
    root = comm.rank() == 0;
    stop = opt.max_steps && progress.global_step >= opt.max_steps;
    return opt.elastic_lr == "linear" ? "x " + std::to_string(factor) : std::string("unchanged");
  };
  auto take_newcomers = [&](const std::vector<uint32_t>& before) {
    commit.Share(comm);
    const std::string lr = go_on_from_commit();
    if (root) {
      std::string joined, all;
      for (uint32_t r : comm.job_ranks()) {
        all += (all.empty() ? "" : ", ") + std::to_string(r);
        if (std::find(before.begin(), before.end(), r) == before.end()) {
          joined += (joined.empty() ? "" : ", ") + std::to_string(r);
        }
      }
      std::printf(
          "plexus-trainer: job rank(s) %s joined at step %lld; going on with %u ranks (job ranks "
          "%s) from the commit at step %lld, lr %s\n",
          joined.c_str(), static_cast<long long>(progress.global_step + 1), comm.size(),
          all.c_str(), static_cast<long long>(progress.global_step), lr.c_str());
      std::fflush(stdout);
    }
  };
  if (newcomer) {
    // (Without the others' state it has nothing to go on from: a failure
    // here ends this rank, and the others go on without it.)
    std::printf("plexus-trainer: job rank %u joined %u ranks under way\n",
                comm.job_ranks()[comm.rank()], comm.size() - 1);
    std::fflush(stdout);
    take_newcomers({});
  }
  std::optional<std::vector<uint32_t>> share_with;  // after grow(): the ranks before
  for (;;) {
    try {
      if (share_with) take_newcomers(*std::exchange(share_with, std::nullopt));
      for (int epoch = progress.epochs_done; epoch < epochs && !stop; ++epoch) {
        sampler->set_epoch(epoch);
        std::vector<StepTime> times;
        double loss_sum = 0;  // this rank's, over micro-batches
        int64_t micro_batches = 0, batch_index = 0, step_in_epoch = 0, micro_in_step = 0;
        const int64_t skip_batches = std::exchange(skip_steps, 0) * k;
        StepTime current;
        double step_loss = 0;
        auto step_start = Clock::now();
        const auto epoch_start = step_start;
        optimizer->zero_grad();
        // 4. The loop. With --no-sync-steps K, K-1 micro-batches accumulate
        // locally under no_sync and the K-th all-reduces the sum.
        for (auto& batch : *loader) {
          if (batch_index < skip_batches) {  // done before the rank left
            ++batch_index;
            step_in_epoch = batch_index / k;
            continue;
          }
          const bool sync = (batch_index + 1) % k == 0 || batch_index + 1 == batches_per_epoch;
          ++batch_index;
          std::optional<plexus::reducer::Reducer::NoSyncGuard> no_sync;
          if (!sync) no_sync.emplace(ddp->no_sync());
          const auto t0 = Clock::now();
          auto output = ddp->forward(batch.data.to(device));
          auto loss = torch::nn::functional::cross_entropy(output, batch.target.to(device));
          const auto t1 = Clock::now();
          (k > 1 ? loss / static_cast<double>(k) : loss)
              .backward();  // buckets all-reduce meanwhile
          const auto t2 = Clock::now();
          no_sync.reset();
          const double l = loss.item<double>();
          loss_sum += l;
          step_loss += l;
          ++micro_batches;
          ++micro_in_step;
          current.forward += Ms(t0, t1);
          current.backward += Ms(t1, t2);
          plexus::trace::Mark("forward", t0, t1);  // (the flight recorder's timeline)
          plexus::trace::Mark("backward", t1, t2);
          if (!sync) continue;
          const auto t3 = Clock::now();
          optimizer->step();
          optimizer->zero_grad();
          const auto t4 = Clock::now();
          plexus::trace::Mark("optimizer", t3, t4);
          current.optimizer = Ms(t3, t4);
          current.step = Ms(step_start, t4);
          const auto last = ddp->logging_data().reducer.last;
          current.comm = last.backward_comm_time / 1e3;
          current.comm_not_hidden = last.comm_not_hidden_time / 1e3;
          if (progress.global_step >= opt.warmup_steps) {
            times.push_back(current);
            all_step_ms.push_back(current.step);
          }
          progress.step_losses.push_back(step_loss / micro_in_step);
          ++progress.global_step;
          ++step_in_epoch;
          ++steps_run;
          if (elastic && progress.global_step % opt.commit_every == 0) {
            commit.Take(model, *optimizer, progress, epoch, step_in_epoch, comm.size());
            // Ranks started again join here (plexus-run --elastic
            // --max-restarts): every rank is at this commit.
            if ((grown = comm.grow())) throw Regroup{};
          }
          // Auto (no --log-every): every tenth of an epoch, at most once a second.
          if (root && opt.log_every >= 0 && step_in_epoch % log_every == 0 &&
              (opt.log_every > 0 || Ms(last_log, t4) >= 1000)) {
            last_log = t4;
            const double elapsed = Ms(run_start, Clock::now()) / 1e3;
            const double rate =
                step_in_epoch * k * opt.batch_size * comm.size() / (Ms(epoch_start, t4) / 1e3);
            std::printf("epoch %d/%d  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %s\n",
                        epoch + 1, epochs, static_cast<long long>(step_in_epoch),
                        static_cast<long long>(steps_per_epoch), progress.step_losses.back(), rate,
                        FormatEta(elapsed / steps_run * (total_steps - steps_run)).c_str());
            std::fflush(stdout);
          }
          current = {};
          step_loss = 0;
          micro_in_step = 0;
          step_start = Clock::now();
          if (opt.max_steps && progress.global_step >= opt.max_steps) {
            stop = true;
            break;
          }
        }
        // 5. The epoch's summary: losses and accuracy over every rank.
        EpochRecord r;
        r.epoch = epoch + 1;
        r.steps = step_in_epoch;
        std::vector<double> sums = {loss_sum, static_cast<double>(micro_batches)};
        AllreduceSums(comm, sums, device);
        r.train_loss = sums[0] / std::max(1.0, sums[1]);
        if (opt.eval) {
          const auto e = Evaluate(model, data, comm, device);
          r.test_loss = e.loss;
          r.test_accuracy = e.accuracy;
        }
        auto pick = [&](double StepTime::*f) {
          std::vector<double> v;
          for (const auto& t : times) v.push_back(t.*f);
          return v;
        };
        r.step_ms_median = Median(pick(&StepTime::step));
        r.forward_ms = Mean(pick(&StepTime::forward));
        r.backward_ms = Mean(pick(&StepTime::backward));
        r.comm_not_hidden_ms = Mean(pick(&StepTime::comm_not_hidden));
        r.comm_ms = Mean(pick(&StepTime::comm));
        r.optimizer_ms = Mean(pick(&StepTime::optimizer));
        r.samples_per_s =
            r.step_ms_median > 0 ? k * opt.batch_size * comm.size() / (r.step_ms_median / 1e3) : 0;
        records.push_back(r);
        progress.epochs_done = epoch + 1;
        if (root) {
          const double hidden = r.comm_ms > 0 ? 100 * (1 - r.comm_not_hidden_ms / r.comm_ms) : 0;
          std::printf(
              "epoch %d/%d done: train loss %.4f, test loss %.4f, test accuracy %.2f %%; step %.1f "
              "ms "
              "median (%.0f samples/s): forward %.1f, backward %.1f of which waiting for "
              "communication %.1f (%.0f %% of %.1f ms hidden), optimizer %.1f\n",
              r.epoch, epochs, r.train_loss, r.test_loss, 100 * r.test_accuracy, r.step_ms_median,
              r.samples_per_s, r.forward_ms, r.backward_ms, r.comm_not_hidden_ms, hidden, r.comm_ms,
              r.optimizer_ms);
          static bool buckets_told = false;
          if (!buckets_told && !comm.hierarchy().empty()) {
            // Which buckets went in two levels (PLEXUS_HIERARCHY), once.
            buckets_told = true;
            int two = 0, flat = 0;
            for (const auto& b : ddp->logging_data().reducer.buckets) {
              (b.comm_scheme == "two-level" ? two : flat) += 1;
            }
            std::printf("buckets: %d two-level, %d flat; %s\n", two, flat,
                        comm.hierarchy().c_str());
          }
          std::fflush(stdout);
          if (!opt.checkpoint.empty()) {
            const auto& order = ddp->logging_data().reducer.ready_order;
            progress.ready_order.assign(order.begin(), order.end());
            SaveCheckpoint(opt.checkpoint, model, *optimizer, progress);
          }
        }
      }
      break;  // every epoch done
    } catch (const Regroup&) {
      // (The state goes out at the top of the loop, where a newcomer that
      // dies meanwhile is a failure like any other.)
      share_with = comm.job_ranks();
      ddp.reset();  // its hooks off the model
      comm = std::move(*grown);
      grown.reset();
    } catch (const std::exception& e) {
      // 6. --elastic: a rank left (plexus-run --elastic took it out). Go back
      // to the last commit, which every rank left holds alike, on a
      // communicator over those ranks, with the data re-partitioned over them.
      if (!elastic) throw;
      const auto failed_at = Clock::now();
      const int64_t failed_step = progress.global_step;
      const std::vector<uint32_t> before = comm.job_ranks();
      std::fprintf(stderr, "plexus-trainer: step %lld failed: %s\n",
                   static_cast<long long>(failed_step + 1), e.what());
      comm.abort();  // what DDP still waits for fails at once
      ddp.reset();   // its hooks off the model
      comm = comm.shrink();
      const std::string lr = go_on_from_commit();
      if (root) {
        std::string left, kept;
        for (uint32_t r : before) {
          const auto& now = comm.job_ranks();
          const bool in = std::find(now.begin(), now.end(), r) != now.end();
          (in ? kept : left) += ((in ? kept : left).empty() ? "" : ", ") + std::to_string(r);
        }
        std::printf(
            "plexus-trainer: job rank(s) %s left at step %lld; going on with %u ranks (job ranks "
            "%s) from the commit at step %lld (%lld steps lost), %.0f ms after the failure, lr "
            "%s\n",
            left.c_str(), static_cast<long long>(failed_step + 1), comm.size(), kept.c_str(),
            static_cast<long long>(progress.global_step),
            static_cast<long long>(failed_step - progress.global_step), Ms(failed_at, Clock::now()),
            lr.c_str());
        std::fflush(stdout);
      }
    }
  }

  if (elastic) {
    // Whatever left and joined, every rank must end with the same model.
    uint64_t hash = 1469598103934665603ull;  // FNV-1a over the parameters' bytes
    for (const auto& p : model->parameters()) {
      const auto t = p.detach().contiguous();
      const auto* b = static_cast<const unsigned char*>(t.data_ptr());
      for (size_t i = 0; i < t.nbytes(); ++i) hash = (hash ^ b[i]) * 1099511628211ull;
    }
    std::vector<uint64_t> hashes(comm.size());
    comm.allgather(&hash, hashes.data(), 1, plexus::DType::UInt64).wait();
    std::string ranks;
    for (uint32_t r : comm.job_ranks()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    const bool same =
        std::all_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h == hash; });
    if (root || !same) {
      std::printf(
          "plexus-trainer: parameters %s on the %u ranks at the end (job ranks %s): hash "
          "%016llx%s\n",
          same ? "identical" : "DIFFER", comm.size(), ranks.c_str(),
          static_cast<unsigned long long>(hash), same ? "" : " here");
      std::fflush(stdout);
    }
    if (!same) return 1;
  }
  if (root && !opt.save_weights.empty()) SaveWeights(*model, opt.save_weights);
  if (root && !opt.json.empty()) {
    const EpochRecord last = records.empty() ? EpochRecord{} : records.back();
    std::ofstream j(opt.json);
    j << std::setprecision(9);
    j << "{\n  \"system\": " << JsonString("plexus-" + comm.backend_name())
      << ",\n  \"backend\": " << JsonString(comm.backend_name())
      << ",\n  \"world_size\": " << comm.size() << ",\n  \"model\": " << JsonString(opt.model)
      << ",\n  \"width\": " << opt.width << ",\n  \"depth\": " << opt.depth
      << ",\n  \"parameters\": " << parameters << ",\n  \"data\": " << JsonString(data.name)
      << ",\n  \"batch_size\": " << opt.batch_size << ",\n  \"no_sync_steps\": " << k
      << ",\n  \"optimizer\": " << JsonString(opt.optimizer) << ",\n  \"lr\": " << opt.lr
      << ",\n  \"seed\": " << opt.seed << ",\n  \"threads\": " << threads
      << ",\n  \"bucket_cap_mb\": "
      << (opt.bucket_cap_mb ? std::to_string(*opt.bucket_cap_mb) : std::string("null"))
      << ",\n  \"gradient_as_bucket_view\": " << (opt.gradient_as_bucket_view ? "true" : "false")
      << ",\n  \"hook\": " << JsonString(opt.hook) << ",\n  \"steps\": " << progress.global_step
      << ",\n  \"step_ms\": " << JsonNumbers(all_step_ms)
      << ",\n  \"step_ms_median\": " << Median(all_step_ms) << ",\n  \"samples_per_s\": "
      << (all_step_ms.empty() ? 0.0
                              : k * opt.batch_size * comm.size() / (Median(all_step_ms) / 1e3))
      << ",\n  \"step_losses\": " << JsonNumbers(progress.step_losses)
      << ",\n  \"final_train_loss\": " << last.train_loss
      << ",\n  \"final_test_loss\": " << last.test_loss
      << ",\n  \"final_test_accuracy\": " << last.test_accuracy << ",\n  \"epochs\": [";
    for (size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      j << (i ? ",\n    " : "\n    ") << "{\"epoch\": " << r.epoch << ", \"steps\": " << r.steps
        << ", \"train_loss\": " << r.train_loss << ", \"test_loss\": " << r.test_loss
        << ", \"test_accuracy\": " << r.test_accuracy
        << ", \"step_ms_median\": " << r.step_ms_median
        << ", \"samples_per_s\": " << r.samples_per_s << ", \"forward_ms\": " << r.forward_ms
        << ", \"backward_ms\": " << r.backward_ms
        << ", \"comm_not_hidden_ms\": " << r.comm_not_hidden_ms << ", \"comm_ms\": " << r.comm_ms
        << ", \"optimizer_ms\": " << r.optimizer_ms << "}";
    }
    j << "\n  ]\n}\n";
    if (!j) throw std::runtime_error("cannot write " + opt.json);
  }
  return 0;
}

}  // namespace
}  // namespace trainer

int main(int argc, char** argv) {
  const auto options = trainer::ParseOptions(argc, argv);
  try {
    return trainer::Train(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plexus-trainer: %s\n", e.what());
    return 1;
  }
}
