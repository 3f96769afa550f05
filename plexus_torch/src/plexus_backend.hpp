// plexus_torch: PyTorch's c10d::Backend over a plexus::Communicator, so that
// torch.distributed runs on every Plexus backend (tcp, ucx, mpi, nccl, a
// vendor's plugin) with no code from the backend's author.
//
// One PlexusBackend is one torch process group's backend: its communicator
// is joined through the c10d store torch hands the creator (so no second
// port), or is the world communicator plexus_torch.init_process_group()
// made from Plexus's own launch discovery (mpirun, srun).
//
// Operations post at once and return a PlexusWork. Whoever waits runs it
// (Work::wait, is_completed: a small operation runs on the caller's thread,
// as plexus::Communicator does); once get_future() is asked for (DDP's comm
// hooks, FSDP), the backend's completion thread waits for it instead and
// completes the future. What torch has and the Plexus ABI lacks is built
// here from what it has: BAND/BOR/BXOR from an allgather, PREMUL_SUM by a
// multiply before the sum, bool and complex tensors as bytes and reals,
// lists of tensors packed into one buffer.
//
// The files: c10d_store (the store adapter), tensors (flattening, packing,
// checks), reductions (the reduce ops Plexus lacks), work (PlexusWork and the
// completion thread), posting.hpp (what every post shares), this one's .cpp
// (creation, the registries, release), collectives_reduce.cpp and
// collectives_move.cpp (the c10d operations).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "plexus/communicator.hpp"
#include "work.hpp"

namespace plexus_torch {

class PlexusBackend : public c10d::Backend {
 public:
  // Joins the communicator of rank of size through store (torch's
  // creator). Releases nothing of Python's: call without the GIL.
  static c10::intrusive_ptr<PlexusBackend> Create(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int size,
                                                  std::chrono::milliseconds timeout);
  // plexus_torch.init_process_group(): the world communicator from Plexus's
  // launch discovery, kept for the next Create with its rank and size.
  // Returns (rank, size, local_rank).
  static std::tuple<int, int, int> PrepareWorldFromEnv();
  // Rank 0's bytes on every rank, over the prepared world communicator.
  static std::string BroadcastFromRankZero(const std::string& bytes);
  // At interpreter exit: the communicators of every backend still alive
  // (Python keeps process groups past destroy_process_group) are released,
  // so that the Plexus backends are finalised when the process exits (MPI
  // must be). Those backends then refuse new operations.
  static void ReleaseAll();

  PlexusBackend(plexus::Communicator comm, std::chrono::milliseconds timeout);
  ~PlexusBackend() override;

  const std::string getBackendName() const override { return "plexus"; }
  // The Plexus backend underneath: "tcp", "ucx", "mpi", "nccl", a plugin's name.
  const std::string& plexusBackendName() const { return comm_.backend_name(); }
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  // For bench/torch_allreduce.py: seconds for `calls` blocking sum
  // allreduces of t (contiguous, in place) on this backend's communicator
  // directly, without c10d: the floor the bridge is measured against.
  double RawAllreduceSeconds(const at::Tensor& t, int calls);

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void abort() override;
  void shutdown() override;

 private:
  c10::intrusive_ptr<PlexusWork> NewWork(c10d::OpType type, OpLabel what,
                                         std::vector<at::Tensor> outputs);
  // Moves what part (a PlexusWork of this backend) posted and has still to
  // do into work.
  void Absorb(PlexusWork& work, const c10::intrusive_ptr<c10d::Work>& part);
  // Posts an allreduce of t (contiguous) with torch's op; what's needed
  // afterwards goes into work (finisher, kept tensors).
  void PostAllreduce(PlexusWork& work, const at::Tensor& t, const c10d::ReduceOp& op,
                     const char* name);

  // Moved out (empty) by ReleaseAll; guarded by the registry's mutex then.
  plexus::Communicator comm_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<CompletionThread> completer_;
  uint64_t seq_ = 0;
};

}  // namespace plexus_torch
