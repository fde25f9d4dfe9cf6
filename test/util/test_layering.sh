#!/bin/bash
# test_layering.sh - each layer of the core calls and includes only itself and
# the layers below it (src/meson.build describes the layers).
#
# usage: test_layering.sh [--mpi LAYER,...] [--mpi-file PATH]... \
#            NAME:LIBRARY.a:LOWER,...:DIR,...:HEADER,... ...   (every layer, any order)
#
# LIBRARY is the layer's static library ("-": none, the commands), DIR its
# source folders (relative to PSTRAIN_SRC, each holding its private headers),
# HEADER its headers in include/pstrain/.
#
# Symbols: every symbol a library leaves undefined that another pstrain
# library defines must be defined by the library itself or by one of the
# layers it may use; otherwise it is a call upward or sideways, reported with
# the object file.
#
# A layer outside --mpi calls no MPI function (but the files of --mpi-file).
#
# Includes: a file of a layer (its folders' .c and .h, its headers) may
# include only headers of its own layer or of the layers below: a
# "pstrain/X.h" of the map, or a private header, whose layer is its folder's.
# Every include/pstrain/*.h must be in the map. <mpi.h> is for the layers of
# --mpi and the files of --mpi-file only. (Parallel HDF5's <hdf5.h> includes
# <mpi.h> itself; test_no_mpi.py checks that nothing else brings it to the
# layers below the cluster.)
set -u
command -v nm >/dev/null || { echo "SKIP: nm not found"; exit 77; }
src=${PSTRAIN_SRC:?PSTRAIN_SRC: the source tree}
mpi_layers=
declare -A path lower dirs header_layer dir_layer mpi_file
while [ $# -gt 0 ]; do
    case $1 in
    --mpi) mpi_layers=$2; shift 2 ;;
    --mpi-file) mpi_file[$2]=1; shift 2 ;;
    *) break ;;
    esac
done
fail=0
for spec in "$@"; do
    IFS=: read -r name lib low dirlist hdrs <<<"$spec"
    [ "$lib" = - ] || [ -f "$lib" ] || { echo "FAIL: $lib: no such library"; exit 1; }
    path[$name]=$lib
    lower[$name]=$low
    dirs[$name]=$dirlist
    for d in ${dirlist//,/ }; do
        [ -d "$src/$d" ] || { echo "FAIL: layer $name: no folder $d"; exit 1; }
        dir_layer[$d]=$name
    done
    for h in ${hdrs//,/ }; do
        [ -f "$src/include/pstrain/$h" ] || { echo "FAIL: layer $name: no header pstrain/$h"; exit 1; }
        [ -z "${header_layer[$h]:-}" ] || { echo "FAIL: pstrain/$h in two layers"; fail=1; }
        header_layer[$h]=$name
    done
done
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# ---- symbols ----
for name in "${!path[@]}"; do
    [ "${path[$name]}" = - ] && continue
    nm -g --defined-only "${path[$name]}" | awk 'NF == 3 {print $3}' | sort -u >"$tmp/$name.def"
done
# every pstrain symbol with the layer that defines it
for name in "${!path[@]}"; do
    [ "${path[$name]}" = - ] && continue
    sed "s/\$/ $name/" "$tmp/$name.def"
done >"$tmp/owners"
checked=0
for name in "${!path[@]}"; do
    [ "${path[$name]}" = - ] && continue
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
    # no MPI call in a layer without MPI (meson names an object by its
    # source's path: src/util/version.c -> src_util_version.c.o)
    [[ ",$mpi_layers," == *",$name,"* ]] && continue
    while read -r obj sym; do
        ok=
        for f in "${!mpi_file[@]}"; do [ "${obj##*/}" = "${f//\//_}.o" ] && ok=1; done
        [ -n "$ok" ] && continue
        echo "FAIL: layer $name ($obj) calls $sym: MPI is for the layers $mpi_layers"
        fail=1
    done < <(awk '$2 ~ /^P?MPI_/' "$tmp/undef")
done

# ---- includes ----
for f in "$src"/include/pstrain/*.h; do
    h=${f##*/}
    [ -n "${header_layer[$h]:-}" ] || { echo "FAIL: pstrain/$h is in no layer"; fail=1; }
done
# may LAYER include a header of layer OWNER?
allowed() { [ "$2" = "$1" ] || [[ ",${lower[$1]}," == *",$2,"* ]]; }
edges=0
for name in "${!dirs[@]}"; do
    files=()
    for d in ${dirs[$name]//,/ }; do
        for f in "$src/$d"/*.[ch]; do [ -f "$f" ] && files+=("${f#"$src"/}"); done
    done
    for h in "${!header_layer[@]}"; do
        [ "${header_layer[$h]}" = "$name" ] && files+=("include/pstrain/$h")
    done
    for f in "${files[@]}"; do
        while IFS= read -r inc; do
            edges=$((edges + 1))
            case $inc in
            '<mpi.h>')
                if [[ ",$mpi_layers," != *",$name,"* ]] && [ -z "${mpi_file[$f]:-}" ]; then
                    echo "FAIL: $f (layer $name) includes <mpi.h>: MPI is for the layers $mpi_layers"
                    fail=1
                fi
                continue ;;
            '<'*) continue ;;
            esac
            inc=${inc//\"/}
            owner=
            if [[ $inc == pstrain/* ]]; then
                owner=${header_layer[${inc#pstrain/}]:-}
                [ -n "$owner" ] || { echo "FAIL: $f includes $inc, which is in no layer"; fail=1; continue; }
            elif [ "$inc" = pstrain_config.h ]; then
                continue # generated by configure: constants, no code
            else
                # a private header, relative to the including file or the root
                rel=$(realpath -m --relative-to="$src" "$src/${f%/*}/$inc")
                [ -f "$src/$rel" ] || rel=$(realpath -m --relative-to="$src" "$src/$inc")
                owner=${dir_layer[${rel%/*}]:-}
                [ -f "$src/$rel" ] && [ -n "$owner" ] || {
                    echo "FAIL: $f includes \"$inc\", not a header of any layer"
                    fail=1
                    continue
                }
            fi
            if ! allowed "$name" "$owner"; then
                echo "FAIL: $f (layer $name) includes $inc of layer $owner, which is not below it"
                fail=1
            fi
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*\([<"][^>"]*[>"]\).*/\1/p' "$src/$f")
    done
done
echo "$# layers, $checked undefined symbols and $edges includes checked"
exit $fail
