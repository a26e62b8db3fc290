#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "core/log.h"
#include "core/params.h"
#include "api/progress_thread.h"

using namespace bc;

TEST_CASE("every parameter has a BC_ name, a valid default and documentation", "[params]") {
  ParamSet defaults;  // parses every default
  for (int i = 0; i < static_cast<int>(ParamId::Count); ++i) {
    const ParamDef &d = param_def(static_cast<ParamId>(i));
    REQUIRE(static_cast<int>(d.id) == i);
    REQUIRE(std::string(d.name).rfind("BC_", 0) == 0);
    REQUIRE(std::string(d.doc).size() > 20);
    ParamSet ps;
    REQUIRE(ps.set(d.id, d.default_value, "test") == BC_OK);
    REQUIRE(param_find(d.name) == &d);
    const bool numeric = d.type == ParamType::Int || d.type == ParamType::Bytes || d.type == ParamType::Seconds;
    INFO(d.name);
    REQUIRE(param_range_text(d).empty() == !numeric);
    if (numeric) {
      REQUIRE(d.range.min <= d.range.max);
      REQUIRE(d.range.min >= 0);
      REQUIRE(param_in_range(d, ps.get_int(d.id)));
    }
  }
  REQUIRE(defaults.describe().find("BC_TIMEOUT") != std::string::npos);
}

namespace {

// A value of `d`'s unit (ms for durations) as text its parser takes.
std::string as_text(const ParamDef &d, int64_t v) {
  return d.type == ParamType::Seconds ? std::to_string(v) + "ms" : std::to_string(v);
}

}  // namespace

TEST_CASE("every numeric parameter takes its range's ends and refuses one step outside", "[params][range]") {
  for (int i = 0; i < static_cast<int>(ParamId::Count); ++i) {
    const ParamDef &d = param_def(static_cast<ParamId>(i));
    if (d.type != ParamType::Int && d.type != ParamType::Bytes && d.type != ParamType::Seconds) continue;
    INFO(d.name << " range " << param_range_text(d));
    ParamSet ps;
    REQUIRE(ps.set(d.id, as_text(d, d.range.min), "test") == BC_OK);
    REQUIRE(ps.get_int(d.id) == d.range.min);
    if (d.range.max != kParamNoMax) {
      REQUIRE(ps.set(d.id, as_text(d, d.range.max), "test") == BC_OK);
      REQUIRE(ps.get_int(d.id) == d.range.max);
      REQUIRE(ps.set(d.id, as_text(d, d.range.max + 1), "test") == BC_ERR_PARAM);
      const std::string msg = last_error();
      REQUIRE(msg.find(d.name) != std::string::npos);
      REQUIRE(msg.find(param_range_text(d)) != std::string::npos);
    }
    if (d.range.zero) REQUIRE(ps.set(d.id, "0", "test") == BC_OK);
    const int64_t below = d.range.min - 1;
    if (below >= 0 && !(below == 0 && d.range.zero)) {
      REQUIRE(ps.set(d.id, as_text(d, below), "test") == BC_ERR_PARAM);
      REQUIRE(std::string(last_error()).find(param_range_text(d)) != std::string::npos);
    }
    // A refused value leaves the last good one.
    REQUIRE(param_in_range(d, ps.get_int(d.id)));
  }
}

