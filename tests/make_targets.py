#!/usr/bin/env python3
"""tests/make_targets.py -- every `make TARGET` the text tells a reader to run exists.

The README, docs/, the chapters, the exercises' pages and the device
scripts tell readers to run make targets; a target renamed or removed
leaves a command that fails on first use. This test collects each `make`
command of those files (in code: a fenced block, an inline `code` span, or a
shell script's line) and its targets (the words after `make` and its
options, up to the end of the command; VAR=value settings skipped), and
fails on each target that the Makefile does not define (make -pq's
database without the built-in rules: explicit targets, and the project's
pattern rules matched as make would). It
first checks on made-up text that it would catch a missing target and pass
a real one.

    python3 tests/make_targets.py      PASS/FAIL lines (tests/run.sh protocol)
"""
import fnmatch
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import repo_files  # noqa: E402

READ = ("README.md", "docs/", "chapters/", "exercises/", "scripts/device/")
# make's options that take a value as the next word
VALUE_OPTS = {"-C", "-f", "-j", "-o", "-W", "-I", "--directory", "--file"}


def defined_targets():
    """(names, patterns) of the targets make -pq knows in the repository root."""
    out = subprocess.run(["make", "-pqrR", "--no-print-directory"], cwd=ROOT, capture_output=True, text=True).stdout
    names, patterns = set(), set()
    for line in out.splitlines():
        m = re.match(r"^([^#\s=][^=]*?):(?:[^=]|$)", line)
        if not m or line.startswith(("\t", "define ")):
            continue
        for t in m.group(1).split():
            (patterns if "%" in t else names).add(t)
    return names, patterns


def commands(text, shell):
    """The make commands of a text: each `make ...` up to the end of the
    command (a newline, ;, &&, ||, |, #, a closing backtick or parenthesis),
    in fenced code blocks and inline code spans of Markdown, or anywhere in
    a shell script."""
    spans = []
    if shell:
        spans = [text]
    else:
        spans += re.findall(r"```.*?```", text, flags=re.S)
        spans += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    cmds = []
    for s in spans:
        s = re.sub(r"(^|\s)#.*", "", s, flags=re.M)   # a shell comment is not a command
        for m in re.finditer(r"(?:^|[\s;&|(`$])make((?:[ \t]+[^\s;&|#`)]+)+)", s, flags=re.M):
            cmds.append(m.group(1))
    return cmds


def targets_of(cmd):
    """The targets named by the words of one make command."""
    words, out, skip = cmd.split(), [], False
    for w in words:
        if re.match(r"[0-9]*[<>]", w):   # a redirection ends the targets
            break
        if skip:
            skip = False
        elif w in VALUE_OPTS:
            skip = True
        elif w.startswith("-") or "=" in w or w.startswith(("$", "\\", "[", "{")):
            continue
        elif re.fullmatch(r"[A-Za-z0-9_./%+-]+", w):
            out.append(w)
    return out


def missing(texts, names, patterns):
    """[(file, target)] of targets the texts name that make does not define."""
    bad = []
    for rel, text in texts.items():
        for cmd in commands(text, rel.endswith(".sh")):
            for t in targets_of(cmd):
                if t not in names and not any(fnmatch.fnmatchcase(t, p.replace("%", "*")) for p in patterns):
                    bad.append((rel, t))
    return sorted(set(bad))


def main():
    names, patterns = defined_targets()
    if "test" not in names:
        print("FAIL make targets: make -pq listed no target `test` (cannot read the Makefile's database)")
        return
    fake = {"a.md": "Run `make paper` then\n\n```\nmake -j4 no-such-target && ./stage3   # see make logs\n```\n",
            "b.sh": "FA_COMMIT=x make -C . GPU_DATA=/tmp gpu-data-op > log  # make sure\n"}
    got = missing(fake, names, patterns)
    ok = got == [("a.md", "no-such-target")]
    print(("PASS" if ok else "FAIL") + " make targets self-check: a made-up missing target caught, real ones passed"
          + ("" if ok else f" (found {got})"))
    rels = [p for p in repo_files.listed() or []
            if p.startswith(READ) and (p.endswith(".md") or p.endswith(".sh"))]
    bad = missing(repo_files.texts(rels), names, patterns)
    if bad:
        for rel, t in bad:
            print(f"FAIL make targets: {rel} tells the reader to run `make {t}`, which the Makefile does not define")
    else:
        print(f"PASS make targets: every make target named in the {len(rels)} files of README.md, docs/, chapters/, "
              "exercises/ and scripts/device/ is defined")


if __name__ == "__main__":
    main()
