# mpiexec.sh - sourced by pstrain's job scripts and tests: the MPI launcher,
# whichever MPI pstrain was built with.
#
# Input (environment):
#   MPIEXEC        the launcher; default: the launcher of the MPI that
#                  $PSTRAIN was built with (its --version), Debian's name
#                  first (mpirun.openmpi, mpiexec.mpich), else mpirun/mpiexec
#   MPIEXEC_ARGS   extra launcher flags, split on blanks (default: none)
#   MPI_FLAVOUR    openmpi | mpich (MPICH and its derivatives: Intel MPI,
#                  Cray MPICH, MVAPICH) | other; default: what $PSTRAIN
#                  --version or `$MPIEXEC --version` says
#   PSTRAIN        (optional) the pstrain binary the launcher is for
# Defines:
#   MPIEXEC_CMD            (array) the launcher with its flags, more ranks
#                          than cores allowed: "${MPIEXEC_CMD[@]}" -n NP CMD...
#   MPIEXEC_TCP            (array) launcher flags that make every rank talk
#                          TCP only, one-sided operations included
#   MPIEXEC_TCP_SKIP       empty, or why this MPI has no usable TCP-only mode
#                          (tests skip their TCP-only runs then)
#   MPI_RANK_VAR           the variable holding a rank's number in its
#                          environment (PMIX_RANK or PMI_RANK)
#   mpiexec_rank_pids, mpiexec_kill (below)
# Open MPI refuses to run as root unless told twice; as root this sets its
# two variables. MPICH needs neither that nor a flag to oversubscribe.

mpiexec_flavour_of() { # the flavour named by a --version text on stdin
    case $(cat || true) in
    *"Open MPI"* | *OpenRTE* | *"Open RTE"*) echo openmpi ;;
    *HYDRA* | *Hydra* | *MPICH* | *"Intel(R) MPI"*) echo mpich ;;
    *) echo other ;;
    esac
}
if [ -z "${MPI_FLAVOUR:-}" ] && [ -z "${MPIEXEC:-}" ] && [ -x "${PSTRAIN:-}" ]; then
    MPI_FLAVOUR=$({ "$PSTRAIN" --version 2>/dev/null || true; } | mpiexec_flavour_of)
    [ "$MPI_FLAVOUR" != other ] || MPI_FLAVOUR= # not said: ask the launcher below
fi
if [ -z "${MPIEXEC:-}" ]; then
    case ${MPI_FLAVOUR:-} in
    openmpi) mpiexec_names="mpirun.openmpi mpiexec.openmpi mpirun mpiexec" ;;
    mpich) mpiexec_names="mpiexec.mpich mpiexec.hydra mpiexec mpirun" ;;
    *) mpiexec_names="mpirun mpiexec" ;;
    esac
    for n in $mpiexec_names; do
        MPIEXEC=$(command -v "$n") && break
    done
    MPIEXEC=${MPIEXEC:-mpirun}
fi
if [ -z "${MPI_FLAVOUR:-}" ]; then
    MPI_FLAVOUR=$({ "$MPIEXEC" --version 2>&1 || true; } | mpiexec_flavour_of)
fi
export MPIEXEC MPI_FLAVOUR

case $MPI_FLAVOUR in
openmpi)
    mpiexec_oversubscribe=(--oversubscribe)
    MPIEXEC_TCP_SKIP=""
    # btl tcp + pml ob1 for messages; osc pt2pt for windows (the rdma
    # component would use shared memory between ranks of one host)
    MPIEXEC_TCP=(--mca btl self,tcp --mca pml ob1 --mca osc pt2pt)
    MPI_RANK_VAR=PMIX_RANK
    if [ "$(id -u)" = 0 ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    ;;
mpich)
    mpiexec_oversubscribe=()
    # ch4:ucx: UCX's TCP transport for everything, no shared memory. Debian's
    # MPICH 4.0.2 (UCX 1.13) with it often hangs in MPI_Finalize after the
    # run's work is done (docs/platform.md, "MPICH 4.0.2"), so tests skip
    # their TCP-only runs under MPICH; jobs may still ask for it.
    MPIEXEC_TCP=(-genv UCX_TLS tcp,self)
    MPIEXEC_TCP_SKIP="MPICH's UCX tcp transport hangs in MPI_Finalize (UCX 1.13; docs/platform.md)"
    # No MPIR_CVAR_ASYNC_PROGRESS: the ranks whose windows others use (root,
    # PS) progress them in their service loops (dist_progress), and MPICH's
    # progress thread, one spinning thread per rank, cost 2-5x in training
    # speed when ranks share cores (docs/platform.md, "MPICH 4.0.2").
    MPI_RANK_VAR=PMI_RANK
    ;;
*)
    mpiexec_oversubscribe=()
    MPIEXEC_TCP=()
    MPIEXEC_TCP_SKIP="no TCP-only flags are known for this MPI"
    MPI_RANK_VAR=PMI_RANK
    ;;
esac

# shellcheck disable=SC2206 # MPIEXEC_ARGS is a list of flags
MPIEXEC_CMD=("$MPIEXEC" ${MPIEXEC_ARGS:-} "${mpiexec_oversubscribe[@]}")

# mpiexec_rank_pids LAUNCHER_PID [RANK]: the pids of the launcher's ranks on
# this host, or of rank RANK only: its descendants whose environment holds
# $MPI_RANK_VAR (Open MPI's ranks are its children, MPICH's the children of
# its hydra_pmi_proxy).
mpiexec_rank_pids() {
    local pid c v todo=("$1")
    while [ ${#todo[@]} -gt 0 ]; do
        pid=${todo[0]}
        todo=("${todo[@]:1}")
        for c in $(pgrep -P "$pid"); do
            todo+=("$c")
            v=$(tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | sed -n "s/^$MPI_RANK_VAR=//p")
            [ -n "$v" ] && { [ -z "${2:-}" ] || [ "$v" = "$2" ]; } && echo "$c"
        done
    done
    return 0
}

# mpiexec_kill LAUNCHER_PID: SIGKILL to the ranks, then to the launcher and
# whatever else it started (a launcher killed first would orphan its ranks).
mpiexec_kill() {
    local p tree=("$1") i=0
    while [ $i -lt ${#tree[@]} ]; do
        for p in $(pgrep -P "${tree[$i]}"); do tree+=("$p"); done
        i=$((i + 1))
    done
    for p in $(mpiexec_rank_pids "$1"); do kill -9 "$p" 2>/dev/null; done
    for p in "${tree[@]}"; do kill -9 "$p" 2>/dev/null; done
    return 0
}
