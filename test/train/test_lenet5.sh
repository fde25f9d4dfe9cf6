#!/usr/bin/env bash
# lenet5, one epoch of Fashion-MNIST in one process (issue 3's acceptance):
# test accuracy >= 0.84; the summary accounts for every example once; the
# metrics JSONL is well formed; `pstrain eval` on the final checkpoint
# reproduces the run's test accuracy exactly, with per-class accuracies and
# a 10x10 confusion matrix that add up to the 10,000 test images.
. "$(dirname "$0")/lib.sh"
need_fm

say "lenet5, 1 epoch"
train "$tmp/train.log" --data "$FM" --model lenet5 --epochs 1 --metrics "$tmp/m.jsonl" \
    --summary-json "$tmp/s.json" --checkpoint-dir "$tmp/ck" || {
    bad "training failed"
    finish
}
acc=$(jget "$tmp/s.json" 'j["test_accuracy"]')
say "test accuracy $acc, $(jget "$tmp/s.json" '"%.0f images/s" % j["images_per_sec"]')"
pyok "summary of the run" '
import json, sys
j = json.load(open(sys.argv[1]))
errs = []
def want(k, v):
    if j.get(k) != v: errs.append("%s = %r, expected %r" % (k, j.get(k), v))
want("model", "lenet5"); want("steps", 938); want("epochs", 1); want("examples", 60000)
want("test_examples", 10000); want("ranks", 1); want("workers", 1)
if not j["test_accuracy"] >= 0.84: errs.append("test accuracy %r < 0.84" % j["test_accuracy"])
ep = j["data"]["epochs"]
if [(e["examples"], e["unique"], e["duplicates"], e["missing"]) for e in ep] != [(60000, 60000, 0, 0)]:
    errs.append("data accounting %r" % ep)
if not 0 < j["final_loss"] < 0.6: errs.append("final_loss %r" % j["final_loss"])
if not j["images_per_sec"] > 0: errs.append("images_per_sec %r" % j["images_per_sec"])
print("\n".join(errs)); sys.exit(1 if errs else 0)' "$tmp/s.json"

say "metrics file"
pyok "metrics JSONL well formed" '
import json, math, sys
errs = []
steps, evals = [], []
step_keys = {"type", "step", "epoch", "loss", "accuracy", "lr", "images_per_sec", "elapsed", "timing"}
eval_keys = {"type", "step", "epoch", "split", "accuracy", "top5_accuracy", "loss", "examples"}
for n, line in enumerate(open(sys.argv[1]), 1):
    try:
        r = json.loads(line)
    except ValueError as ex:
        errs.append("line %d does not parse: %s: %r" % (n, ex, line)); continue
    if r.get("type") == "step":
        if set(r) != step_keys: errs.append("line %d: keys %s" % (n, sorted(r)))
        elif not all(isinstance(r[k], (int, float)) and math.isfinite(r[k])
                     for k in step_keys - {"type", "timing"}):
            errs.append("line %d: a value is not a finite number: %r" % (n, r))
        elif not (r["lr"] == 0.01 and 0 < r["loss"] < 3 and 0 <= r["accuracy"] <= 1
                  and r["images_per_sec"] > 0 and r["epoch"] == 1):
            errs.append("line %d: implausible values %r" % (n, r))
        elif not {"wait_data", "compute"} <= set(r["timing"]):
            errs.append("line %d: timing %r" % (n, r["timing"]))
        else:
            steps.append(r)
    elif r.get("type") == "eval":
        if set(r) != eval_keys: errs.append("line %d: keys %s" % (n, sorted(r)))
        else: evals.append(r)
    else:
        errs.append("line %d: type %r" % (n, r.get("type")))
