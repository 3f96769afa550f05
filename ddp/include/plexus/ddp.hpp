// Everything public of the LibTorch layer: DistributedDataParallel,
// DistributedSampler, the reducer's comm hooks, collectives on tensors.
#pragma once

#include "plexus/ddp/distributed_data_parallel.hpp"
#include "plexus/ddp/distributed_sampler.hpp"
#include "plexus/ddp/tensor_collectives.hpp"
