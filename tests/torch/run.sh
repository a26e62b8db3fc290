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
if [ -z "$python" ]; then
  echo "skipped: the torch backend was not built (-Dtorch=disabled, or no torch at configure time: scripts/install-deps installs python3-torch libtorch-dev)"
  exit 77
fi
if ! "$python" -c 'import torch' >/dev/null 2>&1; then
  echo "skipped: $python cannot import torch"
  exit 77
fi
if ! ls "$pkgdir"/blueconnect/torch/_C*.so >/dev/null 2>&1; then
  echo "skipped: the extension was not built in $pkgdir/blueconnect/torch"
  exit 77
fi
export PYTHONPATH="$pkgdir${PYTHONPATH:+:$PYTHONPATH}"
# One thread per rank for torch's own kernels: 2 cores, up to 8 ranks.
export OMP_NUM_THREADS=1
exec mpirun -x PYTHONPATH -x OMP_NUM_THREADS "$@" -np "$np" "$python" "$here/test_backend.py" "$part"
