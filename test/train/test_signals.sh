#!/usr/bin/env bash
# Stop on signal (issue 5): SIGTERM, then SIGUSR1, to a run with
# --checkpoint-dir: it writes a checkpoint at the next step boundary, says
# so, and exits 0; a twice-interrupted run (SIGINT twice) ends at once with
# status 130. The stop message is printed under --quiet too. Each time
# `--resume` continues, and the run finally ends bitwise equal to an
# uninterrupted one (h5diff of variables and slots).
. "$(dirname "$0")/lib.sh"
need_fm
need_h5diff

ARGS=(--data "$FM" --model lenet5 --limit 6400 --epochs 6 --log-every 0.5)
TOTAL=600
S=$tmp/s

# latest_step: the step of the checkpoint S/latest names (0 if none)
latest_step() {
    local f
    f=$(cat "$S/latest" 2>/dev/null) || { echo 0; return; }
    f=${f#ckpt-}
    echo "${f%.h5}"
}
# interrupt NAME SIGNAL...: starts a resumed run, waits until it wrote a
# checkpoint after the current latest one, then sends the signals (0.05 s
# apart). Leaves the exit status in $rc and the output in $tmp/NAME.log.
interrupt() {
    local name=$1 before pid i
    shift
    before=$(latest_step)
    nice "$PSTRAIN" train "${ARGS[@]}" "${EXTRA[@]}" --checkpoint-dir "$S" --checkpoint-every 50 \
        --resume >"$tmp/$name.log" 2>&1 &
    pid=$!
    for ((i = 0; i < 600; i++)); do
        [ "$(latest_step)" -gt "$before" ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    for sig in "$@"; do
        kill -s "$sig" $pid 2>/dev/null || bad "$name: the run had ended before SIG$sig"
        sleep 0.05
    done
    wait $pid
    rc=$?
}

say "uninterrupted reference run, $TOTAL steps"
train "$tmp/ref.log" "${ARGS[@]}" --checkpoint-dir "$tmp/ref" --summary-json "$tmp/ref.json" \
    --quiet || { bad "reference run failed"; finish; }

stops=()
EXTRA=()
for sig in TERM USR1; do
    # the message is also printed under --quiet (only the progress line is not)
    [ $sig = USR1 ] && EXTRA=(--quiet)
    say "SIG$sig ${EXTRA[*]}"
    interrupt $sig $sig
    check "SIG$sig: exit status $rc, expected 0" test "$rc" = 0
    crash_free "$tmp/$sig.log" || bad "SIG$sig: crash report in the output"
    msg=$(grep -o "signal [0-9]*: stopped at step [0-9]*, checkpoint [^ ]*" "$tmp/$sig.log")
    echo "  $msg"
    n=$(echo "$msg" | sed -n 's/.*stopped at step \([0-9]*\),.*/\1/p')
    if [ -z "$n" ]; then
        bad "SIG$sig: no 'stopped at step N, checkpoint FILE' message"
        tail -3 "$tmp/$sig.log"
        continue
    fi
    check "SIG$sig: message names signal $(kill -l $sig)" grep -q "signal $(kill -l $sig):" <<<"$msg"
    check "SIG$sig: stopped before the end (step $n)" test "$n" -lt $TOTAL
    check "SIG$sig: latest is ckpt-$n.h5" grep -qx "ckpt-$n.h5" "$S/latest"
    s=$("$CKPT_CHECK" "$S/ckpt-$n.h5") || bad "SIG$sig: ckpt-$n.h5 does not verify"
    check "SIG$sig: ckpt-$n.h5 holds step $s" test "$s" = "$n"
    stops+=("$n")
done
[ ${#stops[@]} = 2 ] && check "second stop (${stops[1]}) after the first (${stops[0]})" \
    test "${stops[1]}" -gt "${stops[0]}"

say "SIGINT twice: ends at once"
EXTRA=()
interrupt INT INT INT
check "SIGINT twice: exit status $rc, expected 130" test "$rc" = 130
f=$S/$(cat "$S/latest")
s=$("$CKPT_CHECK" "$f") || bad "after SIGINT twice: latest $f does not verify"
echo "  latest after SIGINT twice: step $s"

say "resume to the end"
train "$tmp/final.log" "${ARGS[@]}" --checkpoint-dir "$S" --resume --summary-json "$tmp/final.json" ||
    bad "final resumed run failed"
grep "resumed from" "$tmp/final.log" | sed 's/^/  /'
if same_vars "$tmp/ref/ckpt-$TOTAL.h5" "$S/ckpt-$TOTAL.h5"; then
    echo "  ckpt-$TOTAL.h5 bitwise equal to the uninterrupted run"
else
    bad "interrupted and resumed run differs from the uninterrupted one"
fi
va=$(jget "$tmp/ref.json" 'j["test_accuracy"]') vb=$(jget "$tmp/final.json" 'j["test_accuracy"]')
check "test accuracy $va (uninterrupted) != $vb (resumed)" test "$va" = "$vb"
finish
