#!/usr/bin/env python3
"""scaling_model.py - the cost of a sync (lockstep) training step of pstrain
and how many workers a root and P parameter servers sustain (docs/scaling.md).

  python3 bench/scaling_model.py predict --model resnet-20 --ps 1 --batch 16 \\
      --compute-ms 14 --bw-gbit 0.1 --lat-us 60 --workers 1,2,4
  python3 bench/scaling_model.py table [--bw-gbit 10,100] [--ps 8]
  python3 bench/scaling_model.py check --model resnet-20 --batch 16 --workers 2 \\
      --summary run1.json run2.json --rma rma.txt --root-on-ps-host [--tolerance 0.3]

The model's bytes per PS and its messages (ranges) come from
`pstrain plan --model M --ps P` (--pstrain, default build/pstrain). One step
of version v, on the critical path (docs/design.md §3.5):

  T = C + T_pull + T_push + T_apply + T_take_exposed + T_lat
  T_pull + T_push = (W + 1) * M_link / B_ps  (served in turn, --sharing serial)
                 or 2 * W * M_link / B_ps   (shared fairly, --sharing fair)
                 and at least 2 * M / B_worker
  T_apply  = (W + 3) * M_ps / B_mem         (sum W gradients, momentum update)
  T_take   = W * S / B_root, exposed beyond the PS's apply and wake-up
  T_lat    = (P + 7) * L + n_msg * o + t_wake

Round trips per step: 4 to the root (take a ticket, poll the slot, get it,
release it), P to the PS (wait for the version), 1 for the pull's flush and
2 for the push's (data and stamp, then the seq word).
C: a worker's compute time per step; M: the model's bytes; M_ps: the largest
PS's bytes; M_link: the bytes behind one PS link (M_ps, or the sum over the
PS that share a host with --ps-per-host); S: a ring slot (batch * (H*W*C +
12) + 64 bytes: uint8 pixels, id, label); L: a small RMA round trip; o: the
cost of one more message in a pipelined batch of gets or puts; n_msg: the
pull's and the push's ranges (2 * plan ranges); t_wake: the PS's and the
workers' back-off (the PS sleeps up to 250 us, a waiting worker up to
200 us: half of each on average once a wait is long).
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys

# Compute time per step on this project's 2-core machines (docs/performance.md,
# "Training step against PyTorch"): (images/s, batch, threads) of pstrain's training step.
COMPUTE = {
    "lenet5": (22676, 64, 1),
    "mlp": (65417, 64, 1),
    "inception-mini": (3147, 64, 1),
    "resnet-20": (1253, 64, 1),
    "resnet-50": (10.4, 32, 2),
    "inception-v3": (9.0, 32, 2),
}
# Input geometry of each model as docs/performance.md benchmarks it.
GEOM = {
    "lenet5": (28, 28, 1, 10),
    "mlp": (28, 28, 1, 10),
    "inception-mini": (28, 28, 1, 10),
    "resnet-20": (28, 28, 1, 10),
    "resnet-56": (28, 28, 1, 10),
    "resnet-50": (224, 224, 3, 1000),
    "inception-v3": (299, 299, 3, 1000),
}


def die(msg):
    print("scaling_model: " + msg, file=sys.stderr)
    sys.exit(2)


def plan(pstrain, model, ps, placement=None, geom=None):
    """Bytes and ranges per PS from `pstrain plan`."""
    h, w, c, k = geom or GEOM.get(model, (28, 28, 1, 10))
    cmd = [pstrain, "plan", "--model", model, "--ps", str(ps), "--height", str(h),
           "--width", str(w), "--channels", str(c), "--classes", str(k)]
    if placement:
        cmd += ["--placement", placement]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        die("%s: %s (--pstrain)" % (pstrain, e.strerror))
    if out.returncode != 0:
        die("%s failed: %s" % (" ".join(cmd), out.stderr.strip().splitlines()[-1:]))
    per = [(int(m[1]), int(m[2])) for m in
           re.finditer(r"^PS \d+ \(rank \d+\): (\d+) ranges, (\d+) bytes", out.stdout, re.M)]
    if len(per) != ps:
        die("could not read the bytes per PS from `%s`" % " ".join(cmd))
    return {"model": model, "geom": (h, w, c, k), "ps": ps,
            "bytes": sum(b for _, b in per), "max_bytes": max(b for _, b in per),
            "ranges": sum(r for r, _ in per), "per_ps": per}


def slot_bytes(batch, geom):
    h, w, c, _ = geom
    raw = 64 + 8 * batch + 8 * math.ceil(4 * batch / 8) + batch * h * w * c
    return (raw + 63) // 64 * 64


def step(p, W, a):
    """Predicted step time (seconds) and its parts for W workers."""
    B_w = a.bw_worker * 1e9 / 8
    B_ps = a.bw_ps * 1e9 / 8
    B_root = a.bw_root * 1e9 / 8
    M, M_ps = p["bytes"], p["max_bytes"]
    # the bytes behind one PS link: the largest PS, or its host's PS together
    per_host = max(1, a.ps_per_host)
    shards = sorted((b for _, b in p["per_ps"]), reverse=True)
    M_link = sum(shards[:per_host])
    S = slot_bytes(a.batch, p["geom"])
    # The PS link moves W * M_link each way per step. Served one worker
    # after another (what the capped runs show: pt2pt answers requests in
    # order), worker i's push overlaps worker i+1's pull and compute, and
    # the last push ends (W + 1) * M_link / B after the version; shared
    # fairly, every transfer ends together: 2 * W * M_link / B.
    m = M_link / B_ps
    link = (W + 1) * m if a.sharing == "serial" else 2 * W * m
    pull = max(M / B_w, link / 2)
    push = max(M / B_w, link / 2)
    apply_ = (a.apply_ms / 1e3 if a.apply_ms is not None
              else (W + 3) * M_ps / (a.mem_gbs * 1e9))
    wake = (a.wake_us if a.wake_us is not None else 225) / 1e6
    take = max(S / B_w, W * S / B_root)
    take_exposed = max(0.0, take - apply_ - wake)
    L = a.lat_us / 1e6
    lat = (p["ps"] + 7) * L + 2 * p["ranges"] * a.msg_us / 1e6 + wake
    C = a.compute
    T = C + pull + push + apply_ + take_exposed + lat
    return T, {"compute": C, "pull": pull, "push": push, "apply": apply_,
               "take": take_exposed, "latency": lat}


def compute_of(model, batch, explicit_ms):
    if explicit_ms is not None:
        return explicit_ms / 1e3
    if model not in COMPUTE:
        die("no compute time for %s in the table: give --compute-ms" % model)
    rate, _, _ = COMPUTE[model]
    return batch / rate


def add_link_args(ap):
    ap.add_argument("--bw-gbit", default="10", help="link bandwidth in Gbit/s of every link "
                    "(payload rate); a list for `table`")
    ap.add_argument("--bw-worker", type=float, help="a worker's link, Gbit/s (default --bw-gbit)")
    ap.add_argument("--bw-ps", type=float, help="a PS host's link, Gbit/s (default --bw-gbit)")
    ap.add_argument("--bw-root", type=float, help="the root's link, Gbit/s (default: the PS "
                    "link when --root-on-ps-host, else --bw-gbit)")
    ap.add_argument("--lat-us", type=float, default=50, help="a small RMA round trip, us "
                    "(default 50: TCP between hosts)")
    ap.add_argument("--msg-us", type=float, default=2, help="cost of one more pipelined "
                    "get/put, us (default 2)")
    ap.add_argument("--wake-us", type=float, help="back-off wake-up per step, us (default 225)")
    ap.add_argument("--mem-gbs", type=float, default=5, help="PS memory bandwidth for the sum "
                    "and update, GB/s (default 5)")
    ap.add_argument("--apply-ms", type=float, help="the PS's sum + update per step, ms "
                    "(measured: summary timing.ps apply / versions); default from --mem-gbs")
    ap.add_argument("--sharing", choices=("serial", "fair"), default="serial",
                    help="how a PS link serves W workers' transfers (default serial)")
    ap.add_argument("--ps-per-host", type=int, default=1, help="PS sharing one host link")
    ap.add_argument("--root-on-ps-host", action="store_true", help="the root shares a PS "
                    "host's link")
    ap.add_argument("--pstrain", default=os.path.join("build", "pstrain"))
    ap.add_argument("--placement", help="pstrain plan --placement (default: pstrain's)")


def fill_links(a, bw):
    a.bw_worker = a.bw_worker_arg if a.bw_worker_arg is not None else bw
    a.bw_ps = a.bw_ps_arg if a.bw_ps_arg is not None else bw
    a.bw_root = (a.bw_root_arg if a.bw_root_arg is not None
                 else (a.bw_ps if a.root_on_ps_host else bw))


def cmd_predict(a):
    bws = [float(x) for x in a.bw_gbit.split(",")]
    p = plan(a.pstrain, a.model, a.ps, a.placement, a.geom)
    a.compute = compute_of(a.model, a.batch, a.compute_ms)
    print("model %s %dx%dx%d: M = %.3f MB in %d ranges over %d PS (largest %.3f MB); batch %d, "
          "ring slot %d bytes; compute %.2f ms per step" % (
              a.model, *p["geom"][:3], p["bytes"] / 1e6, p["ranges"], a.ps,
              p["max_bytes"] / 1e6, a.batch, slot_bytes(a.batch, p["geom"]), 1e3 * a.compute))
    print("%8s %5s %10s %9s %9s %9s %9s %9s %9s %6s" % (
        "Gbit/s", "W", "step ms", "compute", "pull", "push", "apply", "take", "latency", "eff"))
    for bw in bws:
        fill_links(a, bw)
        for W in [int(x) for x in a.workers.split(",")]:
            T, parts = step(p, W, a)
            print("%8g %5d %10.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %5.0f%%" % (
                bw, W, 1e3 * T, *(1e3 * parts[k] for k in
                                  ("compute", "pull", "push", "apply", "take", "latency")),
                100 * parts["compute"] / T))


def read_rma(path):
    """B (Gbit/s: the mean payload bandwidth of 2 origins' 1 MiB gets and
    puts, the incast a PS sees), L (the 8-byte fetch-and-op round trip, us)
    and o (the mean per-message cost of pipelined 8-byte gets and puts, us)
    from bench_rma's output."""
    try:
        rma = open(path).read()
    except OSError as e:
        die("%s: %s (--rma)" % (path, e.strerror))
    bw = [float(m[2]) for m in re.finditer(
        r"bandwidth\s+(get|put)\s+1 MiB\s+origins\s+2\s+([\d.]+) GB/s", rma)]
    lat = re.search(r"latency\s+fop\s+8 B\s+median\s+([\d.]+)", rma)
    msg = [float(m[1]) for m in re.finditer(r"per-msg\s+\w+\s+8 B\s+median\s+([\d.]+)", rma)]
    if not bw or not lat or not msg:
        die("%s: no 2-origin 1 MiB bandwidth, fop latency or per-msg lines (--rma)" % path)
    return statistics.mean(bw) * 8, float(lat[1]), statistics.mean(msg)


