#!/bin/bash
# test_layering.sh - each layer library of the core calls only into itself and
# the layers below it (src/meson.build describes the layers).
#
# usage: test_layering.sh NAME:LIBRARY.a:LOWER,LOWER ... (every layer, any order)
#
# Every symbol a library leaves undefined that another pstrain library defines
# must be defined by the library itself or by one of the layers it may use;
# otherwise it is a call upward or sideways, reported with the object file.
set -u
command -v nm >/dev/null || { echo "SKIP: nm not found"; exit 77; }
declare -A path lower
for spec in "$@"; do
    IFS=: read -r name lib low <<<"$spec"
    [ -f "$lib" ] || { echo "FAIL: $lib: no such library"; exit 1; }
    path[$name]=$lib
    lower[$name]=$low
done
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
for name in "${!path[@]}"; do
    nm -g --defined-only "${path[$name]}" | awk 'NF == 3 {print $3}' | sort -u >"$tmp/$name.def"
done
# every pstrain symbol with the layer that defines it
for name in "${!path[@]}"; do
    sed "s/\$/ $name/" "$tmp/$name.def"
done >"$tmp/owners"
fail=0
checked=0
for name in "${!path[@]}"; do
    # lines "lib.a:obj.o:                 U symbol" -> "obj symbol"
    nm -A -u "${path[$name]}" | awk '{n = split($1, p, ":"); print p[n - 1], $NF}' >"$tmp/undef"
    checked=$((checked + $(wc -l <"$tmp/undef")))
    out=$(awk -v self="$name" -v low=",${lower[$name]}," '
        FNR == NR { owner[$1] = owner[$1] " " $2; next }
        ($2 in owner) {
            n = split(owner[$2], o, " "); ok = 0; bad = ""
            for (i = 1; i <= n; i++)
                if (o[i] == self || index(low, "," o[i] ",")) ok = 1; else bad = o[i]
            if (!ok) printf "FAIL: layer %s (%s) calls %s of layer %s, which is not below it\n",
                            self, $1, $2, bad
        }' "$tmp/owners" "$tmp/undef")
    if [ -n "$out" ]; then
        echo "$out"
        fail=1
    fi
done
echo "$# layers, $checked undefined symbols checked"
exit $fail
