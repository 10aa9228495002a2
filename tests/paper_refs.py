#!/usr/bin/env python3
"""tests/paper_refs.py -- every cross-reference in the book is generated, none typed.

    python3 tests/paper_refs.py [PAPER.txt]

The chapters name a part, chapter or section by the id of its heading,
`chapter [](#sec:tiled)`, and paper/include-code.lua writes the number
(\\ref in LaTeX, the HTML's own numbering otherwise). A number typed by hand
("chapter 4", "section 3.2", "Part II", "table 2", "figure 14", "chapter 4b")
goes stale the day a chapter moves, so this test fails on any, in the prose
of chapters/*.md (fenced code, inline code and HTML comments left out).
References to other documents are not the book's numbering and stand as
typed when the words before them say whose they are ("its section 3.2", "the
FlashAttention paper's Figure 2"): EXTERNAL lists those lead-ins.

The sources outside the book (code comments, scripts, README.md, docs/,
paper/numbers.txt, the exercises) cannot generate a number, so they name a
chapter by its file ("chapters/21-gpu-backward.md") or its title: this test
also fails on "chapter 4b" or "chapter 3" in any tracked file under SOURCES,
other documents' chapters (EXTERNAL) left alone. PENDING names files whose
owner is rewriting them elsewhere; they are reported, not failed.

A figure carries its id on its image ({#fig:name}), a table at the end of
its caption ({#tbl:name}; a generated table's in the Markdown the chapter
includes, read where built), and "figure [](#fig:name)" or "table
[](#tbl:name)" gives the number. LaTeX floats figures: "the
second figure" of a chapter need not be the second the reader meets (a
chapter's first figure may float past the text that names it, or past a
table). So the chapters name a figure or a table by its id or by what it
shows ("the figure of traffic against sequence length"), and this test
fails on an ordinal one ("first
figure", "the second table"), or by a place a float need not keep ("the next
figure", "the figure above"; a table stays where the text puts it).

It also fails when an empty link [](#id) names an id that no heading or part
of the chapters carries, or when the word before it does not fit the
heading ("chapter [](#id)" for a section's id prints "chapter 5.2"; a
chapter is a top-level heading, a section a deeper one, a part a part), and,
given PAPER.txt (pdftotext of the PDF), when LaTeX left a reference
unresolved ("??").

Prints PASS/FAIL lines (tests/run.sh protocol).
"""
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paper_prose  # noqa: E402  (tests/paper_prose.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TYPED = re.compile(
    r"\b(chapters?|sections?|appendix|appendices|parts?|figures?|tables?|listings?)"
    r"\s+(\d[\w.]*|[IVX]+\b|[A-H]\b)", re.IGNORECASE)
# words right before a typed number that make it another document's numbering
EXTERNAL = re.compile(r"(\bits|paper's|textbook's|FlashAttention-2's|FlashAttention's)\s+$",
                      re.IGNORECASE)
# outside chapters/: the files that may name a chapter, and the pattern
SOURCES = ("README.md", "Makefile", "docs/", "core/", "kernels/", "src/", "scripts/", "python/",
           "tests/", "exercises/", "figures/", "mk/", "paper/", "examples/")
CHAPTER_NO = re.compile(r"\bchapters?\s+(\d[\w.]*|[IVX]+\b)", re.IGNORECASE)
PENDING = ()
ORDINAL = re.compile(
    r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)\s+(figures?|tables?)\b"
    r"|\b(?:next|previous|following|preceding)\s+figures?\b|\bfigures?\s+(?:above|below)\b",
    re.IGNORECASE)
REF = re.compile(r"\[\]\(#([^)\s]+)\)")
HEADING_ID = re.compile(r"^(#+) .*\{[^}]*#([\w:.-]+)[^}]*\}\s*$")
# the word before a reference and the heading levels it may name (0: a part)
# a figure's id, on its image line: ![caption](file){#fig:name ...}
FIGURE_ID = re.compile(r"^!\[.*\]\([^)\s]*\)\{[^}]*#(fig:[\w.-]+)")
# a table's id, at the end of its caption (": ... {#tbl:name}"), in a chapter
# or in the generated Markdown a chapter includes (build/paper/X.md)
TABLE_ID = re.compile(r"^: .*\{#(tbl:[\w:.-]+)\}\s*$")
INCLUDE_MD = re.compile(r'\{\.include-md file="([^"]+)"')
KIND = re.compile(r"\b(chapters?|sections?|parts?|figures?|tables?)\s+\[\]\(#([^)\s]+)\)", re.IGNORECASE)
LEVELS = {"chapter": {1}, "section": {2, 3, 4, 5, 6}, "part": {0}, "figure": {-1},
          "table": {-2}}   # -1: a figure, -2: a table
PART_ID = re.compile(r"^:::+\s*\{[^}]*\.part\b[^}]*#([\w:.-]+)|^:::+\s*\{[^}]*#([\w:.-]+)[^}]*\.part\b")


def prose(text):
    return paper_prose.prose(text, drop_captions=False)