s = [r["step"] for r in steps]
if len(s) < 2: errs.append("only %d step lines" % len(s))
if any(b <= a for a, b in zip(s, s[1:])): errs.append("steps not increasing: %r" % s)
if s and not 1 <= s[0] and s[-1] <= 938: errs.append("steps out of range: %r" % s)
el = [r["elapsed"] for r in steps]
if any(b < a for a, b in zip(el, el[1:])): errs.append("elapsed decreasing: %r" % el)
if steps and not steps[-1]["loss"] < steps[0]["loss"]: errs.append("loss did not fall")
if len(evals) != 1: errs.append("%d eval lines, expected 1" % len(evals))
else:
    e = evals[0]
    want = {"step": 938, "epoch": 1, "split": "test", "examples": 10000}
    for k, v in want.items():
        if e[k] != v: errs.append("eval %s = %r, expected %r" % (k, e[k], v))
    if e["accuracy"] != float(sys.argv[2]): errs.append("eval accuracy %r, summary %s" % (e["accuracy"], sys.argv[2]))
print("\n".join(errs)); sys.exit(1 if errs else 0)' "$tmp/m.jsonl" "$acc"

say "pstrain eval on the final checkpoint"
check "final checkpoint ckpt-938.h5 recorded as latest" grep -qx ckpt-938.h5 "$tmp/ck/latest"
step=$("$CKPT_CHECK" "$tmp/ck/ckpt-938.h5") || bad "final checkpoint does not verify"
check "final checkpoint at step 938 (got $step)" test "$step" = 938
if ! nice "$PSTRAIN" eval --data "$FM" --checkpoint "$tmp/ck" --summary-json "$tmp/e.json" \
    >"$tmp/eval.out" 2>"$tmp/eval.err"; then
    bad "pstrain eval failed:"
    cat "$tmp/eval.err"
    finish
fi
cat "$tmp/eval.out"
pyok "eval reproduces the run" '
import json, sys
j = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
errs = []
if j["split"] != "test" or j["examples"] != 10000: errs.append("split/examples %r %r" % (j["split"], j["examples"]))
if j["accuracy"] != s["test_accuracy"]: errs.append("eval accuracy %r, training run %r" % (j["accuracy"], s["test_accuracy"]))
if abs(j["loss"] - s["test_loss"]) > 1e-6 * max(1, abs(s["test_loss"])): errs.append("eval loss %r, training run %r" % (j["loss"], s["test_loss"]))
c = j["confusion"]
if len(c) != 10 or any(len(r) != 10 for r in c): errs.append("confusion is not 10x10")
else:
    if sum(map(sum, c)) != 10000: errs.append("confusion sums to %d" % sum(map(sum, c)))
    if [sum(r) for r in c] != [1000] * 10: errs.append("rows (true classes) %r" % [sum(r) for r in c])
    if sum(c[k][k] for k in range(10)) / 10000 != j["accuracy"]: errs.append("diagonal disagrees with accuracy")
    pc = j["per_class_accuracy"]
    if len(pc) != 10 or any(abs(pc[k] - c[k][k] / 1000) > 1e-6 for k in range(10)):
        errs.append("per-class accuracy %r disagrees with the confusion matrix" % pc)
print("\n".join(errs)); sys.exit(1 if errs else 0)' "$tmp/e.json" "$tmp/s.json"
# the printed report: accuracy line, per-class table (10 rows, with the
# class names), the 10x10 matrix whose numbers add up to 10000
pyok "eval output" '
import json, re, sys
out = open(sys.argv[1]).read().splitlines()
j = json.load(open(sys.argv[2]))
errs = []
if not any(re.search(r"test split of .*: accuracy %.4f" % j["accuracy"], l) for l in out):
    errs.append("no accuracy line with %.4f" % j["accuracy"])
names = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
try:
    i = next(n for n, l in enumerate(out) if l.startswith("per-class accuracy"))
    rows = out[i + 1:i + 11]
    for k, (l, name) in enumerate(zip(rows, names)):
        if name not in l or ("%.4f" % j["per_class_accuracy"][k]) not in l: errs.append("per-class row %r" % l)
    i = next(n for n, l in enumerate(out) if l.startswith("confusion matrix"))
    m = [[int(x) for x in l.split()[1:]] for l in out[i + 2:i + 12]]
    if m != j["confusion"]: errs.append("printed matrix differs from the JSON one")
    if sum(map(sum, m)) != 10000: errs.append("printed matrix sums to %d" % sum(map(sum, m)))
except (StopIteration, ValueError) as ex:
    errs.append("report layout: %r" % ex)
print("\n".join(errs)); sys.exit(1 if errs else 0)' "$tmp/eval.out" "$tmp/e.json"
finish
