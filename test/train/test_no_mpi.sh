#!/usr/bin/env bash
# One process without a launcher does not initialise MPI (main.c,
# launched_by_mpi): Open MPI would make it a singleton and fork its runtime
# daemon, about a second of start-up for nothing. Under the launcher, even
# with -n 1, MPI is initialised as before. Checked by breaking the MPI's
# configuration so that any MPI_Init fails (Open MPI: OMPI_MCA_pml names no
# component; MPICH's ch4:ucx: UCX_TLS names no transport):
#   - pstrain train alone still trains, with the same parameters as without
#     the broken setting;
#   - the launcher with -n 1 fails (its MPI_Init ran), and without the
#     setting gives the same parameters as the single process.
# Skipped (77) with another MPI library or without a launcher.
. "$(dirname "$0")/lib.sh"
P=$PSTRAIN
case $("$P" --version | grep '^MPI ') in
*"Open MPI"*) BREAK=OMPI_MCA_pml=no-such-component ;;
*MPICH*ch4:ucx*) BREAK=UCX_TLS=no-such-transport ;;
*) echo "SKIP: no setting known to break this MPI's MPI_Init"; exit 77 ;;
esac
command -v "$MPIEXEC" >/dev/null || { echo "SKIP: no MPI launcher ($MPIEXEC)"; exit 77; }
"$MKDATA" "$tmp/d.h5" 320 64 8 8 1 4 || { echo "mkdata failed"; exit 1; }
T=(train --data "$tmp/d.h5" --model mlp --batch 16 --steps 5 --quiet)

say "one process: no MPI_Init"
"$P" "${T[@]}" --dump-params "$tmp/ref.bin" >"$tmp/out" 2>&1 || { rc=$?; cat "$tmp/out"; bad "plain run: exit $rc"; }
env "$BREAK" "$P" "${T[@]}" --dump-params "$tmp/a.bin" >"$tmp/out" 2>&1 ||
    { rc=$?; cat "$tmp/out"; bad "one process with $BREAK: exit $rc (MPI_Init was called)"; }
cmp "$tmp/ref.bin" "$tmp/a.bin" || bad "one process: parameters differ"

say "launcher -n 1: MPI_Init as before"
env "$BREAK" timeout -k 5 60 "${MPIEXEC_CMD[@]}" -n 1 "$P" "${T[@]}" >"$tmp/out" 2>&1 &&
    { cat "$tmp/out"; bad "launcher -n 1 with $BREAK succeeded: MPI was not initialised"; }
timeout -k 5 60 "${MPIEXEC_CMD[@]}" -n 1 "$P" "${T[@]}" --dump-params "$tmp/m.bin" >"$tmp/out" 2>&1 ||
    { rc=$?; cat "$tmp/out"; bad "launcher -n 1: exit $rc"; }
cmp "$tmp/ref.bin" "$tmp/m.bin" || bad "launcher -n 1: parameters differ from one process"
finish
