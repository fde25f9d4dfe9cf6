#!/usr/bin/env python3
"""test_help_flags.py - the flags of every command agree three ways:
the option table in the source (what the command accepts), its --help (what
it tells the user) and its man page (man/*.scd, where the user looks them up).

For each command: every flag of its table is in its --help; every flag of its
--help is accepted by some command (its own, or another it refers to); every
flag of its --help that it accepts is an option of its man page (a definition
line, `*--flag*` at the start of a line, in the command's section for the
subcommands of pstrain-prep); every option of its man page is in its table and
the command does not refuse it as unknown; every other flag the page names is
some command's. The table parsed is the command's own (one of its flags is not
"unknown", a made-up one is). The commands of `pstrain --help` and
`pstrain-prep --help` each have their page or section.
Environment (test_env): PSTRAIN, PSTRAIN_PREP, PSTRAIN_SRC."""
import os
import re
import subprocess
import sys

src = os.environ["PSTRAIN_SRC"]
pstrain = os.environ["PSTRAIN"]
prep = os.environ["PSTRAIN_PREP"]
FLAG = r"(?<![\w-])--([a-z][a-z0-9-]*)"

# command, source file, the table's C name (an array whose entries open with
# {"name", *_argument: getopt_long's struct option, or the train flags'
# train_opt; or a NULL-terminated list of names), man page, section of it
COMMANDS = [
    ([pstrain, "train"], "src/cmd/cli.c", "train_opts", "pstrain-train", None),
    ([pstrain, "eval"], "src/cmd/eval_cmd.c", "opts", "pstrain-eval", None),
    ([pstrain, "plan"], "src/cmd/plan_cmd.c", "flags", "pstrain-plan", None),
    ([prep, "idx"], "data-tools/prep_idx.c", "opts", "pstrain-prep", "idx"),
    ([prep, "images"], "data-tools/prep_images.c", "img_flags", "pstrain-prep", "images"),
    ([prep, "preview"], "data-tools/prep_preview.c", "preview_flags", "pstrain-prep", "preview"),
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
    # long flags only (-h, -o are spelled out as --help, --output)
    return {n for n in names if len(n) > 1} - {"help"}


def page(name):
    path = os.path.join(src, "man", name + ".1.scd")
    if not os.path.exists(path):
        sys.exit("FAIL: no man page %s" % os.path.relpath(path, src))
    return open(path, encoding="utf-8").read()


def section(text, name):
    """The `## name` section of a page, up to the next heading."""
    m = re.search(r"^## " + re.escape(name) + r"\n(.*?)(?=^#)", text, re.S | re.M)
    return m.group(1) if m else None


def options(text):
    """Flags a page defines: those of lines that start with `*-`."""
    lines = [ln for ln in text.splitlines() if ln.startswith("*-")]
    return set(re.findall(FLAG, "\n".join(lines))) - {"help"}


def help_text(cmd):
    out = subprocess.run(cmd + ["--help"], capture_output=True, text=True, timeout=60)
    return out.stdout if out.returncode == 0 else None


tables = {tuple(c[1:]): table(path, name) for c, path, name, _, _ in COMMANDS}
anywhere = set().union(*tables.values())

# the commands of the top-level usages, each with its page or section
for prog, name, cmds in ((pstrain, "pstrain", {"train", "eval", "plan"}),
                         (prep, "pstrain-prep", {"idx", "images", "png", "info", "verify",
                                                 "preview"})):
    usage = help_text([prog]) or ""
    # "  train   train a model", not "  pstrain --version"
    listed = set(re.findall(r"^  ([a-z]+)\s", usage, re.M)) - {"pstrain"}
    if listed != cmds:
        bad("%s --help lists the commands %s, this test knows %s" %
            (name, sorted(listed), sorted(cmds)))
    text = page(name)
    for c in sorted(listed):
        where = "pstrain-" + c if name == "pstrain" else None
        if where and not os.path.exists(os.path.join(src, "man", where + ".1.scd")):
            bad("pstrain %s: no man page man/%s.1.scd" % (c, where))
        if where and "*%s*(1)" % where not in text:
            bad("man/pstrain.1.scd does not name *%s*(1)" % where)
        if not where and section(text, c) is None and "*pstrain-prep %s*" % c not in text:
            bad("man/pstrain-prep.1.scd: no section ## %s" % c)

for cmd, path, name, man, sect in COMMANDS:
    label = " ".join([os.path.basename(cmd[0])] + cmd[1:])
    accepted = tables[tuple(cmd[1:])]
    out = help_text(cmd)
    if out is None:
        bad("%s --help: non-zero exit status" % label)
        continue
    shown = set(re.findall(FLAG, out)) - {"help"}
    for f in sorted(accepted - shown):
        bad("%s accepts --%s, but its --help does not show it" % (label, f))
    # a flag of another command may be named in prose (eval's help cites
    # train's --moving-average-decay); one that no command has is stale
    for f in sorted(shown - anywhere):
        bad("%s --help shows --%s, which no command accepts" % (label, f))

    text = page(man)
    if sect:
        text = section(text, sect)
        if text is None:
            bad("man/%s.1.scd: no section ## %s" % (man, sect))
            continue
    where = "man/%s.1.scd" % man + (" (## %s)" % sect if sect else "")
    defined = options(text)
    named = set(re.findall(FLAG, text)) - {"help"}
    for f in sorted((shown & accepted) - defined):
        bad("%s --%s: not an option of %s" % (label, f, where))
    for f in sorted(shown - accepted - named):
        bad("%s --help names --%s, %s does not" % (label, f, where))
    for f in sorted(defined - accepted):
        bad("%s defines --%s, which %s does not accept" % (where, f, label))
    for f in sorted(named - defined - anywhere):
        bad("%s names --%s, which no command accepts" % (where, f))
    # the table parsed is the one the command uses, and each option of the
    # page is taken: not refused as unknown, while a made-up one is (one
    # process each, no data set given: it stops at the missing input)
    for f, known in [(f, True) for f in sorted(defined & accepted)] + [("zz-not-a-flag", False)]:
        r = subprocess.run(cmd + ["--" + f], capture_output=True, text=True, timeout=60)
        if ("unknown option" in r.stderr) == known:
            bad("%s --%s: %s" % (label, f, r.stderr.strip() or "accepted"))
    print("%s: %d flags in the table, --help and %s" % (label, len(accepted), where))
sys.exit(fail)
