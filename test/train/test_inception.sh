#!/usr/bin/env bash
# inception-mini trains on a Fashion-MNIST subset (issue 3): 250 steps of
# batch 32 over 3,200 examples, the loss of the last metrics lines clearly
# below the first ones and the test accuracy far above chance. Also: the
# built-in models adapt to the data set's shape (--dry-run on 32x32x3 with
# 5 classes) and --dry-run reports lenet5's and mlp's parameter counts and
# the memory table.
. "$(dirname "$0")/lib.sh"
need_fm

say "--dry-run"
"$MKDATA" "$tmp/rgb.h5" 96 20 32 32 3 5 || exit 1
for m in mlp lenet5 inception-mini; do
    if "$PSTRAIN" train --data "$tmp/rgb.h5" --model $m --dry-run --summary-json "$tmp/x.json" \
        >"$tmp/dry.$m" 2>&1; then
        check "$m --dry-run: header" grep -q "^model $m: input 32x32x3, 5 classes" "$tmp/dry.$m"
        check "$m --dry-run writes no summary" test ! -e "$tmp/x.json"
        check "$m --dry-run: memory table" grep -q "^    activations (planned) .* bytes  training step" "$tmp/dry.$m"
    else
        bad "$m --dry-run on 32x32x3 failed"
        cat "$tmp/dry.$m"
    fi
    # a few steps on the colour images
    train "$tmp/rgb.$m.log" --data "$tmp/rgb.h5" --model $m --steps 3 --batch 16 --quiet ||
        bad "$m on 32x32x3 images"
done
# parameter counts on 28x28x1, 10 classes: lenet5 (the peer's model)
# 6*(25+1) + 16*(6*25+1) + 120*(400+1) + 84*(120+1) + 10*(84+1);
# mlp 784-256-256-10
"$PSTRAIN" train --data "$FM" --model lenet5 --dry-run >"$tmp/dry.lenet5" 2>&1
"$PSTRAIN" train --data "$FM" --model mlp --dry-run >"$tmp/dry.mlp" 2>&1
want=$((6 * 26 + 16 * 151 + 120 * 401 + 84 * 121 + 10 * 85))
check "lenet5 has $want trainable parameters" grep -q "trainable parameters: $want," "$tmp/dry.lenet5"
want=$((785 * 256 + 257 * 256 + 257 * 10))
check "mlp has $want trainable parameters" grep -q "trainable parameters: $want," "$tmp/dry.mlp"
n=$(grep -c " concat " "$tmp/dry.inception-mini")
check "inception-mini --dry-run shows $n concat layers, expected >= 2" test "$n" -ge 2

say "inception-mini, 250 steps on 3200 examples"
if train "$tmp/train.log" --data "$FM" --model inception-mini --limit 3200 --batch 32 --steps 250 \
    --log-every 0 --metrics "$tmp/m.jsonl" --summary-json "$tmp/s.json" --quiet; then
    say "$(tail -1 "$tmp/train.log")"
    pyok "inception-mini learns" '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
s = json.load(open(sys.argv[2]))
loss = [r["loss"] for r in lines if r["type"] == "step"]
errs = []
if len(loss) != 250: errs.append("%d step lines with --log-every 0, expected 250" % len(loss))
first, last = sum(loss[:20]) / 20, sum(loss[-20:]) / 20
print("mean loss of the first 20 steps %.4f, of the last 20 %.4f; test accuracy %.4f"
      % (first, last, s["test_accuracy"]))
if not last < 0.6 * first: errs.append("loss did not fall clearly: %.4f -> %.4f" % (first, last))
if not s["test_accuracy"] > 0.4: errs.append("test accuracy %r, expected > 0.4" % s["test_accuracy"])
if s["steps"] != 250 or s["examples"] != 8000: errs.append("steps/examples %r %r" % (s["steps"], s["examples"]))
print("\n".join(errs)); sys.exit(1 if errs else 0)' "$tmp/m.jsonl" "$tmp/s.json"
    python3 -c 'import json, sys
l = [json.loads(x) for x in open(sys.argv[1]) if "\"step\"" in x]
s = [r["loss"] for r in l if r["type"] == "step"]
print("first 20: %.4f, last 20: %.4f" % (sum(s[:20]) / 20, sum(s[-20:]) / 20))' "$tmp/m.jsonl"
else
    bad "training failed"
fi
finish
