#!/usr/bin/env bash
# The per-user cost model cache across jobs (BC_MODEL_CACHE, docs/PLANS.md),
# end to end: bc_info under mpirun calibrates a virtual layout (BC_TOPO=1: every
# rank its own "node") and says where its model came from.
#   1. cold: calibrated, and rank 0 leaves one file (mode 0600) in BC_CACHE_DIR
#   2. warm: the next job loads it ("cost model (cache ...")
#   3. corrupt: an edited file is not used (INFO names the checksum), the job
#      calibrates and rewrites it, and the job after loads it again
#   4. another layout: calibrated, its own file beside the first; over UCX
#      (BC_TRANSPORT=ucx) with and without UCX_NET_DEVICES set (another
#      network): a file each, the second loaded by the next job with it set
#   5. stale: BC_MODEL_CACHE_AGE=1s after 2 s: calibrated again
#   6. two jobs writing at once: both succeed, one whole file, no temporary
#      files, and a later job loads it
#   7. BC_MODEL_CACHE=off: calibrated, nothing written
# Everything happens in a directory of its own under WORKDIR, never in the
# user's cache. Environment (tests/meson.build): MPIRUN, MPIRUN_ARGS, EXE
# (bc_info), WORKDIR. Exit 0 on pass, 1 on failure.
set -u
. "$(dirname "$0")/../check_common.sh" model_cache

# job NAME DIR [VAR=VALUE ...]: bc_info at np 4 on the layout in $layout.
layout="BC_MODEL=calibrate;BC_TOPO=1"
job() {
  local name=$1 dir=$2
  shift 2
  local xs=(-x "BC_CACHE_DIR=$dir" -x BC_DEBUG=PLAN)
  local v on=1
  for v in "$@"; do
    xs+=(-x "$v")
    case $v in BC_MODEL_CACHE=*) on=0 ;; esac
  done
  [ $on -eq 0 ] || xs+=(-x BC_MODEL_CACHE=on)
  "$MPIRUN" "${ARGS[@]}" "${xs[@]}" -np 4 "$EXE" --plan 4K --options "$layout" > "$W/$name.out" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { fail "$name: bc_info exited with $rc"; cat "$W/$name.out"; }
}
source_of() { grep -o '^cost model ([a-z]*' "$W/$1.out" | head -1 | sed 's/cost model (//'; }
files_in() { find "$1" -maxdepth 1 -type f | wc -l; }

C="$W/cache"
job cold "$C"
[ "$(source_of cold)" = calibrated ] || fail "cold: model from '$(source_of cold)', not calibrated"
[ "$(files_in "$C")" -eq 1 ] || fail "cold: $(files_in "$C") files in the cache, not 1"
f=$(find "$C" -maxdepth 1 -type f -name 'model-*.txt' | head -1)
[ -n "$f" ] || fail "cold: no model-*.txt in $C"
[ "$(stat -c %a "$C")" = 700 ] || fail "cold: the cache directory has mode $(stat -c %a "$C"), not 700"
[ -z "$f" ] || [ "$(stat -c %a "$f")" = 600 ] || fail "cold: the file has mode $(stat -c %a "$f"), not 600"

job warm "$C"
[ "$(source_of warm)" = cache ] || fail "warm: model from '$(source_of warm)', not the cache"
grep -q "cost model (cache $f" "$W/warm.out" || fail "warm: the model does not name $f"

if [ -n "$f" ]; then
  sed -i '0,/^fit /s/^fit \([0-9]*\) \([a-z]*\) [^ ]*/fit \1 \2 0.5/' "$f"
  job corrupt "$C"
  [ "$(source_of corrupt)" = calibrated ] || fail "corrupt: model from '$(source_of corrupt)', not calibrated"
  grep -q "BC_MODEL_CACHE: not used: .*checksum mismatch" "$W/corrupt.out" || fail "corrupt: no INFO line naming the checksum"
  job rewritten "$C"
  [ "$(source_of rewritten)" = cache ] || fail "rewritten: model from '$(source_of rewritten)', not the cache"
fi

layout="BC_MODEL=calibrate;BC_TOPO=2"
job other "$C"
[ "$(source_of other)" = calibrated ] || fail "another layout: model from '$(source_of other)', not calibrated"
[ "$(files_in "$C")" -eq 2 ] || fail "another layout: $(files_in "$C") files in the cache, not 2"
layout="BC_MODEL=calibrate;BC_TOPO=1"

# The same layout and hosts over a network the user chose for UCX: its own
# file (a model timed on one network priced another at up to 4x its speed).
# BC_TRANSPORT=ucx so that UCX carries the stages on one host;
# UCX_NET_DEVICES=all is UCX's default, so the job itself runs as before.
job ucx "$C" BC_TRANSPORT=ucx
[ "$(source_of ucx)" = calibrated ] || fail "BC_TRANSPORT=ucx: model from '$(source_of ucx)', not calibrated"
job netdev "$C" BC_TRANSPORT=ucx UCX_NET_DEVICES=all
[ "$(source_of netdev)" = calibrated ] || fail "UCX_NET_DEVICES set: model from '$(source_of netdev)', not calibrated"
[ "$(files_in "$C")" -eq 4 ] || fail "UCX_NET_DEVICES set: $(files_in "$C") files in the cache, not 4"
job netdev_warm "$C" BC_TRANSPORT=ucx UCX_NET_DEVICES=all
[ "$(source_of netdev_warm)" = cache ] || fail "UCX_NET_DEVICES set, again: model from '$(source_of netdev_warm)', not the cache"

sleep 2
job stale "$C" BC_MODEL_CACHE_AGE=1s
[ "$(source_of stale)" = calibrated ] || fail "stale: model from '$(source_of stale)', not calibrated"
grep -q "older than BC_MODEL_CACHE_AGE" "$W/stale.out" || fail "stale: no INFO line about the age"

R="$W/race"
job race1 "$R" & p1=$!
job race2 "$R" & p2=$!
wait $p1 || true
wait $p2 || true
# Both start with an empty cache; at least one calibrates. The other may
# calibrate too, or, when its mpirun started later than the first's finished
# writing (a busy machine delays a start by seconds), load that whole file.
s1=$(source_of race1) s2=$(source_of race2)
case "$s1/$s2" in
  calibrated/calibrated | calibrated/cache | cache/calibrated) ;;
  *) fail "race: the jobs' models came from '$s1' and '$s2' (one must calibrate, the other calibrate or load)" ;;
esac
[ "$(files_in "$R")" -eq 1 ] || { fail "race: $(files_in "$R") files left, not 1"; ls -la "$R"; }
job after_race "$R"
[ "$(source_of after_race)" = cache ] || fail "race: the job after loaded '$(source_of after_race)', not the cache"

O="$W/off"
job off "$O" BC_MODEL_CACHE=off
[ "$(source_of off)" = calibrated ] || fail "off: model from '$(source_of off)', not calibrated"
[ ! -e "$O" ] || [ "$(files_in "$O")" -eq 0 ] || fail "off: something was written to $O"

[ $status -eq 0 ] && echo "model cache: cold, warm, corrupt, other layout, another UCX network, stale, racing writers and off all behave"
exit $status
