#!/usr/bin/env bash
# The anchors' training recipes (issue 9): --moving-average-decay,
# --warmup-epochs, --lr-scale linear.
#   - a run interrupted and resumed with all three ends with bitwise the
#     variables, optimizer slots AND moving averages of an uninterrupted run
#     (ckpt_cmp; the control: 27 steps against 50, and another decay, differ);
#   - the learning rate of every step is the documented warm-up
#     lr x (workers x batch)/256 x (0.1 + 0.9 s/N), and the start-up line
#     shows the effective lr;
#   - evaluations use the averages: the run's final evaluation equals
#     `pstrain eval` of its checkpoint, and --no-averages gives other numbers;
#   - resuming into/out of --moving-average-decay says what happens;
#   - bad values are one-line usage errors (exit 2).
#
#   test_recipes.sh ... single   # one process
#   test_recipes.sh ... dist     # mpirun: sync, 2 PS and 2 workers resumed (also
#                                # with 1 PS); 1 worker against one process
. "$(dirname "$0")/lib.sh"
mode=${4:-single}
CKPT_CMP=${CKPT_CMP:?CKPT_CMP must name the ckpt_cmp tool}
export BLIS_NUM_THREADS=1

# inception-mini has batch norm (its moving statistics are averaged too) and
# dropout; 320 examples in batches of 16: 20 batches per epoch
"$MKDATA" "$tmp/d.h5" 320 64 28 28 1 10 || exit 1
B=(--data "$tmp/d.h5" --model inception-mini --batch 16 --optimizer rmsprop --lr 0.01 --seed 5)
R=("${B[@]}" --moving-average-decay 0.9999 --warmup-epochs 1.5 --lr-scale linear)
if [ "$mode" = dist ]; then
    # sync, 2 workers: one step = 2 batches, 10 steps per epoch
    launch=(timeout -k 5 120 "${MPIEXEC_CMD[@]}" -n 5 "$PSTRAIN")
    extra=(--ps 2)
    workers=2 total=40 stop=17 spe=10
else
    launch=(timeout -k 5 120 "$PSTRAIN")
    extra=()
    workers=1 total=50 stop=27 spe=20
fi
# cmp_ckpt A B: ckpt_cmp says equal
cmp_ckpt() {
    local out
    out=$("$CKPT_CMP" "$1" "$2" 2>&1) || { printf '    %s\n' "$out"; return 1; }
}

say "$mode: straight to $total, and to $stop then resumed"
a=$tmp/a b=$tmp/b
run "$a.log" train "${R[@]}" "${extra[@]}" --steps $total --checkpoint-dir "$a" \
    --metrics "$a.jsonl" --log-every 0 --summary-json "$a.json" || bad "run A failed"
run "$b.1.log" train "${R[@]}" "${extra[@]}" --steps $stop --checkpoint-dir "$b" --quiet ||
    bad "run B (first part) failed"
run "$b.log" train "${R[@]}" "${extra[@]}" --steps $total --checkpoint-dir "$b" --resume \
    --summary-json "$b.json" || bad "resumed run B failed"
check "B resumed at step $stop" grep -q "resumed from $b/ckpt-$stop.h5" "$b.log"
if cmp_ckpt "$a/ckpt-$total.h5" "$b/ckpt-$total.h5"; then
    say "  resumed == straight: $("$CKPT_CMP" "$a/ckpt-$total.h5" "$b/ckpt-$total.h5" | sed 's/.*bitwise equal //')"
else
    bad "resumed run differs from the uninterrupted one (variables, slots or averages)"
fi
check "checkpoint has /averages" sh -c "h5ls -r '$a/ckpt-$total.h5/averages' | grep -q 'moving_mean.*Dataset'"
check "checkpoint verifies" sh -c "'$CKPT_CHECK' '$a/ckpt-$total.h5' >/dev/null"
# controls: the comparison sees 23 steps, and averages alone (decay 0.5:
# TF's num_updates form uses min(D, (1+t)/(10+t)), which is below 0.9999
# for the first 89990 steps, but above 0.5 from t = 9 on)
cmp_ckpt "$a/ckpt-$total.h5" "$b/ckpt-$stop.h5" >/dev/null && bad "control: step $stop == step $total"
c=$tmp/c
run "$c.log" train "${R[@]/0.9999/0.5}" "${extra[@]}" --steps $total --checkpoint-dir "$c" \
    --quiet || bad "run C (decay 0.5) failed"
out=$("$CKPT_CMP" "$a/ckpt-$total.h5" "$c/ckpt-$total.h5" 2>&1)
case $out in
*"average of"*"differs"*) ;;
*) bad "decay 0.5 vs 0.9999: expected equal variables and different averages, got: $out" ;;
esac

