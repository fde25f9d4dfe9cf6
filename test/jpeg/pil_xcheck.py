"""Compares jpg_decode's pixels (DIR/NAME.c1, DIR/NAME.c3, written by
`test_jpeg --write DIR`) with PIL's decode of DIR/NAME.jpg:
Image.open(f).convert("L") and .convert("RGB"), byte for byte; and the resnet
recipe's evaluation transform (DIR/NAME.e1-S, NAME.e3-S, written by
`test_jpeg --eval DIR S...`) with torchvision's Resize(round(256/224 S)),
CenterCrop(S) on the PIL image, done here with PIL alone (torchvision 0.14's
arithmetic: the shorter side to R, the longer to int(R * long / short),
bilinear; the crop's corner at int(round((side - S) / 2)))."""
import glob
import os
import sys

from PIL import Image

d = sys.argv[1]
jpgs = sorted(p for p in glob.glob(os.path.join(d, "*.jpg")) if os.path.exists(p[:-4] + ".c3"))
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


def tv_eval(im, S):
    R = round(256 / 224 * S)
    w, h = im.size
    if w <= h:
        nw, nh = R, int(R * h / w)
    else:
        nw, nh = int(R * w / h), R
    im = im.resize((nw, nh), Image.BILINEAR)
    top, left = int(round((nh - S) / 2.0)), int(round((nw - S) / 2.0))
    return im.crop((left, top, left + S, top + S)).tobytes()


evals = sorted(glob.glob(os.path.join(d, "*.e[13]-*")))
for path in evals:
    base, tail = path.rsplit(".e", 1)
    channels, S = int(tail[0]), int(tail[2:])
    mode = "L" if channels == 1 else "RGB"
    with Image.open(base + ".jpg") as im:
        ref = tv_eval(im.convert(mode), S)
    with open(path, "rb") as f:
        ours = f.read()
    if ours == ref:
        continue
    failed += 1
    diff = [abs(ours[i] - ref[i]) for i in range(min(len(ours), len(ref)))]
    print(f"FAIL {os.path.basename(path)}: {sum(x > 0 for x in diff)} of {len(ref)} bytes differ, "
          f"by at most {max(diff)}")
print(f"{2 * len(jpgs)} decodes and {len(evals)} evaluation transforms compared with PIL, "
      f"{failed} differ")
sys.exit(1 if failed else 0)
