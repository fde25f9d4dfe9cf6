#!/usr/bin/env bash
# dist_test.sh SCENARIO - distributed-training tests under the MPI launcher, driven by
# the test_dist program (test_dist.c) on data sets written at test time.
#
# Scenarios:
#   once W          exactly once: W workers (1 PS), 2 epochs, trace file checked
#   determinism     sync final variables bitwise equal for --ps 1/2/3 x every
#                   placement, over TCP only (MPIEXEC_TCP), a rerun,
#                   a model with batch norm (inception-mini), and the
#                   per-epoch evaluations of --eval-every
#   single          sync with 1 worker == train_single: bitwise equal final
#                   parameters, and the same test loss and accuracy
#   backup          W=3, R=2: progress, dropped stale gradients counted
#   steps           --steps S stops after exactly S updates (sync, R=W and R<W)
#   async           async with every optimizer: exactly once, finishes
#   refuse          no worker, no PS, R > W, missing data: refused cleanly
#   idle            PS and root service loops use little CPU
#   resume          sync checkpoints (every N, final at --steps): resuming from
#                   any of them, with another PS count, ends bitwise equal to an
#                   uninterrupted run; async and backup-worker runs resume
#   resume-workers  resuming with another worker count (sync 2 -> 3, 3 -> 1,
#                   backup workers, async): exactly once over both parts,
#                   deterministic, 1 worker == one process
#   chunks          transfers split into small pieces (PSTRAIN_MPI_CHUNK_BYTES):
#                   bitwise equal results, exactly once
#   signal          SIGUSR1 to the launcher mid-run: checkpoint, exit 0; the resumed
#                   run ends bitwise equal to an uninterrupted one
#   stop-at-start   a stop before the first batch (fresh and resumed runs;
#                   lockstep, backup workers, async): the run ends at once
#                   with a checkpoint of its start, and resuming it ends
#                   bitwise equal to an uninterrupted run
#   fashion         LeNet-5 on Fashion-MNIST, async, 2 workers, 1 epoch: acc >= 0.82
#                   (and async momentum converges too: >= 0.75)
set -eu
: "${TEST_DIST:?}" "${PSTRAIN_SRC:?}"
. "$PSTRAIN_SRC/jobs/mpiexec.sh"
SCEN=$1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/pstrain-dist.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
MPI=("${MPIEXEC_CMD[@]}")
TCP=("${MPIEXEC_TCP[@]}")
fail=0
die() { echo "FAIL: $*" >&2; exit 1; }
run() { # run NP ARGS... (training through test_dist)
    np=$1; shift
    timeout 120 "${MPI[@]}" -n "$np" "$TEST_DIST" train "$@"
}

"$TEST_DIST" mkdata "$TMP/small.h5" 600 100 8 8 1 4 || die "mkdata"

case $SCEN in
once)
    W=$2
    run $((W + 2)) --data "$TMP/small.h5" --ps 1 --epochs 2 --expect-once --trace "$TMP/trace.jsonl"
    # the trace: every (epoch, id) once, 600 examples x 2 epochs
    python3 "$(dirname "$0")/check_trace.py" "$TMP/trace.jsonl" "$W" 1200 || fail=1
    ;;
