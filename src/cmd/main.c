/* main.c - the pstrain command: dispatches to the subcommands (commands.h). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"
#include "pstrain/dist.h"
#include "pstrain/train.h"
#include "pstrain/usage.h"
#include "pstrain/version.h"

/* Under mpirun every rank parses the flags; only the first prints errors.
 * The launcher's rank variables are read before MPI_Init so that a bad flag
 * is reported once and no MPI resource is ever created for it: the process
 * management interfaces' own (PMIx: Open MPI, srun --mpi=pmix; PMI: MPICH's
 * Hydra and its derivatives, srun --mpi=pmi2), not one MPI library's. */
static bool launcher_rank_is_zero(void)
{
    const char *vars[] = {"PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < PST_ARRAY_LEN(vars); i++) {
        const char *v = getenv(vars[i]);
        if (v) return atoi(v) == 0;
    }
    return true;
}

/* True when an MPI launcher started this process: mpirun/mpiexec (Open MPI,
 * MPICH's Hydra, Intel MPI) and srun with PMI or PMIx set one of these for
 * each rank; srun without PMI sets only Slurm's own variables, so a step of
 * several tasks counts too (MPI_Init then says what is missing, as before).
 * Anything else is an MPI singleton, whose MPI_Init Open MPI serves by
 * forking its runtime daemon (orted): about a second, for a world of one
 * rank that one process never uses. Such a run does not initialise MPI. */
