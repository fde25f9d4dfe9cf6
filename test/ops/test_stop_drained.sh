#!/usr/bin/env bash
# A stop signal that reaches a distributed sync run when the workers have
# drained the batch ring: the run must still end (exit 0, within a bounded
# time) with a stop checkpoint, and the resumed run must end bitwise equal
# to an uninterrupted one.
#
# The race it provokes (resume-dist hung once this way, docs/design.md §3.9):
# the root computes the stop from the tickets it has published when its poll
# begins (T = the end of that version) and then tells the PS. If the root is
# slow in between (a checkpoint written in the same poll, or descheduled),
# the workers consume every published batch meanwhile and the PS applies
# the version that ends at T before it reads the request. A PS that checked
# "finished" only after applying an update then waited forever for a
# gradient that never comes; the workers ended, the root waited for the
# PS's final state, and nobody exited.
#
# Here the slowness is made, without any hook in pstrain: the root rank is
# stopped (SIGSTOP) while training runs, the workers and the PS go on until
# the ring is empty, and the root gets SIGUSR1 and SIGCONT. With one worker
# every published count is a version boundary, so each try that catches the
# root between two polls (where it spends nearly all its time with a full
# ring) reproduces the hang; with two workers about every second try does.
#
#   test_stop_drained.sh            # 1 and 2 workers, a few tries each
#   STOP_TRIES=N                    # tries per worker count (default 2)
#   STOP_WORKERS="1 2"              # the worker counts
set -u
PSTRAIN=${PSTRAIN:?}
CKPT_CMP=${CKPT_CMP:?CKPT_CMP must name the ckpt_cmp tool}
fm=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -f "$fm/train-images-idx3-ubyte.gz" ] || { echo "SKIP: Fashion-MNIST not found in $fm"; exit 77; }
. "${PSTRAIN_SRC:?}/jobs/mpiexec.sh"
command -v "$MPIEXEC" >/dev/null || { echo "SKIP: no MPI launcher ($MPIEXEC)"; exit 77; }
tries=${STOP_TRIES:-2}
workers=${STOP_WORKERS:-1 2}
case $tries in '' | *[!0-9]*) echo "STOP_TRIES '$tries': expected a positive integer" >&2; exit 2 ;; esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-stop-drained.XXXXXX")
fail=0
bg_pids=()
kill_job() { mpiexec_kill "$1"; }
cleanup() {
    local p
    for p in "${bg_pids[@]}"; do kill_job "$p"; done
    [ $fail = 0 ] && rm -rf "$tmp" || echo "(files kept in $tmp)"
}
trap cleanup EXIT
bad() { echo "FAIL: $*"; fail=1; }

# a small data set (small_fm.sh): the first 2048 train / 512 test images
. "$(dirname "${BASH_SOURCE[0]}")/small_fm.sh"
small_fm_h5 "$fm" "$tmp" || { fail=1; exit 1; }

export BLIS_NUM_THREADS=1
latest_step() { sed -n 's/^ckpt-\([0-9]*\)\.h5$/\1/p' "$1/latest" 2>/dev/null; }
root_rank_pid() { # launcher pid -> the pid of rank 0
    local c
    c=$(mpiexec_rank_pids "$1" 0)
    [ -n "$c" ] && echo "$c"
}

for W in $workers; do
    np=$((W + 2))
    steps=$((480 / W)) # 480 batches: 7.5 epochs of 64; the stop comes after the first 10
    common=(train --data "$tmp/d.h5" --model lenet5 --batch 32 --optimizer momentum --lr 0.02
        --seed 77 --log-every 1000 --ps 1 --steps $steps)
    launch=("${MPIEXEC_CMD[@]}" -n $np "$PSTRAIN")
    # uninterrupted
    timeout -k 5 120 "${launch[@]}" "${common[@]}" --checkpoint-dir "$tmp/A$W" >"$tmp/A$W.log" 2>&1 ||
        { cat "$tmp/A$W.log"; bad "W=$W: the uninterrupted run"; continue; }
    for ((i = 1; i <= tries; i++)); do
        d=$tmp/S$W-$i
        (exec "${launch[@]}" "${common[@]}" --checkpoint-dir "$d" --checkpoint-every 10 >"$d.log" 2>&1) &
        pid=$!
        bg_pids+=("$pid")
        # rank 0 is looked up before training starts, so that nothing slow
        # (pgrep, /proc reads on a loaded machine) lies between the first
        # checkpoint and the SIGSTOP: on a fast machine the whole run takes
        # well under a second, and CI once saw the run end before the stop
        root=
        for ((t = 0; t < 1200; t++)); do
            root=$(root_rank_pid $pid) && break
            kill -0 $pid 2>/dev/null || break
            sleep 0.05
        done
        [ -n "$root" ] || { cat "$d.log"; bad "W=$W try $i: no rank 0 under pid $pid"; kill_job $pid; continue; }
        for ((t = 0; t < 6000; t++)); do # training runs once the first checkpoint exists
            [ -s "$d/latest" ] && break
            kill -0 $pid 2>/dev/null || break
            sleep 0.01
        done
        kill -STOP "$root"
        sleep 1 # the workers and the PS drain the ring meanwhile
        kill -USR1 "$root"
        kill -CONT "$root"
        # bounded: a hang fails here in 60 s, not at meson's timeout
        for ((t = 0; t < 600; t++)); do
            kill -0 $pid 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 $pid 2>/dev/null; then
            cat "$d.log"
            bad "W=$W try $i: the run did not end within 60 s of the stop signal (hang)"
            kill_job $pid
            wait $pid 2>/dev/null
            continue
        fi
        wait $pid
        rc=$?
        stopped=$(latest_step "$d")
        echo "W=$W try $i: exit $rc, stopped at step $stopped of $steps"
        [ $rc = 0 ] || { cat "$d.log"; bad "W=$W try $i: exit status $rc after SIGUSR1"; continue; }
        grep -q "signal 10" "$d.log" || { cat "$d.log"; bad "W=$W try $i: the signal was not reported"; }
        [ -n "$stopped" ] && [ "$stopped" -lt $steps ] || { bad "W=$W try $i: no stop checkpoint before the end (latest '$stopped')"; continue; }
        timeout -k 5 120 "${launch[@]}" "${common[@]}" --checkpoint-dir "$d" --resume >"$d-r.log" 2>&1 ||
            { cat "$d-r.log"; bad "W=$W try $i: the resumed run"; continue; }
        grep -q "resumed from $d/ckpt-$stopped.h5 at step $stopped" "$d-r.log" ||
            { cat "$d-r.log"; bad "W=$W try $i: did not resume at $stopped"; }
        "$CKPT_CMP" "$tmp/A$W/ckpt-$steps.h5" "$d/ckpt-$steps.h5" >/dev/null ||
            bad "W=$W try $i: stopped at $stopped and resumed, the run differs from the uninterrupted one"
    done
done
[ $fail = 0 ] && echo "stop with a drained ring: all checks passed"
exit $fail
