#include "options.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>

namespace trainer {
namespace {

constexpr const char* kHelp = R"(Usage: plexus-trainer [options]

Trains one model data-parallel with plexus::ddp::DistributedDataParallel on
whatever backend PLEXUS_BACKEND names (unset: the best one that loads). Run it
under a launcher, one process per rank:

  PLEXUS_BACKEND=tcp plexus-run -n 2 plexus-trainer --data digits
  PLEXUS_BACKEND=mpi mpirun -np 2 plexus-trainer --data digits
  torchrun --nproc_per_node 2 --no-python plexus-trainer --data digits

Alone (no launcher) it trains as a world of one.

Model and data:
  --model mlp|cnn         an MLP (default) or a small CNN (needs square inputs)
  --width N               MLP hidden features (default 256)
  --depth N               MLP Linear layers (default 3); 16 x 1024 wide is
                          15.8 M parameters, 63 MB of gradients
  --data NAME             synthetic (default): points labelled by a fixed
                          random teacher network, generated in memory;
                          digits: scikit-learn's 1797 8x8 handwritten digits
                          (digits.ptf, written at build time by
                          export_digits.py; $PLEXUS_DATA_DIR overrides where
                          it is looked for); or a tensor file's path
  --samples N             synthetic training samples (default 16384; test
                          set: N/8)

Training:
  --epochs N              default: synthetic 3, digits 20
  --batch-size N          per rank (default 32); the global batch is N x ranks
  --optimizer sgd|adam    default sgd, with --momentum (default 0.9)
  --lr X                  default: sgd 0.05, adam 0.001
  --momentum X
  --seed N                initial weights and data order (default 0)
  --max-steps N           stop after N optimizer steps (default: every epoch)
  --threads N             LibTorch threads per rank (default: cores / ranks
                          on this host, at least 1)
  --device cpu|cuda       where the model and batches live (default cpu);
                          cuda: each rank uses cuda:LOCAL_RANK and needs a
                          backend with CUDA memory (PLEXUS_BACKEND=nccl)

DistributedDataParallel (PyTorch's defaults unless given):
  --bucket-cap-mb X       bucket size in MiB (default 25)
  --find-unused-parameters
  --gradient-as-bucket-view
  --no-sync-steps K       gradient accumulation: K micro-batches per optimizer
                          step, the first K-1 under no_sync (default 1)
  --hook fp16|bf16        compress gradients for the all-reduce

Output and state:
  --log-every N           progress line on rank 0 every N steps (default:
                          about 10 per epoch; 0 for none)
  --warmup-steps N        first steps left out of step-time statistics
                          (default 2)
  --no-eval               skip the per-epoch test-set evaluation
  --json FILE             write the run's record (rank 0)
  --checkpoint DIR        rank 0 saves model, optimizer and progress there at
                          the end of every epoch
  --resume                continue from --checkpoint DIR (every rank reads
                          it: DIR must be visible to all ranks); started
                          again by a launcher (PLEXUS_RESTART_COUNT or
                          TORCHELASTIC_RESTART_COUNT above 0) with a
                          checkpoint there, it resumes without being asked
  --trace DIR             every rank writes its flight recorder (its last
                          collectives, and each step's forward, backward and
                          optimizer) to DIR/rank-R.json at the end or on a
                          failure: plexus-trace DIR (PLEXUS_TRACE_DIR=DIR)
  --init FILE             initial weights from a tensor file (names as in
                          named_parameters) instead of --seed's
  --save-weights FILE     final weights to a tensor file (rank 0)
  --export DIR            write DIR/data.ptf (the data set) and DIR/init.ptf
                          (the initial weights) and exit, without a launcher

Elastic (under plexus-run --elastic):
  --elastic               when a rank leaves (dies, or freezes and is taken
                          out), go on with the ranks left: roll back to the
                          last commit, re-partition the data over the new
                          world, continue; the log says who left and when.
                          A rank plexus-run starts again (--max-restarts)
                          joins at the next commit and gets the others'
                          state; at the end every rank checks that all hold
                          the same parameters
  --commit-every K        steps between commits of model, optimizer and
                          progress (in memory; default 10): at most K steps
                          are lost; ranks started again join at a commit
  --elastic-lr none|linear
                          after a rank leaves or joins: keep the learning
                          rate (default) or scale it by new world / old world
  -h, --help              this help

Environment: PLEXUS_BACKEND, PLEXUS_TIMEOUT and the launcher's variables
(see plexus-run --help).
)";

[[noreturn]] void Usage(const std::string& message) {
  std::fprintf(stderr, "plexus-trainer: %s (see --help)\n", message.c_str());
  std::exit(2);
}

int64_t ToInt(const std::string& flag, const std::string& v, int64_t min) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < min) {
    Usage(flag + " wants an integer >= " + std::to_string(min) + ", got '" + v + "'");
  }
  return x;
}

double ToDouble(const std::string& flag, const std::string& v, double min) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= min)) {
    Usage(flag + " wants a number >= " + std::to_string(min) + ", got '" + v + "'");
  }
  return x;
}

}  // namespace

