/*
 * test_dist.c - driver for the distributed-training tests (run under mpirun
 * by dist_test.sh): runs dist_train (or train_single with --single) on a
 * data set and checks the result on rank 0.
 *
 *   test_dist mkdata PATH NTRAIN NTEST [H W C K]
 *   test_dist train --data F [--model M] [--ps P] [--placement S]
 *       [--partition-bytes N] [--mode sync|async] [--optimizer O] [--lr X]
 *       [--epochs E] [--steps S] [--batch B] [--replicas R] [--seed S]
 *       [--dump FILE] [--trace FILE] [--single]
 *       [--stop-at-start]
 *       checks: [--expect-once] [--expect-fail TEXT] [--min-accuracy X]
 *               [--expect-dropped] [--max-ps-cpu-fraction F] [--expect-steps S]
 *
 * --stop-at-start: the root's stop flag is set before training, as if a
 * stop signal had come before the first batch: the root's first poll stops
 * the run at its start (the data cursor it started from).
 *
 * The synthetic data set labels image i with i % K and draws its pixels
 * from i (test/data/h5test.h), so ids are easy to account for.
 */
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "../data/h5test.h"
#include "check.h"
#include "pstrain/dist.h"
#include "pstrain/placement.h"
#include "pstrain/signals.h"
#include "pstrain/train.h"

