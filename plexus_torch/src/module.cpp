// plexus_torch._C: the Python side of the bridge (plexus_torch/__init__.py
// registers the backend with torch.distributed).
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "plexus_backend.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "Plexus backends for torch.distributed (see plexus_torch)";
  // torch.distributed registers c10d's Backend and Store with pybind11.
  py::module_::import("torch.distributed");
  py::class_<plexus_torch::PlexusBackend, c10d::Backend,
             c10::intrusive_ptr<plexus_torch::PlexusBackend>>(m, "PlexusBackend")
      .def(py::init(&plexus_torch::PlexusBackend::Create), py::arg("store"), py::arg("rank"),
           py::arg("size"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
           "Joins the communicator of rank (of size) through a c10d store.")
      .def("_raw_allreduce_seconds", &plexus_torch::PlexusBackend::RawAllreduceSeconds,
           py::arg("tensor"), py::arg("calls"), py::call_guard<py::gil_scoped_release>(),
           "Seconds for `calls` blocking sum allreduces of tensor on the communicator "
           "directly (no c10d): what bench/torch_allreduce.py compares the bridge with.")
      .def_property_readonly("plexus_backend", &plexus_torch::PlexusBackend::plexusBackendName,
                             "The Plexus backend underneath: tcp, ucx, mpi, nccl or a plugin's "
                             "name.");
  m.def("_prepare_world_from_env", &plexus_torch::PlexusBackend::PrepareWorldFromEnv,
        py::call_guard<py::gil_scoped_release>(),
        "Makes the world communicator from Plexus's launch discovery; (rank, size, local_rank).");
  m.def("_release_all", &plexus_torch::PlexusBackend::ReleaseAll,
        py::call_guard<py::gil_scoped_release>(),
        "At exit: releases the communicators of every backend still alive.");
  m.def(
      "_broadcast_from_rank_zero",
      [](const py::bytes& b) {
        std::string in = b;
        std::string out;
        {
          py::gil_scoped_release release;
          out = plexus_torch::PlexusBackend::BroadcastFromRankZero(in);
        }
        return py::bytes(out);
      },
      "Rank 0's bytes on every rank, over the world communicator from the environment.");
}
