#!/usr/bin/env bash
# test_plan_cli.sh CASE - `pstrain plan` prints the placement that
# docs/design.md §2 and include/pstrain/placement.h describe, and refuses
# bad arguments with one line and the documented exit status.
#
#   good           the table is consistent (bytes = 4 x shape, each PS's
#                  ranges tile its shard in slab order, per-PS totals, the
#                  imbalance ratio, the header's counts), and each strategy
#                  places as specified: round-robin i mod P, greedy largest
#                  first onto the lightest PS, partition slices along axis 0
#                  on distinct PS then greedy
#   bad-ps         --ps 0: exit 2 (usage), one line naming --ps and the value
#   bad-placement  --placement random: exit 2, one line naming the choices
#   bad-args       other usage errors exit 2 with one line and no output
#   counts         the line 'trainable parameters: N' equals the reference
#                  implementations' count (PyTorch's numel sum over
#                  torchvision's models and the peer's torch_models.py)
#   memory         the memory table: parameters and gradients = the slab
#                  (the placement's total bytes), optimizer slots = their
#                  count x the slab, planned activations <= unplanned, the
#                  total adds up; a model whose activations for --batch
#                  would not fit the address space is still planned (the
#                  arena is only allocated by a step)
set -u
: "${PSTRAIN:?PSTRAIN not set (run through meson test)}"
export LC_ALL=C
case_=${1:?CASE}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-plan.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# refused CODE WORDS... -- ARGS...: `pstrain plan ARGS` exits CODE, prints
# nothing on stdout and exactly one line on stderr containing every WORD
refused() {
    local code=$1 words=()
    shift
    while [ "$1" != -- ]; do words+=("$1"); shift; done
    shift
    "$PSTRAIN" plan "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    echo "pstrain plan $*: exit $rc: $(cat "$tmp/err")"
    [ $rc = "$code" ] || bad "pstrain plan $*: exit $rc, expected $code"
    [ ! -s "$tmp/out" ] || bad "pstrain plan $*: wrote to stdout"
    [ "$(wc -l <"$tmp/err")" = 1 ] || bad "pstrain plan $*: $(wc -l <"$tmp/err") lines on stderr, expected 1"
    for w in "${words[@]}"; do
        grep -qF -- "$w" "$tmp/err" || bad "pstrain plan $*: the message does not name '$w'"
    done
}

