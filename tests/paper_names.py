#!/usr/bin/env python3
"""tests/paper_names.py -- a name the text places in a file stands in that file.

    python3 tests/paper_names.py

The chapters send a reader to the code with phrases such as "`sram_arena`
in `src/harness/io_model.h`" or "`fa_bwd_center_cost` in `core/fa_gpu.h`". A
file that only includes the one defining the name, or a name that has
moved, sends the reader to the wrong place. This test reads every such
phrase in the prose of chapters/*.md (a code name, then "in", "of" or
"from", then a repository file in code) and fails when the file is missing
or does not hold the name as a word. It first checks on made-up text that
it finds such a phrase and catches a wrong file.

Prints one PASS/FAIL line (tests/run.sh protocol).
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLACED = re.compile(r"`([A-Za-z_]\w*)(?:\(\))?`\s+(?:in|of|from)\s+"
                    r"`([\w.\-]+(?:/[\w.\-]+)+\.(?:h|c|cu|cuh|py))`")


def wrong(text):
    """[(name, path, why)] for each phrase of text that places a name in a
    file that lacks it."""
    out = []
    for m in PLACED.finditer(text):
        name, path = m.groups()
        full = os.path.join(ROOT, path)
        if not os.path.isfile(full):
            out.append((name, path, "no such file"))
        elif not re.search(r"\b" + re.escape(name) + r"\b", open(full, encoding="utf-8").read()):
            out.append((name, path, "not in the file"))
    return out


def main():
    good = "the arena (`sram_arena` in `src/harness/io_model.h`) holds it"
    bad = "the arena (`sram_arena` in `src/harness/common.h`) holds it"
    if not PLACED.search(good) or wrong(good) or len(wrong(bad)) != 1:
        print("FAIL paper: names stand in the files the text gives: the check itself does not "
              "find 'sram_arena' in io_model.h and miss it in common.h")
        return 0
    n, bad_all = 0, []
    for path in sorted(glob.glob(os.path.join(ROOT, "chapters", "*.md"))):
        text = open(path, encoding="utf-8").read()
        n += len(PLACED.findall(text))
        bad_all += [f"{os.path.relpath(path, ROOT)}: `{a}` in `{b}`: {why}" for a, b, why in wrong(text)]
    if bad_all:
        print("FAIL paper: names stand in the files the text gives: " + "; ".join(bad_all[:8]))
    else:
        print(f"PASS paper: names stand in the files the text gives ({n} placed, each in its file)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