TEST_CASE("ranges: the knobs that would cripple a run are refused with the range", "[params][range]") {
  ParamSet ps;
  // BC_CHUNK: 0 (one chunk) or 4K..1G.
  for (const char *ok : {"0", "4K", "4096", "1M", "1G", "5000"}) {
    INFO(ok);
    REQUIRE(ps.set(ParamId::Chunk, ok, "test") == BC_OK);
  }
  for (const char *bad : {"1", "24", "4095", "2K", "1025M", "2G"}) {
    INFO(bad);
    REQUIRE(ps.set(ParamId::Chunk, bad, "environment") == BC_ERR_PARAM);
    const std::string msg = last_error();
    REQUIRE(msg.find(std::string("BC_CHUNK=") + bad + " is outside its range 0 (one chunk) or 4K..1G (environment)") !=
            std::string::npos);
  }
  // BC_PIPELINE_DEPTH: 1..1024, no silent 0 -> 1.
  REQUIRE(ps.set(ParamId::PipelineDepth, "0", "test") == BC_ERR_PARAM);
  REQUIRE(std::string(last_error()).find("BC_PIPELINE_DEPTH=0 is outside its range 1..1024") != std::string::npos);
  REQUIRE(ps.set(ParamId::PipelineDepth, "1000000", "test") == BC_ERR_PARAM);
  REQUIRE(ps.set(ParamId::PipelineDepth, "1025", "test") == BC_ERR_PARAM);
  REQUIRE(ps.set(ParamId::PipelineDepth, "1", "test") == BC_OK);
  REQUIRE(ps.set(ParamId::PipelineDepth, "1024", "test") == BC_OK);
  REQUIRE(ps.get_int(ParamId::PipelineDepth) == 1024);
  // BC_SPIN_COUNT: 0 (auto, the default) or 1..10^6.
  REQUIRE(ParamSet().get_int(ParamId::SpinCount) == 0);
  REQUIRE(ps.set(ParamId::SpinCount, "-1", "test") == BC_ERR_PARAM);
  REQUIRE(ps.set(ParamId::SpinCount, "1000001", "test") == BC_ERR_PARAM);
  REQUIRE(std::string(last_error()).find("0 (auto) or 1..1000000") != std::string::npos);
  REQUIRE(ps.set(ParamId::SpinCount, "0", "test") == BC_OK);
  REQUIRE(ps.set(ParamId::SpinCount, "1", "test") == BC_OK);
  // BC_TIMEOUT: 0 (forever) up to a day, in any unit.
  REQUIRE(ps.set(ParamId::Timeout, "0", "test") == BC_OK);
  REQUIRE(ps.set(ParamId::Timeout, "24h", "test") == BC_OK);
  REQUIRE(ps.get_int(ParamId::Timeout) == 24LL * 3600 * 1000);
  REQUIRE(ps.set(ParamId::Timeout, "1441m", "test") == BC_ERR_PARAM);
  REQUIRE(std::string(last_error()).find("BC_TIMEOUT=1441m is outside its range 0s..24h") != std::string::npos);
  // BC_SHM_CHUNK: 64..64M (the shm transport used to check this itself).
  REQUIRE(ps.set(ParamId::ShmChunk, "16", "test") == BC_ERR_PARAM);
  REQUIRE(ps.set(ParamId::ShmChunk, "64", "test") == BC_OK);
  REQUIRE(ps.set(ParamId::ShmChunk, "65M", "test") == BC_ERR_PARAM);
  // Communicator options go through the same check.
  REQUIRE(ps.apply_overrides("BC_CHUNK=1") == BC_ERR_PARAM);
  REQUIRE(std::string(last_error()).find("(communicator option)") != std::string::npos);
  REQUIRE(ps.apply_overrides("BC_CHUNK=64K;BC_PIPELINE_DEPTH=8") == BC_OK);
  // bc_info --params shows every range.
  const std::string listing = ParamSet().describe();
  REQUIRE(listing.find("BC_CHUNK = '1M' (default) [range 0 (one chunk) or 4K..1G]") != std::string::npos);
  REQUIRE(listing.find("BC_PIPELINE_DEPTH = '4' (default) [range 1..1024]") != std::string::npos);
  REQUIRE(listing.find("BC_TIMEOUT = '30m' (default) [range 0s..24h]") != std::string::npos);
  // Liveness checks: at least every minute, at most every 10 ms.
  REQUIRE(listing.find("BC_LIVENESS_INTERVAL = '200ms' (default) [range 10ms..1m]") != std::string::npos);
  REQUIRE(ps.set(ParamId::LivenessInterval, "5ms", "test") == BC_ERR_PARAM);
  REQUIRE(ps.set(ParamId::LivenessInterval, "2m", "test") == BC_ERR_PARAM);
  REQUIRE(ps.set(ParamId::LivenessInterval, "50ms", "test") == BC_OK);
  REQUIRE(ps.get_int(ParamId::LivenessInterval) == 50);
  REQUIRE(ps.set(ParamId::Liveness, "dead", "test") == BC_ERR_PARAM);
  REQUIRE(listing.find("BC_PMPI_MIN_BYTES = '0' (default) [range 0 or more]") != std::string::npos);
}

