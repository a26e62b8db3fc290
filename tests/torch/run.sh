#!/usr/bin/env bash
# One torch backend test: tests/torch/test_backend.py PART under mpirun at NP
# ranks, with the build tree's package first on PYTHONPATH.
# Usage: run.sh PYTHON PKGDIR NP PART [mpirun args...]
# PYTHON "" (torch not found at configure time) or a missing extension: skip,
# with the reason, exit 77.
set -uo pipefail
python=$1 pkgdir=$2 np=$3 part=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
. "$here/torch_common.sh" "$python" "$pkgdir" torch "apt-get install python3-torch"
exec mpirun -x PYTHONPATH -x OMP_NUM_THREADS "$@" -np "$np" "$python" "$here/test_backend.py" "$part"