# plan CHECK-ARGS -- PLAN-ARGS...: runs `pstrain plan` and checks its table
plan() {
    local check=()
    while [ "$1" != -- ]; do check+=("$1"); shift; done
    shift
    "$PSTRAIN" plan "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    echo "== pstrain plan $*"
    [ $rc = 0 ] || { bad "pstrain plan $*: exit $rc: $(cat "$tmp/err")"; return; }
    [ ! -s "$tmp/err" ] || bad "pstrain plan $*: wrote to stderr: $(head -3 "$tmp/err")"
    python3 - "$tmp/out" "${check[@]}" <<'EOF' || bad "pstrain plan $*: table check failed"
import math, re, sys
from functools import reduce

path, strategy, nps = sys.argv[1], sys.argv[2], int(sys.argv[3])
partition_bytes = int(sys.argv[4]) if len(sys.argv) > 4 else 256 * 1024
batch = int(sys.argv[5]) if len(sys.argv) > 5 else 64
opt = sys.argv[6] if len(sys.argv) > 6 else "momentum"
threads = int(sys.argv[7]) if len(sys.argv) > 7 else 1
text = open(path).read()
print(text, end="")
lines = text.splitlines()
errors = []
def err(msg):
    errors.append(msg)

head = re.match(r"placement (\S+) on (\d+) PS: (\d+) variables, (\d+) ranges, (\d+) bytes$", lines[1])
assert head, "second line is not the placement header: %r" % lines[1]
assert head.group(1) == strategy and int(head.group(2)) == nps, "header %r" % lines[1]
row_re = re.compile(r"^(\S+?)(\[(\d+):(\d+)\])?( \(state\))?\s+(\d+(?:x\d+)*)\s+(\d+)\s+(\d+)\s+(\d+)$")
ps_re = re.compile(r"^PS (\d+) \(rank (\d+)\): (\d+) ranges, (\d+) bytes$")
rows, pslines, imb, trainable, mem = [], {}, None, None, {}
mem_re = re.compile(r"^    (\S.*?)\s+(\d+(?:\.\d)? (?:bytes|KiB|MiB|GiB|TiB))\s+([\d,]+) bytes(?:  (.*))?$")
for l in lines[3:]:
    m = row_re.match(l)
    if m:
        rows.append(dict(name=m.group(1), r0=m.group(3), r1=m.group(4),
                         shape=[int(x) for x in m.group(6).split("x")], bytes=int(m.group(7)),
                         ps=int(m.group(8)), offset=int(m.group(9)), state=bool(m.group(5))))
        continue
    m = ps_re.match(l)
    if m:
        pslines[int(m.group(1))] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
        continue
    m = re.match(r"^imbalance \(max/mean bytes\): ([0-9.]+)$", l)
    if m:
        imb = float(m.group(1))
        continue
    m = re.match(r"^trainable parameters: (\d+)$", l)
    if m:
        trainable = int(m.group(1))
        continue
    m = re.match(r"^  memory of one process for a batch of (\d+)(?: on (\d+) threads)?:$", l)
    if m:
        mem["batch"] = int(m.group(1))
        mem["threads"] = int(m.group(2) or 1)
        continue
    m = mem_re.match(l)
    if m:
        mem[m.group(1)] = int(m.group(3).replace(",", ""))
        mem[m.group(1) + " note"] = m.group(4) or ""
        continue
    err("unexpected line %r" % l)

# the header's counts, bytes = 4 x shape, PS in range
names = []
for r in rows:
    if r["name"] not in names:
        names.append(r["name"])
total = sum(r["bytes"] for r in rows)
if (int(head.group(3)), int(head.group(4)), int(head.group(5))) != (len(names), len(rows), total):
    err("header says %s variables, %s ranges, %s bytes; the table has %d, %d, %d"
        % (head.group(3), head.group(4), head.group(5), len(names), len(rows), total))
state = {r["name"] for r in rows if r["state"]}
if trainable != sum(r["bytes"] for r in rows if r["name"] not in state) // 4:
    err("trainable parameters: %r, the table's non-state variables hold %d"
        % (trainable, sum(r["bytes"] for r in rows if r["name"] not in state) // 4))
for r in rows:
    if r["bytes"] != 4 * reduce(lambda a, b: a * b, r["shape"], 1):
        err("%s: %d bytes for shape %s" % (r["name"], r["bytes"], r["shape"]))
    if not 1 <= r["ps"] <= nps:
        err("%s on PS %d of %d" % (r["name"], r["ps"], nps))

# each PS's ranges tile its shard, in table (slab) order
bytes_of = [0] * (nps + 1)
for p in range(1, nps + 1):
    mine = [r for r in rows if r["ps"] == p]
    at = 0
    for r in mine:
        if r["offset"] != at:
            err("PS %d: %s at offset %d, expected %d" % (p, r["name"], r["offset"], at))
        at = r["offset"] + r["bytes"] // 4
    bytes_of[p] = 4 * at
    if pslines.get(p) != (p, len(mine), 4 * at):
        err("PS %d line %r, expected (rank %d, %d ranges, %d bytes)" % (p, pslines.get(p), p, len(mine), 4 * at))
if sorted(pslines) != list(range(1, nps + 1)):
    err("PS lines for %s" % sorted(pslines))
mean = sum(bytes_of[1:]) / nps
if imb is None or abs(imb - max(bytes_of[1:]) / mean) > 0.0005:
    err("imbalance %r, expected %.3f" % (imb, max(bytes_of[1:]) / mean))

# the memory table
want_rows = ["parameters", "gradients", "optimizer slots", "activations (planned)",
             "activations (unplanned)", "layer scratch", "total"]
missing = [k for k in want_rows if k not in mem]
if missing or mem.get("batch") != batch or mem.get("threads") != threads:
    err("memory table: missing %s, batch %r (expected %d), threads %r (expected %d)"
        % (missing, mem.get("batch"), batch, mem.get("threads"), threads))
else:
    slots = re.match(r"^(\S+): (\d+) slots?$", mem["optimizer slots note"])
    if mem["parameters"] != total or mem["gradients"] != total:
        err("memory: parameters %d, gradients %d bytes; the slab is %d"
            % (mem["parameters"], mem["gradients"], total))
    if not slots or slots.group(1) != opt or mem["optimizer slots"] != int(slots.group(2)) * total \
            or int(slots.group(2)) != {"sgd": 0, "momentum": 1, "rmsprop": 2, "adam": 2}[opt]:
        err("memory: optimizer slots %d bytes (%r) for %s and a %d-byte slab"
            % (mem["optimizer slots"], mem["optimizer slots note"], opt, total))
    if not 0 < mem["activations (planned)"] <= mem["activations (unplanned)"]:
        err("memory: planned activations %d, unplanned %d"
            % (mem["activations (planned)"], mem["activations (unplanned)"]))
    parts = 2 * total + mem["optimizer slots"] + mem["activations (planned)"] + mem["layer scratch"]
    if mem["total"] != parts:
        err("memory: total %d, the lines add up to %d" % (mem["total"], parts))

# slices: contiguous rows covering the variable, each on a different PS
pieces = []  # (name, bytes, slice key) in model order
for n in names:
    parts = [r for r in rows if r["name"] == n]
    if parts[0]["r0"] is None:
        if len(parts) != 1:
            err("%s: %d ranges without slice bounds" % (n, len(parts)))
        continue
    at = 0
    for r in parts:
        if int(r["r0"]) != at or int(r["r1"]) - at != r["shape"][0]:
            err("%s: slice [%s:%s] of %d rows after row %d" % (n, r["r0"], r["r1"], r["shape"][0], at))
        at = int(r["r1"])
    if len({r["ps"] for r in parts}) != len(parts):
        err("%s: two slices on one PS" % n)

def greedy(order):
    """largest first (stable: model order among equal sizes), each to the PS
    with the fewest bytes so far, ties to the lowest index; slices of one
    variable on distinct PS"""
    load, where, used = [0] * (nps + 1), {}, {}
    for i in sorted(range(len(order)), key=lambda i: -order[i]["bytes"]):
        r = order[i]
        taken = used.setdefault(r["name"], set())
        p = min((q for q in range(1, nps + 1) if q not in taken), key=lambda q: (load[q], q))
        load[p] += r["bytes"]
        taken.add(p)
        where[i] = p
    return [where[i] for i in range(len(order))]

got = [r["ps"] for r in rows]
if strategy == "round-robin":
    want = [names.index(r["name"]) % nps + 1 for r in rows]
    if any(r["r0"] is not None for r in rows):
        err("round-robin split a variable")
elif strategy == "greedy":
    want = greedy(rows)
    if any(r["r0"] is not None for r in rows):
        err("greedy split a variable")
else:
    want = greedy(rows)
    for n in names:
        parts = [r for r in rows if r["name"] == n]
        nbytes = sum(r["bytes"] for r in parts)
        nrows = sum(r["shape"][0] for r in parts)
        expect = 1 if nbytes <= partition_bytes else min(nps, nrows, math.ceil(nbytes / partition_bytes))
        if len(parts) != expect:
            err("%s (%d bytes, %d rows): %d slices, expected %d" % (n, nbytes, nrows, len(parts), expect))
        sizes = [r["shape"][0] for r in parts]
        if max(sizes) - min(sizes) > 1:
            err("%s: slices of %s rows, expected nearly equal" % (n, sizes))
if got != want:
    for r, w in zip(rows, want):
        if r["ps"] != w:
            err("%s on PS %d, %s places it on PS %d" % (r["name"], r["ps"], strategy, w))
for e in errors:
    print("FAIL:", e)
sys.exit(1 if errors else 0)
EOF
}

# count N PLAN-ARGS...: `pstrain plan --ps 1 PLAN-ARGS` says N trainable parameters
count() {
    local want=$1
    shift
    "$PSTRAIN" plan --ps 1 "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$? got
    got=$(grep '^trainable parameters: ' "$tmp/out")
    echo "pstrain plan $*: exit $rc: $got"
    [ $rc = 0 ] || { bad "pstrain plan $*: exit $rc: $(cat "$tmp/err")"; return; }
    [ "$got" = "trainable parameters: $want" ] || bad "pstrain plan $*: '$got', expected $want"
}

case $case_ in
good)
    plan partition 3 -- --model inception-mini --ps 3 --placement partition --height 32 --width 32 --channels 3
    plan round-robin 2 -- --model lenet5 --ps 2
    plan round-robin 3 -- --model inception-mini --ps 3 --placement round-robin
    plan greedy 3 -- --model lenet5 --ps 3 --placement greedy
    plan greedy 2 -- --model inception-mini --ps 2 --placement greedy --classes 7
    # fc1/kernel (192,000 bytes, 400 rows) in 3 slices of 134/133/133 rows
    plan partition 3 65536 -- --model lenet5 --ps 3 --placement partition --partition-bytes 65536
    # fc1/kernel of mlp (802,816 bytes): 9 pieces of 100,000 bytes capped at P = 4
    plan partition 4 100000 -- --model mlp --ps 4 --placement partition --partition-bytes 100000
    # more PS than pieces: one PS stays empty
    plan round-robin 12 -- --model lenet5 --ps 12
    ;;
counts)
    count 272474 --model resnet-20 --height 32 --width 32 --channels 3 --classes 10
    count 272186 --model resnet-20 --height 28 --width 28 --channels 1 --classes 10
    count 855770 --model resnet-56 --height 32 --width 32 --channels 3 --classes 10
    count 25557032 --model resnet-50 --height 224 --width 224 --channels 3 --classes 1000
    count 23522250 --model resnet-50 --height 64 --width 64 --channels 1 --classes 10
    count 23834568 --model inception-v3 --height 299 --width 299 --channels 3 --classes 1000
    count 21806058 --model inception-v3 --height 75 --width 75 --channels 3 --classes 10
    refused 1 inception-v3 74x80x3 75x75 -- --model inception-v3 --ps 1 --height 74 --width 80 --channels 3
    ;;
