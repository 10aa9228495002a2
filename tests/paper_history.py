#!/usr/bin/env python3
"""tests/paper_history.py -- the main text states facts about the code and data, not their history.

    python3 tests/paper_history.py

The main text is every chapter before the one that opens the appendices
(`::: {.appendix}`). Its prose may not name a commit (a hash, or a
[..._commit]{.m} value), a run in the order it happened ("the first device
run", "a later run", "this session", "call 2") or what code used to be ("as
first written", "became the default"). A figure's caption may carry its
data's provenance, commit included, and so may the appendices: those lines
(starting with "![") and files are not read. Fenced code and inline code are
left out, so a file name such as bwd_hopper_bench_call2.csv is not prose.
The generated Markdown a main-text chapter includes (`{.include-md
file="build/paper/X.md"}`, a table and the sentences that read it) is read
too, where it has been built, its table captions (paragraphs opening with
": ") left out as the figures' are.

Prints PASS/FAIL lines (tests/run.sh protocol).
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paper_prose  # noqa: E402  (tests/paper_prose.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HISTORY = re.compile(
    r"(?<![\w./-])[0-9a-f]{7,40}(?![\w.-])"          # a commit hash
    r"|\[\w*commit\w*\]\{\.m\}"                       # a commit read from the data
    r"|\bthis session\b|\b(first|second|third|last|final|later|earlier) (device )?(run|call|measurement)s?\b"
    r"|\bdevice (run|call)s?\b|\bcall \d\b|\bas first written\b|\bat first\b"
    r"|\bbecame the default\b|\bwe first\b|\bused to\b|\bno longer (is|are|does)\b",
    re.IGNORECASE)


def prose(text):
    return paper_prose.prose(text, drop_captions=True)


def included(chapter_text):
    """(path, prose) of each generated file the chapter includes that exists
    (build/paper/*.md, written by make paper), table captions blanked."""
    out = []
    for rel in re.findall(r'\{\.include-md file="([^"]+)"', chapter_text):
        full = os.path.join(ROOT, rel)
        if not os.path.exists(full):
            continue
        paras = open(full, encoding="utf-8").read().split("\n\n")
        kept = [("\n" * p.count("\n")) if p.lstrip().startswith(": ") else p for p in paras]
        out.append((full, prose("\n\n".join(kept))))
    return out


def main():
    chapters = sorted(glob.glob(os.path.join(ROOT, "chapters", "*.md")))
    main_text = []
    for path in chapters:
        if re.search(r"^:::+\s*\{\.appendix\}", open(path, encoding="utf-8").read(), re.M):
            break
        main_text.append(path)
    if not main_text or len(main_text) == len(chapters):
        print("FAIL paper: no run history in the main text: no chapter opens the appendices "
              "(::: {.appendix}), so the main text has no end")
        return 1
    found, generated = [], 0
    for path in main_text:
        text = open(path, encoding="utf-8").read()
        pieces = [(path, prose(text))] + included(text)
        generated += len(pieces) - 1
        for where, body in pieces:
            for m in HISTORY.finditer(body):
                if where != path and m.group(0).isdigit():
                    continue   # a generated table's count (1048576), not a hash
                no = body.count("\n", 0, m.start()) + 1
                found.append(f"{os.path.relpath(where, ROOT)}:{no}: '{' '.join(m.group(0).split())}'")
    if found:
        print(f"FAIL paper: no run history in the main text: {len(found)} found: " + "; ".join(found[:8]))
        return 1
    print(f"PASS paper: no run history in the main text ({len(main_text)} chapters before the "
          f"appendices and the {generated} generated files they include: no commit, no run told in order)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
