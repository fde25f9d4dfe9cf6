#!/usr/bin/env bash
# mpiexec_np.sh [--tcp] NP CMD... - runs CMD on NP ranks with the launcher of
# the MPI pstrain was built with (jobs/mpiexec.sh; --tcp: TCP transports
# only), for tests that are one MPI program.
set -eu
. "${PSTRAIN_SRC:?}/jobs/mpiexec.sh"
tcp=()
if [ "$1" = --tcp ]; then
    [ -z "$MPIEXEC_TCP_SKIP" ] || { echo "SKIP: TCP only: $MPIEXEC_TCP_SKIP"; exit 77; }
    tcp=("${MPIEXEC_TCP[@]}")
    shift
fi
np=$1
shift
exec "${MPIEXEC_CMD[@]}" "${tcp[@]}" -n "$np" "$@"
