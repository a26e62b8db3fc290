#!/usr/bin/env bash
# kill -9 of one rank in the middle of an all-reduce (docs/FAILURES.md, "Peer
# death and lateness"). Runs tests/liveness/liveness_check under
# mpirun --enable-recovery (without it Open MPI kills the whole job when a rank
# dies) and checks, for every survivor:
#   - bc_allreduce failed with BC_ERR_PEER_DEAD (13) naming the victim
#     ("rank 1 (host ..., pid ...) died") within DETECT_MS of its death;
#   - bc_comm_destroy and bc_finalize returned, promptly and with BC_OK;
#   - MPI_Finalize returned, or the survivor left after 5 s inside it (Open
#     MPI's finalize fence; reported as a note, see docs/FAILURES.md);
# and for the job: mpirun returned within the time limit, and nothing of this
# job is left in /dev/shm (our bc-shm-PID-* segments, Open MPI's
# vader_segment.*.JOBID.*) or /tmp (Open MPI's session directory).
#
# Usage: kill_check.sh MPIRUN LIVENESS_CHECK NP [VAR=VALUE ...] [-- mpirun args]
# VAR=VALUE pairs are exported to the ranks (BC_TRANSPORT=shm, BC_LIVENESS=net).
# BC_TEST_KILL_MODE=early: the victim dies before its call, while the
# survivors wait in the argument agreement (liveness_check early).
# BC_TEST_KILL_MODE=shrink: then every survivor also shrinks the broken
# communicator and runs 100 exact all-reduces on the new one (liveness_check
# shrink); each must report status 0, np-1 ranks, 100 calls, 0 wrong, and its
# first exact all-reduce within FIRST_MS of the death. BC_TEST_SECOND_VICTIM=R
# (shrink only): rank R dies too, as it would shrink; the others must agree
# on both deaths and go on with np-2 ranks.
set -u
mpirun=$1 prog=$2 np=$3
shift 3
envs=() extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --) shift; extra=("$@"); break ;;
    *=*) envs+=(-x "$1"); shift ;;
    *) echo "kill_check.sh: unexpected argument $1"; exit 2 ;;
  esac
done
victim=1
# 2 s is the promise; scheduling on a loaded 2-core machine adds up to 1.5 s
# (4 ranks plus other jobs share the cores).
DETECT_MS=${BC_TEST_DETECT_MS:-3500}
# Shrink: from the death to the first exact all-reduce of the survivors'
# communicator. 2 s is the target (issue 43), with the same slack.
FIRST_MS=${BC_TEST_FIRST_MS:-3500}
mode=${BC_TEST_KILL_MODE:-kill}
LIMIT_S=${BC_TEST_LIMIT_S:-60}
dir=$(mktemp -d /tmp/bc-liveness.XXXXXX)
trap 'rm -rf "$dir"' EXIT
# BC_TEST_MPIRUN_LINGER_S=N: Open MPI 4.1.4's mpirun with daemons on other
# hosts (scripts/simcluster) and --enable-recovery did not exit after a rank
# died, even once every survivor had exited (measured: mpirun and both orted
# waited until killed). With N set, mpirun that is still there N s after the
# last survivor's final line is terminated (SIGTERM: it removes its session
# directory and its daemons), and that is reported as a note, not hidden.
LINGER_S=${BC_TEST_MPIRUN_LINGER_S:-}
survivors=$((np - 1))
if [ -n "${BC_TEST_SECOND_VICTIM:-}" ]; then
  survivors=$((np - 2))
  envs+=(-x "BC_TEST_SECOND_VICTIM=$BC_TEST_SECOND_VICTIM")
fi
start=$(date +%s.%N)
timeout -k 5 "$LIMIT_S" "$mpirun" --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
  --enable-recovery "${envs[@]}" "${extra[@]}" -np "$np" "$prog" "$mode" "$victim" "$dir" >"$dir/out" 2>&1 &
launcher=$!
lingered=""
if [ -n "$LINGER_S" ]; then
  all_done=""
  while kill -0 "$launcher" 2>/dev/null; do
    if [ -z "$all_done" ] && [ "$(grep -cE "^LIVENESS-(FINAL|STUCK)" "$dir/out")" -ge "$survivors" ]; then
      all_done=$(date +%s)
    fi
    if [ -n "$all_done" ] && [ $(($(date +%s) - all_done)) -ge "$LINGER_S" ]; then
      lingered=1
      # This job's mpirun (its command line holds $dir), under any wrapper.
      pkill -TERM -f "mpirun .*--enable-recovery.* $dir\$" 2>/dev/null
      break
    fi
    sleep 0.2
  done
