#!/usr/bin/env python3
"""tb_read.py - checks pstrain's TensorBoard event files against its --metrics
log, with readers that share nothing with the writer: the protobuf library
(messages compiled by protoc from tb_event.proto) decodes the records and
python3-crc32c checks their framing.

  tb_read.py PB_DIR METRICS.jsonl T0 T1 FILE [FILE...] [--resumed-at S]...

PB_DIR holds tb_event_pb2.py; the FILEs, in order, are the event files of
one run and its resumptions, written between unix times T0 and T1; each
--resumed-at S gives the checkpoint step at which the next file's run
resumed. Checked: the file names (TensorBoard's events.out.tfevents.SECONDS.
HOST...), every record's length and masked CRC-32C, the first record's
file_version, a resumed file's SessionLog START at S+1, steps nondecreasing
within a file and continuing across files, wall times within [T0, T1], and
one Event per metrics record with the same scalars (the logged numbers
carry 6 significant digits, the events' float32 24 bits: equal within
both roundings; null is NaN).
Exits 1 with one line per problem."""
import json
import math
import os
import re
import socket
import struct
import sys

import crc32c

sys.path.insert(0, sys.argv[1])
import tb_event_pb2 as pb  # noqa: E402

errs = []


def bad(msg):
    errs.append(msg)


def masked(data):
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The Events of one file; a broken frame is an error that ends it."""
    data = open(path, "rb").read()
    off, out = 0, []
    while off < len(data):
        if len(data) - off < 12:
            bad("%s: %d stray bytes at offset %d" % (path, len(data) - off, off))
            break
        (n,) = struct.unpack_from("<Q", data, off)
        (lcrc,) = struct.unpack_from("<I", data, off + 8)
        if lcrc != masked(data[off:off + 8]):
            bad("%s: offset %d: length CRC mismatch" % (path, off))
            break
        if off + 12 + n + 4 > len(data):
            bad("%s: offset %d: truncated record of %d bytes" % (path, off, n))
            break
        body = data[off + 12:off + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, off + 12 + n)
        if dcrc != masked(body):
            bad("%s: offset %d: data CRC mismatch" % (path, off))
            break
        ev = pb.Event()
        ev.ParseFromString(body)
        out.append(ev)
        off += 12 + n + 4
    return out


def same(logged, tb):
    if logged is None:
        return math.isnan(tb)
    if logged == 0:
        return tb == 0
    # the log's %.6g: half a unit in the 6th significant digit; the event's
    # float32: half a unit in the 24th bit
    tol = 0.5 * 10 ** (math.floor(math.log10(abs(logged))) - 5) + abs(logged) * 2.0**-24
    return abs(tb - logged) <= tol


args = sys.argv[2:]
resumed = []
while "--resumed-at" in args:
    i = args.index("--resumed-at")
    resumed.append(int(args[i + 1]))
    del args[i:i + 2]
metrics, t0, t1, files = args[0], float(args[1]), float(args[2]), args[3:]
if len(resumed) != len(files) - 1:
    sys.exit("usage: %d files need %d --resumed-at" % (len(files), len(files) - 1))
log = [json.loads(line) for line in open(metrics)]

host = socket.gethostname().replace("/", "_")
name_re = re.compile(r"^events\.out\.tfevents\.(\d{10})\.%s\.\d+\.\d+$" % re.escape(host))
events = []
for k, path in enumerate(files):
    m = name_re.match(os.path.basename(path))
    if not m:
        bad("%s: not named events.out.tfevents.SECONDS.%s.PID.N" % (path, host))
    elif not int(t0) <= int(m.group(1)) <= t1:
        bad("%s: time in the name outside [%d, %d]" % (path, t0, t1))
    evs = records(path)
    if not evs or evs[0].WhichOneof("what") != "file_version" or evs[0].file_version != "brain.Event:2":
        bad("%s: first record is not file_version brain.Event:2: %r" % (path, evs[:1]))
        continue
    evs = evs[1:]
    if k > 0:
        s = resumed[k - 1]
        if (not evs or evs[0].WhichOneof("what") != "session_log"
                or evs[0].session_log.status != pb.SessionLog.START or evs[0].step != s + 1):
            bad("%s: no SessionLog START at step %d after the version: %r" % (path, s + 1, evs[:1]))
        else:
            evs = evs[1:]
    prev = None
    for ev in evs:
        if ev.WhichOneof("what") != "summary":
            bad("%s: step %d: a %s record among the summaries" % (path, ev.step, ev.WhichOneof("what")))
        if prev is not None and ev.step < prev:
            bad("%s: step %d after step %d" % (path, ev.step, prev))
        if not t0 <= ev.wall_time <= t1:
            bad("%s: step %d: wall_time %.3f outside [%.3f, %.3f]" % (path, ev.step, ev.wall_time, t0, t1))
        prev = ev.step
    if k > 0 and evs and evs[0].step <= resumed[k - 1]:
        bad("%s: first step %d does not continue after %d" % (path, evs[0].step, resumed[k - 1]))
    events += evs

if len(events) != len(log):
    bad("%d summary events, %d metrics records" % (len(events), len(log)))
TIMING = ["wait_data", "pull", "compute", "push", "wait_version", "ps_apply", "ps_idle"]
for rec, ev in zip(log, events):
    vals = {v.tag: v.simple_value for v in ev.summary.value}
    if rec["type"] == "step":
        want = {"train/" + k: rec[k] for k in ["loss", "accuracy", "lr", "images_per_sec"]}
        want.update({"timing/" + k: rec["timing"][k] for k in TIMING if k in rec.get("timing", {})})
    else:
        want = {"eval/%s/%s" % (rec["split"], k): rec[k] for k in ["accuracy", "top5_accuracy", "loss"]}
    if ev.step != rec["step"]:
        bad("event at step %d for the %s record of step %d" % (ev.step, rec["type"], rec["step"]))
    if set(vals) != set(want):
        bad("step %d: tags %s, expected %s" % (rec["step"], sorted(vals), sorted(want)))
    for tag in set(vals) & set(want):
        if not same(want[tag], vals[tag]):
            bad("step %d: %s = %r, the metrics log has %r" % (rec["step"], tag, vals[tag], want[tag]))
    if len(errs) > 20:
        break

for e in errs[:20]:
    print("FAIL: " + e)
if errs:
    sys.exit(1)
print("%d files, %d events, %d of them evaluations: as the metrics log"
      % (len(files), len(events), sum(r["type"] == "eval" for r in log)))
