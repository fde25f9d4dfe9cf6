#!/usr/bin/env bash
# Same seed -> identical runs: summary final_loss, test accuracy and loss,
# and bitwise identical checkpoints (h5diff on /variables and /slots), also
# with augmentation and a different number of preprocessing threads (the
# pipeline's randomness never depends on thread timing). A different seed
# gives a different run.
#
# final_loss is the mean over the last logging interval (train.h), which is
# time-based by default; --log-every 0 makes the interval one step, so
# that it can be compared across runs.
. "$(dirname "$0")/lib.sh"
need_fm
need_h5diff

# run NAME ARGS...: a run with a checkpoint dir and a summary under $tmp/NAME
run() {
    local n=$1
    shift
    train "$tmp/$n.log" --data "$FM" --summary-json "$tmp/$n.json" --checkpoint-dir "$tmp/$n" \
        --log-every 0 --quiet "$@" || bad "run $n failed"
}
# same_result A B: summaries and final checkpoints of runs A and B agree
same_result() {
    local k va vb
    for k in final_loss test_accuracy test_loss steps; do
        va=$(jget "$tmp/$1.json" "j['$k']") vb=$(jget "$tmp/$2.json" "j['$k']")
        check "$1 vs $2: $k $va != $vb" test "$va" = "$vb"
    done
    check "$1 vs $2: checkpoints differ" same_vars "$tmp/$1/$(cat "$tmp/$1/latest")" \
        "$tmp/$2/$(cat "$tmp/$2/latest")"
}

say "mlp, 1 epoch, seed 1 twice and seed 2"
run a --model mlp --seed 1
run b --model mlp --seed 1
run c --model mlp --seed 2
same_result a b
say "seed 1: $(jget "$tmp/a.json" '(j["final_loss"], j["test_accuracy"])'), seed 2: $(jget "$tmp/c.json" '(j["final_loss"], j["test_accuracy"])')"
va=$(jget "$tmp/a.json" 'j["final_loss"]') vc=$(jget "$tmp/c.json" 'j["final_loss"]')
check "seed 1 and seed 2 have the same final_loss $va" test "$va" != "$vc"
if h5diff -q "$tmp/a/ckpt-938.h5" "$tmp/c/ckpt-938.h5" /variables /variables >/dev/null 2>&1; then
    bad "seed 1 and seed 2 give identical variables"
fi

say "lenet5 with --augment crop,flip, 1 vs 3 preprocessing threads"
run d --model lenet5 --seed 5 --limit 6400 --augment crop,flip --prep-threads 1
run e --model lenet5 --seed 5 --limit 6400 --augment crop,flip --prep-threads 3
same_result d e
finish
