#!/usr/bin/env bash
# One process without a launcher does not initialise MPI (main.c,
# launched_by_mpi): Open MPI would make it a singleton and fork its runtime
# daemon, about a second of start-up for nothing. Under mpirun, even with
# -np 1, MPI is initialised as before. Checked by breaking Open MPI's
# configuration (OMPI_MCA_pml names no component, so any MPI_Init fails):
#   - pstrain train alone still trains, with the same parameters as without
#     the broken setting;
#   - mpirun -np 1 pstrain train fails (its MPI_Init ran), and without the
#     setting gives the same parameters as the single process.
# Skipped (77) with another MPI library or without mpirun.
. "$(dirname "$0")/lib.sh"
P=$PSTRAIN
"$P" --version | grep -q "Open MPI" || { echo "SKIP: pstrain is not built with Open MPI"; exit 77; }
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$MKDATA" "$tmp/d.h5" 320 64 8 8 1 4 || { echo "mkdata failed"; exit 1; }
T=(train --data "$tmp/d.h5" --model mlp --batch 16 --steps 5 --quiet)

say "one process: no MPI_Init"
"$P" "${T[@]}" --dump-params "$tmp/ref.bin" >"$tmp/out" 2>&1 || { rc=$?; cat "$tmp/out"; bad "plain run: exit $rc"; }
OMPI_MCA_pml=no-such-component "$P" "${T[@]}" --dump-params "$tmp/a.bin" >"$tmp/out" 2>&1 ||
    { rc=$?; cat "$tmp/out"; bad "one process with a broken Open MPI setting: exit $rc (MPI_Init was called)"; }
cmp "$tmp/ref.bin" "$tmp/a.bin" || bad "one process: parameters differ"

say "mpirun -np 1: MPI_Init as before"
OMPI_MCA_pml=no-such-component timeout -k 5 60 mpirun -np 1 "$P" "${T[@]}" >"$tmp/out" 2>&1 &&
    { cat "$tmp/out"; bad "mpirun -np 1 with a broken Open MPI setting succeeded: MPI was not initialised"; }
timeout -k 5 60 mpirun -np 1 "$P" "${T[@]}" --dump-params "$tmp/m.bin" >"$tmp/out" 2>&1 ||
    { rc=$?; cat "$tmp/out"; bad "mpirun -np 1: exit $rc"; }
cmp "$tmp/ref.bin" "$tmp/m.bin" || bad "mpirun -np 1: parameters differ from one process"
finish
