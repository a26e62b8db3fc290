// bc_bench's command line (tools/bench_args.cc): the timing modes and their
// conflicts, and the automatic count of timed calls. Parsing is pure, so it is
// tested here without MPI.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "bench_args.h"

using namespace bcbench;

namespace {
// Parses "bc_bench ARGS..."; err holds the reason when it fails.
bool parse(std::vector<std::string> args, Options *opt, std::string *err) {
  args.insert(args.begin(), "bc_bench");
  std::vector<char *> argv;
  for (auto &a : args) argv.push_back(&a[0]);
  return parse_args(static_cast<int>(argv.size()), argv.data(), opt, err);
}
}  // namespace

TEST_CASE("bc_bench times back to back unless told otherwise", "[bench_args]") {
  Options opt;
  std::string err;
  REQUIRE(parse({"-c", "--compare", "mpi"}, &opt, &err));
  CHECK(opt.mode == Mode::BackToBack);
  CHECK(std::string(mode_name(opt.mode)) == "back-to-back");
}

TEST_CASE("bc_bench --interleave and --app choose their modes", "[bench_args]") {
  Options opt;
  std::string err;
  REQUIRE(parse({"--compare", "mpi", "--interleave"}, &opt, &err));
  CHECK(opt.mode == Mode::Interleave);
  CHECK(std::string(mode_name(opt.mode)) == "interleave");

  Options app;
  REQUIRE(parse({"--app", "200"}, &app, &err));
  CHECK(app.mode == Mode::App);
  CHECK(app.app_us == 200);
  Options eq;
  REQUIRE(parse({"--app=0"}, &eq, &err));  // a barrier alone is an application step too
  CHECK(eq.mode == Mode::App);
  CHECK(eq.app_us == 0);
}

TEST_CASE("bc_bench refuses two timing modes and bad --app values", "[bench_args]") {
  std::string err;
  Options a;
  CHECK_FALSE(parse({"--app", "5", "--interleave"}, &a, &err));
  CHECK(err.find("choose one") != std::string::npos);
  Options b;
  CHECK_FALSE(parse({"--interleave", "--app", "5"}, &b, &err));
  Options c;
  CHECK_FALSE(parse({"--app"}, &c, &err));
  CHECK(err.find("needs a value") != std::string::npos);
  for (const char *bad : {"-1", "x", "10000001"}) {
    Options d;
    CHECK_FALSE(parse({"--app", bad}, &d, &err));
    CHECK(err.find("--app") != std::string::npos);
  }
}

TEST_CASE("the automatic count of timed calls", "[bench_args]") {
  CHECK(auto_iters(0) == kAutoMaxIters);  // a count-0 row: nothing to time
  CHECK(auto_iters(1e-9) == kAutoMaxIters);
  CHECK(auto_iters(kAutoSeconds / 10) == 10);
  CHECK(auto_iters(kAutoSeconds / 10.5) == 11);  // rounded up
  CHECK(auto_iters(kAutoSeconds) == kAutoMinIters);
  CHECK(auto_iters(1e9) == kAutoMinIters);
}

TEST_CASE("bc_bench --help mentions every timing mode", "[bench_args]") {
  const std::string u = usage_text();
  CHECK(u.find("back-to-back") != std::string::npos);
  CHECK(u.find("--interleave") != std::string::npos);
  CHECK(u.find("--app USEC") != std::string::npos);
}

TEST_CASE("bc_bench --repeats: rounds per size, not with --interleave", "[bench_args]") {
  Options opt;
  std::string err;
  CHECK(opt.repeats == 1);
  REQUIRE(parse({"--compare", "mpi", "-r", "5"}, &opt, &err));
  CHECK(opt.repeats == 5);
  Options app;
  REQUIRE(parse({"--app", "100", "--repeats", "3"}, &app, &err));
  CHECK(app.repeats == 3);
  for (const char *bad : {"0", "-1", "100", "x"}) {
    Options o;
    CHECK_FALSE(parse({"--repeats", bad}, &o, &err));
    CHECK(err.find("rounds per size") != std::string::npos);
  }
  Options il;
  CHECK_FALSE(parse({"--interleave", "-r", "3"}, &il, &err));
  CHECK(err.find("--repeats with --interleave") != std::string::npos);
}
