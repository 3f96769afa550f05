// comm_create of the NCCL backend: picks and checks the device, shares rank
// 0's ncclUniqueId through the host's out-of-band channel, and creates the
// NCCL communicator without blocking (ncclConfig_t.blocking = 0), polling it
// under the communicator's timeout so that a missing peer is a TIMEOUT that
// says what it waited for, not a hang.
#pragma once

#include <memory>
#include <string>

#include "cuda_api.hpp"
#include "nccl_comm.hpp"
#include "plexus/backend.h"

namespace plexus::nccl {

// Maps an NCCL result to the ABI's error classes.
int32_t StatusOfNccl(ncclResult_t r);

// Collective over the ranks of config. On success *out holds the
// communicator. On failure *error says why (naming the rank at fault where
// known) and nothing is left behind. The calling thread's current CUDA device
// is the same afterwards as before.
int32_t CreateCommunicator(const CudaApi& api, const plexus_host_v1& host,
                           const plexus_comm_config_v1& config, std::shared_ptr<CommCore>* out,
                           std::string* error);

// comm_split (ABI 1.2): a new communicator from parent's NCCL communicator
// with ncclCommSplit, collective over every rank of parent. config describes
// this rank's new communicator (the host's result: rank, size, name,
// timeout, the group's out-of-band channel), or is NULL for
// PLEXUS_SPLIT_NO_COLOR (then *out stays empty). The new communicator uses
// parent's device and shares nothing else with it. On failure *error says
// why; a failure inside NCCL's split aborts parent (its ranks are out of
// step). nccl_bootstrap.cpp says how the color and key are passed.
int32_t SplitCommunicator(const CudaApi& api, CommCore& parent, uint32_t color, uint32_t key,
                          const plexus_comm_config_v1* config, std::shared_ptr<CommCore>* out,
                          std::string* error);

}  // namespace plexus::nccl
