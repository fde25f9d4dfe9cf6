#!/usr/bin/env bash
# test_comm_dtype.sh FM MKDATA CKPT_CHECK SCENARIO - --comm-dtype bf16
# (docs/design.md §3, "Transfer type") under the MPI launcher.
#   bitwise   LeNet-5 on a small generated set, 2 sync workers: bf16 final
#             variables bitwise equal for --ps 1/2/3, two placements and 2
#             PS threads, and different from fp32's; the same for a model
#             with batch norm (inception-mini, --ps 1 and 3); resumed bf16 equal to an
#             uninterrupted run; the summary's bytes per step halve (fp32: 4
#             bytes a parameter each way); async bf16 (SGD through the PS's
#             slots, and Adam) sees every example once
#   fashion   LeNet-5 on Fashion-MNIST, 1 epoch, 2 sync workers, the same
#             seed: bf16 test accuracy within 0.005 of fp32's
. "$(dirname "$0")/lib.sh"
SCEN=${4:?scenario}
command -v "$MPIEXEC" >/dev/null || { echo "SKIP: no MPI launcher ($MPIEXEC)"; exit 77; }
launch=(timeout 120 "${MPIEXEC_CMD[@]}")
# dist NP ARGS...: pstrain train under the launcher, log to $tmp/log
dist() {
    local np=$1
    shift
    launch=(timeout 300 "${MPIEXEC_CMD[@]}" -n "$np" "$PSTRAIN")
    run "$tmp/log" train --quiet "$@"
}
same() { cmp "$1" "$2" >/dev/null 2>&1 || { bad "$3"; cmp "$1" "$2" 2>&1 | sed 's/^/    /'; }; }

case $SCEN in
bitwise)
    "$MKDATA" "$tmp/img.h5" 256 64 28 28 1 10 || { echo "mkdata failed"; exit 1; }
    A=(--data "$tmp/img.h5" --model lenet5 --epochs 2)
    say "fp32 and bf16, --ps 1"
    dist 4 "${A[@]}" --ps 1 --dump-params "$tmp/f.bin" --summary-json "$tmp/f.json" || bad "fp32 run"
    dist 4 "${A[@]}" --ps 1 --comm-dtype bf16 --dump-params "$tmp/b1.bin" \
        --summary-json "$tmp/b.json" || bad "bf16 run"
    say "bf16, --ps 2 greedy, --ps 3 partition with 2 PS threads"
    dist 5 "${A[@]}" --ps 2 --placement greedy --comm-dtype bf16 --dump-params "$tmp/b2.bin" ||
        bad "bf16 --ps 2"
    dist 6 "${A[@]}" --ps 3 --placement partition --partition-bytes 16384 --ps-threads 2 \
        --comm-dtype bf16 --dump-params "$tmp/b3.bin" || bad "bf16 --ps 3"
    same "$tmp/b1.bin" "$tmp/b2.bin" "bf16: --ps 1 and --ps 2 greedy differ"
    same "$tmp/b1.bin" "$tmp/b3.bin" "bf16: --ps 1 and --ps 3 partition differ"
    cmp -s "$tmp/f.bin" "$tmp/b1.bin" && bad "bf16 equals fp32: not in effect?"
    say "batch norm (its statistics travel as float32): inception-mini, --ps 1 and 3"
    "$MKDATA" "$tmp/c3.h5" 192 32 16 16 3 10 || { echo "mkdata failed"; exit 1; }
    B=(--data "$tmp/c3.h5" --model inception-mini --epochs 1 --comm-dtype bf16)
    dist 4 "${B[@]}" --ps 1 --dump-params "$tmp/i1.bin" --summary-json "$tmp/i.json" ||
        bad "inception-mini --ps 1"
    dist 6 "${B[@]}" --ps 3 --placement greedy --dump-params "$tmp/i3.bin" ||
        bad "inception-mini --ps 3"
    same "$tmp/i1.bin" "$tmp/i3.bin" "bf16 inception-mini: --ps 1 and --ps 3 differ"
    pyok "bytes per step" 'import json, sys
f, b = (json.load(open(p)) for p in sys.argv[1:3])
fc, bc = f["comm"], b["comm"]
n = sum(f["placement"]["per_ps_bytes"]) // 4
assert fc == {"dtype": "fp32", "pull_bytes_per_step": 4 * n, "push_bytes_per_step": 4 * n}, fc
assert bc == {"dtype": "bf16", "pull_bytes_per_step": 2 * n, "push_bytes_per_step": 2 * n}, bc
print(fc, bc)' "$tmp/f.json" "$tmp/b.json"
    say "bf16 resume: 1 epoch, then on to 2 with --ps 2"
    dist 4 "${A[@]}" --epochs 1 --ps 1 --comm-dtype bf16 --checkpoint-dir "$tmp/ck" ||
        bad "bf16 first part"
    dist 5 "${A[@]}" --ps 2 --comm-dtype bf16 --checkpoint-dir "$tmp/ck" --resume \
        --dump-params "$tmp/r.bin" || bad "bf16 resumed part"
    same "$tmp/b1.bin" "$tmp/r.bin" "bf16: resumed run differs from the uninterrupted one"
    say "async bf16: SGD (through the PS's slots) and Adam, exactly once"
    for opt in "--optimizer sgd --lr 0.05" "--optimizer adam --lr 0.001"; do
        # shellcheck disable=SC2086
        dist 5 "${A[@]}" --ps 2 --mode async $opt --comm-dtype bf16 --summary-json "$tmp/a.json" ||
            bad "async bf16 $opt"
        pyok "async bf16 $opt: accounting" 'import json, sys
j = json.load(open(sys.argv[1]))
assert j["comm"]["dtype"] == "bf16", j["comm"]
for e in j["data"]["epochs"]:
    assert e["examples"] == e["unique"] == 256 and e["missing"] == 0, e' "$tmp/a.json"
    done
    ;;
fashion)
    need_fm
    for dt in fp32 bf16; do
        say "LeNet-5, 1 epoch, --comm-dtype $dt"
        dist 4 --data "$FM" --model lenet5 --epochs 1 --ps 1 --comm-dtype $dt \
            --summary-json "$tmp/$dt.json" || bad "$dt run"
    done
    say "test accuracy: fp32 $(jget "$tmp/fp32.json" 'j["test_accuracy"]')," \
        "bf16 $(jget "$tmp/bf16.json" 'j["test_accuracy"]')"
    pyok "bf16 accuracy within 0.005 of fp32's" 'import json, sys
f, b = (json.load(open(p))["test_accuracy"] for p in sys.argv[1:3])
print("fp32 %.4f bf16 %.4f" % (f, b))
assert abs(f - b) <= 0.005 and f > 0.8, (f, b)' "$tmp/fp32.json" "$tmp/bf16.json"
    ;;
*)
    echo "unknown scenario $SCEN"
    exit 2
    ;;
esac
finish
