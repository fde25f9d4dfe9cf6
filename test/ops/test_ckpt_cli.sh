#!/usr/bin/env bash
# Checkpoints as input and outputs as hazards, through `pstrain train`:
# hand-made checkpoints with attributes out of range are refused with one
# line naming the attribute, its value and the range (no crash, no silent
# truncation); `--resume DIR` skips a damaged newest checkpoint with a
# warning and resumes from the older good one.
# Arguments: those of test/train/lib.sh; CKPT_ATTR (environment) sets an
# integer attribute of a checkpoint.
. "$(dirname "$0")/../train/lib.sh"
: "${CKPT_ATTR:?CKPT_ATTR not set}"

# err_case NAME 'NEEDLE1|NEEDLE2...' CMD ARGS...: CMD exits 1..125 with one
# line on stderr holding every needle, and no crash.
err_case() {
    local name=$1 needles=$2 rc n lines
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc = 0 ] || [ $rc -ge 126 ]; then bad "$name: exit status $rc, expected 1..125"; fi
    crash_free "$tmp/err" || { bad "$name: crash:"; head -5 "$tmp/err" | sed 's/^/    /'; }
    lines=$(grep -c . "$tmp/err")
    [ "$lines" = 1 ] || { bad "$name: $lines lines on stderr, expected one"; head -5 "$tmp/err"; }
    local IFS='|'
    for n in $needles; do
        grep -qF -- "$n" "$tmp/err" || bad "$name: message does not mention '$n': $(head -1 "$tmp/err")"
    done
    echo "  $name (exit $rc): $(head -1 "$tmp/err")"
}

d=$tmp
"$MKDATA" "$d/ok.h5" 640 100 28 28 1 10 || { echo "mkdata failed"; exit 1; }
T=("$PSTRAIN" train --quiet --data "$d/ok.h5" --model mlp)

say "checkpoint attributes out of range"
"${T[@]}" --steps 3 --checkpoint-dir "$d/ck" >"$tmp/log" 2>&1 || { bad "first run"; cat "$tmp/log"; }
"${T[@]}" --steps 6 --checkpoint-dir "$d/ck" --resume >"$tmp/log" 2>&1 || { bad "second run"; cat "$tmp/log"; }
attr_case() { # attribute value shown-value
    cp "$d/ck/ckpt-6.h5" "$d/bad.h5"
    "$CKPT_ATTR" "$d/bad.h5" "$1" "$2" || bad "ckpt_attr $1 $2"
    err_case "resume with $1 = $2" "bad.h5|attribute $1|$3|expected" "${T[@]}" --steps 10 \
        --resume "$d/bad.h5"
}
# -1 wrote before the last-losses ring; INT64_MAX overflowed; 2^31 became an int
attr_case global_step -1 -1
attr_case global_step 9223372036854775807 9223372036854775807
attr_case examples 9223372036854775807 9223372036854775807
attr_case examples -64 -64
attr_case epoch 2147483648 2147483648
attr_case epoch_batch -1 -1
attr_case batch 4294967360 4294967360
attr_case height 4294967324 4294967324
attr_case seed -1 -1
cp "$d/ck/ckpt-6.h5" "$d/bad.h5"
"$CKPT_ATTR" "$d/bad.h5" global_step -1
err_case "eval with global_step = -1" "bad.h5|attribute global_step" "$PSTRAIN" eval --quiet \
    --data "$d/ok.h5" --checkpoint "$d/bad.h5"

say "--resume DIR skips a damaged newest checkpoint"
cp "$d/ck/ckpt-6.h5" "$d/ck/ckpt-9.h5"
"$CKPT_ATTR" "$d/ck/ckpt-9.h5" global_step -1
"${T[@]}" --steps 8 --checkpoint-dir "$d/ck" --resume >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 0 ] || bad "resume past a damaged checkpoint: exit $rc: $(head -3 "$tmp/err")"
grep -q "warning: skipping damaged checkpoint .*ckpt-9.h5: attribute global_step is -1" "$tmp/err" ||
    bad "no warning naming the damaged ckpt-9.h5 and why: $(head -3 "$tmp/err")"
