#!/usr/bin/env bash
# Top-5 accuracy, in one process ("single", suite cli) or under mpirun
# ("dist", suite mpi; 4th argument):
#   pstrain eval: top5_accuracy in --summary-json and "top-5" in the printed
#     line equal the top-5 recomputed from its --logits file (a stable sort
#     by descending logit: the lowest index wins a tie, as the argmax)
#   training: every eval record of --metrics has top5_accuracy, the summary
#     eval_top5_accuracy/test_top5_accuracy, the final line "top-5", and the
#     final evaluation's numbers equal pstrain eval's on the final checkpoint
#   (single only) more than 100 classes: eval prints the 10 best and 10 worst
#     classes (recomputed from the logits) instead of the per-class table and
#     the confusion matrix; the JSON keeps all 120 classes
. "$(dirname "$0")/lib.sh"
MODE=${4:-single}
d=$tmp
"$MKDATA" "$d/k10.h5" 640 100 8 8 1 10 || exit 1
if [ "$MODE" = dist ]; then
    command -v "$MPIEXEC" >/dev/null || { echo "SKIP: no MPI launcher ($MPIEXEC)"; exit 77; }
    RUN=(timeout 120 "${MPIEXEC_CMD[@]}" -n 4 "$PSTRAIN" train --ps 1)
else
    RUN=("$PSTRAIN" train)
fi

