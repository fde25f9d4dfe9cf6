#!/usr/bin/env bash
# jobs/plot-metrics on a generated metrics file: every PNG exists, starts with
# the PNG signature and has the requested size (IHDR); eval points of two
# splits and null values are accepted; bad input fails with a message.
set -u
src=${PSTRAIN_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
plot=$src/jobs/plot-metrics
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot not installed (apt-get install gnuplot-nox)"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-plot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # message, command...
    local msg=$1; shift
    if ! "$@"; then echo "FAIL: $msg"; fail=1; fi
}

# 300 logging intervals over 3 epochs, an eval per epoch on test and val,
# a NaN loss written as null, and the timing object of metrics.h
awk 'BEGIN {
    for (s = 1; s <= 300; s++) {
        e = int((s - 1) / 100)
        loss = 2.3 * exp(-s / 80) + 0.25
        acc = 0.9 - 0.8 * exp(-s / 60)
        lr = 0.01 * 0.5 ^ e
        ips = 9000 + 500 * sin(s / 10)
        if (s == 150)
            printf "{\"type\":\"step\",\"step\":%d,\"epoch\":%d,\"loss\":null,\"accuracy\":%.4f,\"lr\":%g,\"images_per_sec\":%.1f,\"elapsed\":%.2f}\n", s, e, acc, lr, ips, s * 0.1
        else
            printf "{\"type\":\"step\",\"step\":%d,\"epoch\":%d,\"loss\":%.6g,\"accuracy\":%.4f,\"lr\":%g,\"images_per_sec\":%.1f,\"elapsed\":%.2f,\"timing\":{\"wait_data\":0.001,\"pull\":0.002,\"compute\":0.01,\"push\":0.002,\"wait_version\":1e-05,\"ps_apply\":0.001,\"ps_idle\":0.5}}\n", s, e, loss, acc, lr, ips, s * 0.1
        if (s % 100 == 0) {
            printf "{\"type\":\"eval\",\"step\":%d,\"epoch\":%d,\"split\":\"test\",\"accuracy\":%.4f,\"loss\":%.4f,\"examples\":10000}\n", s, e, acc - 0.02, loss + 0.05
            printf "{\"type\":\"eval\",\"step\":%d,\"epoch\":%d,\"split\":\"val\",\"accuracy\":%.4f,\"loss\":%.4f,\"examples\":5000}\n", s, e, acc - 0.01, loss + 0.03
        }
    }
}' >"$tmp/metrics.jsonl"

# u32 big-endian at byte offset $2 of file $1
be32() { od -An -tu1 -j "$2" -N4 "$1" | awk '{print (($1*256+$2)*256+$3)*256+$4}'; }

out=$tmp/plots
if ! "$plot" "$tmp/metrics.jsonl" "$out" --size 640x400 --title "test run" >"$tmp/list" 2>"$tmp/err"; then
    echo "FAIL: plot-metrics exited with an error:"; cat "$tmp/err"; exit 1
fi
for f in loss accuracy images_per_sec learning_rate; do
    p=$out/$f.png
    check "$p listed" grep -qx "$p" "$tmp/list"
    check "$p exists" test -s "$p"
    [ -s "$p" ] || continue
    sig=$(od -An -tx1 -N8 "$p" | tr -d ' \n')
    check "$p PNG signature ($sig)" test "$sig" = "89504e470d0a1a0a"
    chunk=$(od -An -c -j12 -N4 "$p" | tr -d ' \n')
    check "$p first chunk IHDR ($chunk)" test "$chunk" = "IHDR"
    w=$(be32 "$p" 16) h=$(be32 "$p" 20)
    check "$p is 640x400 (got ${w}x${h})" test "$w" = 640 -a "$h" = 400
    # a plot with lines and points is not a blank image: well above the
    # size of an empty 640x400 frame
    sz=$(stat -c %s "$p")
    check "$p has content ($sz bytes)" test "$sz" -gt 6000
done

# default size and output directory = the metrics file's directory
check "default run" "$plot" "$tmp/metrics.jsonl" >/dev/null 2>&1
w=$(be32 "$tmp/loss.png" 16)
check "default width 900 (got $w)" test "$w" = 900

# two files (a requeued job's two starts) plotted as one run, with -o
head -150 "$tmp/metrics.jsonl" >"$tmp/part1.jsonl"
tail -n +151 "$tmp/metrics.jsonl" >"$tmp/part2.jsonl"
check "two input files" "$plot" "$tmp/part1.jsonl" "$tmp/part2.jsonl" -o "$tmp/two" --size 640x400 --title "test run" >/dev/null 2>&1
check "two files plot the same data" cmp -s "$tmp/two/loss.png" "$out/loss.png"
check "two input files, OUTDIR last" "$plot" "$tmp/part1.jsonl" "$tmp/part2.jsonl" "$tmp/three" >/dev/null 2>&1
check "OUTDIR last used" test -s "$tmp/three/accuracy.png"

# errors: no step lines, missing file, bad size
echo '{"type":"eval","step":1,"epoch":0,"split":"test","accuracy":0.5,"loss":1,"examples":10}' >"$tmp/evalonly.jsonl"
"$plot" "$tmp/evalonly.jsonl" "$tmp/x" 2>"$tmp/err" && { echo "FAIL: accepted a file without steps"; fail=1; }
check "message names the missing step lines" grep -q 'no {"type":"step"} lines' "$tmp/err"
"$plot" "$tmp/nonexistent.jsonl" 2>"$tmp/err" && { echo "FAIL: accepted a missing file"; fail=1; }
check "message names the missing file" grep -q nonexistent.jsonl "$tmp/err"
"$plot" "$tmp/metrics.jsonl" --size big 2>"$tmp/err" && { echo "FAIL: accepted --size big"; fail=1; }
check "message explains --size" grep -q 'expected WxH' "$tmp/err"

[ $fail = 0 ] && echo "plot-metrics: all checks passed"
exit $fail
