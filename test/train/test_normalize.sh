#!/usr/bin/env bash
# --normalize dataset|imagenet|M1,M2,M3/S1,S2,S3 (train and eval):
#   - dataset (the default) and the data set's own values given by hand give
#     bitwise the variables of a run without the flag; imagenet gives others;
#   - the checkpoint records the choice (attribute normalize); `pstrain eval`
#     uses it unless --normalize is given, and a given one changes the
#     result;
#   - --resume takes the checkpoint's: a run resumed without the flag ends
#     bitwise where an uninterrupted --normalize imagenet run ends; a
#     --normalize that differs from the checkpoint's is refused (exit 1, one
#     line naming the attribute and the flag);
#   - a checkpoint without the attribute (written before it was recorded)
#     reads as dataset;
#   - bad values are one-line usage errors naming the flag (exit 2), and a
#     value count that does not fit the channels an error naming it (exit 1).
#
#   test_normalize.sh ... single   # one process
#   test_normalize.sh ... dist     # mpirun: root, 1 PS, 1 worker
. "$(dirname "$0")/lib.sh"
mode=${4:-single}
export BLIS_NUM_THREADS=1
need_h5diff

"$MKDATA" "$tmp/d.h5" 320 64 16 16 3 5 || exit 1
"$MKDATA" "$tmp/g.h5" 64 16 12 12 1 5 || exit 1
if [ "$mode" = dist ]; then
    launch=(timeout -k 5 120 "${MPIEXEC_CMD[@]}" -n 3 "$PSTRAIN")
    extra=(--ps 1)
else
    launch=(timeout -k 5 120 "$PSTRAIN")
    extra=()
fi
B=(--data "$tmp/d.h5" --model lenet5 --batch 16 --seed 3 "${extra[@]}")

# attr FILE: the checkpoint's normalize attribute ("" when absent)
attr() { h5dump -a normalize "$1" 2>/dev/null | sed -n 's/^ *(0): "\(.*\)"$/\1/p'; }
# means FILE: the data set's mean and std attributes as M1,M2,M3/S1,S2,S3 (%.9g)
means() {
    h5dump -a mean -a std "$1" | awk '/\(0\)/ {sub(/.*\(0\): /, ""); gsub(/ /, ""); v[n++] = $0}
        END {print v[0] "/" v[1]}'
}

say "$mode: the default is bitwise dataset's"
run "$tmp/a.log" train "${B[@]}" --steps 10 --dump-params "$tmp/a.bin" --quiet || bad "default run"
run "$tmp/b.log" train "${B[@]}" --steps 10 --normalize dataset --dump-params "$tmp/b.bin" \
    --quiet || bad "--normalize dataset run"
check "--normalize dataset == default" cmp -s "$tmp/a.bin" "$tmp/b.bin"
m=$(means "$tmp/d.h5")
run "$tmp/c.log" train "${B[@]}" --steps 10 --normalize "$m" --dump-params "$tmp/c.bin" \
    --quiet || bad "--normalize $m run"
check "--normalize $m (the data set's own) == default" cmp -s "$tmp/a.bin" "$tmp/c.bin"

say "$mode: imagenet, recorded and used by eval and --resume"
run "$tmp/i.log" train "${B[@]}" --steps 20 --normalize imagenet --dump-params "$tmp/i.bin" \
    --checkpoint-dir "$tmp/ck" --checkpoint-every 10 --quiet || bad "imagenet run"
check "imagenet changes the run" bash -c "! cmp -s '$tmp/a.bin' '$tmp/i.bin'"
got=$(attr "$tmp/ck/ckpt-20.h5")
check "attribute normalize is imagenet (got '$got')" test "$got" = imagenet
ev() { "$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$tmp/ck/ckpt-20.h5" --quiet "$@" |
    sed -n 2p; }
e0=$(ev) e1=$(ev --normalize imagenet) e2=$(ev --normalize dataset)
check "eval takes the checkpoint's ($e0 / $e1)" test -n "$e0" -a "$e0" = "$e1"
check "eval --normalize dataset differs ($e2)" test -n "$e2" -a "$e0" != "$e2"
mkdir -p "$tmp/r" && cp "$tmp/ck/ckpt-10.h5" "$tmp/r/"
run "$tmp/r.log" train "${B[@]}" --steps 20 --resume "$tmp/r/ckpt-10.h5" --dump-params \
    "$tmp/r.bin" --quiet || bad "resume without --normalize"