TEST_CASE("ranges apply to the environment as to everything else", "[params][range]") {
  ParamSet ps;
  setenv("BC_PIPELINE_DEPTH", "0", 1);
  REQUIRE(ParamSet::from_environment(&ps) == BC_ERR_PARAM);
  REQUIRE(std::string(last_error()).find("BC_PIPELINE_DEPTH=0 is outside its range 1..1024 (environment)") !=
          std::string::npos);
  setenv("BC_PIPELINE_DEPTH", "1000000", 1);
  REQUIRE(ParamSet::from_environment(&ps) == BC_ERR_PARAM);
  setenv("BC_PIPELINE_DEPTH", "8", 1);
  setenv("BC_CHUNK", "1", 1);
  REQUIRE(ParamSet::from_environment(&ps) == BC_ERR_PARAM);
  REQUIRE(std::string(last_error()).find("BC_CHUNK=1 is outside") != std::string::npos);
  setenv("BC_CHUNK", "0", 1);
  REQUIRE(ParamSet::from_environment(&ps) == BC_OK);
  REQUIRE(ps.get_int(ParamId::PipelineDepth) == 8);
  REQUIRE(ps.get_int(ParamId::Chunk) == 0);
  unsetenv("BC_PIPELINE_DEPTH");
  unsetenv("BC_CHUNK");
}

TEST_CASE("typed parsing: sizes, durations, enums, booleans", "[params]") {
  int64_t v = 0;
  REQUIRE(parse_bytes("64K", &v));
  REQUIRE(v == 65536);
  REQUIRE(parse_bytes("1M", &v));
  REQUIRE(v == 1048576);
  REQUIRE(parse_bytes("3gb", &v));
  REQUIRE(v == 3LL << 30);
  REQUIRE_FALSE(parse_bytes("12Q", &v));
  REQUIRE_FALSE(parse_bytes("-1", &v));
  REQUIRE(parse_duration_ms("500ms", &v));
  REQUIRE(v == 500);
  REQUIRE(parse_duration_ms("30", &v));
  REQUIRE(v == 30000);
  REQUIRE(parse_duration_ms("2m", &v));
  REQUIRE(v == 120000);
  REQUIRE(parse_duration_ms("1h", &v));
  REQUIRE(v == 3600000);
  REQUIRE_FALSE(parse_duration_ms("soon", &v));

  ParamSet ps;
  REQUIRE(ps.set(ParamId::Transport, "MPI", "test") == BC_OK);
  REQUIRE(ps.get_str(ParamId::Transport) == "mpi");
  REQUIRE(ps.set(ParamId::Transport, "carrier-pigeon", "test") == BC_ERR_PARAM);
  REQUIRE(std::string(last_error()).find("auto|mpi") != std::string::npos);
  REQUIRE(ps.set(ParamId::Timeout, "250ms", "test") == BC_OK);
  REQUIRE(ps.get_int(ParamId::Timeout) == 250);
  REQUIRE(ps.set(ParamId::Disable, "maybe", "test") == BC_ERR_PARAM);
  REQUIRE(ps.set(ParamId::SpinCount, "-3", "test") == BC_ERR_PARAM);
}

