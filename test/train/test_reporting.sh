#!/usr/bin/env bash
# What training reports, in one process ("single", suite cli) or under
# mpirun ("dist", suite mpi; 4th argument):
#   --eval-split: val by default when the data set has one, else test; the
#     summary's eval_split/eval_accuracy/eval_loss (test_* only for test);
#     an --eval-split the data set lacks names the splits it has; --eval-every
#     with nothing to evaluate warns; `pstrain eval --split` likewise
#   the placement: one summary line by default, the table with --verbose
#   the log of a short run (stderr not a terminal): the time at the start of
#     every line, no blank line, checkpoint lines, a last progress line at
#     the final step; --metrics steps strictly increasing, one epoch
#     convention (1-based, "epoch 3/4") in progress, metrics and final line
#   after a resume: this run's steps, examples and time apart from the whole
#     run's; --steps at or below the checkpoint's step says so and exits 0
. "$(dirname "$0")/lib.sh"
MODE=${4:-single}
P=$PSTRAIN
d=$tmp
"$MKDATA" "$d/ok.h5" 640 100 8 8 1 4 || { echo "mkdata failed"; exit 1; }
"$MKDATA" "$d/notest.h5" 640 0 8 8 1 4 || exit 1
# a val split of its own size (256 of the train images), to tell it from test
"$MKDATA" "$d/val.h5" 640 100 8 8 1 4 || exit 1
"$MKDATA" "$d/v256.h5" 256 100 8 8 1 4 || exit 1
h5copy -i "$d/v256.h5" -o "$d/val.h5" -s /train -d /val || { echo "SKIP: h5copy failed"; exit 77; }

if [ "$MODE" = dist ]; then
    command -v "$MPIEXEC" >/dev/null || { echo "SKIP: no MPI launcher ($MPIEXEC)"; exit 77; }
    RUN=(timeout 120 "${MPIEXEC_CMD[@]}" -n 4 "$P" train --ps 1)
else
    RUN=("$P" train)
fi
T=("${RUN[@]}" --model mlp --batch 16 --log-every 0)

say "--eval-split ($MODE)"
"${T[@]}" --data "$d/val.h5" --epochs 2 --eval-every 1 --metrics "$d/m.jsonl" \
    --summary-json "$d/s.json" >"$d/out" 2>&1 || { bad "default split: exit $?"; tail -5 "$d/out"; }
pyok "default: val when the data set has one" '
import json, sys
s = json.load(open(sys.argv[1]))
ev = [json.loads(l) for l in open(sys.argv[2]) if "\"eval\"" in l]
errs = []
if s.get("eval_split") != "val" or s.get("eval_examples") != 256: errs.append("summary eval %r %r" % (s.get("eval_split"), s.get("eval_examples")))
if not 0 <= s.get("eval_accuracy", -1) <= 1 or not s.get("eval_loss", -1) > 0: errs.append("eval numbers %r" % s)
if "test_accuracy" in s: errs.append("test_accuracy without a test evaluation")
if [e["split"] for e in ev] != ["val"] * len(ev) or len(ev) < 2: errs.append("metrics eval records %r" % ev)
if errs: sys.exit("; ".join(errs))' "$d/s.json" "$d/m.jsonl"
grep -q "val accuracy" "$d/out" || bad "final line does not name the val split: $(tail -1 "$d/out")"

"${T[@]}" --data "$d/val.h5" --steps 5 --eval-split test --summary-json "$d/s.json" >"$d/out" 2>&1 ||
    bad "--eval-split test: exit $?"
pyok "--eval-split test: eval_* and test_*" '
import json, sys
s = json.load(open(sys.argv[1]))
if not (s["eval_split"] == "test" and s["eval_examples"] == 100 and s["test_examples"] == 100
        and s["test_accuracy"] == s["eval_accuracy"] and s["test_loss"] == s["eval_loss"]):
    sys.exit("summary %r" % s)' "$d/s.json"

"${T[@]}" --data "$d/ok.h5" --steps 5 --summary-json "$d/s.json" >"$d/out" 2>&1 || bad "no val: exit $?"
pyok "no val split: test" '
import json, sys
s = json.load(open(sys.argv[1]))
if s.get("eval_split") != "test" or s.get("test_examples") != 100: sys.exit("summary %r" % s)' "$d/s.json"

"${T[@]}" --data "$d/ok.h5" --steps 5 --eval-split val >"$d/out" 2>&1
rc=$?
[ $rc = 1 ] || bad "--eval-split val without a val split: exit $rc, expected 1"
grep -qF "no 'val' split (this data set has train, test)" "$d/out" ||
    bad "--eval-split val: the splits that exist are not named: $(grep . "$d/out" | head -3)"

"${T[@]}" --data "$d/notest.h5" --epochs 2 --eval-every 1 --summary-json "$d/s.json" >"$d/out" 2>&1 ||
    bad "nothing to evaluate: exit $?"
grep -q "warning: --eval-every 1: .*no val or test split" "$d/out" ||
    bad "--eval-every with no split to evaluate: no warning: $(head -3 "$d/out")"
pyok "nothing evaluated" 'import json, sys
s = json.load(open(sys.argv[1]))
if "eval_split" in s or "test_accuracy" in s: sys.exit("summary %r" % s)' "$d/s.json"

