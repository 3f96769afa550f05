// Tensors as Plexus sees them: a tensor flattened to a dense buffer of a
// Plexus dtype (complex as pairs of reals, non-contiguous through a
// contiguous copy), lists of tensors packed into one buffer, and the checks
// every operation makes of the tensors it is given.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plexus/backend.h"
#include "plexus/types.hpp"

namespace plexus_torch {

class PlexusWork;

namespace detail {

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

// t as a Flat for operation op on backend (a RuntimeError for what Plexus cannot carry).
Flat AsFlat(const at::Tensor& t, const char* op, const std::string& backend);

// An output that was not contiguous gets the result back after the operation.
void CopyBackLater(PlexusWork& w, const at::Tensor& caller, const Flat& f);

// The one tensor of a per-device list (one process per device).
const at::Tensor& OneTensor(const std::vector<at::Tensor>& tensors, const char* op);

// r as a rank of a group of size (a root, a peer), checked.
uint32_t CheckedRank(int64_t r, int size, const char* what, const char* op);

// Packs tensors (each flattened) into one contiguous buffer of their dtype.
at::Tensor Pack(const std::vector<at::Tensor>& tensors);

// Copies consecutive pieces of packed into each of tensors.
void Unpack(const at::Tensor& packed, std::vector<at::Tensor>& tensors);

// Checks that a and b have one dtype and one device (one of each per call).
void CheckSameKind(const at::Tensor& a, const at::Tensor& b, const char* op);

}  // namespace detail
}  // namespace plexus_torch