determinism)
    run 4 --data "$TMP/small.h5" --ps 1 --dump "$TMP/ref.bin" >/dev/null
    # a rerun; with one PS every strategy gives the same plan (the unit test
    # placement checks it for every model), so --ps 1 runs once per process
    # layout, not once per strategy
    run 4 --data "$TMP/small.h5" --ps 1 --dump "$TMP/d.bin" >/dev/null
    cmp "$TMP/ref.bin" "$TMP/d.bin" || { echo "differs on a rerun"; fail=1; }
    for ps in 2 3; do
        for pl in round-robin greedy partition; do
            run $((ps + 3)) --data "$TMP/small.h5" --ps $ps --placement $pl \
                --partition-bytes 16384 --dump "$TMP/d.bin" >/dev/null
            cmp "$TMP/ref.bin" "$TMP/d.bin" || { echo "differs: --ps $ps --placement $pl"; fail=1; }
        done
    done
    if [ -n "$MPIEXEC_TCP_SKIP" ]; then
        echo "TCP only: skipped: $MPIEXEC_TCP_SKIP"
    else
        timeout 120 "${MPI[@]}" "${TCP[@]}" -n 5 "$TEST_DIST" train --data "$TMP/small.h5" --ps 2 \
            --placement partition --partition-bytes 16384 --dump "$TMP/d.bin" >/dev/null
        cmp "$TMP/ref.bin" "$TMP/d.bin" || { echo "differs over TCP only"; fail=1; }
    fi
    # 3 workers, momentum vs adam differ from each other but each is reproducible
    run 5 --data "$TMP/small.h5" --ps 1 --optimizer adam --lr 0.001 --dump "$TMP/a1.bin" >/dev/null
    run 6 --data "$TMP/small.h5" --ps 2 --placement greedy --optimizer adam --lr 0.001 \
        --dump "$TMP/a2.bin" >/dev/null
    cmp "$TMP/a1.bin" "$TMP/a2.bin" || { echo "adam, 3 workers: --ps 1 vs 2 differ"; fail=1; }
    cmp -s "$TMP/ref.bin" "$TMP/a1.bin" && { echo "adam equals momentum?"; fail=1; }
    # --eval-every 1: one evaluation per epoch, at the version that ends it,
    # identical for any PS count
    run 4 --data "$TMP/small.h5" --ps 1 --epochs 3 --eval-every 1 --metrics "$TMP/m1.jsonl" >/dev/null
    run 6 --data "$TMP/small.h5" --ps 3 --epochs 3 --eval-every 1 --metrics "$TMP/m3.jsonl" >/dev/null
    grep '"eval"' "$TMP/m1.jsonl" >"$TMP/e1.txt"
    grep '"eval"' "$TMP/m3.jsonl" >"$TMP/e3.txt"
    [ "$(wc -l <"$TMP/e1.txt")" = 3 ] || { echo "expected 3 eval lines:"; cat "$TMP/e1.txt"; fail=1; }
    cmp "$TMP/e1.txt" "$TMP/e3.txt" || { echo "evaluations differ between --ps 1 and 3"; fail=1; }
    # batch norm: moving statistics are variables too
    "$TEST_DIST" mkdata "$TMP/c3.h5" 192 32 16 16 3 10 || die "mkdata"
    run 4 --data "$TMP/c3.h5" --model inception-mini --epochs 1 --ps 1 --dump "$TMP/i1.bin" >/dev/null
    run 6 --data "$TMP/c3.h5" --model inception-mini --epochs 1 --ps 3 --placement greedy \
        --dump "$TMP/i3.bin" >/dev/null
    cmp "$TMP/i1.bin" "$TMP/i3.bin" || { echo "inception-mini: --ps 1 vs 3 differ"; fail=1; }
    ;;
single)
    "$TEST_DIST" train --data "$TMP/small.h5" --single --dump "$TMP/s.bin" |
        grep RESULT >"$TMP/single.txt"
    for ps in 1 2; do
        run $((ps + 2)) --data "$TMP/small.h5" --ps $ps --dump "$TMP/d.bin" |
            grep RESULT >"$TMP/dist.txt"
        cat "$TMP/single.txt" "$TMP/dist.txt"
        cmp "$TMP/single.txt" "$TMP/dist.txt" || { echo "1 worker, --ps $ps != single"; fail=1; }
        cmp "$TMP/s.bin" "$TMP/d.bin" || { echo "1 worker, --ps $ps: parameters != single"; fail=1; }
    done
    "$TEST_DIST" mkdata "$TMP/img.h5" 256 64 28 28 1 10 || die "mkdata"
    "$TEST_DIST" train --data "$TMP/img.h5" --model lenet5 --epochs 1 --single --dump "$TMP/s.bin" |
        grep RESULT >"$TMP/single.txt"
    run 4 --data "$TMP/img.h5" --model lenet5 --epochs 1 --ps 2 --placement greedy \
        --dump "$TMP/d.bin" | grep RESULT >"$TMP/dist.txt"
    cmp "$TMP/single.txt" "$TMP/dist.txt" || { echo "lenet5: 1 worker != single"; fail=1; }
    cmp "$TMP/s.bin" "$TMP/d.bin" || { echo "lenet5: 1 worker: parameters != single"; fail=1; }
    ;;
backup)
    run 5 --data "$TMP/small.h5" --ps 1 --replicas 2 --expect-dropped --expect-once
    run 6 --data "$TMP/small.h5" --ps 2 --replicas 2 --epochs 0 --steps 25 --expect-steps 25
    ;;
steps)
    run 4 --data "$TMP/small.h5" --ps 1 --epochs 0 --steps 30 --expect-steps 30
    run 5 --data "$TMP/small.h5" --ps 2 --epochs 5 --steps 7 --expect-steps 7
    ;;
