// The machinery of the BC_* parameter registry: parsing the value syntaxes
// (sizes, durations, booleans, enums), range checks and their messages, lookup
// by id or name, reading the environment (with "did you mean" for misspelt
// names), communicator overrides and bc_info's description. The rows
// themselves, with their documentation, are params_table.cc.
#include "core/params.h"

#include "core/params_internal.h"

#include <strings.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>

extern char **environ;

namespace bc {
namespace {

std::string trim(const std::string &s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool parse_int(const std::string &text, int64_t *out) {
  if (text.empty()) return false;
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

// Levenshtein distance, for "did you mean".
size_t edit_distance(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

bool parse_bytes(const std::string &raw, int64_t *out) {
  std::string text = trim(raw);
  if (text.empty()) return false;
  int64_t mult = 1;
  char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  if (last == 'B' && text.size() > 1) {
    text.pop_back();
    last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  }
  if (last == 'K') mult = 1024;
  else if (last == 'M') mult = 1024 * 1024;
  else if (last == 'G') mult = 1024LL * 1024 * 1024;
  if (mult != 1) text.pop_back();
  int64_t v = 0;
  if (!parse_int(text, &v) || v < 0 || v > (INT64_MAX / mult)) return false;
  *out = v * mult;
  return true;
}

bool parse_duration_ms(const std::string &raw, int64_t *out) {
  std::string text = trim(raw);
  int64_t mult = 1000;
  auto ends_with = [&](const char *suf) {
    size_t n = std::strlen(suf);
    return text.size() > n && strcasecmp(text.c_str() + text.size() - n, suf) == 0;
  };
  if (ends_with("ms")) { mult = 1; text.resize(text.size() - 2); }
  else if (ends_with("h")) { mult = 3600000; text.resize(text.size() - 1); }
  else if (ends_with("s")) { mult = 1000; text.resize(text.size() - 1); }
  else if (ends_with("m")) { mult = 60000; text.resize(text.size() - 1); }
  int64_t v = 0;
  if (!parse_int(text, &v) || v < 0 || v > INT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

const ParamDef &param_def(ParamId id) { return kParamDefs[static_cast<int>(id)]; }

const ParamDef *param_find(const char *name) {
  for (const ParamDef &d : kParamDefs)
    if (std::strcmp(d.name, name) == 0) return &d;
  return nullptr;
}

namespace {

bool is_numeric(ParamType t) { return t == ParamType::Int || t == ParamType::Bytes || t == ParamType::Seconds; }

// A value in the parameter's own syntax: 4K, 64M, 1G for sizes; 24h, 2m, 30s, 500ms for durations.
std::string format_value(ParamType t, int64_t v) {
  struct Unit {
    int64_t size;
    const char *suffix;
  };
  static const Unit bytes[] = {{kGiB, "G"}, {kMiB, "M"}, {kKiB, "K"}};
  static const Unit ms[] = {{kHour, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
  if (t == ParamType::Bytes && v != 0)
    for (const Unit &u : bytes)
      if (v % u.size == 0) return std::to_string(v / u.size) + u.suffix;
  if (t == ParamType::Seconds) {
    if (v == 0) return "0s";
    for (const Unit &u : ms)
      if (v % u.size == 0) return std::to_string(v / u.size) + u.suffix;
  }
  return std::to_string(v);
}

}  // namespace

bool param_in_range(const ParamDef &d, int64_t v) {
  if (!is_numeric(d.type)) return true;
  if (v == 0 && d.range.zero) return true;
  return v >= d.range.min && v <= d.range.max;
}

std::string param_range_text(const ParamDef &d) {
  if (!is_numeric(d.type)) return "";
  std::string out;
  if (d.range.zero) out = std::string("0 (") + d.range.zero + ") or ";
  out += format_value(d.type, d.range.min);
  if (d.range.max == kParamNoMax) out += " or more";
  else out += ".." + format_value(d.type, d.range.max);
  return out;
}

std::string param_range_error(const ParamDef &d, const std::string &value) {
  return std::string(d.name) + "=" + value + " is outside its range " + param_range_text(d);
}

ParamSet::ParamSet() {
  for (const ParamDef &d : kParamDefs) {
    Status st = set(d.id, d.default_value, "default");
    (void)st;  // defaults are checked by the unit test
    set_[static_cast<int>(d.id)] = false;
  }
}

Status ParamSet::set(ParamId id, const std::string &raw, const char *origin) {
  const ParamDef &d = param_def(id);
  const int i = static_cast<int>(id);
  std::string text = trim(raw);
  int64_t v = 0;
  switch (d.type) {
    case ParamType::Int:
      if (!parse_int(text, &v) || v < 0)
        return BC_FAIL(BC_ERR_PARAM, "%s=%s (%s): expected a non-negative integer", d.name,
                       raw.c_str(), origin);
      break;
    case ParamType::Bytes:
      if (!parse_bytes(text, &v))
        return BC_FAIL(BC_ERR_PARAM, "%s=%s (%s): expected a size such as 4096, 64K, 1M", d.name,
                       raw.c_str(), origin);
      break;
    case ParamType::Seconds:
      if (!parse_duration_ms(text, &v))
        return BC_FAIL(BC_ERR_PARAM, "%s=%s (%s): expected a duration such as 30, 30s, 500ms, 2m",
                       d.name, raw.c_str(), origin);
      break;
    case ParamType::Bool:
      if (text == "1" || strcasecmp(text.c_str(), "yes") == 0 || strcasecmp(text.c_str(), "true") == 0)
        v = 1;
      else if (text == "0" || text.empty() || strcasecmp(text.c_str(), "no") == 0 ||
               strcasecmp(text.c_str(), "false") == 0)
        v = 0;
      else
        return BC_FAIL(BC_ERR_PARAM, "%s=%s (%s): expected 0 or 1", d.name, raw.c_str(), origin);
      break;
    case ParamType::Enum: {
      std::string choices = d.choices;
      bool ok = false;
      size_t pos = 0;
      int index = 0;
      while (pos <= choices.size()) {
        size_t bar = choices.find('|', pos);
        std::string c = choices.substr(pos, bar == std::string::npos ? std::string::npos : bar - pos);
        if (strcasecmp(c.c_str(), text.c_str()) == 0) { ok = true; v = index; text = c; break; }
        if (bar == std::string::npos) break;
        pos = bar + 1;
        ++index;
      }
      if (!ok)
        return BC_FAIL(BC_ERR_PARAM, "%s=%s (%s): expected one of %s", d.name, raw.c_str(),
                       origin, d.choices);
      break;
    }
    case ParamType::String:
      break;
  }
  if (!param_in_range(d, v))
    return BC_FAIL(BC_ERR_PARAM, "%s (%s); bc_info --params says why", param_range_error(d, trim(raw)).c_str(), origin);
  text_[i] = text;
  value_[i] = v;
  set_[i] = true;
  return BC_OK;
}

Status ParamSet::from_environment(ParamSet *out) {
  ParamSet ps;
  for (const ParamDef &d : kParamDefs) {
    const char *env = std::getenv(d.name);
    if (env) BC_CHECK(ps.set(d.id, env, "environment"));
  }
  // A misspelt knob would be a silent no-op: refuse a name one or two edits away
  // from a real one. Other BC_ names (our scripts' BC_SIMCLUSTER_STATE, say) are
  // not ours to judge.
  for (char **e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "BC_", 3) != 0) continue;
    std::string name(*e, std::strcspn(*e, "="));
    if (param_find(name.c_str())) continue;
    for (const ParamDef &d : kParamDefs)
      if (edit_distance(name, d.name) <= 2)
        return BC_FAIL(BC_ERR_PARAM, "unknown parameter %s in the environment; did you mean %s? "
                       "(bc_info --params lists them)", name.c_str(), d.name);
  }
  *out = ps;
  return BC_OK;
}

Status ParamSet::apply_overrides(const char *options) {
  if (!options) return BC_OK;
  std::string s = options;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t semi = s.find(';', pos);
    std::string item = trim(s.substr(pos, semi == std::string::npos ? std::string::npos : semi - pos));
    pos = semi == std::string::npos ? s.size() : semi + 1;
    if (item.empty()) continue;
    if (item[0] == '!') {
      // "!KEY": the default, as if the environment had not set it (so that a
      // benchmark can run the plan BlueConnect learns beside a pinned one:
      // bc_bench --plan). "KEY=" would not do: an empty value means something
      // to some parameters (BC_PLAN= is "split at every size").
      const std::string key = trim(item.substr(1));
      const ParamDef *d = param_find(key.c_str());
      if (!d) return BC_FAIL(BC_ERR_INVALID_ARG, "option '%s': unknown parameter %s", item.c_str(), key.c_str());
      BC_CHECK(set(d->id, d->default_value, "default"));
      set_[static_cast<int>(d->id)] = false;
      continue;
    }
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      return BC_FAIL(BC_ERR_INVALID_ARG, "option '%s': expected KEY=VALUE or !KEY", item.c_str());
    std::string key = trim(item.substr(0, eq));
    const ParamDef *d = param_find(key.c_str());
    if (!d) return BC_FAIL(BC_ERR_INVALID_ARG, "option '%s': unknown parameter %s", item.c_str(), key.c_str());
    BC_CHECK(set(d->id, item.substr(eq + 1), "communicator option"));
  }
  return BC_OK;
}

int64_t ParamSet::get_int(ParamId id) const { return value_[static_cast<int>(id)]; }
const std::string &ParamSet::get_str(ParamId id) const { return text_[static_cast<int>(id)]; }

std::string ParamSet::describe() const {
  std::string out;
  for (const ParamDef &d : kParamDefs) {
    const int i = static_cast<int>(d.id);
    out += d.name;
    out += " = '" + text_[i] + "'";
    out += set_[i] ? " (set)" : " (default)";
    if (d.choices) out += std::string(" [") + d.choices + "]";
    if (is_numeric(d.type)) out += " [range " + param_range_text(d) + "]";
    out += "\n    ";
    out += d.doc;
    out += "\n";
  }
  return out;
}

}  // namespace bc
