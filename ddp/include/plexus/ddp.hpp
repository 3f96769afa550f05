// Everything public of the LibTorch layer: DistributedDataParallel,
// DistributedSampler, and the reducer's comm hooks.
#pragma once

#include "plexus/ddp/distributed_data_parallel.hpp"
#include "plexus/ddp/distributed_sampler.hpp"
