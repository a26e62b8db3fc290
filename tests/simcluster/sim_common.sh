# shellcheck shell=bash
# What every simulated-cluster test does around its run (sourced by
# mpi_on_simcluster.sh, discover_on_simcluster.sh and
# tests/liveness/kill_on_simcluster.sh): skip where namespaces cannot be made,
# a private folder, the cluster up, and down again however the test ends.
# Needs $sc (scripts/simcluster) and the test's own BC_SIMCLUSTER_PREFIX and
# BC_SIMCLUSTER_STATE exported (sim_names), so that it never touches another's
# cluster.

# sim_names PREFIX_SUFFIX STATE_SUFFIX: this test's own namespace prefix and
# state folder, beside the MPI suite's (BC_SIMCLUSTER_TEST_PREFIX / _STATE:
# for engineers whose suites run at once).
sim_names() {
  export BC_SIMCLUSTER_PREFIX=${BC_SIMCLUSTER_TEST_PREFIX:-bctest}$1
  export BC_SIMCLUSTER_STATE=${BC_SIMCLUSTER_TEST_STATE:-/run/bc-simcluster-test}-$2
}

# sim_up TAG UP_ARGS...: exits 77, saying why, where no cluster can be made;
# otherwise sets $dir (a folder of its own, /tmp/bc-TAG.XXXXXX) and brings the
# cluster up with UP_ARGS.
sim_up() {
  local tag=$1 reason
  shift
  if ! reason=$("$sc" check 2>&1); then
    echo "skipped: cannot make a simulated cluster here: $reason"
    exit 77
  fi
  dir=$(mktemp -d "/tmp/bc-$tag.XXXXXX")
  trap '"$sc" down >/dev/null 2>&1; rm -rf "$dir"' EXIT
  "$sc" down >/dev/null 2>&1
  "$sc" up "$@" || { echo "simcluster up failed"; exit 1; }
}

# sim_down: the cluster down; the test fails when that leaves something
# behind. $dir stays until the script exits.
sim_down() {
  "$sc" down || { echo "simcluster down left something behind"; exit 1; }
  trap 'rm -rf "$dir"' EXIT
}

# sim_run ARGS...: "$sc" run ARGS, passing on the BC_* variables a person may
# set around a test run (BC_TRANSPORT, BC_DEBUG, BC_TIMEOUT); the sanitizer's
# variables go on by scripts/simcluster run itself.
sim_run() {
  local forward=() v
  for v in BC_TRANSPORT BC_DEBUG BC_TIMEOUT; do [ -n "${!v:-}" ] && forward+=(-x "$v"); done
  "$sc" run "${forward[@]}" "$@"
}
