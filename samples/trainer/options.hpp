// plexus-trainer's command line (no LibTorch here).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace trainer {

struct TrainerOptions {
  // What is trained.
  std::string model = "mlp";       // mlp | cnn
  int width = 256;                 // mlp: hidden features
  int depth = 3;                   // mlp: Linear layers (depth - 1 hidden ones)
  std::string data = "synthetic";  // synthetic | digits | a tensor file
  int64_t samples = 16384;         // synthetic: training samples (test: samples / 8)
  // How.
  int epochs = 0;                 // 0 = the data set's default (synthetic 3, digits 20)
  int batch_size = 32;            // per rank
  std::string optimizer = "sgd";  // sgd (with momentum) | adam
  double lr = 0;                  // 0 = the optimizer's default (sgd 0.05, adam 0.001)
  double momentum = 0.9;
  uint64_t seed = 0;           // initial weights and data order
  int64_t max_steps = 0;       // stop after this many optimizer steps (0: run every epoch)
  int threads = 0;             // LibTorch intra-op threads; 0 = cores / ranks on this host
  std::string device = "cpu";  // cpu | cuda (cuda:LOCAL_RANK)
  // DistributedDataParallel.
  std::optional<double> bucket_cap_mb;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  int no_sync_steps = 1;  // micro-batches per optimizer step (K-1 of them under no_sync)
  std::string hook;       // "" | fp16 | bf16
  // Output and state.
  int log_every = 0;     // progress line every N steps; 0 = about 10 per epoch; -1 = none
  int warmup_steps = 2;  // steps left out of the step-time statistics
  bool eval = true;
  std::string json;          // final record (rank 0)
  std::string checkpoint;    // directory: rank 0 saves at the end of every epoch
  bool resume = false;       // continue from --checkpoint
  std::string trace;         // directory: every rank's flight-recorder dump (PLEXUS_TRACE_DIR)
  std::string init;          // load initial weights from a tensor file
  std::string save_weights;  // final weights to a tensor file (rank 0)
  std::string export_dir;    // write data.ptf and init.ptf there and exit
  // Elastic (under plexus-run --elastic): go on without a rank that left.
  bool elastic = false;
  int commit_every = 10;            // steps between in-memory commits of the state
  std::string elastic_lr = "none";  // none | linear (lr scaled by the world size)
};

// Parses argv; prints --help or an error and exits (0 / 2) itself.
TrainerOptions ParseOptions(int argc, char** argv);

}  // namespace trainer
