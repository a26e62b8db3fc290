// bc_info: the library's version, its BC_* parameters, and (under mpirun, or
// as a singleton) the detected topology and the plans for a few sizes.
//
//   bc_info                  version, parameters, topology, plans for 4K 1M 64M
//   bc_info --params         only the parameters
//   bc_info --plan SIZE      topology and the plan for SIZE bytes (repeatable)
//   bc_info --options S      per-communicator overrides, e.g. "BC_TOPO=2x2"
//   bc_info --plans          the learned plans: the per-user cache's verdicts for this layout and hosts
//   bc_info --topology       only the detected topology
//   bc_info --topology-file PATH  also write its levels above the host as a
//                            BC_TOPO_FILE (rank 0 writes), to reload later
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bc_config.h"
#include "bench_args.h"
#include "blueconnect.h"

namespace {

const char kUsage[] =
    "Usage: [mpirun -np N] bc_info [--params] [--plan SIZE]... [-t DTYPE] [--options \"BC_NAME=v;...\"]\n"
    "               [--topology] [--topology-file PATH]\n"
    "  (no option)    version, BC_* parameters, topology, and the plans for 4K, 1M and 64M\n"
    "  --params       only the BC_* parameters (value, default, documentation)\n"
    "  --plan SIZE    topology and the all-reduce plan for SIZE bytes (K M G suffixes; repeatable)\n"
    "  -t DTYPE       element type for --plan (default float32)\n"
    "  --options S    communicator overrides, as bc_comm_create_with: \"BC_TOPO=2x2;BC_ALGO=ring\"\n"
    "  --plans        the learned plans (BC_PLAN_LEARN) cached for this layout and these hosts: per size\n"
    "                 bucket the candidates, their agreed times and the winner (docs/PLANS.md, Learning)\n"
    "  --topology     only the detected topology (levels, units, where they came from)\n"
    "  --topology-file PATH\n"
    "                 with --topology, or alone: also write the levels above the host to PATH as a\n"
    "                 BC_TOPO_FILE (one 'HOSTNAME GROUP...' line per host; rank 0 writes), which\n"
    "                 BC_TOPO_FILE=PATH loads in a later job\n"
    "  -h, --help     this text\n";

int finish(int code) {
  MPI_Finalize();
  return code;
}

// bc_comm_describe's text for `count` elements of `dtype`; false (and the
// error printed) when it fails.
bool describe(bc_comm_t comm, int64_t count, bc_dtype_t dtype, std::string *text) {
  size_t needed = 0;
  bc_status_t st = bc_comm_describe(comm, count, dtype, nullptr, 0, &needed);
  if (st == BC_OK) {
    text->resize(needed);
    st = bc_comm_describe(comm, count, dtype, &(*text)[0], needed, &needed);
  }
  if (st != BC_OK) {
    std::fprintf(stderr, "bc_info: bc_comm_describe failed: %s\n", bc_last_error());
    return false;
  }
  text->resize(std::strlen(text->c_str()));
  return true;
}

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  bool params_only = false;
  bool topology_only = false;
  std::string topology_file;
  std::vector<int64_t> plans;
  bool learned_only = false;
  std::string options;
  bc_dtype_t dtype = BC_FLOAT32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char *next = i + 1 < argc ? argv[i + 1] : nullptr;
    int64_t bytes = 0;
    if (a == "-h" || a == "--help") {
      if (rank == 0) std::fputs(kUsage, stdout);
      return finish(0);
    } else if (a == "--params") {
      params_only = true;
    } else if (a == "--plan" && next && bcbench::parse_bytes(next, &bytes)) {
      plans.push_back(bytes);
      ++i;
    } else if (a == "--plans") {
      learned_only = true;
    } else if (a == "--topology") {
      topology_only = true;
    } else if (a == "--topology-file" && next) {
      topology_file = argv[++i];
      topology_only = true;
    } else if (a == "--options" && next) {
      options = argv[++i];
    } else if (a == "-t" && next) {
      bool found = false;
      for (int t = 0; t < BC_DTYPE_COUNT && !found; ++t)
        if (std::strcmp(next, bc_dtype_name(static_cast<bc_dtype_t>(t))) == 0)
          dtype = static_cast<bc_dtype_t>(t), found = true;
      if (!found) {
        if (rank == 0) std::fprintf(stderr, "bc_info: unknown dtype '%s'\n%s", next, kUsage);
        return finish(2);
      }
      ++i;
    } else {
      if (rank == 0)
        std::fprintf(stderr, "bc_info: bad argument '%s'%s\n%s", argv[i],
                     (a == "--plan" || a == "--options" || a == "-t" || a == "--topology-file") ? " (missing or bad value)" : "", kUsage);
      return finish(2);
    }
  }

  bc_status_t st = bc_init();
  if (st != BC_OK) {
    if (rank == 0) std::fprintf(stderr, "bc_info: bc_init failed: %s\n", bc_last_error());
    return finish(1);
  }
  if (rank == 0 && !topology_only && !learned_only) {
    if (!params_only)
      std::printf("BlueConnect %s (header %d.%d.%d), CUDA support: %s\n\nParameters:\n", BC_VERSION,
                  BC_VERSION_MAJOR, BC_VERSION_MINOR, BC_VERSION_PATCH, BC_HAVE_CUDA ? "yes" : "no");
    bc_print_params(stdout);
  }
  if (params_only) {
    bc_finalize();
    return finish(0);
  }

  bc_comm_t comm = nullptr;
  st = bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &comm);
  if (st != BC_OK) {
    if (rank == 0) std::fprintf(stderr, "bc_info: bc_comm_create failed: %s\n", bc_last_error());
    bc_finalize();
    return finish(1);
  }
  if (learned_only) {
    int code = 0;
    std::string text;
    if (rank == 0 && !describe(comm, 1024, BC_FLOAT32, &text)) {
      code = 1;
    } else if (rank == 0) {
      // The learning's part: from its line to the first that is not indented below it.
      const size_t from = std::min(text.size(), text.find("plan learning:"));
      size_t end = text.find('\n', from);
      while (end != std::string::npos && end + 1 < text.size() && text[end + 1] == ' ') end = text.find('\n', end + 1);
      std::printf("%s\n", text.substr(from, end == std::string::npos ? std::string::npos : end - from).c_str());
    }
    bc_comm_destroy(&comm);
    bc_finalize();
    return finish(code);
  }
  if (topology_only) {
    int code = 0;
    std::string text;
    if (rank == 0 && !describe(comm, 1024, BC_FLOAT32, &text)) {
      code = 1;
    } else if (rank == 0) {
      text.erase(std::min(text.size(), text.find("choice for ")));  // the topology, not the plan
      std::printf("%s", text.c_str());
    }
    if (!topology_file.empty()) {
      st = bc_comm_write_topology(comm, topology_file.c_str());
      if (st != BC_OK) {
        if (rank == 0) std::fprintf(stderr, "bc_info: bc_comm_write_topology failed: %s\n", bc_last_error());
        code = 1;
      } else if (rank == 0) {
        std::printf("wrote the levels above the host to %s (load with BC_TOPO_FILE=%s)\n", topology_file.c_str(),
                    topology_file.c_str());
      }
    }
    bc_comm_destroy(&comm);
    bc_finalize();
    return finish(code);
  }
  if (plans.empty()) plans = {4 << 10, 1 << 20, 64 << 20};
  int code = 0;
  if (rank == 0) {
    std::printf("\nTopology and plans (%d rank(s)%s%s):\n", size, options.empty() ? "" : ", options ",
                options.c_str());
    const size_t elem = bc_dtype_size(dtype);
    // The choice per size, with the cost model's prediction where it is on.
    std::printf("\nPlan per all-reduce size (BC_PLAN terms; predicted by the cost model, BC_MODEL):\n");
    std::printf("  %10s  %12s  %s\n", "bytes", "predicted", "plan");
    for (int64_t bytes = 4 << 10; bytes <= (int64_t{64} << 20); bytes *= 4) {
      char plan[256] = "";
      double predicted = -1;
      if (bc_comm_plan_for(comm, bytes, plan, sizeof plan, &predicted) != BC_OK) {
        std::fprintf(stderr, "bc_info: bc_comm_plan_for failed: %s\n", bc_last_error());
        code = 1;
        break;
      }
      const std::string when = predicted < 0 ? "(model off)" : std::to_string(predicted * 1e3).substr(0, 8) + " ms";
      std::printf("  %10s  %12s  %s\n", bcbench::format_bytes(bytes).c_str(), when.c_str(), plan);
    }
    for (size_t k = 0; k < plans.size(); ++k) {
      const int64_t bytes = plans[k];
      const int64_t count = bytes / static_cast<int64_t>(elem);
      std::string text;
      if (!describe(comm, count, dtype, &text)) {
        code = 1;
        break;
      }
      // The topology is the same for every size: show it once.
      const size_t plan_at = text.find("plan:");
      if (k > 0 && plan_at != std::string::npos) text.erase(0, plan_at);
      std::printf("\n== all-reduce of %s B (%lld x %s) ==\n%s%s", bcbench::format_bytes(bytes).c_str(),
                  static_cast<long long>(count), bc_dtype_name(dtype), text.c_str(),
                  text.empty() || text.back() == '\n' ? "" : "\n");
    }
  }
  bc_comm_destroy(&comm);
  bc_finalize();
  return finish(code);
}