def measured_parts(path):
    """A sync run's mean step and its parts (seconds) from its
    --summary-json: a worker's loop time over its steps (wait for data +
    pull + compute + push + wait for the version, the mean over workers),
    and the PS's apply per step."""
    try:
        s = json.load(open(path))
    except (OSError, ValueError) as e:
        die("%s: %s (--summary)" % (path, e))
    t = s["timing"]
    ws = t["workers"]
    n = s["steps"] if "steps" in s else s["global_step"]
    if not ws or not n:
        die("%s: no worker timing or no steps" % path)
    parts = {k: statistics.mean(w[k] for w in ws) / n for k in
             ("wait_data", "pull", "compute", "push", "wait_version")}
    parts["step"] = sum(parts.values())
    parts["apply"] = t["ps"][0]["apply"] / n
    return parts


def cmd_check(a):
    """Measured steps (the median of the runs) against the prediction from
    the runs' own compute and apply and the link's B, L and o."""
    # what is given explicitly wins over bench_rma's measurement
    B, src = a.bw_ps, "given"
    if a.rma:
        rB, rL, ro = read_rma(a.rma)
        if B is None:
            B, src = rB, "bench_rma, 2 origins, 1 MiB"
        a.lat_us = rL if a.lat_us is None else a.lat_us
        a.msg_us = ro if a.msg_us is None else a.msg_us
    if B is None or a.lat_us is None or a.msg_us is None:
        die("check needs --rma, or --bw-ps, --lat-us and --msg-us")
    runs = [measured_parts(f) for f in a.summary]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    lo, hi = min(r["step"] for r in runs), max(r["step"] for r in runs)
    p = plan(a.pstrain, a.model, a.ps, a.placement)
    # the workers' links: uncapped (at least 1 Gbit/s) unless given
    a.bw_ps_arg = B
    fill_links(a, float(a.bw_gbit) if a.bw_gbit is not None else max(B, 1.0))
    a.compute = med["compute"]
    a.apply_ms = 1e3 * med["apply"]
    T, parts = step(p, a.workers, a)
    ratio = med["step"] / T
    ms = {k: 1e3 * v for k, v in med.items()}
    print("link: %.3f Gbit/s payload (%s), round trip %.0f us, %.1f us per pipelined message" % (
        B, src, a.lat_us, a.msg_us))
    print("measured, median of %d runs (ms per step): step %.1f [%.1f-%.1f]  wait_data %.1f  "
          "pull %.1f  compute %.1f  push %.1f  wait_version %.1f  (PS apply %.1f)" % (
              len(runs), ms["step"], 1e3 * lo, 1e3 * hi, ms["wait_data"], ms["pull"],
              ms["compute"], ms["push"], ms["wait_version"], ms["apply"]))
    print("predicted: step %.1f ms  (pull %.2f, push %.2f, apply %.2f, take %.2f, latency %.2f)  "
          "-> measured/predicted %.2f" % (1e3 * T, *(1e3 * parts[k] for k in
                                                   ("pull", "push", "apply", "take", "latency")),
                                          ratio))
    if a.tolerance is not None:
        ok = abs(ratio - 1) <= a.tolerance
        print("ratio %.2f %s [%.2f, %.2f]" % (ratio, "within" if ok else "OUTSIDE",
                                              1 - a.tolerance, 1 + a.tolerance))
        if not ok:
            sys.exit(1)