async)
    for o in sgd momentum rmsprop adam; do
        run 5 --data "$TMP/small.h5" --ps 2 --mode async --optimizer $o --lr 0.01 --expect-once
    done
    run 4 --data "$TMP/small.h5" --ps 1 --mode async --epochs 0 --steps 40 --expect-steps 40
    if [ -n "$MPIEXEC_TCP_SKIP" ]; then
        echo "TCP only: skipped: $MPIEXEC_TCP_SKIP"
    else
        timeout 120 "${MPI[@]}" "${TCP[@]}" -n 4 "$TEST_DIST" train --data "$TMP/small.h5" --ps 1 \
            --mode async --optimizer adam --lr 0.001 --expect-once
    fi
    ;;
refuse)
    run 2 --data "$TMP/small.h5" --ps 1 --expect-fail "3 ranks are needed"
    run 3 --data "$TMP/small.h5" --ps 2 --expect-fail "4 ranks are needed"
    run 3 --data "$TMP/small.h5" --ps 0 --expect-fail "at least one parameter server"
    run 4 --data "$TMP/small.h5" --ps 1 --replicas 3 --expect-fail "replicas-to-aggregate 3 with 2 workers"
    run 4 --data "$TMP/none.h5" --ps 1 --expect-fail "none.h5"
    run 3 --data "$TMP/small.h5" --ps 1 --batch 100000000 --expect-fail "expected at most the"
    run 3 --data "$TMP/small.h5" --ps 1 --checkpoint-dir /dev/null --expect-fail "not a directory"
    # a fatal error on one rank ends the whole job (no hang) with the rank's role
    if timeout 60 "${MPI[@]}" -n 4 "$TEST_DIST" train --data "$TMP/small.h5" --ps 1 --lr 1e30 \
        >"$TMP/nan.log" 2>&1; then
        echo "a diverging run exited 0"; fail=1
    fi
    grep -E "^rank [0-9]+ \(worker [0-9]+\): loss is (NaN|Inf)" "$TMP/nan.log" ||
        { cat "$TMP/nan.log"; echo "no 'rank R (worker W): loss is NaN' message"; fail=1; }
    ;;
idle)
    "$TEST_DIST" mkdata "$TMP/img.h5" 512 64 28 28 1 10 || die "mkdata"
    # async SGD: the PS has nothing to do but serve progress: its CPU time
    # must stay a small fraction of the wall time (Open MPI: 1-3%); the
    # root's loop serves ~1000 batches/s here (3-11%) but must not spin.
    # MPICH's ch4:ucx applies the workers' accumulates on the target's CPU,
    # in the PS's progress calls: 7% there (docs/platform.md, "MPICH 4.0.2")
    ps_cpu=0.05
    [ "$MPI_FLAVOUR" = mpich ] && ps_cpu=0.12
    run 4 --data "$TMP/img.h5" --model lenet5 --ps 1 --mode async --optimizer sgd --epochs 40 \
        --max-ps-cpu-fraction $ps_cpu --max-root-cpu-fraction 0.3
    ;;
