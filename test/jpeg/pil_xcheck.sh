#!/usr/bin/env bash
# jpg_decode against PIL (Pillow): every fixture of test_jpeg, decoded by both,
# byte for byte. Skips (77) where Debian's python3 has no PIL (python3-pil).
#   pil_xcheck.sh BUILD/test/jpeg/test_jpeg
set -u
py=/usr/bin/python3
if ! "$py" -c 'import PIL.Image' 2>/dev/null; then
    echo "SKIP: $py cannot import PIL (Debian package python3-pil)"
    exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/test-jpeg-pil.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
"$1" --write "$work" || { echo "FAIL: $1 --write $work"; exit 1; }
"$py" "$(dirname "${BASH_SOURCE[0]}")/pil_xcheck.py" "$work"