static bool launched_by_mpi(void)
{
    const char *vars[] = {"PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                          "PMI_FD",    "PMI_PORT", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < PST_ARRAY_LEN(vars); i++)
        if (getenv(vars[i])) return true;
    const char *n = getenv("SLURM_STEP_NUM_TASKS");
    return n && atoi(n) > 1;
}

#ifdef __SANITIZE_ADDRESS__
/* Open MPI's plugins are dlopen'ed and unloaded at MPI_Finalize, leaving
 * process-lifetime allocations LeakSanitizer cannot attribute ("<unknown
 * module>"), so no suppression can name them: leak checking is off for this
 * MPI program only. The library code it runs is leak-checked by the unit and
 * cli tests of the sanitizer build. Address and UB checks stay on. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "detect_leaks=0";
}
#endif

static void abort_hook(int status)
{
    MPI_Abort(MPI_COMM_WORLD, status);
}

/* Async: "staleness: N updates, mean X, max M global steps (bound S)". */
static void print_staleness_line(const train_result *r)
{
    int64_t n = 0;
    double sum = 0;
    for (int i = 0; i < TRAIN_STALE_BINS; i++) n += r->staleness_hist[i];
    for (int i = 0; i < TRAIN_STALE_BINS; i++) sum += (double)i * (double)r->staleness_hist[i];
    printf("staleness: %lld updates, mean %.2f, max %lld global steps", (long long)n,
           n ? sum / (double)n : 0.0, (long long)r->staleness_max);
    if (r->staleness_bound != TRAIN_STALE_NONE)
        printf(" (--max-staleness %lld)\n", (long long)r->staleness_bound);
    else
        printf(" (unbounded)\n");
}

/* "trained M: step S/T, epoch E/N, ..." on stdout; after a resume, this
 * run's steps, examples and time apart from the whole run's. */
static void print_final_line(const train_cfg *cfg, const train_result *r)
{
    printf("trained %s: step %lld", cfg->model, (long long)r->steps);
    if (r->total_steps > 0) printf("/%lld", (long long)r->total_steps);
    if (r->epoch > 0) printf(", epoch %d", r->epoch);
    if (r->epoch > 0 && r->total_epochs > 0) printf("/%d", r->total_epochs);
    if (r->start_step > 0)
        printf("; this run: %lld steps, %lld examples in %.1f s, %.0f images/s; whole run: %lld "
               "examples in %.1f s",
               (long long)r->run_steps, (long long)r->run_examples, r->run_seconds,
               r->images_per_sec, (long long)r->examples, r->train_seconds);
    else
        printf(", %lld examples in %.1f s, %.0f images/s", (long long)r->examples, r->train_seconds,
               r->images_per_sec);
    if (r->has_eval)
        printf(", %s accuracy %.4f, top-5 %.4f (loss %.4f, %lld examples)", r->eval_split,
               r->eval_accuracy, r->eval_top5_accuracy, r->eval_loss, (long long)r->eval_examples);
    printf("\n");
    if (r->has_staleness) print_staleness_line(r);
}

static int cmd_train(int argc, char **argv)
{
    train_cfg cfg;
    int rc = train_parse_args(argc, argv, &cfg, launcher_rank_is_zero());
    if (rc) return rc == 1 ? 0 : PST_EXIT_USAGE;

    int provided = 0, rank = 0, size = 1;
    const bool use_mpi = launched_by_mpi(); /* else one process, without MPI */
    if (use_mpi) {
        if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            pst_error("MPI_Init_thread failed");
            return 1;
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
    if (size > 1) pst_set_die_hook(abort_hook);
    /* --ps defaults to 1 under mpirun, unless --ps-per-node derives it from
     * the nodes (0: not given) */
    if (size > 1 && !cfg.ps && !cfg.ps_per_node) cfg.ps = 1;

    train_result res;
    memset(&res, 0, sizeof res);
    pst_err e = {{0}};
    rc = 0;
    /* every output the root writes can be written: checked before any
     * work, and the verdict shared so that all ranks stop together */
    int outputs_ok = 1;
    if (rank == 0 && !cfg.dry_run && train_check_outputs(&cfg, &e) < 0) outputs_ok = 0;
    if (size > 1) MPI_Bcast(&outputs_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!outputs_ok) {
        if (rank == 0) fprintf(stderr, "pstrain train: %s\n", e.msg);
        rc = 1;
    } else if (train_run(&cfg, &res, &e) < 0) {
        if (rank == 0) fprintf(stderr, "pstrain train: %s\n", e.msg);
        rc = 1;
    } else if (rank == 0 && res.stop_signal) {
        /* also under --quiet: a job log must say why the run ended early */
        fprintf(stderr, "pstrain train: signal %d: stopped at step %lld, checkpoint %s\n",
                res.stop_signal, (long long)res.steps, res.last_checkpoint);
    } else if (rank == 0 && res.nothing_to_do) {
        fprintf(stderr,
                "pstrain train: %s is at step %lld, at or past --steps %lld: nothing to train\n",
                res.last_checkpoint, (long long)res.steps, (long long)cfg.steps);
    } else if (rank == 0 && !cfg.dry_run) {
        print_final_line(&cfg, &res);
        if (cfg.summary_path && train_write_summary(cfg.summary_path, &cfg, &res, &e) < 0) {
            fprintf(stderr, "pstrain train: %s\n", e.msg);
            rc = 1;
        }
    }
    train_result_free(&res);
    if (use_mpi) MPI_Finalize();
    return rc;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: pstrain COMMAND [options]\n"
                 "\n"
                 "commands:\n"
                 "  train   train a model (single process, or under mpirun with --ps P)\n"
                 "  eval    evaluate a checkpoint on a data set split\n"
                 "  plan    print the placement of a model's variables on P parameter servers\n"
                 "\n"
                 "  pstrain --version    versions of pstrain, MPI, HDF5, BLIS and libpng\n"
                 "  pstrain CMD --help   options of a command\n");
}

int main(int argc, char **argv)
{
    pst_set_progname("pstrain");
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        pst_version_print(stdout, "pstrain");
        nn_blis_version_print(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    static const struct {
        const char *name, *prog; /* getopt names the program after argv[0] */
        int (*fn)(int, char **);
    } cmds[] = {
        {"train", "pstrain train", cmd_train},
        {"eval", "pstrain eval", eval_main},
        {"plan", "pstrain plan", plan_main},
    };
    for (size_t i = 0; i < PST_ARRAY_LEN(cmds); i++)
        if (!strcmp(cmd, cmds[i].name)) {
            argv[1] = (char *)cmds[i].prog;
            pst_set_progname(cmds[i].prog); /* "pstrain train: message" */
            return cmds[i].fn(argc - 1, argv + 1);
        }
    static const char *const names[] = {"train", "eval", "plan", "version", "help", NULL};
    const char *near = pst_nearest_flag(cmd, names);
    if (near)
        fprintf(stderr, "pstrain: unknown command '%s' (did you mean %s?); see pstrain --help\n",
                cmd, near);
    else
        fprintf(stderr, "pstrain: unknown command '%s'; see pstrain --help\n", cmd);
    return 2;
}
