// The communicator's cost model (BC_MODEL): from BC_MODEL_FILE, from this
// process, from the per-user cache, or calibrated (lib/api/calibrate.cc).
//
// A process keeps the models it calibrated, by layout and hosts: a later
// communicator with the same layout on the same hosts (frameworks create
// groups freely) takes rank 0's copy instead of calibrating again (about
// 0.8-2 s on the simulated 4-node cluster). Across jobs, rank 0 keeps them in
// the per-user cache (model_cache.h, BC_MODEL_CACHE) and a later job with the
// same layout on the same hosts loads them from there.

#include <mpi.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "api/comm.h"
#include "api/model_cache.h"
#include "core/hash.h"
#include "core/log.h"

namespace bc {
namespace {

// Rank 0's *text on every rank. Collective.
Status bcast_text(bc_comm *c, std::string *text) {
  long long len = static_cast<long long>(text->size());
  BC_MPI_CHECK(MPI_Bcast(&len, 1, MPI_LONG_LONG, 0, c->mpi));
  text->resize(static_cast<size_t>(len));
  if (len > 0) BC_MPI_CHECK(MPI_Bcast(&(*text)[0], static_cast<int>(len), MPI_CHAR, 0, c->mpi));
  return BC_OK;
}

// Rank 0 reads the file; everyone gets its text ("" when there is none).
Status read_shared(bc_comm *c, const std::string &path, std::string *text) {
  text->clear();
  if (c->rank == 0) {
    std::ifstream in(path);
    if (in) {
      std::ostringstream ss;
      ss << in.rdbuf();
      *text = ss.str();
    }
  }
  return bcast_text(c, text);
}

// Models this process calibrated: cache key -> serialized model.
std::mutex g_models_mutex;
std::map<std::string, std::string> g_models;

// The user's choice of UCX network, when UCX carries a stage and the user made
// one: the same hosts over another NIC or UCX transport (UCX_NET_DEVICES=
// mlx5_0:1 against eth0, UCX_TLS=tcp) are another network, which host names do
// not show, and a model timed on one priced the other at up to 4x its speed
// (layout a loading layout d's model: 251 ms predicted, 884-940 ms measured at
// 16 MiB). "" when neither is set, so the default's key stays as it was.
std::string ucx_network_key(const bc_comm *c) {
  bool ucx = false;
  for (const auto &t : c->transports) ucx = ucx || std::string(t->name()) == "ucx";
  if (!ucx) return "";
  std::string chosen;
  for (const char *var : {"UCX_NET_DEVICES", "UCX_TLS"}) {
    const char *v = std::getenv(var);
    if (v && *v) chosen += std::string(var) + "=" + v + ";";
  }
  return chosen.empty() ? "" : " ucx=" + hex64(fnv1a(chosen));
}

// The model's layout signature, the transports (and UCX's network when the
// user chose one) and a hash of every rank's host name, in rank order: equal
// keys mean the same hierarchy over the same hosts and the same networks.
// Collective.
Status model_cache_key(bc_comm *c, const std::string &signature, std::string *key) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  uint64_t mine = fnv1a(host);
  std::vector<uint64_t> all(static_cast<size_t>(c->size));
  BC_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, c->mpi));
  std::ostringstream os;
  // The calibration's version: a model an older library calibrated lacks fits
  // this one takes (cal=2: the top=all plans, timed since 2026-12-02), so it
  // is calibrated anew once instead of choosing from borrowed prices for a week.
  // The transports the fits were measured over: BC_TRANSPORT=mpi measures
  // another network than auto on the same hosts.
  os << signature << " cal=2 t=";
  for (size_t i = 0; i < c->transports.size(); ++i) os << (i ? "," : "") << c->transports[i]->name();
  os << ucx_network_key(c);
  for (uint64_t h : all) os << ' ' << std::hex << h;
  *key = os.str();
  return BC_OK;
}

// A model from the process cache when every rank has one for `key`; rank 0's
// copy then goes to all (ranks may have cached different calibrations of the
// same layout, from different communicators). Collective.
Status model_from_cache(bc_comm *c, const std::string &key, const std::string &signature, bool *found) {
  *found = false;
  std::string text;
  {
    std::lock_guard<std::mutex> lock(g_models_mutex);
    auto it = g_models.find(key);
    if (it != g_models.end()) text = it->second;
  }
  // One allreduce says whether every rank has a model and whether all hold the
  // same text (the usual case: they took rank 0's last time); only when they
  // differ does rank 0's text travel.
  const uint64_t h = text.empty() ? 0 : fnv1a(text);
  uint64_t mine[3] = {text.empty() ? 1u : 0u, h, ~h}, most[3] = {0, 0, 0};
  BC_MPI_CHECK(MPI_Allreduce(mine, most, 3, MPI_UINT64_T, MPI_MAX, c->mpi));
  if (most[0] != 0) return BC_OK;  // someone has none
  if (most[1] != ~most[2]) BC_CHECK(bcast_text(c, &text));  // max != min: they differ
  bool matches = false;
  BC_CHECK(model_parse(text, signature, &c->model, &matches));
  if (!matches) return BC_FAIL(BC_ERR_INTERNAL, "the cached cost model does not match its layout %s", signature.c_str());
  c->model.source = "calibrated earlier in this process";
  *found = true;
  return BC_OK;
}

