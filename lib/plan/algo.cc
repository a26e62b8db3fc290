// The registry's table, and what the rest of the plan asks of it.
#include "plan/algo.h"

#include <algorithm>

namespace bc {

// Listed by hand rather than by each file registering itself at start-up: the
// unit tests link the library's objects from a static archive, where a file
// nothing refers to would be left out with its registration.
const std::vector<const AlgoImpl *> &algorithms() {
  static const std::vector<const AlgoImpl *> kAlgorithms{&kAlgoRing, &kAlgoRhd, &kAlgoDirect, &kAlgoRd, &kAlgoAll};
  return kAlgorithms;
}

const AlgoImpl *algo_find(Algo a) {
  for (const AlgoImpl *impl : algorithms())
    if (impl->id == a) return impl;
  return nullptr;
}

const AlgoImpl *algo_for_top(Top top) {
  if (top == Top::Split) return nullptr;
  for (const AlgoImpl *impl : algorithms())
    if (impl->top == top) return impl;
  return nullptr;
}

bool top_whole(Top t, int q) {
  const AlgoImpl *impl = algo_for_top(t);
  return impl && q > 1 && impl->serves(q);
}

const char *top_name(Top t) {
  const AlgoImpl *impl = algo_for_top(t);
  return impl ? impl->name : "split";
}

const char *algo_name(Algo a) {
  const AlgoImpl *impl = algo_find(a);
  return impl ? impl->name : "auto";
}

std::vector<Algo> auto_candidates(int level) {
  std::vector<const AlgoImpl *> takes;
  for (const AlgoImpl *impl : algorithms())
    if (impl->top == Top::Split && level <= impl->auto_max_level) takes.push_back(impl);
  std::stable_sort(takes.begin(), takes.end(),
                   [](const AlgoImpl *a, const AlgoImpl *b) { return a->auto_rank < b->auto_rank; });
  std::vector<Algo> out;
  for (const AlgoImpl *impl : takes) out.push_back(impl->id);
  return out;
}

std::string algo_choices() {
  std::string text = "auto";
  std::vector<const char *> names;
  for (const AlgoImpl *impl : algorithms())
    if (impl->top == Top::Split) names.push_back(impl->name);
  for (size_t i = 0; i < names.size(); ++i) text += (i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
  return text;
}

Status algo_parse(const std::string &text, Algo *out) {
  if (text == "auto") { *out = Algo::Auto; return BC_OK; }
  for (const AlgoImpl *impl : algorithms())
    if (impl->top == Top::Split && text == impl->name) { *out = impl->id; return BC_OK; }
  return BC_FAIL(BC_ERR_PARAM, "unknown algorithm '%s'; expected %s", text.c_str(), algo_choices().c_str());
}

}  // namespace bc
