"""tests/repo_files.py -- the repository's files as the tree's rule checks
(tests/layers.py, tests/rooms.py) read them: git's list of files (tracked,
and new ones git does not ignore), their text, and the FAIL or PASS report of
a rule's findings."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def listed():
    """Sorted paths, relative to the repository root, of the files git lists
    (tracked, and untracked but not ignored) that exist; None outside a git
    checkout."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return sorted(p for p in out.stdout.split("\n") if p and os.path.isfile(os.path.join(ROOT, p)))


def texts(rels):
    """{rel: text} of the given repository paths, read as UTF-8 with bad
    bytes replaced."""
    sources = {}
    for rel in rels:
        with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
            sources[rel] = f.read()
    return sources


def report(found, fail_head, pass_line):
    """Print 'FAIL <fail_head>' and each finding on an indented line of its
    own, or 'PASS <pass_line>' when there is none; True when none."""
    if found:
        print("FAIL " + fail_head)
        for why in found:
            print("    " + why)
        return False
    print("PASS " + pass_line)
    return True