crash_free "$tmp/err" || bad "crash while skipping a damaged checkpoint"
[ "$("$CKPT_CHECK" "$d/ck/ckpt-8.h5" 2>&1)" = 8 ] || bad "no good ckpt-8.h5 after the resume from step 6"

say "outputs checked at start-up"
# each would have trained for ages first (timeout: the old code did)
mkfifo "$d/fifo"
err_case "summary in a missing directory" "--summary-json|$d/nodir/s.json" timeout 30 "${T[@]}" \
    --epochs 100000 --summary-json "$d/nodir/s.json"
err_case "dump in a missing directory" "--dump-params|$d/nodir/p.bin" timeout 30 "${T[@]}" \
    --epochs 100000 --dump-params "$d/nodir/p.bin"
err_case "metrics to a FIFO" "--metrics|$d/fifo|not a regular file" timeout 30 "${T[@]}" \
    --epochs 100000 --metrics "$d/fifo"
err_case "summary to a FIFO" "--summary-json|$d/fifo|not a regular file" timeout 30 "${T[@]}" \
    --epochs 100000 --summary-json "$d/fifo"
err_case "summary into a directory" "--summary-json|is a directory" timeout 30 "${T[@]}" \
    --epochs 100000 --summary-json "$d"
# our own standard output stays allowed, even when it is a pipe
"${T[@]}" --steps 2 --summary-json /dev/stdout 2>"$tmp/err" | grep -q '"steps": 2' ||
    bad "summary to /dev/stdout through a pipe: $(head -2 "$tmp/err")"
# a metrics file that cannot be written (a full device) is an error, not exit 0
if [ -w /dev/full ]; then
    err_case "metrics on a full device" "/dev/full|write error|metrics" "${T[@]}" --steps 3 \
        --log-every 0 --metrics /dev/full
fi

say "one writer per checkpoint directory"
"$PSTRAIN" train --quiet --data "$d/ok.h5" --model mlp --epochs 100000 --checkpoint-dir "$d/ck2" \
    >"$tmp/a.log" 2>&1 &
apid=$!
for _ in $(seq 600); do grep -q "^pid $apid " "$d/ck2/lock" 2>/dev/null && break; sleep 0.1; done
err_case "second writer" "$d/ck2|in use|pid $apid|$(hostname)" "${T[@]}" --steps 3 \
    --checkpoint-dir "$d/ck2"
# under mpirun the root is refused the same way, and no rank hangs
timeout 120 "${MPIEXEC_CMD[@]}" -n 3 "$PSTRAIN" train --quiet --data "$d/ok.h5" --model mlp \
    --ps 1 --steps 3 --checkpoint-dir "$d/ck2" >"$tmp/out" 2>"$tmp/err"
rc=$?
{ [ $rc != 0 ] && [ $rc -lt 124 ]; } || bad "second writer under mpirun: exit $rc"
grep -q "ck2 is in use by another run: pid $apid on host" "$tmp/err" ||
    bad "second writer under mpirun: $(head -2 "$tmp/err")"
echo "  second writer under mpirun (exit $rc): $(grep -m1 'in use' "$tmp/err")"
# evals read the directory while it is written (they take no lock)
"$PSTRAIN" eval --quiet --data "$d/ok.h5" --checkpoint "$d/ck" >"$tmp/out" 2>&1 ||
    bad "eval beside a run: $(head -2 "$tmp/out")"
kill -TERM $apid
wait $apid
arc=$?
[ $arc = 0 ] || bad "the first run, stopped by SIGTERM, exited $arc: $(tail -2 "$tmp/a.log")"
"${T[@]}" --steps 3 --checkpoint-dir "$d/ck2" --resume >"$tmp/out" 2>&1 ||
    bad "a writer after the first ended: $(head -2 "$tmp/out")"
finish