say "$mode: the learning rate of every step"
base=$(awk -v w=$workers 'BEGIN {printf "%.9g", 0.01 * w * 16 / 256}')
check "start-up line shows the effective lr" grep -q \
    "learning rate $base (--lr 0.01 x $workers workers x batch 16 / 256); warm-up from" "$a.log"
pyok "lr per step" 'import json, sys
base, n, total = float(sys.argv[2]), 1.5 * int(sys.argv[3]), int(sys.argv[4])
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in recs if r["type"] == "step"]
errs = []
for r in steps:
    s = r["step"] - 1  # the record carries the lr of its last update, index step-1
    want = base * (0.1 + 0.9 * s / n) if s < n else base
    if abs(r["lr"] - want) > 2e-6 * want:
        errs.append("step %d: lr %r, expected %r" % (r["step"], r["lr"], want))
# one process logs every step with --log-every 0; the root under mpirun
# about every second (whichever steps those are, their lr must fit)
if not steps or (sys.argv[5] == "single" and len(steps) != total):
    errs.append("%d step records" % len(steps))
if sys.argv[5] == "single" and (steps[0]["step"] != 1 or abs(steps[0]["lr"] - base / 10) > 1e-6 * base):
    errs.append("the first step does not run at lr/10: %r" % steps[:1])
print("\n".join(errs[:5]))
sys.exit(1 if errs else 0)' "$a.jsonl" "$base" $spe $total "$mode"

say "$mode: evaluations use the averages"
"$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$a" --summary-json "$tmp/ev.json" \
    >"$tmp/ev.log" 2>&1 || bad "eval failed: $(tail -2 "$tmp/ev.log")"
"$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$a" --summary-json "$tmp/raw.json" \
    --no-averages >"$tmp/raw.log" 2>&1 || bad "eval --no-averages failed: $(tail -2 "$tmp/raw.log")"
check "eval says it uses the averages" grep -q "step $total, moving averages)" "$tmp/ev.log"
check "eval --no-averages says so" grep -q "raw variables, --no-averages)" "$tmp/raw.log"
pyok "eval with and without averages" 'import json, sys
a, ev, raw = (json.load(open(p)) for p in sys.argv[1:4])
errs = []
if not ev["averages"] or raw["averages"]:
    errs.append("averages flags %r %r" % (ev["averages"], raw["averages"]))
if ev["loss"] == raw["loss"]:
    errs.append("the same loss %r with and without averages" % ev["loss"])
# the run evaluated its averages too: the numbers of pstrain eval
if abs(a["test_loss"] - ev["loss"]) > 1e-6 * abs(ev["loss"]) or a["test_accuracy"] != ev["accuracy"]:
    errs.append("run: test loss %r accuracy %r; eval of its averages: %r %r; raw: %r" % (
        a["test_loss"], a["test_accuracy"], ev["loss"], ev["accuracy"], raw["loss"]))
print("\n".join(errs))
sys.exit(1 if errs else 0)' "$a.json" "$tmp/ev.json" "$tmp/raw.json"

if [ "$mode" = dist ]; then
    say "dist: resumed with 1 PS from the 2-PS checkpoint: bitwise the 2-PS run, averages included"
    # (the checkpoint gathers the averages of both shards; one PS takes them all)
    launch=(timeout -k 5 120 "${MPIEXEC_CMD[@]}" -n 4 "$PSTRAIN")
    run "$tmp/p1.log" train "${R[@]}" --ps 1 --steps $total --checkpoint-dir "$tmp/p1" \
        --resume "$b/ckpt-$stop.h5" --quiet || bad "1-PS resumed run failed"
    cmp_ckpt "$a/ckpt-$total.h5" "$tmp/p1/ckpt-$total.h5" || bad "1 PS and 2 PS differ"
    say "dist: 1 worker gives bitwise the run of one process, averages included"
    launch=(timeout -k 5 120 "${MPIEXEC_CMD[@]}" -n 3 "$PSTRAIN")
    run "$tmp/w1.log" train "${R[@]}" --ps 1 --steps 30 --checkpoint-dir "$tmp/w1" --quiet ||
        bad "1-worker run failed"
    launch=(timeout -k 5 120 "$PSTRAIN")
    run "$tmp/one.log" train "${R[@]}" --steps 30 --checkpoint-dir "$tmp/one" --quiet ||
        bad "one-process run failed"
    cmp_ckpt "$tmp/one/ckpt-30.h5" "$tmp/w1/ckpt-30.h5" || bad "1 worker and one process differ"
    finish
fi

