// bc_sim --scale: what the library's plan code costs one rank at large p
// (issue 17 item 5): building the Hierarchy (all three shapes), one rank's
// Program, and the cost model's choice, each timed and sized.
#pragma once

#include <string>
#include <vector>

namespace bcsim {

// ranks: e.g. {"1024", "16384", "65536"}; prefix: the lower levels, e.g.
// "8x32" (8 ranks per node, 32 nodes per rack): the layout is PREFIXxRACKS.
int scale_report(const std::vector<std::string> &ranks, const std::string &prefix);

}  // namespace bcsim
