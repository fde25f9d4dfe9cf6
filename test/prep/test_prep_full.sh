#!/usr/bin/env bash
# pstrain-prep on a full disk, on a small tmpfs mounted by the test (skipped,
# 77, where mounting is not permitted or Fashion-MNIST is not installed).
# The tmpfs sizes sweep across the size of the output, so the disk fills
# while images are written or while HDF5 writes the last metadata at close
# (which crashed in libhdf5's exit handler). Every run either succeeds with
# a sound data set or fails with one line naming the file and "No space left
# on device", exit 1, never a crash, and leaves no temporary behind.
set -u
: "${PSTRAIN_PREP:?PSTRAIN_PREP not set (run through meson test)}"
fm=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -f "$fm/t10k-images-idx3-ubyte.gz" ] ||
    { echo "SKIP: $fm not installed (Debian package dataset-fashion-mnist)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-prep-full.XXXXXX")
mnt=$tmp/mnt
mkdir -p "$mnt"
trap 'umount "$mnt" 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# the test split as a train split: 10,000 images, about 4.4 MB
A=(idx --train-images "$fm/t10k-images-idx3-ubyte.gz" --train-labels "$fm/t10k-labels-idx1-ubyte.gz")
"$PSTRAIN_PREP" "${A[@]}" -o "$tmp/ref.h5" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
kib=$(($(stat -c %s "$tmp/ref.h5") / 4096 * 4))
if ! mount -t tmpfs -o size=4k tmpfs "$mnt" 2>/dev/null; then
    echo "SKIP: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
    exit 77
fi
umount "$mnt"
echo "output of $kib KiB; tmpfs sizes $((kib - 32))..$((kib + 12)) KiB"
nfail=0 nok=0 phases=
for ((size = kib - 32; size <= kib + 12; size += 4)); do
    mount -t tmpfs -o "size=${size}k" tmpfs "$mnt" || { bad "mount size=${size}k"; break; }
    timeout 120 "$PSTRAIN_PREP" "${A[@]}" -o "$mnt/o.h5" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    grep -v '^idx: ' "$tmp/err" >"$tmp/msg"
    if [ $rc = 0 ]; then
        nok=$((nok + 1))
        "$PSTRAIN_PREP" verify "$mnt/o.h5" >/dev/null 2>&1 || bad "${size}k: exit 0 but $mnt/o.h5 does not verify"
    else
        nfail=$((nfail + 1))
        [ $rc = 1 ] || bad "${size}k: exit status $rc, expected 1"
        [ "$(wc -l <"$tmp/msg")" = 1 ] || bad "${size}k: not one line of error: $(head -c 600 "$tmp/msg")"
        grep -q "^pstrain-prep idx: $mnt/o.h5.*No space left on device" "$tmp/msg" ||
            bad "${size}k: the error does not name the output and the full disk: $(head -c 300 "$tmp/msg")"
        [ -e "$mnt/o.h5" ] && bad "${size}k: an output was published after a failure"
        phases="$phases $(sed -n 's/.*: \(closing\|writing\) .*/\1/p' "$tmp/msg")"
    fi
    grep -Eqi 'segmentation|sanitizer|runtime error|core dumped|double free' "$tmp/err" &&
        bad "${size}k: crash: $(grep -Ei 'segmentation|sanitizer|runtime error' "$tmp/err" | head -2)"
    left=$(ls -A "$mnt" | grep -v '^o\.h5$')
    [ -z "$left" ] || bad "${size}k: left behind: $left"
    umount "$mnt"
done
echo "$nok runs fitted, $nfail failed (while:$(printf ' %s' $phases | tr ' ' '\n' | sort | uniq -c | tr -s ' \n' ' '))"
[ $nfail -gt 0 ] || bad "no run ran out of space: the sweep missed the output size"
[ $nok -gt 0 ] || bad "no run fitted: the sweep missed the output size"
[ $fail = 0 ] && echo PASS || echo FAILED
exit $fail