# check_eval H5 SPLIT JSON LOGITS OUT: eval's numbers against its logits
check_eval() {
    local n=$5
    h5dump -d "/$2/labels" -b LE -o "$d/labels-$n.bin" "$1" >/dev/null || { bad "h5dump"; return; }
    pyok "$n: top-1, top-5 and per-class accuracy from the logits" '
import json, re, struct, sys
s = json.load(open(sys.argv[1]))
raw = open(sys.argv[2], "rb").read()
out = open(sys.argv[3]).read()
lb = open(sys.argv[4], "rb").read()
labels = struct.unpack("<%di" % (len(lb) // 4), lb)
hlen = struct.unpack("<H", raw[8:10])[0]
data = raw[10 + hlen:]
n = len(labels); K = len(data) // 4 // n
lg = struct.unpack("<%df" % (n * K), data)
top1 = top5 = 0
hit = [0] * K; cnt = [0] * K
for i, y in enumerate(labels):
    row = lg[K * i:K * i + K]
    order = sorted(range(K), key=lambda k: (-row[k], k))
    top1 += order[0] == y
    top5 += y in order[:5]
    cnt[y] += 1; hit[y] += order[0] == y
errs = []
if s["examples"] != n: errs.append("examples %r, %d labels" % (s["examples"], n))
if round(s["accuracy"] * n) != top1: errs.append("accuracy %r, %d/%d from the logits" % (s["accuracy"], top1, n))
if round(s["top5_accuracy"] * n) != top5: errs.append("top5_accuracy %r, %d/%d from the logits" % (s["top5_accuracy"], top5, n))
if top5 in (0, n) and K > 5: errs.append("top-5 %d of %d: the test cannot tell" % (top5, n))
if not re.search(r"split of .*: accuracy %.4f, top-5 %.4f, loss " % (top1 / n, top5 / n), out):
    errs.append("printed line: %r" % out.split("\n")[1])
acc = [hit[k] / cnt[k] if cnt[k] else 0 for k in range(K)]
if len(s["per_class_accuracy"]) != K or len(s["confusion"]) != K: errs.append("per-class arrays of %d" % len(s["per_class_accuracy"]))
if any(abs(a - b) > 1e-6 for a, b in zip(acc, s["per_class_accuracy"])): errs.append("per_class_accuracy")
if K > 100:
    have = [k for k in range(K) if cnt[k]]
    best = sorted(have, key=lambda k: (-acc[k], k))[:10]
    worst = sorted(have, key=lambda k: (acc[k], k))[:10]
    m = re.search(r"per-class accuracy of %d classes \(%d without examples in the split\); the 10 best:\n((?:.*\n){10})the 10 worst:\n((?:.*\n){10})" % (K, K - len(have)), out)
    if not m: errs.append("no best/worst summary in %r" % out[:600])
    else:
        for name, want, block in (("best", best, m.group(1)), ("worst", worst, m.group(2))):
            got = [(int(l.split()[0]), l.split()[1], float(l.split()[2]), l.split("(")[1]) for l in block.strip("\n").split("\n")]
            exp = [(k, "class%d" % k, round(acc[k], 4), "%d, %d correct)" % (cnt[k], hit[k])) for k in want]
            if got != exp: errs.append("%s: %r, expected %r" % (name, got, exp))
    if "confusion matrix (rows" in out or "per-class accuracy:" in out: errs.append("a table printed for %d classes" % K)
    if "--summary-json file has every class" not in out: errs.append("no pointer to the JSON")
else:
    if "per-class accuracy:" not in out or "confusion matrix" not in out: errs.append("no table for %d classes" % K)
print("top-1 %d, top-5 %d of %d" % (top1, top5, n))
if errs: sys.exit("\n".join(errs))' "$3" "$4" "$d/$n.out" "$d/labels-$n.bin"
}

say "training reports top-5 ($MODE)"
"${RUN[@]}" --model mlp --batch 16 --log-every 0 --data "$d/k10.h5" --epochs 2 --eval-every 1 \
    --metrics "$d/m.jsonl" --summary-json "$d/s.json" --checkpoint-dir "$d/ck" >"$d/train.out" 2>&1 ||
    { bad "training: exit $?"; tail -5 "$d/train.out"; }
"$PSTRAIN" eval --data "$d/k10.h5" --checkpoint "$d/ck" --batch 16 --summary-json "$d/e.json" \
    --logits "$d/l.npy" >"$d/k10.out" 2>&1 || bad "eval: exit $?"
check_eval "$d/k10.h5" test "$d/e.json" "$d/l.npy" k10
pyok "top5_accuracy in the metrics and the summary, the final one eval's" '
import json, re, sys
s = json.load(open(sys.argv[1]))
ev = [json.loads(l) for l in open(sys.argv[2]) if "\"eval\"" in l]
e = json.load(open(sys.argv[3]))
out = open(sys.argv[4]).read()
errs = []
if len(ev) != 2: errs.append("%d eval records" % len(ev))
for r in ev:
    if not r["accuracy"] <= r["top5_accuracy"] <= 1: errs.append("record %r" % r)
if ev and ev[-1]["top5_accuracy"] != e["top5_accuracy"]: errs.append("last record %r, eval %r" % (ev[-1], e["top5_accuracy"]))
if (s.get("eval_top5_accuracy"), s.get("test_top5_accuracy")) != (e["top5_accuracy"],) * 2:
    errs.append("summary %r %r, eval %r" % (s.get("eval_top5_accuracy"), s.get("test_top5_accuracy"), e["top5_accuracy"]))
if s.get("eval_accuracy") != e["accuracy"]: errs.append("summary accuracy %r, eval %r" % (s.get("eval_accuracy"), e["accuracy"]))
if not re.search(r"test accuracy %.4f, top-5 %.4f \(loss" % (e["accuracy"], e["top5_accuracy"]), out): errs.append("final line %r" % out[-300:])
if not re.search(r"eval test: step \d+, epoch 1: accuracy %.4f, top-5 %.4f, loss" % (ev[0]["accuracy"], ev[0]["top5_accuracy"]), out): errs.append("no eval line with top-5")
if errs: sys.exit("\n".join(errs))' "$d/s.json" "$d/m.jsonl" "$d/e.json" "$d/train.out"

if [ "$MODE" = single ]; then
    say "more than 100 classes: the best and worst 10"
    # 120 classes, 3 test examples each (label i % 120), and 11 classes
    # without test examples in a second set (label i % 120 for i < 109)
    "$MKDATA" "$d/k120.h5" 720 360 8 8 1 120 || exit 1
    "$MKDATA" "$d/k120b.h5" 720 109 8 8 1 120 || exit 1
    "$PSTRAIN" train --model mlp --batch 32 --data "$d/k120.h5" --steps 100 --lr 0.1 --quiet \
        --checkpoint-dir "$d/ck120" >"$d/t120.out" 2>&1 || bad "training on 120 classes: exit $?"
    for set in k120 k120b; do
        "$PSTRAIN" eval --data "$d/$set.h5" --checkpoint "$d/ck120" --summary-json "$d/$set.json" \
            --logits "$d/$set.npy" >"$d/$set.out" 2>&1 || bad "eval $set: exit $?"
        check_eval "$d/$set.h5" test "$d/$set.json" "$d/$set.npy" $set
    done
    "$PSTRAIN" eval --data "$d/k120.h5" --checkpoint "$d/ck120" >"$d/nojson.out" 2>&1 ||
        bad "eval without --summary-json: exit $?"
    check "without --summary-json: says how to get every class" \
        grep -q "summary-json FILE writes every class" "$d/nojson.out"
fi
finish
