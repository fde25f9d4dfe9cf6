#!/usr/bin/env bash
# Full disks, on a small tmpfs mounted by the test (skipped, 77, where
# mounting is not permitted): a checkpoint that does not fit ends the run
# with one clear error and a non-zero exit, never a crash (it segfaulted in
# libhdf5's close callback at exit / in MPI_Finalize), in one process and
# under mpirun, and the previous checkpoint stays good; --metrics write
# errors fail the run (exit 0 and a truncated file before); --dump-params
# and --summary-json leave the previous file intact (dumped in place before).
# Arguments: those of test/train/lib.sh.
. "$(dirname "$0")/../train/lib.sh"

mnt=$tmp/mnt
mkdir -p "$mnt"
"$MKDATA" "$tmp/ok.h5" 640 100 28 28 1 10 || { echo "mkdata failed"; exit 1; }
T=(train --quiet --data "$tmp/ok.h5" --model mlp)
# one checkpoint's size: the tmpfs holds one, not two
"$PSTRAIN" "${T[@]}" --steps 1 --checkpoint-dir "$tmp/probe" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
size=$(stat -c %s "$tmp/probe/ckpt-1.h5")
kib=$(((size * 3 / 2 + 8192) / 4096 * 4))
if ! mount -t tmpfs -o "size=${kib}k" tmpfs "$mnt" 2>/dev/null; then
    echo "SKIP: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
    exit 77
fi
trap 'umount "$mnt" 2>/dev/null; rm -rf "$tmp"' EXIT
say "tmpfs of ${kib} KiB, checkpoints of $size bytes"

# no_crash FILE: no crash report (mpirun's "the job has been aborted" after a
# rank's exit 1 is no crash)
no_crash() {
    ! grep -Eqi 'segmentation|sanitizer|runtime error|core dumped|Signal:|double free|stack smashing|internal error' "$1"
}

# full_case NAME 'NEEDLES' CMD...: exits 1..125 (not a signal), no crash, and
# its stderr holds every needle
full_case() {
    local name=$1 needles=$2 rc n
    shift 2
    timeout 300 "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc = 0 ] || [ $rc -ge 124 ]; then bad "$name: exit status $rc, expected 1..123"; fi
    no_crash "$tmp/err" && no_crash "$tmp/out" ||
        { bad "$name: crash:"; grep -iE 'segmentation|signal' "$tmp/err" | head -3; }
    local IFS='|'
    for n in $needles; do
        grep -qF -- "$n" "$tmp/err" || bad "$name: stderr does not mention '$n': $(head -2 "$tmp/err")"
    done
    echo "  $name (exit $rc): $(grep -m1 -F "${needles%%|*}" "$tmp/err")"
}

# check_ckpt_dir DIR: ckpt-2.h5 is good and named by latest, no temporary is left
check_ckpt_dir() {
    [ "$("$CKPT_CHECK" "$1/ckpt-2.h5" 2>&1)" = 2 ] || bad "$1/ckpt-2.h5 does not verify after ENOSPC"
    [ "$(cat "$1/latest" 2>/dev/null)" = ckpt-2.h5 ] || bad "$1/latest: '$(cat "$1/latest")'"
    ! ls -a "$1" | grep -q '\.tmp\.' || bad "temporaries left in $1: $(ls -a "$1" | grep '\.tmp\.')"
}

say "a checkpoint that does not fit"
full_case "single process" "ckpt-4.h5|No space left on device" "$PSTRAIN" "${T[@]}" --steps 4 \
    --checkpoint-every 2 --checkpoint-dir "$mnt/ck"
check_ckpt_dir "$mnt/ck"
rm -rf "$mnt/ck"
full_case "mpirun -np 3 --ps 1" "ckpt-4.h5|No space left on device" "${MPIEXEC_CMD[@]}" -n 3 \
    "$PSTRAIN" "${T[@]}" --ps 1 --steps 4 --checkpoint-every 2 --checkpoint-dir "$mnt/ck"
check_ckpt_dir "$mnt/ck"
rm -rf "$mnt/ck"

say "other outputs on a full disk"
head -c 1000 /dev/urandom >"$mnt/p.bin"
printf '{"old": true}\n' >"$mnt/s.json"
cp "$mnt/p.bin" "$tmp/p.old"
cp "$mnt/s.json" "$tmp/s.old"
dd if=/dev/zero of="$mnt/fill" bs=4k >/dev/null 2>&1 # until ENOSPC
full_case "--dump-params" "p.bin|No space left on device" "$PSTRAIN" "${T[@]}" --steps 2 \
    --dump-params "$mnt/p.bin"
cmp -s "$mnt/p.bin" "$tmp/p.old" || bad "--dump-params on a full disk changed the previous dump"
full_case "--summary-json" "s.json|No space left on device" "$PSTRAIN" "${T[@]}" --steps 2 \
    --summary-json "$mnt/s.json"
cmp -s "$mnt/s.json" "$tmp/s.old" || bad "--summary-json on a full disk changed the previous summary"
full_case "--metrics" "m.jsonl|write error|No space left on device" "$PSTRAIN" "${T[@]}" --steps 3 \
    --log-every 0 --metrics "$mnt/m.jsonl"
! ls -a "$mnt" | grep -q '\.tmp\.' || bad "temporaries left: $(ls -a "$mnt" | grep '\.tmp\.')"
finish