check "resumed == uninterrupted imagenet run" cmp -s "$tmp/i.bin" "$tmp/r.bin"
"${launch[@]}" train "${B[@]}" --steps 20 --resume "$tmp/r/ckpt-10.h5" --normalize dataset \
    --quiet >"$tmp/x.log" 2>&1
rc=$?
check "resume with another --normalize exits 1 (got $rc)" test $rc = 1
check "  and says why: $(grep -m1 normalize "$tmp/x.log")" grep -q \
    "attribute normalize is 'imagenet' but this run uses --normalize dataset" "$tmp/x.log"
run "$tmp/s.log" train "${B[@]}" --steps 20 --resume "$tmp/r/ckpt-10.h5" --normalize imagenet \
    --dump-params "$tmp/s.bin" --quiet || bad "resume with the same --normalize"
check "resumed with the same --normalize == uninterrupted" cmp -s "$tmp/i.bin" "$tmp/s.bin"

say "$mode: a checkpoint without the attribute reads as dataset"
run "$tmp/o.log" train "${B[@]}" --steps 10 --checkpoint-dir "$tmp/old" --quiet || bad "old run"
o=$tmp/old/ckpt-10.h5
check "the default records dataset" test "$(attr "$o")" = dataset
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
    /usr/bin/python3 -c 'import h5py, sys
with h5py.File(sys.argv[1], "r+") as f: del f.attrs["normalize"]' "$o"
    check "attribute removed" test -z "$(attr "$o")"
    eo=$("$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$o" --quiet | sed -n 2p)
    ed=$("$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$o" --quiet --normalize dataset |
        sed -n 2p)
    check "eval of it == --normalize dataset ($eo)" test -n "$eo" -a "$eo" = "$ed"
    "${launch[@]}" train "${B[@]}" --steps 20 --resume "$o" --normalize imagenet --quiet \
        >"$tmp/y.log" 2>&1
    check "resuming it with --normalize imagenet is refused" grep -q \
        "attribute normalize is 'dataset' but this run uses --normalize imagenet" "$tmp/y.log"
else
    say "  (python3-h5py missing: skipped)"
fi

if [ "$mode" = single ]; then
    say "errors"
    for v in foo 0.5 0.5/0 1.5/1 0.1,0.2/0.3 0.1,0.2,0.3,0.4,0.5/1,1,1,1,1 /; do
        "$PSTRAIN" train "${B[@]}" --steps 1 --normalize "$v" >"$tmp/e.log" 2>&1
        rc=$?
        check "--normalize '$v' exits 2 (got $rc)" test $rc = 2
        check "  one line naming the flag: $(head -1 "$tmp/e.log")" sh -c \
            "test \$(wc -l <'$tmp/e.log') = 1 && grep -q -- \"--normalize: expected dataset, imagenet\" '$tmp/e.log'"
    done
    "$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$tmp/ck" --normalize 2/1 >"$tmp/e.log" 2>&1
    rc=$?
    check "eval --normalize 2/1 exits 2 (got $rc)" test $rc = 2
    check "  naming the flag" grep -q -- "--normalize: expected" "$tmp/e.log"
    "$PSTRAIN" train --data "$tmp/g.h5" --model lenet5 --batch 16 --steps 1 --normalize imagenet \
        >"$tmp/e.log" 2>&1
    rc=$?
    check "imagenet on 1-channel images exits 1 (got $rc)" test $rc = 1
    check "  and says why: $(cat "$tmp/e.log")" grep -q \
        "normalize imagenet has values for 3 channels, but .* has 1-channel images: expected 1 mean and 1 std" \
        "$tmp/e.log"
    "$PSTRAIN" eval --data "$tmp/g.h5" --checkpoint "$tmp/ck" >"$tmp/e.log" 2>&1
    rc=$?
    check "eval of a 3-channel checkpoint on 1-channel data exits 1 (got $rc)" test $rc = 1
    check "  naming the shapes: $(cat "$tmp/e.log")" grep -q "checkpoint is for 16x16x3" "$tmp/e.log"
    run "$tmp/g.log" train --data "$tmp/g.h5" --model lenet5 --batch 16 --steps 1 \
        --checkpoint-dir "$tmp/gck" --quiet || bad "1-channel run"
    "$PSTRAIN" eval --data "$tmp/g.h5" --checkpoint "$tmp/gck" --normalize imagenet \
        >"$tmp/e.log" 2>&1
    rc=$?
    check "eval --normalize imagenet on 1-channel images exits 1 (got $rc)" test $rc = 1
    check "  and says why: $(cat "$tmp/e.log")" grep -q \
        -- "--normalize imagenet has values for 3 channels" "$tmp/e.log"
fi
finish