def max_workers(p, a, eff, only=None, limit=1 << 20):
    """Largest W whose step keeps compute/T >= eff; with `only`, the other
    resources are taken as free (root: only its ring; ps: only the PS)."""
    best = 0
    W = 1
    while W <= limit:
        T, parts = step(p, W, a)
        if only == "root":
            # the ring alone, its whole time exposed
            S = slot_bytes(a.batch, p["geom"])
            T = parts["compute"] + W * S / (a.bw_root * 1e9 / 8)
        if parts["compute"] / T >= eff:
            best = W
            W = W + 1 if W < 64 else int(W * 1.05) + 1
        else:
            break
    return best


def cmd_table(a):
    bws = [float(x) for x in a.bw_gbit.split(",")]
    models = a.models.split(",")
    print("Workers sustained at efficiency >= %.0f%% (compute / step) and where communication "
          "equals compute (50%%); sync lockstep, every link at the bandwidth shown, L = %g us" % (
              100 * a.eff, a.lat_us))
    print("| model | M (MB) | batch | compute/step | Gbit/s | root only | 1 PS | %d PS | "
          "bound, 1 / %d PS |" % (a.ps, a.ps))
    print("|---|---|---|---|---|---|---|---|---|")
    for model in models:
        rate, batch, threads = COMPUTE[model]
        a.batch = batch
        a.compute = batch / rate
        p1 = plan(a.pstrain, model, 1, a.placement)
        pP = plan(a.pstrain, model, a.ps, a.placement)
        for bw in bws:
            fill_links(a, bw)
            cells = []
            for what, p in (("root", p1), (None, p1), (None, pP)):
                w90 = max_workers(p, a, a.eff, what)
                w50 = max_workers(p, a, 0.5, what)
                cells.append("%s / %s" % (fmt_w(w90), fmt_w(w50)))
            # BytePS's bound with pull and push overlapped on full-duplex
            # links: the PS link moves W * M_ps each way per compute time
            cells.append("%s / %s" % tuple(
                fmt_w(int(a.compute * a.bw_ps * 1e9 / 8 / p["max_bytes"])) for p in (p1, pP)))
            print("| %s | %.2f | %d (%d thr) | %.1f ms | %g | %s |" % (
                model, p1["bytes"] / 1e6, batch, threads, 1e3 * a.compute, bw, " | ".join(cells)))


