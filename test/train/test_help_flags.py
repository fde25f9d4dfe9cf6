#!/usr/bin/env python3
"""test_help_flags.py - the flags of every command agree three ways:
the option table in the source (what the command accepts), its --help (what
it tells the user) and README.md (where the user looks them up).

For each command: every flag of its table is in its --help, every flag of
its --help is accepted by some command (its own, or another it refers to),
and every flag of its --help is in README.md as `--flag`; the table parsed
is the command's own (one of its flags is not "unknown", a made-up one is).
Environment (test_env): PSTRAIN, PSTRAIN_PREP, PSTRAIN_SRC."""
import os
import re
import subprocess
import sys

src = os.environ["PSTRAIN_SRC"]
pstrain = os.environ["PSTRAIN"]
prep = os.environ["PSTRAIN_PREP"]
readme = open(os.path.join(src, "README.md"), encoding="utf-8").read()
documented = set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", readme))

# command, source file, the table's C name (an array whose entries open with
# {"name", *_argument: getopt_long's struct option, or the train flags'
# train_opt; or a NULL-terminated list of names)
COMMANDS = [
    ([pstrain, "train"], "src/cmd/cli.c", "train_opts"),
    ([pstrain, "eval"], "src/cmd/eval_cmd.c", "opts"),
    ([pstrain, "plan"], "src/cmd/plan_cmd.c", "flags"),
    ([prep, "idx"], "data-tools/prep_idx.c", "opts"),
    ([prep, "images"], "data-tools/prep_images.c", "img_flags"),
    ([prep, "preview"], "data-tools/prep_preview.c", "preview_flags"),
]
fail = 0


def bad(msg):
    global fail
    fail = 1
    print("FAIL: " + msg)


def table(path, name):
    text = open(os.path.join(src, path), encoding="utf-8").read()
    m = re.search(r"\b" + re.escape(name) + r"\[\]\s*=\s*\{(.*?)\};", text, re.S)
    if not m:
        sys.exit("FAIL: no table %s[] in %s" % (name, path))
    body = m.group(1)
    names = re.findall(r'\{\s*"([^"]+)"\s*,\s*\w+_argument', body)
    if not names:
        names = re.findall(r'"([^"]+)"', body)
    # long flags only: -h and -o are not flags a README lists
    return {n for n in names if len(n) > 1} - {"help"}


tables = {tuple(c[1:]): table(path, name) for c, path, name in COMMANDS}
anywhere = set().union(*tables.values())
for cmd, path, name in COMMANDS:
    label = " ".join([os.path.basename(cmd[0])] + cmd[1:])
    accepted = tables[tuple(cmd[1:])]
    out = subprocess.run(cmd + ["--help"], capture_output=True, text=True)
    if out.returncode != 0:
        bad("%s --help: exit status %d" % (label, out.returncode))
        continue
    shown = set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", out.stdout)) - {"help"}
    for f in sorted(accepted - shown):
        bad("%s accepts --%s, but its --help does not show it" % (label, f))
    # a flag of another command may be named in prose (eval's help cites
    # train's --moving-average-decay); one that no command has is stale
    for f in sorted(shown - anywhere):
        bad("%s --help shows --%s, which no command accepts" % (label, f))
    # the table parsed is the one the command uses: a flag of it is not
    # refused as unknown, a made-up one is (one process each: seconds)
    for f, known in ((min(accepted), True), ("zz-not-a-flag", False)):
        r = subprocess.run(cmd + ["--" + f], capture_output=True, text=True, timeout=60)
        if ("unknown option" in r.stderr) == known:
            bad("%s --%s: %s" % (label, f, r.stderr.strip() or "accepted"))
    for f in sorted(shown - documented):
        bad("%s --%s: not in README.md" % (label, f))
    print("%s: %d flags in the table, --help and README.md" % (label, len(accepted)))
sys.exit(fail)
