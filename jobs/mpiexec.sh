# mpiexec.sh - sourced by pstrain's job scripts and tests: the MPI launcher,
# whichever MPI pstrain was built with.
#
# Input (environment):
#   MPIEXEC        the launcher (default: mpirun, else mpiexec, from PATH)
#   MPIEXEC_ARGS   extra launcher flags, split on blanks (default: none)
#   MPI_FLAVOUR    openmpi | mpich (MPICH and its derivatives: Intel MPI,
#                  Cray MPICH, MVAPICH) | other; default: what
#                  `$MPIEXEC --version` says
# Defines:
#   MPIEXEC_CMD            (array) the launcher with its flags, more ranks
#                          than cores allowed: "${MPIEXEC_CMD[@]}" -n NP CMD...
#   MPIEXEC_TCP            (array) launcher flags that make every rank talk
#                          TCP only, one-sided operations included
#   MPI_RANK_VAR           the variable holding a rank's number in its
#                          environment (PMIX_RANK or PMI_RANK)
# Open MPI refuses to run as root unless told twice; as root this sets its
# two variables. MPICH needs neither that nor a flag to oversubscribe.

MPIEXEC=${MPIEXEC:-$(command -v mpirun || command -v mpiexec || echo mpirun)}
if [ -z "${MPI_FLAVOUR:-}" ]; then
    case $("$MPIEXEC" --version 2>&1) in
    *"Open MPI"* | *OpenRTE* | *"Open RTE"*) MPI_FLAVOUR=openmpi ;;
    *HYDRA* | *Hydra* | *MPICH* | *"Intel(R) MPI"*) MPI_FLAVOUR=mpich ;;
    *) MPI_FLAVOUR=other ;;
    esac
fi
export MPIEXEC MPI_FLAVOUR

case $MPI_FLAVOUR in
openmpi)
    mpiexec_oversubscribe=(--oversubscribe)
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
    # MPICH 4.0.2 with it often hangs in MPI_Finalize after the run's work
    # is done (docs/mpi-facts.md, "MPICH 4.0.2").
    MPIEXEC_TCP=(-genv UCX_TLS tcp,self)
    # No MPIR_CVAR_ASYNC_PROGRESS: the ranks whose windows others use (root,
    # PS) progress them in their service loops (dist_progress), and MPICH's
    # progress thread, one spinning thread per rank, cost 2-5x in training
    # speed when ranks share cores (docs/mpi-facts.md).
    MPI_RANK_VAR=PMI_RANK
    ;;
*)
    mpiexec_oversubscribe=()
    MPIEXEC_TCP=()
    MPI_RANK_VAR=PMI_RANK
    ;;
esac

# shellcheck disable=SC2206 # MPIEXEC_ARGS is a list of flags
MPIEXEC_CMD=("$MPIEXEC" ${MPIEXEC_ARGS:-} "${mpiexec_oversubscribe[@]}")