say "single: resuming into and out of --moving-average-decay"
n=$tmp/noavg
run "$n.log" train "${B[@]}" --steps 10 --checkpoint-dir "$n" --quiet || bad "run without averages failed"
run "$n.2.log" train "${R[@]}" --steps 20 --checkpoint-dir "$n" --resume ||
    bad "resume with averages from a checkpoint without failed"
check "start of the averages said" grep -q "has no moving averages: they start from its variables" "$n.2.log"
run "$n.3.log" train "${B[@]}" --steps 30 --checkpoint-dir "$n" --resume ||
    bad "resume without averages from a checkpoint with failed"
check "dropped averages said" grep -q "has moving averages; this run has no --moving-average-decay" "$n.3.log"
check "a checkpoint without averages has no /averages" sh -c "! h5ls '$n/ckpt-30.h5/averages' >/dev/null 2>&1"

say "single: damaged averages are refused, naming the file and the dataset"
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
    src=$a/ckpt-$total.h5
    # mis-shaped: /averages/stem/kernel replaced by 3 floats (checksums intact)
    cp "$src" "$tmp/shape.h5"
    /usr/bin/python3 -c 'import h5py, sys
f = h5py.File(sys.argv[1], "r+")
del f["/averages/stem/kernel"]
f.create_dataset("/averages/stem/kernel", data=[1.0, 2.0, 3.0], dtype="f4")' "$tmp/shape.h5"
    # corrupt: one flipped bit in the data of /averages/stem/kernel
    cp "$src" "$tmp/flip.h5"
    off=$(/usr/bin/python3 -c 'import h5py, sys
print(h5py.File(sys.argv[1], "r")["/averages/stem/kernel"].id.get_chunk_info(0).byte_offset + 40)' "$tmp/flip.h5")
    /usr/bin/python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2]))
f.write(bytes([b[0] ^ 0x10]))' "$tmp/flip.h5" "$off"
    for f in shape flip; do
        "$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$tmp/$f.h5" --quiet >"$tmp/$f.log" 2>&1
        rc=$?
        check "eval of $f.h5: exit $rc, expected 1" test $rc = 1
        check "eval of $f.h5: one line naming the file and /averages/stem/kernel, got: $(head -3 "$tmp/$f.log")" \
            sh -c "test \$(wc -l <'$tmp/$f.log') = 1 && grep -q '$tmp/$f.h5.*/averages/stem/kernel' '$tmp/$f.log'"
        "$PSTRAIN" train "${R[@]}" --steps $((total + 5)) --checkpoint-dir "$tmp/$f.d" \
            --resume "$tmp/$f.h5" >"$tmp/$f.r.log" 2>&1
        rc=$?
        check "--resume $f.h5: exit $rc, expected 1" test $rc = 1
        check "--resume $f.h5 names /averages/stem/kernel" grep -q "/averages/stem/kernel" "$tmp/$f.r.log"
    done
    # --resume DIR falls back past a damaged newest checkpoint to the older good one
    mkdir -p "$tmp/fall"
    cp "$b/ckpt-$stop.h5" "$tmp/fall/"
    cp "$tmp/flip.h5" "$tmp/fall/ckpt-$total.h5"
    echo "ckpt-$total.h5" >"$tmp/fall/latest"
    run "$tmp/fall.log" train "${R[@]}" --steps $total --checkpoint-dir "$tmp/fall" --resume ||
        bad "--resume of a directory with a damaged newest checkpoint failed"
    check "fell back to ckpt-$stop.h5 with a warning" grep -q \
        "skipping damaged checkpoint $tmp/fall/ckpt-$total.h5: .*/averages/stem/kernel" "$tmp/fall.log"
    cmp_ckpt "$a/ckpt-$total.h5" "$tmp/fall/ckpt-$total.h5" || bad "fallback resume differs"
else
    echo "  (skipped: /usr/bin/python3 has no h5py; Debian's python3-h5py; the unit test ckpt covers the library)"
fi

say "single: bad values"
for args in "--moving-average-decay 1.5" "--moving-average-decay 1" "--moving-average-decay 0" \
    "--moving-average-decay -0.1" "--moving-average-decay 0.999999999" "--moving-average-decay x" \
    "--warmup-epochs -1" "--warmup-epochs nan" "--lr-scale cubic"; do
    # shellcheck disable=SC2086
    "$PSTRAIN" train --data "$tmp/d.h5" --steps 1 $args >"$tmp/bad.log" 2>&1
    rc=$?
    flag=${args%% *}
    check "'$args': exit $rc, expected 2" test $rc = 2
    check "'$args': one line naming $flag, got: $(head -3 "$tmp/bad.log")" \
        sh -c "test \$(wc -l <'$tmp/bad.log') = 1 && grep -q -- '$flag' '$tmp/bad.log'"
done
finish
