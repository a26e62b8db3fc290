#!/usr/bin/env bash
# Rack discovery across simulated hosts (topo/discover.h): 4 hosts x 2 ranks,
# 250 Mbit/s host links, 100 us delay, in one LAYOUT:
#   flat     one switch: no rack level
#   flat1g   the same at 1 Gbit/s, with Open MPI's default settings (one TCP
#            link per peer, as a plain mpirun): there the first exchange of a
#            pass read slow enough to make 2 racks of it (topo/discover.cc);
#            the other layouts run with two links per peer, as scripts/bench
#   racks    2 racks x 2 hosts, trunks 100 Mbit/s
#   delay    the same, trunks 1 ms slower each way
#   uneven   racks of 3 hosts and 1 host (--rack-sizes 3,1), trunks 100 Mbit/s
#   oversub  2 racks x 2 hosts, trunks 250 Mbit/s: as fast as a host link but
#            shared by the rack's two hosts. At the limit of what discovery
#            can tell (docs/TOPOLOGY.md): the racks or no level
#            are accepted, never another level.
# CREATIONS communicators in a row each measure anew and must find the
# layout's racks; an exact all-reduce runs on each; then a default creation
# must take the racks from the per-user cache (a private BC_CACHE_DIR). Where
# racks are expected, one creation in ten may end with no level (discovery's
# answer when its passes disagree on a stalled host), never another level;
# rank 0's decisions are then printed on stdout, where a failure's log keeps them.
# Skips (exit 77, with the reason) where this machine cannot make namespaces.
# Uses its own namespace prefix and state, so it never touches a cluster a
# person has up, nor the other simcluster tests'.
# On flat and racks, a BC_TOPO_FILE that groups the hosts as 2 racks of 2 is
# then given (bc_info --topology): the measurement, from that cache, must
# say that the network agrees with it (racks) or warn that it disagrees
# (flat: every flow equally fast), and the file's levels are used either way.
# Usage: discover_on_simcluster.sh SIMCLUSTER DISCOVER_CHECK LAYOUT [CREATIONS [BC_INFO]]
set -u
sc=$1 prog=$2 layout=$3 creations=${4:-10} info=${5:-}
mpi_settings=(--mca pml ob1 --mca btl_tcp_links 2)
base=(--nodes 4 --slots 2 --bw 250mbit --delay 100us)
case $layout in
  flat) up=("${base[@]}"); groups=(all all all all) ;;
  flat1g) up=(--nodes 4 --slots 2 --bw 1gbit --delay 100us); groups=(all all all all); mpi_settings=() ;;
  racks) up=("${base[@]}" --racks 2 --trunk-bw 100mbit); groups=(rack0 rack0 rack1 rack1) ;;
  delay) up=("${base[@]}" --racks 2 --trunk-bw 100mbit --trunk-delay 1ms); groups=(rack0 rack0 rack1 rack1) ;;
  uneven) up=("${base[@]}" --rack-sizes 3,1 --trunk-bw 100mbit); groups=(rack0 rack0 rack0 rack1) ;;
  oversub) up=("${base[@]}" --racks 2 --trunk-bw 250mbit); groups=(rack0 rack0 rack1 rack1) ;;
  *) echo "unknown layout '$layout'"; exit 2 ;;
esac
. "$(dirname "$0")/sim_common.sh"
sim_names d disc
sim_up discsim "${up[@]}"
for i in 1 2 3 4; do echo "sim-n$i ${groups[$((i - 1))]}"; done > "$dir/expected.txt"
also=()
if [ "$layout" = oversub ]; then
  for i in 1 2 3 4; do echo "sim-n$i all"; done > "$dir/also.txt"
  also=("$dir/also.txt")