fi
wait "$launcher"
rc=$?
wall=$(echo "$(date +%s.%N) - $start" | bc)
fail=0
problem() { echo "FAIL: $*"; fail=1; }
grep -E "^(LIVENESS|SHRINK)" "$dir/out" | cut -c1-600
# A hung job: each survivor's watchdog line says where it was.
grep -q "^LIVENESS-WATCHDOG" "$dir/out" && problem "some survivors were still running 45 s after the failure (LIVENESS-WATCHDOG lines above)"
[ "$rc" = 124 ] || [ "$rc" = 137 ] && problem "mpirun did not return within ${LIMIT_S}s"
echo "mpirun exit status $rc after ${wall}s (a killed rank makes it non-zero)"
[ -n "$lingered" ] && echo "note: mpirun was still running ${LINGER_S} s after every survivor had finished; terminated (BC_TEST_MPIRUN_LINGER_S)"
lines=$(grep -c "^LIVENESS rank" "$dir/out")
[ "$lines" = "$survivors" ] || problem "$lines of $survivors survivors reported"
while read -r line; do
  set -- $line
  r=$3 st=$7 det=$9 des=${11} fin=${13} dst=${15} fst=${17} named=${19}
  [ "$st" = 13 ] || problem "rank $r: status $st, not BC_ERR_PEER_DEAD (13)"
  [ "$named" = 1 ] || problem "rank $r: the message does not name rank $victim as dead"
  awk -v d="$det" -v l="$DETECT_MS" 'BEGIN { exit !(d >= 0 && d <= l) }' ||
    problem "rank $r: reported the death after ${det} ms (limit ${DETECT_MS} ms)"
  awk -v d="$des" 'BEGIN { exit !(d <= 3000) }' || problem "rank $r: bc_comm_destroy took ${des} ms"
  awk -v d="$fin" 'BEGIN { exit !(d <= 1000) }' || problem "rank $r: bc_finalize took ${fin} ms"
  [ "$dst" = 0 ] && [ "$fst" = 0 ] || problem "rank $r: bc_comm_destroy/bc_finalize returned $dst/$fst"
done < <(grep "^LIVENESS rank" "$dir/out")
if [ "$mode" = shrink ]; then
  lines=$(grep -c "^SHRINK rank" "$dir/out")
  [ "$lines" = "$survivors" ] || problem "$lines of $survivors survivors reported on their shrink"
  while read -r line; do
    set -- $line
    r=$3 nsize=$7 st=$9 first=${13} calls=${15} wrong=${17} dst=${19}
    [ "$st" = 0 ] || problem "rank $r: bc_comm_shrink returned $st"
    [ "$nsize" = "$survivors" ] || problem "rank $r: the shrunk communicator has $nsize ranks, not $survivors"
    [ "$calls" = 100 ] && [ "$wrong" = 0 ] || problem "rank $r: $calls all-reduces on the shrunk communicator, $wrong wrong or failed"
    [ "$dst" = 0 ] || problem "rank $r: destroying the shrunk communicator returned $dst"
    awk -v d="$first" -v l="$FIRST_MS" 'BEGIN { exit !(d >= 0 && d <= l) }' ||
      problem "rank $r: first exact all-reduce after the death at ${first} ms (limit ${FIRST_MS} ms)"
  done < <(grep "^SHRINK rank" "$dir/out")
  # Every survivor has the same new size and distinct new ranks 0..survivors-1.
  ranks=$(grep "^SHRINK rank" "$dir/out" | awk '{ print $5 }' | sort -n | tr '\n' ' ')
  [ "$ranks" = "$(seq 0 $((survivors - 1)) | tr '\n' ' ')" ] || problem "the shrunk communicator's ranks are $ranks"
fi
fin=$(grep -c "^LIVENESS-FINAL" "$dir/out")
stuck=$(grep -c "^LIVENESS-STUCK" "$dir/out")
[ $((fin + stuck)) = "$survivors" ] || problem "$fin survivors returned from MPI_Finalize, $stuck left it after 5 s"
[ "$stuck" = 0 ] || echo "note: $stuck survivor(s) left MPI_Finalize after 5 s (Open MPI's finalize fence, docs/FAILURES.md)"
# Leftovers of this job.
for f in "$dir"/pid.*; do
  pid=$(cat "$f")
  ls /dev/shm/bc-shm-"$pid"-* >/dev/null 2>&1 && problem "left in /dev/shm: $(ls /dev/shm/bc-shm-"$pid"-*)"
done
job=$(cat "$dir/jobid" 2>/dev/null)
if [ -n "$job" ]; then
  hex=$(printf '%x' "$job")
  sleep 1  # mpirun's own cleanup runs as it exits
  ls /dev/shm/vader_segment.*."$hex".* >/dev/null 2>&1 && problem "left in /dev/shm: $(ls /dev/shm/vader_segment.*."$hex".*)"
fi
session=$(cat "$dir/session" 2>/dev/null)
if [ -n "$session" ]; then
  jobdir=${session%/*/*}  # /tmp/ompi.HOST.UID/pid.MPIRUN
  # Open MPI's daemons on other hosts remove theirs as they exit: allow 5 s.
  for _ in $(seq 50); do [ -e "$jobdir" ] || break; sleep 0.1; done
  [ -e "$jobdir" ] && problem "left in /tmp: $jobdir"
fi
if [ "$fail" != 0 ]; then
  echo "--- output"
  cut -c1-400 "$dir/out" | head -60
  exit 1
fi
if [ "$mode" = shrink ]; then
  echo "PASS: every survivor named rank $victim, shrank and ran 100 exact all-reduces, the first within ${FIRST_MS} ms of the death; nothing left behind"
else
  echo "PASS: every survivor named rank $victim within ${DETECT_MS} ms and exited; nothing left behind"
fi