def source_files():
    """Tracked files under SOURCES (git ls-files; every file there when git
    is not at hand, as in an unpacked tarball)."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True,
                             check=True).stdout.decode("utf-8", "replace")
        files = [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = [os.path.relpath(os.path.join(d, f), ROOT)
                 for d, _, fs in os.walk(ROOT) for f in fs]
    me = os.path.relpath(os.path.abspath(__file__), ROOT)
    return sorted(f for f in files
                  if f.startswith(SOURCES) and f != me and not f.startswith("build/"))


def typed_in_sources():
    """(typed, pending): 'file:line: text' of each typed chapter number in
    the sources; those in PENDING files apart."""
    typed, pending = [], []
    for name in source_files():
        try:
            with open(os.path.join(ROOT, name), encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue   # binary or gone
        for m in CHAPTER_NO.finditer(text):
            if EXTERNAL.search(text[max(0, m.start() - 40):m.start()]):
                continue
            hit = f"{name}:{text.count(chr(10), 0, m.start()) + 1}: '{' '.join(m.group(0).split())}'"
            (pending if name in PENDING else typed).append(hit)
    return typed, pending


def main():
    chapters = sorted(glob.glob(os.path.join(ROOT, "chapters", "*.md")))
    if not chapters:
        print("FAIL paper: cross-references generated: no chapters/*.md")
        return 1
    typed, ids, refs, level = [], set(), [], {}
    texts = {}
    for path in chapters:
        text = texts[path] = open(path, encoding="utf-8").read()
        for line in text.split("\n"):
            m = HEADING_ID.match(line)
            if m:
                level[m.group(2)] = len(m.group(1))
            m = PART_ID.match(line)
            if m:
                level[next(g for g in m.groups() if g)] = 0
            m = FIGURE_ID.match(line)
            if m:
                level[m.group(1)] = -1
            m = TABLE_ID.match(line)
            if m:
                level[m.group(1)] = -2
        for rel in INCLUDE_MD.findall(text):   # generated tables, where built
            full = os.path.join(ROOT, rel)
            if os.path.exists(full):
                for line in open(full, encoding="utf-8").read().split("\n"):
                    m = TABLE_ID.match(line)
                    if m:
                        level[m.group(1)] = -2
    ids = set(level)
    misnamed, ordinal = [], []
    for path in chapters:
        name = os.path.relpath(path, ROOT)
        text = texts[path]
        body = prose(text)   # matched whole: a reference may break across lines
        for m in TYPED.finditer(body):
            if EXTERNAL.search(body[max(0, m.start() - 40):m.start()]):
                continue
            no = body.count("\n", 0, m.start()) + 1
            typed.append(f"{name}:{no}: '{' '.join(m.group(0).split())}'")
        for m in ORDINAL.finditer(body):
            hit = f"{name}:{body.count(chr(10), 0, m.start()) + 1}: '{' '.join(m.group(0).split())}'"
            ordinal.append(hit)
        for m in REF.finditer(body):
            refs.append((f"{name}:{body.count(chr(10), 0, m.start()) + 1}", m.group(1)))
        for m in KIND.finditer(body):
            word, i = m.group(1).lower().rstrip("s"), m.group(2)
            if i in level and level[i] not in LEVELS[word]:
                what = {-2: "a table", -1: "a figure", 0: "a part", 1: "a chapter"}.get(level[i], "a section")
                misnamed.append(f"{name}:{body.count(chr(10), 0, m.start()) + 1}: '{word} [](#{i})' "
                                f"names {what}")
    ok = True
    if typed:
        ok = False
        print(f"FAIL paper: no typed cross-reference: {len(typed)} typed, write [](#id) "
              f"instead: " + "; ".join(typed[:8]))
    else:
        print(f"PASS paper: no typed cross-reference in {len(chapters)} chapters "
              f"({len(refs)} generated ones)")
    if ordinal:
        ok = False
        print(f"FAIL paper: no figure or table named by its place: {len(ordinal)} found, name it by "
              f"what it shows instead: " + "; ".join(ordinal[:8]))
    else:
        print("PASS paper: no figure or table named by its place (first figure, second table)")
    src_typed, src_pending = typed_in_sources()
    if src_typed:
        ok = False
        print(f"FAIL paper: sources name chapters by file: {len(src_typed)} typed chapter "
              f"numbers, write the chapter's file (chapters/NN-name.md) or title instead: "
              + "; ".join(src_typed[:8]))
    else:
        note = (f"; pending: {len(src_pending)} in " + ", ".join(PENDING)) if src_pending else ""
        print(f"PASS paper: sources name chapters by file, no typed chapter number "
              f"({len(source_files())} files{note})")
    dangling = [f"{where}: #{i}" for where, i in refs if i not in ids]
    if not refs:
        ok = False
        print("FAIL paper: cross-references resolve: the chapters make no [](#id) reference at all")
    elif dangling:
        ok = False
        print("FAIL paper: cross-references resolve: no heading or figure carries " + "; ".join(dangling[:8]))
    elif misnamed:
        ok = False
        print("FAIL paper: cross-references resolve: the word before a reference does not fit its "
              "heading: " + "; ".join(misnamed[:8]))
    else:
        print(f"PASS paper: cross-references resolve ({len(refs)} references to "
              f"{len({i for _, i in refs})} of {len(ids)} heading and figure ids)")
    if len(sys.argv) > 1:
        txt = open(sys.argv[1], encoding="utf-8", errors="replace").read()
        n = txt.count("??")
        if n:
            ok = False
            print(f"FAIL paper: references resolved in the PDF: {n} '??' in {sys.argv[1]}")
        else:
            print("PASS paper: references resolved in the PDF (no '??')")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
