#!/usr/bin/env bash
# mlp on Fashion-MNIST in one process: one epoch reaches test accuracy >=
# 0.82 (issue 3); --eval-every 1 logs one eval line per epoch at the epoch's
# last step, the last one equal to the summary; `pstrain eval --split train`
# of the final checkpoint covers the 60,000 training images.
. "$(dirname "$0")/lib.sh"
need_fm

say "mlp, 1 epoch"
if train "$tmp/train.log" --data "$FM" --model mlp --epochs 1 --summary-json "$tmp/s.json" \
    --checkpoint-dir "$tmp/ck"; then
    say "$(tail -1 "$tmp/train.log")"
    pyok "mlp one epoch" '
import json, sys
j = json.load(open(sys.argv[1]))
errs = []
if j["steps"] != 938 or j["examples"] != 60000: errs.append("steps/examples %r %r" % (j["steps"], j["examples"]))
if not j["test_accuracy"] >= 0.82: errs.append("test accuracy %r < 0.82" % j["test_accuracy"])
print("\n".join(errs)); sys.exit(1 if errs else 0)' "$tmp/s.json"
    if nice "$PSTRAIN" eval --quiet --data "$FM" --checkpoint "$tmp/ck/latest" --split train \
        --summary-json "$tmp/e.json" >"$tmp/eval.out" 2>&1; then
        pyok "eval --split train" '
import json, sys
j = json.load(open(sys.argv[1]))
errs = []
if j["split"] != "train" or j["examples"] != 60000: errs.append("split/examples %r %r" % (j["split"], j["examples"]))
c = j["confusion"]
if [sum(r) for r in c] != [6000] * 10: errs.append("confusion rows %r" % [sum(r) for r in c])
if not 0.8 <= j["accuracy"] <= 1: errs.append("train accuracy %r" % j["accuracy"])
print("\n".join(errs)); sys.exit(1 if errs else 0)' "$tmp/e.json"
    else
        bad "pstrain eval --split train failed"
        cat "$tmp/eval.out"
    fi
else
    bad "training failed"
fi

say "mlp, 3 epochs of 6400 examples, --eval-every 1"
if train "$tmp/t3.log" --data "$FM" --model mlp --limit 6400 --epochs 3 --eval-every 1 \
    --metrics "$tmp/m.jsonl" --summary-json "$tmp/s3.json" --log-every 0; then
    # not a terminal: one plain progress line per logging interval (here
    # every step), starting with the elapsed time, no carriage returns
    n=$(grep -Ec '^\[ *[0-9.]+[smh][0-9ms]*\] step [0-9]+/300  epoch [1-3]/3  loss [0-9.]+  acc [0-9.]+  lr 0.01  [0-9]+ img/s' "$tmp/t3.log")
    check "300 plain progress lines (got $n)" test "$n" = 300
    check "no carriage return in a non-terminal log" test "$(tr -cd '\r' <"$tmp/t3.log" | wc -c)" = 0
    pyok "eval lines per epoch" '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
s = json.load(open(sys.argv[2]))
ev = [(r["step"], r["epoch"], r["split"], r["examples"]) for r in lines if r["type"] == "eval"]
errs = []
if ev != [(100, 1, "test", 10000), (200, 2, "test", 10000), (300, 3, "test", 10000)]:
    errs.append("eval lines %r" % ev)
last = [r for r in lines if r["type"] == "eval"][-1]
if last["accuracy"] != s["test_accuracy"]: errs.append("last eval %r, summary %r" % (last["accuracy"], s["test_accuracy"]))
ep = [(e["epoch"], e["examples"], e["unique"], e["duplicates"], e["missing"]) for e in s["data"]["epochs"]]
if ep != [(i, 6400, 6400, 0, 0) for i in range(1, 4)]: errs.append("data accounting %r" % ep)
if s["steps"] != 300 or s["epochs"] != 3: errs.append("steps/epochs %r %r" % (s["steps"], s["epochs"]))
print("\n".join(errs)); sys.exit(1 if errs else 0)' "$tmp/m.jsonl" "$tmp/s3.json"
else
    bad "training failed"
fi

say "progress line on a terminal"
if command -v script >/dev/null; then
    script -qec "$PSTRAIN train --data $FM --model mlp --limit 640 --epochs 2 --eval-every 1 --log-every 0" \
        /dev/null >"$tmp/tty.log" 2>&1 </dev/null || bad "run on a pseudo-terminal failed"
    pyok "progress on a terminal rewrites one line" '
import sys
t = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
errs = []
n = t.count("\r\x1b[Kstep ")
if n != 20: errs.append("%d rewrites of the progress line, expected 20" % n)
if "\neval test: step 10, epoch 1: " not in t.replace("\r\n", "\n"): errs.append("the eval line does not start on a line of its own")
print("\n".join(errs)); print(repr(t[-400:])); sys.exit(1 if errs else 0)' "$tmp/tty.log"
else
    echo "  (script(1) not installed: terminal progress not checked)"
fi
finish