TEST_CASE("per-communicator overrides", "[params]") {
  ParamSet ps;
  REQUIRE(ps.apply_overrides("BC_TOPO=3,2,3; BC_ALGO=ring") == BC_OK);
  REQUIRE(ps.get_str(ParamId::Topo) == "3,2,3");
  REQUIRE(ps.get_str(ParamId::Algo) == "ring");
  REQUIRE(ps.is_set(ParamId::Topo));
  REQUIRE(ps.apply_overrides("BC_NOPE=1") == BC_ERR_INVALID_ARG);
  REQUIRE(ps.apply_overrides("BC_TOPO") == BC_ERR_INVALID_ARG);
  REQUIRE(ps.apply_overrides(nullptr) == BC_OK);
  // "!KEY": back to the default, no longer set (what pins a plan).
  REQUIRE(ps.apply_overrides("!BC_ALGO;BC_CHUNK=64K") == BC_OK);
  REQUIRE(ps.get_str(ParamId::Algo) == ParamSet().get_str(ParamId::Algo));
  REQUIRE_FALSE(ps.is_set(ParamId::Algo));
  REQUIRE(ps.is_set(ParamId::Chunk));
  REQUIRE(ps.apply_overrides(" !BC_CHUNK ") == BC_OK);
  REQUIRE_FALSE(ps.is_set(ParamId::Chunk));
  REQUIRE(ps.get_int(ParamId::Chunk) == ParamSet().get_int(ParamId::Chunk));
  REQUIRE(ps.apply_overrides("!BC_NOPE") == BC_ERR_INVALID_ARG);
  // An empty value is a value: BC_PLAN= pins the split at every size.
  REQUIRE(ps.apply_overrides("BC_PLAN=") == BC_OK);
  REQUIRE(ps.is_set(ParamId::Plan));
}

TEST_CASE("a misspelt BC_ variable in the environment is named", "[params]") {
  setenv("BC_TIMEOUTT", "5", 1);
  ParamSet ps;
  REQUIRE(ParamSet::from_environment(&ps) == BC_ERR_PARAM);
  REQUIRE(std::string(last_error()).find("did you mean BC_TIMEOUT") != std::string::npos);
  unsetenv("BC_TIMEOUTT");
  setenv("BC_SIMCLUSTER_STATE", "/run/x", 1);  // a script's variable, not a knob
  REQUIRE(ParamSet::from_environment(&ps) == BC_OK);
  unsetenv("BC_SIMCLUSTER_STATE");
  setenv("BC_TIMEOUT", "7s", 1);
  REQUIRE(ParamSet::from_environment(&ps) == BC_OK);
  REQUIRE(ps.get_int(ParamId::Timeout) == 7000);
  unsetenv("BC_TIMEOUT");
}

TEST_CASE("BC_DEBUG syntax", "[params][log]") {
  const char *bad = nullptr;
  REQUIRE(log_configure("INFO", "", false, &bad));
  REQUIRE(log_enabled(LogLevel::Info, LogSys::Topo));
  REQUIRE(log_configure("PLAN", "", true, &bad));
  REQUIRE(log_enabled(LogLevel::Info, LogSys::Plan));
  REQUIRE_FALSE(log_enabled(LogLevel::Info, LogSys::Topo));
  REQUIRE_FALSE(log_enabled(LogLevel::Error, LogSys::Topo));  // quiet default
  REQUIRE_FALSE(log_configure("INFO,BOGUS", "", false, &bad));
  REQUIRE(std::string(bad) == "BOGUS");
  REQUIRE(log_configure("", "", false, &bad));
  REQUIRE(log_enabled(LogLevel::Warn, LogSys::Api));
  REQUIRE_FALSE(log_enabled(LogLevel::Info, LogSys::Api));
}

TEST_CASE("BC_PROGRESS_THREAD: off by default; with mpi peers only under MPI_THREAD_MULTIPLE", "[params][progress]") {
  ParamSet ps;
  REQUIRE(ps.get_int(ParamId::ProgressThread) == 0);
  REQUIRE(ps.apply_overrides("BC_PROGRESS_THREAD=1") == BC_OK);
  REQUIRE(ps.get_int(ParamId::ProgressThread) == 1);
  REQUIRE(progress_thread_allowed(nullptr, MPI_THREAD_SINGLE) == BC_OK);
  REQUIRE(progress_thread_allowed("the mpi transport", MPI_THREAD_MULTIPLE) == BC_OK);
  REQUIRE(progress_thread_allowed("the mpi transport", MPI_THREAD_SERIALIZED) == BC_ERR_NOT_SUPPORTED);
  REQUIRE(std::string(last_error()).find("MPI_Init_thread(MPI_THREAD_MULTIPLE)") != std::string::npos);
}