def fmt_w(w):
    return "0" if w == 0 else ("%d" % w if w < 1 << 20 else "> 1M")


def main():
    ap = argparse.ArgumentParser(description="pstrain's sync step cost model (docs/scaling.md)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("predict", help="predicted step time for W workers")
    pr.add_argument("--model", required=True)
    pr.add_argument("--ps", type=int, default=1)
    pr.add_argument("--batch", type=int, default=64)
    pr.add_argument("--size", help="HxWxC (default: the model's usual input)")
    pr.add_argument("--classes", type=int)
    pr.add_argument("--compute-ms", type=float, help="compute per step, ms (default: the "
                    "benchmark of docs/performance.md for the model)")
    pr.add_argument("--workers", default="1,2,4,8,16,32")
    add_link_args(pr)
    tb = sub.add_parser("table", help="workers sustained per model and link speed")
    tb.add_argument("--models", default="lenet5,resnet-50,inception-v3")
    tb.add_argument("--ps", type=int, default=8, help="the P of the last column (default 8)")
    tb.add_argument("--eff", type=float, default=0.9)
    add_link_args(tb)
    tb.set_defaults(bw_gbit="10,100")
    ck = sub.add_parser("check", help="measured sync steps (--summary-json files) against "
                        "the prediction")
    ck.add_argument("--summary", nargs="+", required=True, help="pstrain --summary-json files "
                    "of the same sync run repeated (the median is compared)")
    ck.add_argument("--rma", help="bench_rma's output across the same hosts: the PS link's B "
                    "(2 origins, 1 MiB), L and o, where --bw-ps, --lat-us, --msg-us are not given")
    ck.add_argument("--model", required=True)
    ck.add_argument("--ps", type=int, default=1)
    ck.add_argument("--batch", type=int, default=64)
    ck.add_argument("--workers", type=int, default=2)
    ck.add_argument("--tolerance", type=float, help="exit 1 unless |measured/predicted - 1| "
                    "<= this (e.g. 0.3)")
    add_link_args(ck)
    ck.set_defaults(bw_gbit=None, lat_us=None, msg_us=None)
    a = ap.parse_args()
    a.bw_worker_arg, a.bw_ps_arg, a.bw_root_arg = a.bw_worker, a.bw_ps, a.bw_root
    if a.cmd == "predict":
        a.geom = None
        if a.size or a.classes:
            g = GEOM.get(a.model, (28, 28, 1, 10))
            if a.size:
                try:
                    h, w, c = (int(x) for x in a.size.split("x"))
                except ValueError:
                    die("--size: HxWxC, not '%s'" % a.size)
                g = (h, w, c, g[3])
            a.geom = (g[0], g[1], g[2], a.classes or g[3])
        cmd_predict(a)
    elif a.cmd == "check":
        a.geom = None
        cmd_check(a)
    else:
        cmd_table(a)


if __name__ == "__main__":
    main()
