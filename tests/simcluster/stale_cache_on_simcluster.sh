#!/usr/bin/env bash
# A cost model cached on one network must not be trusted on another that the
# same host names now have (lib/api/plan_learn.cc, check_caches; docs/PLANS.md,
# "The caches the plans stand on, checked"). 2 simulated hosts x 2 ranks:
#   1. at 1 Gbit/s, a job calibrates and caches its model (BC_CACHE_DIR of
#      its own);
#   2. the same hosts at 100 Mbit/s: the next job loads that model, its plans
#      take far longer than it predicts, and rank 0 warns and removes the file;
#   3. the job after calibrates anew (and caches the model of today's network).
# Every job checks its results bit for bit (bc_bench -c). Skips (exit 77, with
# the reason) where namespaces cannot be made. Its own namespace prefix and state.
# Usage: stale_cache_on_simcluster.sh SIMCLUSTER BC_BENCH
set -u
sc=$1 bench=$2
. "$(dirname "$0")/sim_common.sh"
sim_names stale stale
sim_up stale --nodes 2 --slots 2 --bw 1gbit --delay 50us
cache="$dir/cache"
mkdir -m 700 "$cache"
job() {  # job N: one bc_bench run through the C API with the cache on; its output in $dir/jobN
  timeout -k 5 120 "$sc" run -x BC_MODEL_CACHE=on -x BC_CACHE_DIR="$cache" -x BC_DEBUG=PLAN -np 4 \
    "$bench" -c -m 1M:1M -i 6 > "$dir/job$1" 2>&1
}
fail() {
  echo "FAIL: $*"
  for f in "$dir"/job*; do echo "== $f"; grep -E "BC (WARN|INFO) PLAN (cost model|plan learning)|wrong|failed" "$f" | cut -c1-300 | head -8; done
  exit 1
}
job 1 || fail "job 1 (1 Gbit/s) failed"
grep -q "calibration took" "$dir/job1" || fail "job 1 did not calibrate"
ls "$cache"/model-*.txt > /dev/null 2>&1 || fail "job 1 cached no model"
sim_down
sim_up stale --nodes 2 --slots 2 --bw 100mbit --delay 50us
job 2 || fail "job 2 (100 Mbit/s) failed"
grep -q "cost model (cache " "$dir/job2" || fail "job 2 did not load the cached model"
grep -q "describe another network than today's" "$dir/job2" || fail "job 2 did not find the cached model stale"
ls "$cache"/model-*.txt > /dev/null 2>&1 && fail "job 2 left the stale model in the cache"
job 3 || fail "job 3 failed"
grep -q "calibration took" "$dir/job3" || fail "job 3 did not calibrate anew"
grep -q "describe another network" "$dir/job3" && fail "job 3 found its own fresh model stale"
sim_down
grep -h "describe another network" "$dir/job2" | sed 's/.*PLAN //' | cut -c1-240
echo "PASS: a model cached at 1 Gbit/s was found stale at 100 Mbit/s, removed, and calibrated anew"
