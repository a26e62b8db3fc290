#!/usr/bin/env bash
# The MPI test suite across simulated hosts: 3 hosts, 7 ranks placed 3+3+1
# (uneven), real MPI_COMM_TYPE_SHARED nodes, traffic between hosts on shaped
# links. Skips (exit 77, with the reason) where this machine cannot make
# namespaces. Uses its own namespace prefix and state, so it never touches a
# cluster a person has up.
# Usage: mpi_on_simcluster.sh SIMCLUSTER MPI_TESTS XML_OUT [catch args...]
set -u
sc=$1 tests=$2 xml=$3
shift 3
# BC_SIMCLUSTER_TEST_PREFIX / _STATE: for engineers whose suites run at once.
export BC_SIMCLUSTER_PREFIX=${BC_SIMCLUSTER_TEST_PREFIX:-bctest} BC_SIMCLUSTER_STATE=${BC_SIMCLUSTER_TEST_STATE:-/run/bc-simcluster-test}
. "$(dirname "$0")/sim_common.sh"
sim_up mpisim --nodes 3 --slots 3 --bw 1gbit --delay 50us
sim_run -np 7 "$tests" -r xml -o "$xml" "$@"
rc=$?
sim_down
exit $rc
