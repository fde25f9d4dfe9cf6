#!/usr/bin/python3
"""The peer of bench/bench_augment.c: decode + Inception-style training
preprocessing to SIZE x SIZE with PIL and torchvision's transforms on PIL images
(RandomResizedCrop(SIZE, scale=(0.05, 1), ratio=(3/4, 4/3)), RandomHorizontalFlip,
ColorJitter(brightness=32/255, saturation=0.5, hue=0.2, contrast=0.5)), one torch
thread, timed by this process's CPU time (time.process_time). Prints images/s per
core for decode only and for decode + preprocessing.

  /usr/bin/python3 jobs/bench_augment_peer.py DIR [--size 299] [--reps 3]
  /usr/bin/python3 jobs/bench_augment_peer.py --make DIR [--count 64]   (writes the JPEG set)

--make writes COUNT photo-like 500x375 JPEGs at quality 90 (gradients, soft shapes and
sensor-like noise, 4:2:0; about 95 KiB each, near ImageNet's average of about 110 KB)
for both benchmarks."""
import argparse, io, os, sys, time

import numpy as np
from PIL import Image


def make(out, count):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    H, W = 375, 500
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    for i in range(count):
        img = np.zeros((H, W, 3), np.float32)
        for c in range(3):
            a, b, d = rng.uniform(-0.4, 0.4, 3)
            img[..., c] = 0.5 + a * xx / W + b * yy / H + d * np.sin(xx / rng.uniform(20, 80) + yy / rng.uniform(20, 80))
        for _ in range(6):  # soft blobs of colour
            cx, cy, r = rng.uniform(0, W), rng.uniform(0, H), rng.uniform(20, 120)
            m = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))[..., None]
            img = img * (1 - m) + m * rng.uniform(0, 1, 3)
        img += rng.normal(0, 0.08, img.shape)  # texture / sensor noise
        px = (np.clip(img, 0, 1) * 255).astype(np.uint8)
        Image.fromarray(px).save(os.path.join(out, f"{i:04d}.JPEG"), quality=90)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--make", action="store_true")
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--size", type=int, default=299)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if a.make:
        make(a.dir, a.count)
        return
    import torch
    from torchvision import transforms as T

    torch.set_num_threads(1)
    torch.manual_seed(0)
    files = sorted(os.path.join(a.dir, f) for f in os.listdir(a.dir) if f.lower().endswith((".jpg", ".jpeg")))
    if not files:
        sys.exit(f"bench_augment_peer: no .jpg/.JPEG files in {a.dir}")
    blobs = [open(f, "rb").read() for f in files]
    tf = T.Compose([
        T.RandomResizedCrop(a.size, scale=(0.05, 1.0), ratio=(3 / 4, 4 / 3)),
        T.RandomHorizontalFlip(),
        T.ColorJitter(brightness=32 / 255, saturation=0.5, hue=0.2, contrast=0.5),
    ])

    def decode(b):
        return Image.open(io.BytesIO(b)).convert("RGB")

    def run(fn):
        fn(blobs[0])  # warm-up
        t0 = time.process_time()
        for _ in range(a.reps):
            for b in blobs:
                fn(b)
        return a.reps * len(blobs) / (time.process_time() - t0)

    dec = run(lambda b: np.asarray(decode(b)))
    full = run(lambda b: np.asarray(tf(decode(b))))
    print(f"peer (PIL {Image.__version__}, torchvision {__import__('torchvision').__version__}, 1 torch thread): "
          f"{len(blobs)} JPEGs x {a.reps}, CPU time")
    print(f"peer decode only:                      {dec:8.1f} images/s per core")
    print(f"peer decode + inception train {a.size}x{a.size}: {full:8.1f} images/s per core")


if __name__ == "__main__":
    main()
