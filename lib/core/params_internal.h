// Shared by the two halves of the BC_* parameter registry: the table of rows
// with their documentation (params_table.cc) and the machinery that parses,
// checks, looks up and describes them (params.cc). Separate so that adding or
// documenting a knob touches only the table. Not for other code: params.h is
// the registry's interface.
#pragma once

#include <cstdint>

#include "core/params.h"

namespace bc {

constexpr int64_t kKiB = 1024, kMiB = 1024 * kKiB, kGiB = 1024 * kMiB;
constexpr int64_t kHour = 3600 * 1000;  // Seconds parameters hold milliseconds

// The registry: one row per ParamId, in ParamId order (params_table.cc).
extern const ParamDef kParamDefs[static_cast<int>(ParamId::Count)];

}  // namespace bc
