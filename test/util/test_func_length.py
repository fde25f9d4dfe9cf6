#!/usr/bin/env python3
"""test_func_length.py - no C function in src/ or data-tools/ is longer than
LIMIT lines (from the first line of its signature to its closing brace), so
that each fits a screen and does one job (docs/contributing.md). Numeric
kernels may be longer: name them in ALLOWED with the reason. The sources are
clang-formatted, so a function body opens with '{' alone at column 0 and
closes with '}' at column 0. Environment (test_env): PSTRAIN_SRC."""
import os
import re
import sys

LIMIT = 110
# function name -> why it may be longer
ALLOWED = {}

src = os.environ["PSTRAIN_SRC"]


def functions(path):
    """(name, first line, length) of every function definition in path."""
    lines = open(path, encoding="utf-8").read().split("\n")
    start = None
    for i, line in enumerate(lines):
        if start is None and line == "{":
            j = i
            while j > 0:
                prev = lines[j - 1]
                body = prev.strip()
                if (not body or prev.startswith("#") or body.endswith((";", "}", "*/"))
                        or body.startswith(("/*", "*", "//"))):
                    break
                j -= 1
            m = re.search(r"(\w+)\s*\(", " ".join(lines[j:i]))
            start, name = j, m.group(1) if m else "?"
        elif start is not None and line.startswith("}"):
            yield name, start + 1, i - start + 1
            start = None


def main():
    files = []
    for top in ("src", "data-tools"):
        for root, _, names in os.walk(os.path.join(src, top)):
            files += [os.path.join(root, n) for n in names if n.endswith(".c")]
    bad = 0
    for path in sorted(files):
        for name, line, n in functions(path):
            if n > LIMIT and name not in ALLOWED:
                rel = os.path.relpath(path, src)
                print(f"{rel}:{line}: {name} is {n} lines, expected at most {LIMIT}: split it "
                      "into functions that each do one job")
                bad += 1
    if not files:
        print(f"no C files under {src}/src")
        return 1
    print(f"{len(files)} files checked, {bad} functions over {LIMIT} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
