# Sourced by the torch test scripts: skips (exit 77, with the reason) unless
# the backend was built and PYTHON imports MODULES, then puts the build tree's
# package first on PYTHONPATH and gives torch one thread per rank (2 cores,
# up to 8 ranks).
# Usage, after `set -u`: . "$(dirname "$0")/torch_common.sh" PYTHON PKGDIR "MODULES" "HOW TO GET THEM"
torch_python=$1 torch_pkgdir=$2
if [ -z "$torch_python" ]; then
  echo "skipped: the torch backend was not built (-Dtorch=disabled, or no torch at configure time: scripts/install-deps installs python3-torch libtorch-dev)"
  exit 77
fi
if ! "$torch_python" -c "import $3" >/dev/null 2>&1; then
  echo "skipped: $torch_python cannot import $3 ($4)"
  exit 77
fi
if ! ls "$torch_pkgdir"/blueconnect/torch/_C*.so >/dev/null 2>&1; then
  echo "skipped: the extension was not built in $torch_pkgdir/blueconnect/torch"
  exit 77
fi
export PYTHONPATH="$torch_pkgdir${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1
