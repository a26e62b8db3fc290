// The Python module blueconnect.torch._C: the process group's constructor and
// the MPI helpers the package uses for torch's env:// rendezvous.
#include <torch/extension.h>
#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include "process_group.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "BlueConnect's torch.distributed process group (see docs/TORCH.md)";
  py::module::import("torch.distributed");  // registers c10d's ProcessGroup and Store types
  py::class_<bctorch::ProcessGroupBlueConnect, c10d::ProcessGroup,
             c10::intrusive_ptr<bctorch::ProcessGroupBlueConnect>>(m, "ProcessGroupBlueConnect")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                       std::vector<int64_t> world_ranks, std::chrono::milliseconds timeout) {
             return c10::make_intrusive<bctorch::ProcessGroupBlueConnect>(store, rank, size, std::move(world_ranks),
                                                                          timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("world_ranks"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def("describe", &bctorch::ProcessGroupBlueConnect::describe, py::arg("count"),
           py::call_guard<py::gil_scoped_release>(),
           "The BlueConnect communicator's topology and plan for `count` float32 elements")
      .def("learning_calls", &bctorch::ProcessGroupBlueConnect::learning_calls, py::arg("bytes"),
           py::call_guard<py::gil_scoped_release>(),
           "All-reduces of `bytes` bytes still to run before that size's plan is learned (docs/PLANS.md); "
           "0 once it is. A benchmark that warms up with this many calls times the learned plan");
  m.def("mpi_world", &bctorch::mpi_world, py::call_guard<py::gil_scoped_release>(),
        "Initialises MPI and BlueConnect if needed; returns (world rank, world size)");
  m.def("mpi_rendezvous", &bctorch::mpi_rendezvous, py::call_guard<py::gil_scoped_release>(),
        "Collective over MPI_COMM_WORLD: (rank, size, master address, free port) agreed from rank 0");
  m.def("set_nonblocking", &bctorch::set_nonblocking, py::arg("mode") = "",
        "For tests: which all-reduces start non-blocking (auto, always, never; '' keeps it); "
        "returns how many have so far");
  m.def("abort", &bctorch::abort_job, py::arg("code"),
        "MPI_Abort(MPI_COMM_WORLD, code) when MPI is up; nothing otherwise");
  m.def("shutdown", &bctorch::shutdown, py::call_guard<py::gil_scoped_release>(),
        "Drains the communication threads, frees the communicators, finalises BlueConnect and MPI");
}
