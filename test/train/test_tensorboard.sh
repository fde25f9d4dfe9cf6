#!/usr/bin/env bash
# --tensorboard DIR, in one process ("single", suite cli) or under mpirun -n 3
# (root, 1 PS, 1 worker: "dist", suite mpi; 4th argument): a run and its
# resumption write two event files in DIR whose records tb_read.py decodes
# with Debian's protobuf library and protoc and checks with python3-crc32c
# against the --metrics log (every step and eval record, the same scalars,
# steps that continue); a flipped byte fails the check (control); a DIR that
# cannot be made is refused before any work (exit 1, one line naming it); a
# write error later (a file-size limit) warns once and the run ends well.
. "$(dirname "$0")/lib.sh"
MODE=${4:-single}
PY=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)
if ! "$PY" -c 'import google.protobuf, crc32c' 2>/dev/null || ! command -v protoc >/dev/null; then
    echo "SKIP: $PY cannot import google.protobuf and crc32c, or no protoc (Debian packages" \
        "python3-protobuf python3-crc32c protobuf-compiler)"
    exit 77
fi
mkdir -p "$tmp/pb"
protoc --proto_path="$here" --python_out="$tmp/pb" "$here/tb_event.proto" ||
    { echo "protoc failed"; exit 1; }
d=$tmp
"$MKDATA" "$d/ok.h5" 640 100 8 8 1 4 || { echo "mkdata failed"; exit 1; }
if [ "$MODE" = dist ]; then
    command -v "$MPIEXEC" >/dev/null || { echo "SKIP: no MPI launcher ($MPIEXEC)"; exit 77; }
    RUN=(timeout 120 "${MPIEXEC_CMD[@]}" -n 3 "$PSTRAIN" train --ps 1)
    S=30 N=60 LE=0.001 # 40 steps per epoch (one worker); the root logs at its ticks
else
    RUN=("$PSTRAIN" train)
    S=50 N=100 LE=0
fi
T=("${RUN[@]}" --data "$d/ok.h5" --model mlp --batch 16 --log-every $LE --eval-every 1
    --checkpoint-dir "$d/ck" --metrics "$d/m.jsonl" --tensorboard "$d/tb/run")

say "a run and its resumption ($MODE)"
t0=$(date +%s.%N)
"${T[@]}" --steps $S >"$d/out1" 2>&1 || { bad "first run: exit $?"; tail -5 "$d/out1"; }
"${T[@]}" --steps $N --resume >"$d/out2" 2>&1 || { bad "resumed run: exit $?"; tail -5 "$d/out2"; }
t1=$(date +%s.%N)
mapfile -t files < <(ls -1rt "$d/tb/run"/events.out.tfevents.* 2>/dev/null)
[ ${#files[@]} = 2 ] || bad "${#files[@]} event files in $d/tb/run, expected 2: ${files[*]}"
if [ ${#files[@]} = 2 ]; then
    out=$("$PY" "$here/tb_read.py" "$tmp/pb" "$d/m.jsonl" "$t0" "$t1" "${files[@]}" \
        --resumed-at $S 2>&1) || bad "event files against the metrics log: $out"
    echo "  $out" | tail -1
    # the log has every step of both runs and their evaluations
    pyok "the metrics log covers steps 1..$N" 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
s = [x["step"] for x in r if x["type"] == "step"]
ev = [x["step"] for x in r if x["type"] == "eval"]
n, S = int(sys.argv[2]), int(sys.argv[3])
if s != list(range(1, n + 1)) and sys.argv[4] == "single": sys.exit("steps %r" % s)
if s[-1] != n or S not in s: sys.exit("steps %r" % s)
if S not in ev or n not in ev: sys.exit("evaluations at %r" % ev)' "$d/m.jsonl" $N $S "$MODE"

    say "control: a flipped byte fails the check"
    cp "${files[1]}" "$d/flipped" || bad "copy failed"
    "$PY" -c 'import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[len(b) // 2] ^= 0x10
open(sys.argv[1], "wb").write(b)' "$d/flipped"
    mv "$d/flipped" "$d/tb/$(basename "${files[1]}")"
    out=$("$PY" "$here/tb_read.py" "$tmp/pb" "$d/m.jsonl" "$t0" "$t1" "${files[0]}" \
        "$d/tb/$(basename "${files[1]}")" --resumed-at $S 2>&1) &&
        bad "a flipped byte went unnoticed"
    grep -q "CRC mismatch" <<<"$out" || bad "a flipped byte: no CRC mismatch reported: $out"
fi

if [ "$MODE" = single ]; then
    say "a DIR that cannot be made"
    : >"$d/file"
    for dir in "$d/file" "$d/file/tb"; do
        rm -rf "$d/ck2"
        "${RUN[@]}" --data "$d/ok.h5" --model mlp --steps 5 --checkpoint-dir "$d/ck2" \
            --tensorboard "$dir" >"$d/out" 2>&1
        rc=$?
        [ $rc = 1 ] || bad "--tensorboard $dir: exit $rc, expected 1"
        [ "$(wc -l <"$d/out")" = 1 ] || bad "--tensorboard $dir: not one line: $(cat "$d/out")"
        grep -q "^pstrain train: --tensorboard: $dir: .*not a directory" "$d/out" ||
            bad "--tensorboard $dir: message does not name it: $(cat "$d/out")"
        [ ! -e "$d/ck2" ] || bad "--tensorboard $dir: work was done before the refusal"
    done

    say "a write error later: one warning, the run goes on"
    # 8 KiB per file: the event file outgrows it after a few dozen records
    # (--quiet: the limit holds for the redirected output too)
    (
        trap '' XFSZ
        ulimit -f 8
        exec "$PSTRAIN" train --data "$d/ok.h5" --model mlp --batch 16 --log-every 0 --steps 200 \
            --quiet --tensorboard "$d/tbfull"
    ) >"$d/out" 2>&1
    rc=$?
    [ $rc = 0 ] || { bad "file-size limit: exit $rc, expected 0"; tail -3 "$d/out"; }
    n=$(grep -c "warning: .*/tbfull/events.out.tfevents.*: write error on the TensorBoard event file: File too large; no more TensorBoard records are written, training goes on" "$d/out")
    [ "$n" = 1 ] || bad "file-size limit: $n warnings, expected 1: $(grep -i tensorboard "$d/out" | head -3)"
    grep -q "^trained mlp: step 200/200" "$d/out" || bad "file-size limit: no final line: $(tail -2 "$d/out")"
fi
finish
