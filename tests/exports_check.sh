#!/bin/bash
# libblueconnect.so exports exactly what its headers declare with BC_API: the
# C API (blueconnect.h), the preload's door (blueconnect_preload.h, namespace
# bc::preload) and BC_LOG's two entry points (core/log.h, namespace bc).
# Anything more is an internal leaking out (issue 16); anything less, a
# declaration the library does not provide.
# Usage: exports_check.sh LIBBLUECONNECT_SO SOURCE_ROOT
set -u
lib=$1 src=$2

# NAME for each `BC_API ... NAME(` declaration in a header, with a prefix.
declared() {
  grep -E '^\s*BC_API ' "$1" | grep -o 'BC_API [^(]*(' | sed -E 's/\($//; s/.*[ *]//; s/^/'"$2"'/'
}
want=$( { declared "$src/lib/include/blueconnect.h" ""
          declared "$src/lib/include/blueconnect_preload.h" "bc::preload::"
          declared "$src/lib/core/log.h" "bc::"; } | sort -u)
# Defined dynamic symbols, demangled, without their argument lists and ABI tags.
have=$(nm -DC --defined-only "$lib" | awk '{ $1 = ""; $2 = ""; sub(/^ +/, ""); print }' |
       sed -E 's/\[abi:[^]]*\]//; s/\(.*//' | sort -u)

extra=$(comm -13 <(echo "$want") <(echo "$have"))
missing=$(comm -23 <(echo "$want") <(echo "$have"))
status=0
[ -n "$extra" ] && { echo "exported but not declared with BC_API:"; echo "$extra" | sed 's/^/  /'; status=1; }
[ -n "$missing" ] && { echo "declared with BC_API but not exported:"; echo "$missing" | sed 's/^/  /'; status=1; }
[ -z "$want" ] && { echo "no BC_API declarations found under $src"; status=1; }
[ $status = 0 ] && echo "ok: $(grep -c . <<< "$want") symbols, each declared with BC_API"
exit $status
