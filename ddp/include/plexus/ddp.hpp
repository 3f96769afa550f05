// Everything public of the LibTorch layer: DistributedDataParallel,
// DistributedSampler, the reducer's comm hooks, collectives on tensors,
// LibTorch's CUDA support on demand.
#pragma once

#include "plexus/ddp/distributed_data_parallel.hpp"
#include "plexus/ddp/distributed_sampler.hpp"
#include "plexus/ddp/tensor_collectives.hpp"
#include "plexus/ddp/torch_cuda.hpp"
