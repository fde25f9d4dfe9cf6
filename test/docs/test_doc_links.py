#!/usr/bin/env python3
"""test_doc_links.py - every relative link in README.md and docs/*.md leads
somewhere: the file exists and, for a link into a Markdown file with
#anchor, a heading of that file has that anchor (GitHub's rule: lower case,
punctuation other than '-' and '_' dropped, spaces to '-', a repeated
heading numbered -1, -2, ...). Sections move between the README and docs/
as the project grows; a link left pointing at the old place is what this
catches. Environment (test_env): PSTRAIN_SRC."""
import os
import re
import sys

src = os.environ["PSTRAIN_SRC"]


def anchors(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # no headings in code
    seen, out = {}, set()
    for m in re.finditer(r"^#{1,6} +(.*?) *#* *$", text, re.M):
        a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else f"{a}-{n}")
    return out


files = ["README.md"] + sorted(
    os.path.join("docs", f) for f in os.listdir(os.path.join(src, "docs")) if f.endswith(".md"))
cache, bad, checked = {}, [], 0
for f in files:
    text = open(os.path.join(src, f), encoding="utf-8").read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        link = m.group(1)
        if re.match(r"[a-z]+:", link):
            continue  # http:, https:, mailto:
        path, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        checked += 1
        if not os.path.exists(os.path.join(src, target)):
            bad.append(f"{f}: link '{link}': no file {target}")
        elif anchor and target.endswith(".md"):
            if target not in cache:
                cache[target] = anchors(os.path.join(src, target))
            if anchor not in cache[target]:
                bad.append(f"{f}: link '{link}': no heading with anchor #{anchor} in {target}")
for b in bad:
    print(b)
print(f"{checked} links checked in {len(files)} files, {len(bad)} broken")
sys.exit(1 if bad else 0)
