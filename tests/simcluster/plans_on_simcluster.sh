#!/usr/bin/env bash
# Plan learning across a shaped link (tests/mpi/test_plan_learn.cc,
# "[plans_sim]"): 2 simulated hosts x 2 ranks at 100 Mbit/s, where the two
# candidates' speeds differ by the bytes they put on the link (S and 2 S per
# host each way). Skips (exit 77, with the reason) where this machine cannot
# make namespaces. Its own namespace prefix and state.
# Usage: plans_on_simcluster.sh SIMCLUSTER MPI_TESTS XML_OUT
set -u
sc=$1 tests=$2 xml=$3
. "$(dirname "$0")/sim_common.sh"
sim_names plans plans
sim_up plans --nodes 2 --slots 2 --bw 100mbit --delay 50us
sim_run -np 4 "$tests" -r xml -o "$xml" "[plans_sim]"
rc=$?
sim_down
exit $rc