TrainerOptions ParseOptions(int argc, char** argv) {
  TrainerOptions o;
  using Setter = std::function<void(const std::string&, const std::string&)>;
  auto i32 = [](int& field, int64_t min) -> Setter {
    return [&field, min](const std::string& f, const std::string& v) {
      const int64_t x = ToInt(f, v, min);
      if (x > 1 << 30) Usage(f + " is too large");
      field = static_cast<int>(x);
    };
  };
  auto str = [](std::string& field) -> Setter {
    return [&field](const std::string&, const std::string& v) { field = v; };
  };
  const std::map<std::string, Setter> with_value = {
      {"--model",
       [&](const std::string& f, const std::string& v) {
         if (v != "mlp" && v != "cnn") Usage(f + " is mlp or cnn, not '" + v + "'");
         o.model = v;
       }},
      {"--width", i32(o.width, 1)},
      {"--depth", i32(o.depth, 1)},
      {"--data", str(o.data)},
      {"--samples",
       [&](const std::string& f, const std::string& v) { o.samples = ToInt(f, v, 8); }},
      {"--epochs", i32(o.epochs, 1)},
      {"--batch-size", i32(o.batch_size, 1)},
      {"--optimizer",
       [&](const std::string& f, const std::string& v) {
         if (v != "sgd" && v != "adam") Usage(f + " is sgd or adam, not '" + v + "'");
         o.optimizer = v;
       }},
      {"--lr", [&](const std::string& f, const std::string& v) { o.lr = ToDouble(f, v, 1e-12); }},
      {"--momentum",
       [&](const std::string& f, const std::string& v) { o.momentum = ToDouble(f, v, 0); }},
      {"--seed", [&](const std::string& f,
                     const std::string& v) { o.seed = static_cast<uint64_t>(ToInt(f, v, 0)); }},
      {"--max-steps",
       [&](const std::string& f, const std::string& v) { o.max_steps = ToInt(f, v, 1); }},
      {"--threads", i32(o.threads, 1)},
      {"--device",
       [&](const std::string& f, const std::string& v) {
         if (v != "cpu" && v != "cuda") Usage(f + " must be cpu or cuda, not '" + v + "'");
         o.device = v;
       }},
      {"--bucket-cap-mb",
       [&](const std::string& f, const std::string& v) { o.bucket_cap_mb = ToDouble(f, v, 0); }},
      {"--no-sync-steps", i32(o.no_sync_steps, 1)},
      {"--hook",
       [&](const std::string& f, const std::string& v) {
         if (v != "fp16" && v != "bf16") Usage(f + " is fp16 or bf16, not '" + v + "'");
         o.hook = v;
       }},
      {"--log-every", i32(o.log_every, 0)},
      {"--warmup-steps", i32(o.warmup_steps, 0)},
      {"--json", str(o.json)},
      {"--checkpoint", str(o.checkpoint)},
      {"--trace", str(o.trace)},
      {"--init", str(o.init)},
      {"--save-weights", str(o.save_weights)},
      {"--export", str(o.export_dir)},
      {"--commit-every", i32(o.commit_every, 1)},
      {"--elastic-lr",
       [&](const std::string& f, const std::string& v) {
         if (v != "none" && v != "linear") Usage(f + " is none or linear, not '" + v + "'");
         o.elastic_lr = v;
       }},
  };
  const std::map<std::string, bool*> flags = {
      {"--find-unused-parameters", &o.find_unused_parameters},
      {"--gradient-as-bucket-view", &o.gradient_as_bucket_view},
      {"--resume", &o.resume},
      {"--elastic", &o.elastic},
  };
  bool log_every_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    bool has_value = false;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    if (arg == "-h" || arg == "--help") {
      std::fputs(kHelp, stdout);
      std::exit(0);
    }
    if (arg == "--no-eval") {
      o.eval = false;
      continue;
    }
    if (const auto f = flags.find(arg); f != flags.end()) {
      if (has_value) Usage(arg + " takes no value");
      *f->second = true;
      continue;
    }
    const auto s = with_value.find(arg);
    if (s == with_value.end()) Usage("unknown option '" + arg + "'");
    if (!has_value) {
      if (i + 1 >= argc) Usage(arg + " needs a value");
      value = argv[++i];
    }
    if (arg == "--log-every") log_every_given = true;
    s->second(arg, value);
  }
  if (!log_every_given)
    o.log_every = 0;
  else if (o.log_every == 0)
    o.log_every = -1;
  if (o.resume && o.checkpoint.empty()) Usage("--resume needs --checkpoint DIR");
  if (o.elastic && o.device != "cpu") Usage("--elastic works with --device cpu only");
  if (o.resume && !o.init.empty()) Usage("--resume and --init both set the weights; give one");
  // A checkpoint loaded into a CUDA model would move it back to the CPU.
  if (o.resume && o.device != "cpu") Usage("--resume works with --device cpu only");
  if (o.lr == 0) o.lr = o.optimizer == "sgd" ? 0.05 : 0.001;
  return o;
}

}  // namespace trainer