memory)
    plan round-robin 1 262144 8 adam -- --model lenet5 --ps 1 --batch 8 --optimizer adam
    plan round-robin 2 262144 1 sgd -- --model inception-mini --ps 2 --batch 1 --optimizer sgd
    plan round-robin 1 262144 64 momentum -- --model resnet-20 --ps 1 --height 32 --width 32 --channels 3
    # resnet-56 on 32x32x3 at batch 8192: tens of GiB of activations, planned
    # under a 2 GiB address space because nothing allocates them (not in
    # AddressSanitizer builds: its shadow memory alone reserves terabytes of
    # address space, so any ulimit -v fails at start-up)
    if ldd "$PSTRAIN" | grep -q libasan; then
        echo "== skipped under AddressSanitizer: resnet-56 at batch 8192 under ulimit -v 2 GiB"
    else
        (ulimit -v 2097152 && plan round-robin 1 262144 8192 rmsprop -- --model resnet-56 --ps 1 \
            --height 32 --width 32 --channels 3 --batch 8192 --optimizer rmsprop && exit $fail) ||
            bad "resnet-56 at batch 8192 under ulimit -v 2 GiB"
    fi
    grep -F "activations (planned)" "$tmp/out"
    # on 2 threads each float of the arena belongs to one thread (plan.c): the
    # header says so and the table still adds up; --threads 0 is the affinity
    # mask's CPUs (exactly 1 under taskset -c 0)
    plan round-robin 1 262144 64 momentum 2 -- --model inception-mini --ps 1 --threads 2
    grep -F "activations (planned)" "$tmp/out"
    if command -v taskset >/dev/null; then
        (taskset -p -c 0 $BASHPID >/dev/null && plan round-robin 1 262144 64 momentum 1 -- \
            --model inception-mini --ps 1 --threads 0 && exit $fail) || bad "--threads 0 on one CPU"
    fi
    ;;