fi
mkdir -m 0700 "$dir/cache"
# BC_DEBUG=TOPO by default: rank 0 logs each discovery's decision, reason and
# rates, the evidence when a creation finds other levels.
forward=(-x "BC_DEBUG=${BC_DEBUG:-TOPO}")
[ -n "${BC_TRANSPORT:-}" ] && forward+=(-x BC_TRANSPORT)
# stderr through tee (stdout kept on fd 3): shown as it comes, and kept whole
# in a file for the decisions below once the pipeline is done.
{ "$sc" run ${mpi_settings[@]+"${mpi_settings[@]}"} -x BC_CACHE_DIR="$dir/cache" "${forward[@]}" \
    -np 8 "$prog" "$dir/expected.txt" "$creations" "${also[@]}" 2>&1 1>&3 3>&- | tee "$dir/stderr.txt" >&2; } 3>&1
rc=${PIPESTATUS[0]}
# Rank 0's decisions (BC_DEBUG=TOPO) on stdout too, where a failure's log
# keeps them: each creation's verdict and why, without the rates (on stderr).
if [ "$rc" != 0 ] || { [ "${layout#flat}" = "$layout" ] && grep -q "TOPO discovery over .*: no rack level" "$dir/stderr.txt"; }; then
  echo "discovery decisions (rank 0):"
  grep -o "TOPO discovery over .*" "$dir/stderr.txt" | sed 's/; rates .*//'
fi
if [ "$rc" = 0 ] && [ -n "$info" ] && { [ "$layout" = flat ] || [ "$layout" = racks ]; }; then
  printf 'sim-n1 r0\nsim-n2 r0\nsim-n3 r1\nsim-n4 r1\n' > "$dir/given.txt"
  want="BC_TOPO_FILE: the network agrees with its racks: {0,2} {4,6}"
  [ "$layout" = flat ] && want="BC_TOPO_FILE and the network disagree: it groups the nodes (by their first rank) as {0,2} {4,6}, the measurement finds no rack level (every flow between nodes equally fast)"
  "$sc" run ${mpi_settings[@]+"${mpi_settings[@]}"} -x BC_CACHE_DIR="$dir/cache" -x BC_DEBUG=TOPO \
    -x BC_TOPO_FILE="$dir/given.txt" -np 8 "$info" --topology > "$dir/given.out" 2>&1
  info_rc=$?
  cat "$dir/given.out"
  if [ "$info_rc" != 0 ]; then
    echo "FAIL: bc_info --topology with a BC_TOPO_FILE exited with $info_rc"; rc=1
  elif ! grep -qF "$want" "$dir/given.out"; then
    echo "FAIL: the check of the given BC_TOPO_FILE did not say: $want"; rc=1
  elif ! grep -q "from MPI_COMM_TYPE_SHARED + BC_TOPO_FILE" "$dir/given.out" || ! grep -q "{0,1,2,3} {4,5,6,7}" "$dir/given.out"; then
    echo "FAIL: the file's racks {0,1,2,3} {4,5,6,7} were not used"; rc=1
  else
    echo "PASS: the given BC_TOPO_FILE was checked against the measurement and used"
  fi
fi
# flat1g: discovery as the first thing a job does, as in a user's job (in
# discover_check only the first measuring creation is; later ones ran
# unbiased even before the fix): JOBS jobs of bc_info --topology, each
# measuring, none may find a rack level.
if [ "$rc" = 0 ] && [ -n "$info" ] && [ "$layout" = flat1g ]; then
  jobs=5 racked=0
  for j in $(seq "$jobs"); do
    "$sc" run -x BC_CACHE_DIR="$dir/cache" -x BC_TOPO_DISCOVER=always -x BC_DEBUG=TOPO \
      -np 8 "$info" --topology > "$dir/job$j.out" 2>&1
    job_rc=$?
    grep -o "TOPO discovery over .*" "$dir/job$j.out" | sed 's/; rates .*//' | head -1
    if [ "$job_rc" != 0 ]; then
      echo "FAIL: job $j: bc_info --topology exited with $job_rc"; rc=1
    elif grep -q "measured racks" "$dir/job$j.out"; then
      racked=$((racked + 1))
    fi
  done
  if [ "$racked" != 0 ]; then
    echo "FAIL: $racked of $jobs jobs found a rack level on one switch"; rc=1
  elif [ "$rc" = 0 ]; then
    echo "PASS: $jobs jobs, each discovering first, found no rack level"
  fi
fi
sim_down
exit $rc
