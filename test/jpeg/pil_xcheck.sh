#!/usr/bin/env bash
# jpg_decode against PIL (Pillow): every fixture of test_jpeg, decoded by both,
# byte for byte; and the resnet recipe's evaluation transform against
# torchvision's on PIL images (Resize, CenterCrop) at three sizes (up- and
# downscaling), on those fixtures and on photo-like JPEGs PIL writes (odd and
# even sides, gray and colour, 4:2:0 and 4:4:4). Skips (77) where Debian's
# python3 has no PIL (python3-pil).
#   pil_xcheck.sh BUILD/test/jpeg/test_jpeg
set -u
py=/usr/bin/python3
if ! "$py" -c 'import PIL.Image, numpy' 2>/dev/null; then
    echo "SKIP: $py cannot import PIL and numpy (Debian packages python3-pil python3-numpy)"
    exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/test-jpeg-pil.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
"$1" --write "$work" || { echo "FAIL: $1 --write $work"; exit 1; }
"$py" - "$work" <<'EOF' || { echo "FAIL: writing the photo-like JPEGs"; exit 1; }
import sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(7)
sizes = [(500, 375), (375, 500), (301, 257), (256, 256), (640, 427), (227, 229), (1001, 97),
         (97, 1001), (260, 260)]
for i, (w, h) in enumerate(sizes):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = 128 + 60 * np.sin(x / (7 + i)) * np.cos(y / (11 + i))
    px = np.clip(base[..., None] + rng.normal(0, 25, (h, w, 3)) * [1, 0.7, 1.3], 0, 255)
    im = Image.fromarray(px.astype(np.uint8))
    if i % 3 == 2:
        im = im.convert("L")
    im.save(f"{sys.argv[1]}/photo-{w}x{h}.jpg", quality=85 + i, subsampling=0 if i % 2 else 2)
EOF
"$1" --eval "$work" 24 100 224 || { echo "FAIL: $1 --eval $work"; exit 1; }
"$py" "$(dirname "${BASH_SOURCE[0]}")/pil_xcheck.py" "$work"
