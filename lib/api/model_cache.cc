// The per-user cost model cache. See model_cache.h for the file and its checks.
#include "api/model_cache.h"

#include <cmath>
#include <string>

#include "core/cache_file.h"
#include "plan/cost.h"

namespace bc {
namespace {

// The numbers of a parsed model are ones calibration can produce.
bool model_sane(const CostModel &m, std::string *why) {
  auto bad = [](double alpha, double beta) {
    return !std::isfinite(alpha) || !std::isfinite(beta) || alpha < 0 || beta < 0 || alpha > 10.0 || beta > 1e-3;
  };
  if (m.fits.empty()) {
    *why = "it holds no fits";
    return false;
  }
  for (const auto &f : m.fits)
    if (bad(f.second.alpha, f.second.beta)) {
      *why = "a fit is out of range (alpha " + std::to_string(f.second.alpha) + " s, beta " +
             std::to_string(f.second.beta) + " s/B)";
      return false;
    }
  for (const PlanFit &f : m.plan_fits)
    if (bad(f.alpha, f.beta)) {
      *why = "a plan fit is out of range";
      return false;
    }
  constexpr int64_t kGiB = int64_t{1} << 30;
  if (m.max_chunk > kGiB || m.max_whole > kGiB || m.plan_fit_max > kGiB) {
    *why = "a size limit is out of range";
    return false;
  }
  return true;
}

}  // namespace

std::string model_cache_dir(const ParamSet &params) { return cache_dir(params); }

std::string model_cache_path(const std::string &dir, const std::string &key) {
  return cache_path(dir, "model", key);
}

std::string model_cache_load(const std::string &dir, const std::string &key, const std::string &signature,
                             int64_t max_age_ms, std::string *why) {
  why->clear();
  std::string body;
  if (!cache_read(dir, "model", key, max_age_ms, "BC_MODEL_CACHE_AGE", &body, why)) return "";
  const std::string path = model_cache_path(dir, key);
  const auto fail = [&](const std::string &reason) {
    *why = path + ": " + reason;
    return std::string();
  };
  CostModel m;
  bool matches = false;
  if (model_parse(body, signature, &m, &matches) != BC_OK) {
    const std::string reason = last_error();
    clear_error();
    return fail(reason);
  }
  if (!matches) return fail("the model is for another layout");
  std::string insane;
  if (!model_sane(m, &insane)) return fail(insane);
  return body;
}

bool model_cache_store(const std::string &dir, const std::string &key, const std::string &model_text,
                       std::string *why) {
  return cache_write(dir, "model", key, model_text, why);
}

}  // namespace bc
