#!/usr/bin/env python3
"""test_doc_links.py - the documentation's links and the source tree's
references into it lead somewhere.

1. Every relative link in README.md, docs/*.md and jobs/README.md: the file
   exists and, for a link into a Markdown file with #anchor, a heading of
   that file has that anchor (GitHub's rule: lower case, punctuation other
   than '-' and '_' dropped, spaces to '-', a repeated heading numbered -1,
   -2, ...).
2. Every reference to a document in the source tree (src, include,
   data-tools, test, jobs, bench, the meson files), in the one form the
   project uses (docs/contributing.md, "Documentation"):
     docs/FILE.md                the file exists
     docs/FILE.md §N             a heading "N. ..." (or "N.M ...") exists
     docs/FILE.md §N, "Text"     and Text occurs in that section
     docs/FILE.md, "Heading"     a heading of FILE starts with Heading
   Text and headings compare case-insensitively, without `backticks`, with
   runs of white space as one space, and across comment line breaks. Other
   forms are refused: a document named without docs/ (design.md §3), and
   "section N" for §N.
Sections move between pages as the project grows; a link or a comment left
pointing at the old place is what this catches. Environment (test_env):
PSTRAIN_SRC."""
import os
import re
import sys

src = os.environ["PSTRAIN_SRC"]


def strip_code(text):
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def norm(s):
    return re.sub(r"\s+", " ", s.replace("`", "")).strip().lower()


def headings(path):
    """[(level, text, start, end)]: each heading and its section's span."""
    text = strip_code(open(path, encoding="utf-8").read())
    hs = [(len(m.group(1)), m.group(2).strip(), m.start())
          for m in re.finditer(r"^(#{1,6}) +(.*?) *#* *$", text, re.M)]
    out = []
    for i, (lev, h, start) in enumerate(hs):
        end = next((s for l2, _, s in hs[i + 1:] if l2 <= lev), len(text))
        out.append((lev, h, start, end))
    return text, out


def anchors(path):
    seen, out = {}, set()
    for _, h, _, _ in headings(path)[1]:
        a = re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-")
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else f"{a}-{n}")
    return out


bad, cache = [], {}

# 1. links in the documentation
files = ["README.md", os.path.join("jobs", "README.md")] + sorted(
    os.path.join("docs", f) for f in os.listdir(os.path.join(src, "docs")) if f.endswith(".md"))
links = 0
for f in files:
    text = strip_code(open(os.path.join(src, f), encoding="utf-8").read())
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        link = m.group(1)
        if re.match(r"[a-z]+:", link):
            continue  # http:, https:, mailto:
        path, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        links += 1
        if not os.path.exists(os.path.join(src, target)):
            bad.append(f"{f}: link '{link}': no file {target}")
        elif anchor and target.endswith(".md"):
            if target not in cache:
                cache[target] = anchors(os.path.join(src, target))
            if anchor not in cache[target]:
                bad.append(f"{f}: link '{link}': no heading with anchor #{anchor} in {target}")

# 2. references from the source tree
docnames = {f for f in os.listdir(os.path.join(src, "docs")) if f.endswith(".md")}
docnames |= {"mpi-facts.md"} - {"README.md"}
docnames.discard("README.md")
REF = re.compile(r'docs/([\w.-]+\.md)(?: §(\d+(?:\.\d+)?)(?:, "([^"]+)")?|, "([^"]+)")?')
BARE = re.compile(r'(?<![\w/.-])(' + "|".join(re.escape(d) for d in sorted(docnames)) + r')\b')
SECTION_WORD = re.compile(r'docs/[\w.-]+\.md,? (?:section|sect\.) ?\d')
sources = []
for top in ["src", "include", "data-tools", "test", "jobs", "bench"]:
    for d, _, fs in os.walk(os.path.join(src, top)):
        for name in fs:
            if name.endswith((".c", ".h", ".py", ".sh", ".build", ".sbatch")) or "." not in name:
                sources.append(os.path.join(d, name))
sources += [os.path.join(src, "meson.build"), os.path.join(src, "meson_options.txt")]
sources = [p for p in sources if os.path.basename(p) != "test_doc_links.py"]
refs = 0
for p in sorted(sources):
    try:
        raw = open(p, encoding="utf-8").read()
    except (UnicodeDecodeError, FileNotFoundError):
        continue
    rel = os.path.relpath(p, src)
    # one logical text: comment line breaks become one space
    text = re.sub(r"[ \t]*\n[ \t]*(?:\*(?!/)|#|//)?[ \t]*", " ", raw)
    for m in SECTION_WORD.finditer(text):
        bad.append(f"{rel}: '{m.group(0)}': write docs/FILE.md §N")
    for m in BARE.finditer(text):
        bad.append(f"{rel}: '{m.group(1)}': write docs/{m.group(1)}")
    for m in REF.finditer(text):
        name, sec, sec_text, head = m.groups()
        refs += 1
        path = os.path.join(src, "docs", name)
        if not os.path.exists(path):
            bad.append(f"{rel}: '{m.group(0)}': no file docs/{name}")
            continue
        body, hs = headings(path)
        if sec:
            hit = [h for h in hs if re.match(re.escape(sec) + r"(\.|\s)", h[1])
                   and not re.match(re.escape(sec) + r"\.\d", h[1])]
            if not hit:
                bad.append(f"{rel}: '{m.group(0)}': no section {sec} in docs/{name}")
            elif sec_text and norm(sec_text) not in norm(body[hit[0][2]:hit[0][3]]):
                bad.append(f"{rel}: '{m.group(0)}': \"{sec_text}\" is not in §{sec} of docs/{name}")
        elif head and not any(norm(h).startswith(norm(head)) for _, h, _, _ in hs):
            bad.append(f"{rel}: '{m.group(0)}': no heading \"{head}\" in docs/{name}")

for b in bad:
    print(b)
print(f"{links} links in {len(files)} documents and {refs} references in "
      f"{len(sources)} source files checked, {len(bad)} broken")
sys.exit(1 if bad else 0)