resume)
    run 4 --data "$TMP/small.h5" --ps 1 --dump "$TMP/ref.bin" >/dev/null
    run 4 --data "$TMP/small.h5" --ps 1 --steps 20 --checkpoint-dir "$TMP/ck" \
        --checkpoint-every 7 --expect-steps 20 >/dev/null
    for c in ckpt-7.h5 ckpt-14.h5 ckpt-20.h5; do
        [ -f "$TMP/ck/$c" ] || { echo "missing checkpoint $c"; fail=1; continue; }
        run 5 --data "$TMP/small.h5" --ps 2 --placement greedy --resume-from "$TMP/ck/$c" \
            --dump "$TMP/r.bin" --expect-steps 38 >/dev/null
        cmp "$TMP/ref.bin" "$TMP/r.bin" || { echo "resumed from $c differs"; fail=1; }
    done
    # --resume with the directory: its latest (ckpt-20)
    run 4 --data "$TMP/small.h5" --ps 1 --resume --checkpoint-dir "$TMP/ck" --dump "$TMP/r.bin" \
        >/dev/null
    cmp "$TMP/ref.bin" "$TMP/r.bin" || { echo "--resume DIR differs"; fail=1; }
    # async and backup workers: a final checkpoint, and a run that continues it
    run 4 --data "$TMP/small.h5" --ps 1 --mode async --optimizer adam --lr 0.001 --epochs 1 \
        --checkpoint-dir "$TMP/ca" --expect-steps 38 >/dev/null
    run 4 --data "$TMP/small.h5" --ps 1 --mode async --optimizer adam --lr 0.001 --epochs 2 \
        --resume --checkpoint-dir "$TMP/ca" --expect-steps 76 >/dev/null
    run 5 --data "$TMP/small.h5" --ps 1 --replicas 2 --epochs 1 --checkpoint-dir "$TMP/cb" >/dev/null
    run 5 --data "$TMP/small.h5" --ps 1 --replicas 2 --epochs 2 --resume --checkpoint-dir "$TMP/cb" \
        >/dev/null
    # a mismatched checkpoint is refused: another batch size
    run 4 --data "$TMP/small.h5" --ps 1 --batch 8 --resume --checkpoint-dir "$TMP/ck" \
        --expect-fail "batch"
    # ... and another mode, in either direction (a sync step is W batches'
    # mean gradient, an async step one batch: step, schedule and slots differ)
    run 4 --data "$TMP/small.h5" --ps 1 --mode async --resume --checkpoint-dir "$TMP/ck" \
        --expect-fail "attribute mode is sync but this run uses --mode async"
    run 4 --data "$TMP/small.h5" --ps 1 --optimizer adam --lr 0.001 --epochs 3 --resume \
        --checkpoint-dir "$TMP/ca" --expect-fail "attribute mode is async but this run uses --mode sync"
    ;;
resume-workers)
    # A checkpoint resumed with another worker count (a requeued job on
    # another node count): sync lockstep 2 -> 3 and 3 -> 1 workers, backup
    # workers 3 -> 2, async 2 -> 3. The traces of both parts together hold
    # every example of both epochs exactly once; the resumed lockstep runs
    # are deterministic (any PS count, and a second resume inside the new
    # worker count ends equal), and 1 worker equals one process resumed
    # from the same checkpoint.
    once2() { # trace1 trace2: every (epoch, id) of 2 epochs exactly once
        python3 - "$1" "$2" <<'EOF'
import json, sys
seen = {}
for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        for i in r["ids"]:
            k = (r["epoch"], i)
            assert k not in seen, "duplicate %r in %s" % (k, f)
            seen[k] = f
assert len(seen) == 2 * 600, "%d (epoch, id) pairs, expected 1200" % len(seen)
print("traces OK: %d pairs" % len(seen))
EOF
    }
    a="--data $TMP/small.h5"
    # 2 -> 3 (lockstep): 7 versions of 2 batches, then versions of 3
    run 4 $a --ps 1 --steps 7 --checkpoint-dir "$TMP/c2" --trace "$TMP/t1" >/dev/null
    [ -f "$TMP/c2/ckpt-7.h5" ] || die "2 workers: no ckpt-7.h5"
    run 5 $a --ps 1 --resume-from "$TMP/c2/ckpt-7.h5" --checkpoint-dir "$TMP/c3" \
        --checkpoint-every 9 --trace "$TMP/t2" --dump "$TMP/r3.bin" --expect-steps 28 >/dev/null
    once2 "$TMP/t1" "$TMP/t2" || { echo "2 -> 3 workers: not exactly once"; fail=1; }
    run 6 $a --ps 2 --placement greedy --resume-from "$TMP/c2/ckpt-7.h5" --dump "$TMP/r.bin" \
        >/dev/null
    cmp "$TMP/r3.bin" "$TMP/r.bin" || { echo "2 -> 3 workers: --ps 1 vs 2 differ"; fail=1; }
    [ -f "$TMP/c3/ckpt-18.h5" ] || { echo "3 workers: no ckpt-18.h5"; fail=1; }
    run 6 $a --ps 2 --resume-from "$TMP/c3/ckpt-18.h5" --dump "$TMP/r.bin" >/dev/null
    cmp "$TMP/r3.bin" "$TMP/r.bin" || { echo "2 -> 3 -> 3 workers differs from 2 -> 3"; fail=1; }
    # 3 -> 1 (lockstep), and one process resumed from the same checkpoint
    run 5 $a --ps 1 --steps 5 --checkpoint-dir "$TMP/c31" --trace "$TMP/t3" >/dev/null
    run 3 $a --ps 1 --resume-from "$TMP/c31/ckpt-5.h5" --trace "$TMP/t4" --dump "$TMP/r1.bin" \
        --expect-steps 66 >/dev/null
    once2 "$TMP/t3" "$TMP/t4" || { echo "3 -> 1 workers: not exactly once"; fail=1; }
    "$TEST_DIST" train $a --single --resume-from "$TMP/c31/ckpt-5.h5" --dump "$TMP/s.bin" \
        >/dev/null
    cmp "$TMP/r1.bin" "$TMP/s.bin" || { echo "3 -> 1 workers differs from one process"; fail=1; }
    # backup workers 3 (R 2) -> 2 (R 1), async 2 -> 3
    run 5 $a --ps 1 --replicas 2 --steps 6 --checkpoint-dir "$TMP/cb" --trace "$TMP/t5" >/dev/null
    run 5 $a --ps 2 --replicas 1 --resume --checkpoint-dir "$TMP/cb" --trace "$TMP/t6" >/dev/null
    once2 "$TMP/t5" "$TMP/t6" || { echo "backup 3 -> 2 workers: not exactly once"; fail=1; }
    run 4 $a --ps 1 --mode async --optimizer adam --lr 0.001 --steps 11 --checkpoint-dir "$TMP/ca" \
        --trace "$TMP/t7" >/dev/null
    run 5 $a --ps 2 --mode async --optimizer adam --lr 0.001 --resume --checkpoint-dir "$TMP/ca" \
        --trace "$TMP/t8" --expect-steps 76 >/dev/null
    once2 "$TMP/t7" "$TMP/t8" || { echo "async 2 -> 3 workers: not exactly once"; fail=1; }
    ;;