say "the log of a short run ($MODE)"
# steps per epoch: 40 batches, one per step in one process, 2 (workers) per sync step
if [ "$MODE" = dist ]; then spe=20; else spe=40; fi
# 640 examples, batch 16: 40 steps per epoch; 3 epochs, a checkpoint every 25
rm -rf "$d/ck" "$d/m.jsonl"
# (a short --log-every: the step of a record must follow its losses, not lag
# and repeat as 0 0 0 ... 36 36 36 in a sync run of 2 workers)
"${T[@]}" --data "$d/ok.h5" --epochs 3 --eval-every 1 --checkpoint-dir "$d/ck" --log-every 0.005 \
    --checkpoint-every 25 --metrics "$d/m.jsonl" >"$d/out" 2>"$d/err" || bad "log run: exit $?"
pyok "the log of a short run" '
import json, re, sys
err = open(sys.argv[1]).read().split("\n")
out = open(sys.argv[2]).read()
rec = [json.loads(l) for l in open(sys.argv[3])]
errs = []
if err[-1] == "": err.pop()
for l in err:
    if not re.match(r"^\[ *[0-9.]+[smh][0-9ms]*\] \S", l) and not l.startswith("pstrain train: warning"):
        errs.append("a line without the time: %r" % l)
prog = [l for l in err if "] step " in l]
spe = int(sys.argv[4]); n = 3 * spe
if not prog or not re.search(r"\] step %d/%d  epoch 3/3  loss " % (n, n), prog[-1]):
    errs.append("last progress line %r" % (prog[-1:],))
ck = [l for l in err if "] checkpoint " in l]
if len(ck) < 3: errs.append("checkpoint lines %r" % ck)
steps = [r for r in rec if r["type"] == "step"]
s = [r["step"] for r in steps]
if s != sorted(set(s)) or s[-1] != n: errs.append("metrics steps not strictly increasing to %d: %r" % (n, s))
for r in steps:
    if r["epoch"] != (r["step"] - 1) // spe + 1: errs.append("step %d in epoch %d" % (r["step"], r["epoch"])); break
ev = [(r["step"], r["epoch"]) for r in rec if r["type"] == "eval"]
if ev != [(spe, 1), (2 * spe, 2), (n, 3)]: errs.append("eval records (step, epoch) %r" % ev)
if not re.match(r"trained mlp: step %d/%d, epoch 3/3, 1920 examples in " % (n, n), out): errs.append("final line %r" % out)
if errs: sys.exit("\n".join(errs))' "$d/err" "$d/out" "$d/m.jsonl" $spe

say "resume ($MODE)"
"${T[@]}" --data "$d/ok.h5" --epochs 4 --checkpoint-dir "$d/ck" --resume --summary-json "$d/s.json" \
    >"$d/out" 2>"$d/err" || bad "resumed run: exit $?"
grep -Eq "^\[ *[0-9.]+s\] resumed from $d/ck/ckpt-$((3 * spe)).h5 at step $((3 * spe))" "$d/err" ||
    bad "no resumed line with the time: $(head -2 "$d/err")"
grep -Eq "^trained mlp: step $((4 * spe))/$((4 * spe)), epoch 4/4; this run: $spe steps, 640 examples in [0-9.]+ s, [0-9]+ images/s; whole run: 2560 examples in " "$d/out" ||
    bad "final line after a resume: $(cat "$d/out")"
last=$((4 * spe))
for n in $last $((2 * spe)); do
    "${T[@]}" --data "$d/ok.h5" --steps $n --checkpoint-dir "$d/ck" --resume >"$d/out" 2>"$d/err"
    rc=$?
    [ $rc = 0 ] || bad "--steps $n at a checkpoint of step $last: exit $rc"
    grep -q "ckpt-$last.h5 is at step $last, at or past --steps $n: nothing to train" "$d/err" ||
        bad "--steps $n at step $last: $(cat "$d/err")"
    [ -s "$d/out" ] && bad "--steps $n at step $last: a final line: $(cat "$d/out")"
done
[ "$(ls "$d/ck" | grep -c 'ckpt-.*h5$')" -le 3 ] && [ -e "$d/ck/ckpt-$((4 * spe)).h5" ] || bad "checkpoints touched"

say "the placement at the start ($MODE)"
if [ "$MODE" = dist ]; then
    "${T[@]}" --data "$d/ok.h5" --steps 2 >"$d/out" 2>&1 || bad "placement run: exit $?"
    grep -q "^\[ *[0-9.]*s\] placement round-robin on 1 PS: 6 variables.*imbalance.*--verbose" "$d/out" ||
        bad "no one-line placement summary: $(head -3 "$d/out")"
    grep -q "dense1/kernel\|offset" "$d/out" && bad "the placement table printed without --verbose"
    "${T[@]}" --data "$d/ok.h5" --steps 2 --verbose >"$d/out" 2>&1 || bad "--verbose run: exit $?"
    grep -q "variable.*shape.*bytes.*PS.*offset" "$d/out" || bad "--verbose: no placement table"
else
    say "pstrain eval on a missing split"
    "$P" train --model mlp --data "$d/ok.h5" --steps 2 --quiet --checkpoint-dir "$d/ck" >/dev/null 2>&1 ||
        bad "checkpoint run failed"
    "$P" eval --data "$d/ok.h5" --checkpoint "$d/ck" --split val >"$d/out" 2>&1
    rc=$?
    [ $rc = 1 ] || bad "eval --split val: exit $rc"
    grep -qF "no 'val' split (this data set has train, test)" "$d/out" ||
        bad "eval --split val: the splits that exist are not named: $(cat "$d/out")"
fi
finish
