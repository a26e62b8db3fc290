# Sourced by the shell checks that meson runs (tests/*/*_check.sh): a fresh
# work directory $W under $WORKDIR, mpirun's arguments as the array ARGS (from
# MPIRUN_ARGS), and fail(), which prints a failure and records it in $status.
# Usage, after `set -u`: . "$(dirname "$0")/../check_common.sh" NAME
W="$WORKDIR/$1"
rm -rf "$W"
mkdir -p "$W"
read -r -a ARGS <<< "$MPIRUN_ARGS"
status=0
fail() { echo "FAIL: $*"; status=1; }