chunks)
    # Transfers are split into pieces of at most 1 GiB (MPI counts are int);
    # PSTRAIN_MPI_CHUNK_BYTES=1000 splits every variable, ring slot,
    # snapshot and broadcast here: results stay bitwise equal (sync, with a
    # resume from a checkpoint written in pieces) and exactly once (async).
    run 5 --data "$TMP/small.h5" --ps 2 --placement partition --partition-bytes 4096 \
        --dump "$TMP/ref.bin" >/dev/null
    export PSTRAIN_MPI_CHUNK_BYTES=1000
    run() { np=$1; shift; timeout 120 "${MPI[@]}" -n "$np" "$TEST_DIST" train "$@"; }
    run 5 --data "$TMP/small.h5" --ps 2 --placement partition --partition-bytes 4096 \
        --dump "$TMP/c.bin" >/dev/null
    cmp "$TMP/ref.bin" "$TMP/c.bin" || { echo "split transfers change the result"; fail=1; }
    run 5 --data "$TMP/small.h5" --ps 2 --steps 20 --checkpoint-dir "$TMP/ck" \
        --checkpoint-every 7 >/dev/null
    run 4 --data "$TMP/small.h5" --ps 1 --resume-from "$TMP/ck/ckpt-7.h5" --dump "$TMP/c.bin" \
        >/dev/null
    cmp "$TMP/ref.bin" "$TMP/c.bin" || { echo "split transfers: resumed run differs"; fail=1; }
    run 5 --data "$TMP/small.h5" --ps 2 --mode async --optimizer adam --lr 0.001 --expect-once
    run 4 --data "$TMP/small.h5" --ps 1 --mode async --optimizer sgd --expect-once
    ;;
signal)
    "$TEST_DIST" mkdata "$TMP/img.h5" 256 32 28 28 1 10 || die "mkdata"
    args="--data $TMP/img.h5 --model lenet5 --epochs 60"
    run 4 $args --ps 1 --dump "$TMP/ref.bin" >/dev/null
    # the launcher itself in the background (it forwards SIGUSR1 to the ranks);
    # meson's timeout guards against a hang
    "${MPI[@]}" -n 4 "$TEST_DIST" train $args --ps 1 --checkpoint-dir "$TMP/ck" --checkpoint-secs 0.2 \
        --metrics "$TMP/m.jsonl" >"$TMP/sig.log" 2>&1 &
    pid=$!
    # signal once training runs (the first metrics line), not during start-up
    n=0
    while ! [ -s "$TMP/m.jsonl" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n + 1)); done
    kill -USR1 $pid 2>/dev/null || true
    wait $pid || { cat "$TMP/sig.log"; die "the signalled run failed"; }
    grep -E "stop signal|checkpoint" "$TMP/sig.log" || true
    [ -f "$TMP/ck/latest" ] || die "no checkpoint after the signal"
    # the oldest checkpoint: a time-based one, unless the signal came first
    first=$(ls "$TMP/ck" | grep '^ckpt-' | sort -t- -k2 -n | head -1)
    echo "checkpoints: $(ls "$TMP/ck" | tr '\n' ' ')"
    run 4 $args --ps 1 --resume-from "$TMP/ck/$first" --dump "$TMP/r.bin" >/dev/null
    cmp "$TMP/ref.bin" "$TMP/r.bin" || { echo "resume from $first differs"; fail=1; }
    # (this one writes ckpt-480 and prunes the old ones)
    run 5 $args --ps 2 --resume --checkpoint-dir "$TMP/ck" --dump "$TMP/r.bin" >/dev/null
    cmp "$TMP/ref.bin" "$TMP/r.bin" || { echo "signal + resume differs"; fail=1; }
    ;;
