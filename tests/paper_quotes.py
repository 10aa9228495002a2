#!/usr/bin/env python3
"""tests/paper_quotes.py -- every quotation of the textbook is really in it.

    python3 tests/paper_quotes.py [SEED_CHAPTER]

paper/gen/claims.py keeps every quotation the paper makes in one table
(QUOTES), each a list of fragments and the place they stand. For the
textbook chapter this checks, fragment by fragment, that the text is there
word for word on the lines the quotation names, and that no fragment runs
to twelve words (a quotation is not a copy). The chapter is not part of
this repository: it is looked for in $FA_SEED_CHAPTER, or as
shared/seed/flashattention-chapter.txt beside the repository (or beside its
parent, for a worktree); without it the check prints SKIP. The papers'
quotations cannot be checked here; they carry their section or figure.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "paper", "gen"))
import claims  # noqa: E402


def seed_path(argv):
    cands = argv[1:2] + [os.environ.get("FA_SEED_CHAPTER", "")]
    for up in ("..", os.path.join("..", "..")):
        cands.append(os.path.join(ROOT, up, "shared", "seed", "flashattention-chapter.txt"))
    return next((c for c in cands if c and os.path.isfile(c)), None)


def lines_named(where, n_lines):
    """Line numbers a 'where' names: 'l. 124', 'll. 38-42', several of them."""
    out = set()
    for a, b in re.findall(r"\bl{1,2}\. (\d+)(?:-(\d+))?", where):
        out.update(range(int(a), int(b or a) + 1))
    return {i for i in out if 1 <= i <= n_lines}


def main(argv):
    name = "paper: textbook quotations are word for word on the lines they name"
    path = seed_path(argv)
    if not path:
        print(f"SKIP {name}: the textbook chapter the quotations come from is not part of this repository "
              "(FA_SEED_CHAPTER=FILE names a copy of it)")
        return 0
    with open(path, encoding="utf-8") as f:
        text = f.read().split("\n")
    bad, n = [], 0
    for key, q in claims.QUOTES.items():
        if q.source != "chapter":
            continue
        where = lines_named(q.where, len(text))
        if not where:
            bad.append(f"{key} names no line ('{q.where}')")
            continue
        body = "\n".join(text[i - 1] for i in sorted(where))
        for frag in q.fragments:
            n += 1
            if len(frag.split()) >= 12:
                bad.append(f"{key}: a fragment of {len(frag.split())} words")
            if frag not in body:
                bad.append(f"{key}: '{frag[:50]}' is not on {q.where}")
    if bad:
        print(f"FAIL {name}: " + "; ".join(bad[:5]))
    else:
        print(f"PASS {name} ({n} fragments, each under twelve words)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
