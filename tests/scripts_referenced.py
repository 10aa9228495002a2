"""tests/scripts_referenced.py -- every file of scripts/ is used by something.

A script is referenced when its path (scripts/...) appears in a root -- the
Makefile and every make fragment (*.mk), a file of tests/, the README or a
page of docs/ -- or in a script that is itself referenced; a Python module is
also referenced when a referenced Python script of its own folder imports it
by name. A file of scripts/ that nothing reaches this way is dead: it is
removed, or, if it made data, moved with that data into
data/gpu/studies/NAME/. The test fails on each such file, and first checks on
a made-up tree that it would (an orphan, a chain through an import, a path
named only in data/).

    python3 tests/scripts_referenced.py      PASS/FAIL lines (tests/run.sh protocol)
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def is_root(path):
    """Whether a repository file is one whose mentions count by themselves."""
    return (path in ("Makefile", "README.md") or path.endswith(".mk")
            or path.startswith("tests/") or (path.startswith("docs/") and path.endswith(".md")))


def unreferenced(files, read):
    """The files of scripts/ (sorted) that no root reaches. files: every
    repository path; read(path): its text ("" when unreadable)."""
    scripts = sorted(f for f in files if f.startswith("scripts/"))
    texts = {f: read(f) for f in files if is_root(f) or f in scripts}
    reached = set()
    frontier = [f for f in files if is_root(f)]
    while frontier:
        src = frontier.pop()
        text = texts.get(src, "")
        for s in scripts:
            if s in reached or s == src:
                continue
            named = re.search(r"(?<![\w/.-])" + re.escape(s) + r"(?![\w-])", text)
            mod = os.path.splitext(os.path.basename(s))[0]
            imported = (src.endswith(".py") and s.endswith(".py") and src.startswith("scripts/")
                        and os.path.dirname(src) == os.path.dirname(s)
                        and re.search(r"^\s*(?:import|from)\s+" + re.escape(mod) + r"\b", text, re.M))
            if named or imported:
                reached.add(s)
                frontier.append(s)
    return [s for s in scripts if s not in reached]


def self_check():
    """The made-up tree: what unreferenced() must find in it, and what it found."""
    tree = {
        "Makefile": "all:\n\tpython3 scripts/gpu/bench.py\n",
        "scripts/gpu/bench.py": "import timing\n",
        "scripts/gpu/timing.py": "",
        "scripts/gpu/orphan.py": "",
        "scripts/gpu/named_in_data.sh": "",
        "scripts/setup.sh": "",
        "tests/t.sh": "sh scripts/setup.sh\n",
        "data/gpu/README.md": "scripts/gpu/named_in_data.sh scripts/gpu/orphan.py\n",
        "docs/a.md": "scripts/gpu/benchmark.py is another name\n",
    }
    with tempfile.TemporaryDirectory() as d:
        for rel, text in tree.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        got = unreferenced(sorted(tree), lambda p: open(os.path.join(d, p)).read())
    return ["scripts/gpu/named_in_data.sh", "scripts/gpu/orphan.py"], got


def main():
    want, got = self_check()
    if got != want:
        print(f"FAIL scripts referenced self-check: on the made-up tree expected {want}, got {got}")
        return 1
    print(f"PASS scripts referenced self-check: the made-up tree's {len(want)} dead scripts found, "
          "an imported module kept")
    try:
        files = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard"],
                               capture_output=True, text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        print("SKIP scripts referenced: not a git checkout (the file list comes from git)")
        return 0
    files = [f for f in files if f and os.path.isfile(os.path.join(ROOT, f))]

    def read(p):
        try:
            with open(os.path.join(ROOT, p), errors="replace") as f:
                return f.read()
        except OSError:
            return ""
    scripts = [f for f in files if f.startswith("scripts/")]
    dead = unreferenced(files, read)
    for s in dead:
        print(f"FAIL script referenced: {s}: no make target, test, README or docs page names it "
              "(nor a script they reach); remove it or move it with its data to data/gpu/studies/NAME/")
    if not dead:
        print(f"PASS scripts referenced: each of the {len(scripts)} files of scripts/ is reached from the "
              "Makefile, a make fragment, tests/, README.md or docs/")
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main())
