"""Compares jpg_decode's pixels (DIR/NAME.c1, DIR/NAME.c3, written by
`test_jpeg --write DIR`) with PIL's decode of DIR/NAME.jpg:
Image.open(f).convert("L") and .convert("RGB"), byte for byte."""
import glob
import os
import sys

from PIL import Image

d = sys.argv[1]
jpgs = sorted(glob.glob(os.path.join(d, "*.jpg")))
if not jpgs:
    sys.exit(f"FAIL: no fixtures in {d}")
failed = 0
for path in jpgs:
    base = path[:-4]
    name = os.path.basename(base)
    for channels, mode in ((1, "L"), (3, "RGB")):
        with Image.open(path) as im:
            ref = im.convert(mode).tobytes()
        with open(f"{base}.c{channels}", "rb") as f:
            ours = f.read()
        if ours == ref:
            continue
        failed += 1
        if len(ours) != len(ref):
            print(f"FAIL {name} {mode}: {len(ours)} bytes, PIL {len(ref)}")
            continue
        diff = [i for i in range(len(ref)) if ours[i] != ref[i]]
        i = diff[0]
        print(f"FAIL {name} {mode}: {len(diff)} bytes differ, the first at {i}: "
              f"{ours[i]} vs PIL {ref[i]}")
print(f"{2 * len(jpgs)} decodes compared with PIL, {failed} differ")
sys.exit(1 if failed else 0)