bad-ps)
    refused 2 --ps "'0'" -- --model lenet5 --ps 0
    refused 2 --ps "'-1'" -- --model lenet5 --ps -1
    refused 2 --ps "'two'" -- --model lenet5 --ps two
    ;;
bad-placement)
    refused 2 --placement "'random'" round-robin greedy partition -- --model lenet5 --ps 2 --placement random
    ;;
bad-args)
    refused 2 --model --ps -- --ps 2
    refused 2 --model --ps -- --model lenet5
    refused 2 --ps "missing value" -- --model lenet5 --ps
    refused 2 --partition-bytes "'0'" -- --model lenet5 --ps 2 --placement partition --partition-bytes 0
    refused 2 --bogus -- --model lenet5 --ps 2 --bogus
    refused 2 --threads "'-1'" 0..1024 -- --model lenet5 --ps 2 --threads -1
    refused 2 --threads "'two'" -- --model lenet5 --ps 2 --threads two
    # an unknown model is a usage error naming the table's models; an image
    # too small for the model is refused by the model code: exit 1 (failure)
    refused 2 "'foo'" mlp lenet5 inception-mini -- --model foo --ps 2
    refused 1 lenet5 2x28x1 -- --model lenet5 --ps 2 --height 2
    ;;
*)
    echo "unknown case $case_" >&2
    exit 2
    ;;
esac
[ $fail = 0 ] && echo PASS
exit $fail
