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
  }
  REQUIRE(defaults.describe().find("BC_TIMEOUT") != std::string::npos);
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