// The per-user cache across jobs (model_cache.h): rank 0 reads and checks the
// file, everyone gets its text, and a model found there also goes into the
// process cache. Collective.
Status model_from_file_cache(bc_comm *c, const std::string &key, const std::string &signature, bool *found) {
  *found = false;
  if (c->params.get_str(ParamId::ModelCache) != "on") return BC_OK;
  const std::string dir = model_cache_dir(c->params);
  std::string text;
  if (c->rank == 0) {
    std::string why;
    text = model_cache_load(dir, key, signature, c->params.get_int(ParamId::ModelCacheAge), &why);
    // A missing file is the ordinary first run; anything else is worth a line.
    if (text.empty() && why != "no cached model") BC_INFO(Plan, "BC_MODEL_CACHE: not used: %s", why.c_str());
  }
  BC_CHECK(bcast_text(c, &text));
  if (text.empty()) return BC_OK;
  bool matches = false;
  BC_CHECK(model_parse(text, signature, &c->model, &matches));
  if (!matches) return BC_FAIL(BC_ERR_INTERNAL, "the cached cost model does not match its layout %s", signature.c_str());
  c->model_cache_file = model_cache_path(dir, key);
  c->model.source = "cache " + c->model_cache_file;
  {
    std::lock_guard<std::mutex> lock(g_models_mutex);
    g_models[key] = text;
  }
  *found = true;
  return BC_OK;
}

void write_file(const std::string &path, const std::string &text) {
  const std::string tmp = path + ".tmp." + std::to_string(static_cast<long long>(getpid()));
  std::ofstream out(tmp);
  out << text;
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    BC_WARN(Plan, "BC_MODEL_FILE=%s: could not write the calibrated model; it is used but not cached", path.c_str());
  }
}

}  // namespace

bool spans_nodes(const bc_comm *c) {
  for (int64_t n : c->topo.node_of)
    if (n != c->topo.node_of[0]) return true;
  return false;
}

Status comm_cache_key(bc_comm *c, std::string *key) {
  // The same on every rank: either all have asked before or none has.
  if (c->cache_key.empty()) BC_CHECK(model_cache_key(c, model_signature(c->hier), &c->cache_key));
  *key = c->cache_key;
  return BC_OK;
}

bool model_is_local(const bc_comm *c) {
  const std::string &mode = c->params.get_str(ParamId::Model);
  return mode == "off" || c->hier.stages.empty() || (mode == "auto" && !spans_nodes(c));
}

namespace {

// bc_comm_shrink: the survivors' links are the ones the parent measured, so
// its per-level fits serve the new communicator when they cover every level
// of its hierarchy (a calibration would cost 0.6-2.9 s of the shrink's
// budget). Its whole-plan fits were for the parent's layout: dropped. The same
// on every rank: every survivor had the parent's model.
bool inherited_model_fits(bc_comm *c) {
  if (c->inherited_model.empty()) return false;
  for (const StageGroups &sg : c->hier.stages) {
    bool covered = false;
    for (const auto &kv : c->inherited_model.fits) covered = covered || kv.first.first == sg.level;
    if (!covered) return false;
  }
  c->model = c->inherited_model;
  c->model.plan_fits.clear();
  c->model.plan_fit_max = 0;
  c->model.source = "inherited from the communicator it was shrunk from";
  if (c->rank == 0) BC_INFO(Plan, "%s", model_describe(c->model).c_str());
  return true;
}

}  // namespace

Status model_setup(bc_comm *c) {
  c->model = CostModel();
  c->model_cache_file.clear();
  c->choices.clear();  // made with or without the model: none may outlive it
  if (model_is_local(c)) return BC_OK;
  if (inherited_model_fits(c)) return BC_OK;
  const std::string mode = c->params.get_str(ParamId::Model);
  const std::string path = c->params.get_str(ParamId::ModelFile);
  const std::string signature = model_signature(c->hier);
  if (!path.empty()) {
    std::string text;
    BC_CHECK(read_shared(c, path, &text));
    bool matches = false;
    if (!text.empty()) {
      Status st = model_parse(text, signature, &c->model, &matches);
      if (st != BC_OK) return BC_FAIL(BC_ERR_PARAM, "BC_MODEL_FILE=%s: %s", path.c_str(), last_error());
    }
    if (matches) {
      c->model.source = "file " + path;
      BC_INFO(Plan, "%s", model_describe(c->model).c_str());
      return BC_OK;
    }
    if (!text.empty())
      BC_INFO(Plan, "BC_MODEL_FILE=%s was written for another layout; calibrating %s", path.c_str(), signature.c_str());
  }
  std::string key;
  BC_CHECK(comm_cache_key(c, &key));
  bool cached = false;
  BC_CHECK(model_from_cache(c, key, signature, &cached));
  if (!cached) BC_CHECK(model_from_file_cache(c, key, signature, &cached));
  if (cached) {
    BC_INFO(Plan, "%s", model_describe(c->model).c_str());
    if (c->rank == 0 && !path.empty()) write_file(path, model_serialize(c->model, signature));
    return BC_OK;
  }
  const auto start = std::chrono::steady_clock::now();
  BC_CHECK(calibrate(c, &c->model));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string text = model_serialize(c->model, signature);
  {
    std::lock_guard<std::mutex> lock(g_models_mutex);
    g_models[key] = text;
  }
  if (c->rank == 0) {
    BC_INFO(Plan, "%s; calibration took %.0f ms", model_describe(c->model).c_str(), took * 1e3);
    if (!path.empty()) write_file(path, text);
    if (c->params.get_str(ParamId::ModelCache) == "on") {
      const std::string dir = model_cache_dir(c->params);
      std::string why;
      if (model_cache_store(dir, key, text, &why))
        BC_INFO(Plan, "cost model cached in %s", model_cache_path(dir, key).c_str());
      else
        BC_WARN(Plan, "BC_MODEL_CACHE: the calibrated model is used but not cached: %s", why.c_str());
    }
  }
  return BC_OK;
}

}  // namespace bc