static int mkdata(int argc, char **argv)
{
    if (argc < 5) return 2;
    int H = argc > 5 ? atoi(argv[5]) : 8, W = argc > 6 ? atoi(argv[6]) : 8;
    int C = argc > 7 ? atoi(argv[7]) : 1, K = argc > 8 ? atoi(argv[8]) : 4;
    int rc = h5test_write(argv[2], atoll(argv[3]), atoll(argv[4]), H, W, C, K, 64);
    if (rc < 0) fprintf(stderr, "mkdata: cannot write %s\n", argv[2]);
    return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "mkdata")) return mkdata(argc, argv);
    int prov = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &prov);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    train_cfg cfg = train_cfg_defaults();
    cfg.model = "mlp";
    cfg.ps = 1;
    cfg.batch = 16;
    cfg.epochs = 2;
    cfg.opt = opt_defaults(OPT_MOMENTUM);
    cfg.lr = 0.05f;
    cfg.quiet = true;
    cfg.pipe.prep_threads = 1;
    cfg.log_every = 0.5;
    bool single = false, expect_once = false, expect_dropped = false, stop_at_start = false;
    const char *expect_fail = NULL;
    double min_acc = -1, max_ps_cpu = -1, max_root_cpu = -1;
    int64_t expect_steps = -1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--data"))
            cfg.data_path = v, i++;
        else if (!strcmp(a, "--model"))
            cfg.model = v, i++;
        else if (!strcmp(a, "--ps"))
            cfg.ps = atoi(v), i++;
        else if (!strcmp(a, "--placement")) {
            if (place_parse(v, &cfg.placement) < 0) return 2;
            i++;
        } else if (!strcmp(a, "--partition-bytes"))
            cfg.partition_bytes = atoll(v), i++;
        else if (!strcmp(a, "--mode"))
            cfg.mode = strcmp(v, "async") ? TRAIN_SYNC : TRAIN_ASYNC, i++;
        else if (!strcmp(a, "--optimizer")) {
            opt_kind k;
            if (opt_parse(v, &k) < 0) return 2;
            cfg.opt = opt_defaults(k);
            i++;
        } else if (!strcmp(a, "--lr"))
            cfg.lr = (float)atof(v), i++;
        else if (!strcmp(a, "--epochs"))
            cfg.epochs = atoi(v), i++;
        else if (!strcmp(a, "--steps"))
            cfg.steps = atoll(v), i++;
        else if (!strcmp(a, "--batch"))
            cfg.batch = atoi(v), i++;
        else if (!strcmp(a, "--replicas"))
            cfg.replicas_to_aggregate = atoi(v), i++;
        else if (!strcmp(a, "--seed"))
            cfg.seed = (uint64_t)atoll(v), i++;
        else if (!strcmp(a, "--dump"))
            cfg.dump_params_path = v, i++;
        else if (!strcmp(a, "--trace"))
            cfg.trace_path = v, i++;
        else if (!strcmp(a, "--metrics"))
            cfg.metrics_path = v, i++;
        else if (!strcmp(a, "--checkpoint-dir"))
            cfg.checkpoint_dir = v, i++;
        else if (!strcmp(a, "--checkpoint-every"))
            cfg.checkpoint_every = atoll(v), i++;
        else if (!strcmp(a, "--checkpoint-secs"))
            cfg.checkpoint_secs = atof(v), i++;
        else if (!strcmp(a, "--resume"))
            cfg.resume = true;
        else if (!strcmp(a, "--resume-from"))
            cfg.resume = true, cfg.resume_path = v, i++;
        else if (!strcmp(a, "--eval-every"))
            cfg.eval_every = atoi(v), i++;
        else if (!strcmp(a, "--single"))
            single = true;
        else if (!strcmp(a, "--expect-once"))
            expect_once = true;
        else if (!strcmp(a, "--expect-dropped"))
            expect_dropped = true;
        else if (!strcmp(a, "--expect-fail"))
            expect_fail = v, i++;
        else if (!strcmp(a, "--min-accuracy"))
            min_acc = atof(v), i++;
        else if (!strcmp(a, "--max-ps-cpu-fraction"))
            max_ps_cpu = atof(v), i++;
        else if (!strcmp(a, "--max-root-cpu-fraction"))
            max_root_cpu = atof(v), i++;
        else if (!strcmp(a, "--expect-steps"))
            expect_steps = atoll(v), i++;
        else if (!strcmp(a, "--stop-at-start"))
            stop_at_start = true;
        else {
            fprintf(stderr, "test_dist: unknown option %s\n", a);
            return 2;
        }
    }
    train_result res;
    pst_err e = {{0}};
    /* (only the root's flag decides) */
    if (stop_at_start && rank == 0) pst_stop_request(SIGUSR1);
    int rc = single ? train_single(&cfg, &res, &e) : dist_train(&cfg, &res, &e);
    if (expect_fail) {
        CHECK(rc < 0, "expected a refusal containing '%s'", expect_fail);
        CHECK(strstr(e.msg, expect_fail) != NULL, "message '%s' lacks '%s'", e.msg, expect_fail);
        if (rank == 0) fprintf(stderr, "refused as expected: %s\n", e.msg);
        MPI_Finalize();
        return rank == 0 ? check_exit() : 0;
    }
    if (rc < 0) {
        fprintf(stderr, "rank %d: training failed: %s\n", rank, e.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) {
        fprintf(stderr,
                "ranks %d ps %d workers %d: steps %lld examples %lld epochs %d %.1f img/s "
                "loss %.4f test acc %.4f loss %.6f dropped %lld root cpu %.3f s / %.3f s\n",
                res.ranks, res.ps, res.workers, (long long)res.steps, (long long)res.examples,
                res.epochs, res.images_per_sec, res.final_loss, res.test_accuracy, res.test_loss,
                (long long)res.dropped_stale, res.root_cpu, res.train_seconds);
        /* exact values, for scripts comparing runs (train_single has no dump) */
        printf("RESULT test_loss=%a test_accuracy=%a steps=%lld final_loss=%a\n", res.test_loss,
               res.test_accuracy, (long long)res.steps, (double)res.final_loss);
        if (res.stop_signal || res.start_step || res.last_checkpoint[0])
            fprintf(stderr, "start step %lld, stop signal %d, last checkpoint %s\n",
                    (long long)res.start_step, res.stop_signal, res.last_checkpoint);
        for (int w = 0; w < res.nworker_timing; w++)
            fprintf(stderr,
                    "  worker %d: wait_data %.3f pull %.3f compute %.3f push %.3f "
                    "wait_version %.3f\n",
                    w, res.wtiming[w].wait_data, res.wtiming[w].pull, res.wtiming[w].compute,
                    res.wtiming[w].push, res.wtiming[w].wait_version);
        for (int p = 0; p < res.nps && res.pstiming; p++)
            fprintf(stderr, "  ps %d: apply %.3f idle %.3f cpu %.3f bytes %lld\n", p + 1,
                    res.pstiming[p].apply, res.pstiming[p].idle, res.pstiming[p].cpu,
                    (long long)res.per_ps_bytes[p]);
        for (int i = 0; i < res.nepochs_stats; i++) {
            const epoch_stats *s = &res.epoch_stats[i];
            fprintf(stderr, "  epoch %d: examples %lld unique %lld duplicates %lld missing %lld",
                    s->epoch, (long long)s->examples, (long long)s->unique,
                    (long long)s->duplicates, (long long)s->missing);
            for (int w = 0; w < s->nworkers; w++)
                fprintf(stderr, " w%d=%lld", w, (long long)s->per_worker[w]);
            fputc('\n', stderr);
        }
        if (expect_once) {
            CHECK(res.nepochs_stats == cfg.epochs, "%d epochs accounted, expected %d",
                  res.nepochs_stats, cfg.epochs);
            for (int i = 0; i < res.nepochs_stats; i++) {
                const epoch_stats *s = &res.epoch_stats[i];
                CHECK(s->duplicates == 0 && s->missing == 0 && s->examples == s->unique,
                      "epoch %d: %lld duplicates, %lld missing", i, (long long)s->duplicates,
                      (long long)s->missing);
                int64_t sum = 0;
                for (int w = 0; w < s->nworkers; w++) sum += s->per_worker[w];
                /* each id seen once in total => the workers' sets are disjoint */
                CHECK(sum == s->unique, "epoch %d: workers saw %lld, unique %lld", i,
                      (long long)sum, (long long)s->unique);
            }
        }
        if (min_acc >= 0)
            CHECK(res.has_test && res.test_accuracy >= min_acc, "test accuracy %.4f < %.4f",
                  res.test_accuracy, min_acc);
        if (expect_dropped)
            CHECK(res.dropped_stale > 0, "no stale gradient dropped (W=%d R=%d)", res.workers,
                  cfg.replicas_to_aggregate);
        if (expect_steps >= 0)
            CHECK(res.steps == expect_steps, "steps %lld, expected %lld", (long long)res.steps,
                  (long long)expect_steps);
        if (max_ps_cpu >= 0)
            for (int p = 0; p < res.nps; p++)
                CHECK(res.pstiming[p].cpu <= max_ps_cpu * res.train_seconds,
                      "ps %d used %.3f CPU s in %.3f s (limit %.0f%%)", p + 1, res.pstiming[p].cpu,
                      res.train_seconds, 100 * max_ps_cpu);
        /* the root serves every batch (copies, pipeline hand-over): it may
         * work, but must not spin */
        if (max_root_cpu >= 0)
            CHECK(res.root_cpu <= max_root_cpu * res.train_seconds,
                  "root service loop used %.3f CPU s in %.3f s", res.root_cpu, res.train_seconds);
        CHECK(res.has_test || res.stop_signal, "no test evaluation");
    }
    train_result_free(&res);
    MPI_Finalize();
    return rank == 0 ? check_exit() : 0;
}
