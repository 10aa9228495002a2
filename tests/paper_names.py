#!/usr/bin/env python3
"""tests/paper_names.py -- a name the text places in a file stands in that file,
and a file the text names exists.

    python3 tests/paper_names.py

The chapters send a reader to the code with phrases such as "`sram_arena`
in `src/harness/io_model.h`" or "`fa_bwd_center_cost` in `core/fa_gpu.h`". A
file that only includes the one defining the name, or a name that has
moved, sends the reader to the wrong place. This test reads every such
phrase in the prose of chapters/*.md (a code name, then "in", "of" or
"from", then a repository file in code) and fails when the file is missing
or does not hold the name as a word. It also fails on a path in code that
names a file or folder of the repository (under one of its top folders,
TOP) that is not there: `tests/gpu/v3_check` for the program
`build/v3_check`. A segment that is a placeholder (`exercises/exN/`) is not a
path. It first checks on made-up text that it finds such a phrase and
catches a wrong file, and that it catches a path that is not there.

Prints one PASS/FAIL line (tests/run.sh protocol).
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = ("src/", "core/", "kernels/", "tests/", "scripts/", "data/", "paper/", "figures/", "exercises/",
       "python/", "chapters/", "docs/", "mk/", "examples/")
PATH = re.compile(r"`([\w.\-]+/[\w./\-]*)`")
PLACEHOLDER = re.compile(r"^[a-z]*[A-Z]+$")   # exN, NAME
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


def missing_paths(text):
    """The repository paths in code in text that are not there."""
    out = []
    for m in PATH.finditer(text):
        path = m.group(1).split("#")[0]
        if not path.startswith(TOP) or any(PLACEHOLDER.match(seg) for seg in path.split("/")):
            continue
        if not os.path.exists(os.path.join(ROOT, path.rstrip("/"))):
            out.append(path)
    return out


def main():
    good = "the arena (`sram_arena` in `src/harness/io_model.h`) holds it"
    bad = "the arena (`sram_arena` in `src/harness/common.h`) holds it"
    if not PLACED.search(good) or wrong(good) or len(wrong(bad)) != 1:
        print("FAIL paper: names stand in the files the text gives: the check itself does not "
              "find 'sram_arena' in io_model.h and miss it in common.h")
        return 0
    if missing_paths("`tests/gpu/v3_check.c`, `exercises/exN/`") or \
            missing_paths("`tests/gpu/v3_check`") != ["tests/gpu/v3_check"]:
        print("FAIL paper: names stand in the files the text gives: the check itself does not "
              "tell tests/gpu/v3_check.c (there) from tests/gpu/v3_check (not there)")
        return 0
    n, paths, bad_all = 0, 0, []
    for path in sorted(glob.glob(os.path.join(ROOT, "chapters", "*.md"))):
        text = open(path, encoding="utf-8").read()
        rel = os.path.relpath(path, ROOT)
        n += len(PLACED.findall(text))
        paths += sum(m.startswith(TOP) for m in PATH.findall(text))
        bad_all += [f"{rel}: `{a}` in `{b}`: {why}" for a, b, why in wrong(text)]
        bad_all += [f"{rel}: `{p}`: no such file or folder" for p in missing_paths(text)]
    if bad_all:
        print("FAIL paper: names stand in the files the text gives: " + "; ".join(bad_all[:8]))
    else:
        print(f"PASS paper: names stand in the files the text gives ({n} names placed, each in its "
              f"file; {paths} repository paths in code, each there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
