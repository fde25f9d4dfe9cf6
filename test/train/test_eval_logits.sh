#!/usr/bin/env bash
# pstrain eval --logits FILE.npy: every example's logits, float32
# [examples][classes] in the split's order, as a NumPy .npy file. Checked
# without numpy: the header's shape and dtype, the file size, and that the
# softmax cross-entropy and the argmax of the logits give the loss and the
# accuracy eval reports. A failed eval leaves no logits file.
. "$(dirname "$0")/lib.sh"

"$MKDATA" "$tmp/d.h5" 64 37 28 28 1 10 || exit 1
train "$tmp/train.log" --data "$tmp/d.h5" --model lenet5 --steps 3 --batch 16 --optimizer sgd \
    --checkpoint-dir "$tmp/ck" --quiet || exit 1

say "--logits with batches of 16 over 37 test examples"
h5dump -d /test/labels -b LE -o "$tmp/labels.bin" "$tmp/d.h5" >/dev/null || exit 1
if "$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$tmp/ck" --batch 16 --logits "$tmp/l.npy" \
    --summary-json "$tmp/e.json" --quiet >"$tmp/eval.out" 2>&1; then
    pyok "logits file" '
import ast, json, math, struct, sys
raw = open(sys.argv[1], "rb").read()
s = json.load(open(sys.argv[2]))
errs = []
if raw[:8] != b"\x93NUMPY\x01\x00": sys.exit("bad magic/version %r" % raw[:8])
hlen = struct.unpack("<H", raw[8:10])[0]
if (10 + hlen) % 64: errs.append("header of %d bytes is not 64-byte aligned" % (10 + hlen))
hdr = ast.literal_eval(raw[10:10 + hlen].decode("latin1"))
if raw[10 + hlen - 1:10 + hlen] != b"\n": errs.append("header does not end in a newline")
if hdr != {"descr": "<f4", "fortran_order": False, "shape": (37, 10)}: errs.append("header %r" % hdr)
data = raw[10 + hlen:]
if len(data) != 37 * 10 * 4: sys.exit("%d data bytes, expected %d" % (len(data), 37 * 40))
lg = struct.unpack("<370f", data)
lb = open(sys.argv[3], "rb").read()
labels = struct.unpack("<%di" % (len(lb) // 4), lb)
if len(labels) != 37: sys.exit("%d labels" % len(labels))
loss = correct = 0
for i, y in enumerate(labels):
    row = lg[10 * i:10 * i + 10]
    m = max(row)
    loss += m + math.log(sum(math.exp(v - m) for v in row)) - row[y]
    correct += row.index(m) == y
loss /= len(labels)
print("loss from the logits %.6f, eval %.6f; accuracy %.4f, eval %.4f"
      % (loss, s["loss"], correct / len(labels), s["accuracy"]))
if abs(loss - s["loss"]) > 1e-5 * max(1, abs(s["loss"])): errs.append("loss differs")
if correct != round(s["accuracy"] * len(labels)): errs.append("accuracy differs")
print("\n".join(errs)); sys.exit(1 if errs else 0)' "$tmp/l.npy" "$tmp/e.json" \
        "$tmp/labels.bin"
else
    bad "eval --logits failed: $(head -3 "$tmp/eval.out")"
fi

say "a failed eval leaves no logits file"
"$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$tmp/ck" --split val --logits "$tmp/v.npy" \
    >"$tmp/err.out" 2>&1
rc=$?
check "eval of a missing split exits 1 (got $rc)" test "$rc" = 1
check "no logits file after the failed eval" test ! -e "$tmp/v.npy"
check "no temporary of v.npy left: $(ls -A "$tmp" | grep v.npy)" test -z "$(ls -A "$tmp" | grep v.npy)"
"$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$tmp/ck" --logits "$tmp/nodir/l.npy" \
    >"$tmp/err2.out" 2>&1
rc=$?
check "--logits in a missing directory exits 1 (got $rc)" test "$rc" = 1
check "--logits in a missing directory: one line naming the file" \
    grep -q "^pstrain eval: $tmp/nodir/l.npy: cannot create" "$tmp/err2.out"
check "one line" test "$(wc -l <"$tmp/err2.out")" = 1
finish
