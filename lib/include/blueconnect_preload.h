// The preload's door into libblueconnect.so (not installed).
//
// libblueconnect.so is built with hidden visibility: it exports the C API of
// blueconnect.h and, for the PMPI interposer (lib/pmpi), only what is declared
// here with BC_API, plus the two logging entry points behind BC_LOG
// (core/log.h). The preload needs a little more than the C API: it starts the
// library silently inside MPI_Init, reads its own BC_PMPI_* parameters from
// the one registry, and asks what memory a buffer is in. Nothing else of the
// library's internals is reachable from outside it; tests/exports_check.sh
// fails when the exported symbols and these declarations differ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "blueconnect.h"
#include "core/params.h"

namespace bc {
namespace preload {

// bc_init's work, silent by default unless BC_DEBUG asks (quiet_by_default),
// as the interposer must print nothing a program did not ask for.
BC_API bc_status_t init(bool quiet_by_default);
// bc_finalize's work.
BC_API bc_status_t finalize();
// A parameter's value from the registry that init read (core/params.h).
BC_API int64_t param_int(ParamId id);
BC_API std::string param_str(ParamId id);
// Where a buffer lives (BC_MEM_HOST without a CUDA build).
BC_API bc_memtype_t memtype_of(const void *p);
// Whether any buffer can be device memory (a CUDA build and a usable device);
// false: memtype_of says BC_MEM_HOST for every pointer. Probed once.
BC_API bool device_buffers_usable();
// Whether the device kernels reduce (dtype, op); false leaves no error behind.
BC_API bool device_reduces(bc_dtype_t dtype, bc_op_t op);
// A copy between host and device memory (either direction).
BC_API bc_status_t copy(void *dst, const void *src, size_t bytes);
// At most how many of BlueConnect's blocking calls of `bytes` a communicator
// spends learning its plan (BC_PLAN_LEARN), for bc_pmpi_probe_calls.
BC_API int learning_calls(int64_t bytes);

}  // namespace preload
}  // namespace bc