stop-at-start)
    # The root's stop flag is set before training (test_dist --stop-at-start),
    # so its first poll stops the run at the data cursor it started from.
    # Lockstep PS then have nothing to apply and must not wait for the first
    # version (and a fresh run's stop at ticket 0 is a request, not "no
    # request"). Each run is bounded: a hang fails in 60 s.
    srun() { np=$1; shift; timeout -k 5 60 "${MPI[@]}" -n "$np" "$TEST_DIST" train "$@"; }
    a="--data $TMP/small.h5 --ps 1"
    run 4 $a --dump "$TMP/ref.bin" >/dev/null
    srun 4 $a --checkpoint-dir "$TMP/c0" --stop-at-start --expect-steps 0 >/dev/null ||
        die "lockstep, fresh: the run stopped at its start failed or hung"
    [ -f "$TMP/c0/ckpt-0.h5" ] || die "lockstep, fresh: no ckpt-0.h5 after the stop"
    run 4 $a --resume-from "$TMP/c0/ckpt-0.h5" --dump "$TMP/r.bin" >/dev/null
    cmp "$TMP/ref.bin" "$TMP/r.bin" || { echo "resumed from the stop at 0: differs"; fail=1; }
    run 4 $a --steps 7 --checkpoint-dir "$TMP/c7" >/dev/null
    srun 4 $a --resume-from "$TMP/c7/ckpt-7.h5" --checkpoint-dir "$TMP/c7b" --stop-at-start \
        --expect-steps 7 >/dev/null || die "lockstep, resumed at 7: the stopped run failed or hung"
    [ -f "$TMP/c7b/ckpt-7.h5" ] || die "lockstep, resumed at 7: no ckpt-7.h5 after the stop"
    run 4 $a --resume-from "$TMP/c7b/ckpt-7.h5" --dump "$TMP/r.bin" >/dev/null
    cmp "$TMP/ref.bin" "$TMP/r.bin" || { echo "resumed from the stop at 7: differs"; fail=1; }
    srun 5 $a --replicas 2 --checkpoint-dir "$TMP/cb" --stop-at-start --expect-steps 0 >/dev/null ||
        die "backup workers: the run stopped at its start failed or hung"
    srun 4 $a --mode async --checkpoint-dir "$TMP/ca" --stop-at-start --expect-steps 0 >/dev/null ||
        die "async: the run stopped at its start failed or hung"
    ;;
fashion)
    : "${PSTRAIN_PREP:?}"
    D=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
    [ -f "$D/train-images-idx3-ubyte.gz" ] || { echo "SKIP: no Fashion-MNIST in $D"; exit 77; }
    "$PSTRAIN_PREP" idx --train-images "$D/train-images-idx3-ubyte.gz" \
        --train-labels "$D/train-labels-idx1-ubyte.gz" --test-images "$D/t10k-images-idx3-ubyte.gz" \
        --test-labels "$D/t10k-labels-idx1-ubyte.gz" -o "$TMP/fm.h5" >/dev/null
    run 4 --data "$TMP/fm.h5" --model lenet5 --ps 1 --mode async --optimizer sgd --lr 0.05 \
        --epochs 1 --batch 64 --expect-once --min-accuracy 0.82
    # Async momentum depends on timing (each gradient is applied on arrival,
    # with the staleness of the moment): 0.79-0.86 seen over 8 runs, idle and
    # loaded. The gate is for convergence: a broken optimizer path stays < 0.5.
    run 4 --data "$TMP/fm.h5" --model lenet5 --ps 1 --mode async --optimizer momentum --lr 0.01 \
        --epochs 1 --batch 64 --min-accuracy 0.75
    ;;
*)
    die "unknown scenario $SCEN"
    ;;
esac
[ $fail = 0 ] || die "$SCEN"
echo "$SCEN: OK"
