#!/usr/bin/env python3
"""paper/gen/data_sources.py -- the data-provenance table of the book's appendix.

    python3 paper/gen/data_sources.py --out build/paper

Writes OUT/provenance.md: one row per CSV file under data/ that the programs
and scripts wrote, with the commit, date and command that wrote it, read from
the file itself and nowhere else. A CPU file carries them in its '#' lines
(`# commit: ...`, `# date: ...`, `# command: ...`, as src/harness/outputs.c writes
them); a GPU table carries them in the columns `commit`, `date` and `command`
of every row, and may hold rows of several runs: each distinct commit is
listed with the span of its dates and its rows' commands. A file with neither
is listed with "not recorded", so that the table shows what is missing
rather than hiding it. The main text names no commit (tests/paper_history.py);
this table is where a reader finds them.

Errors: a data/ directory that cannot be read stops the script (exit 2).
"""
import argparse
import csv
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cell(text, limit=90):
    """Markdown table cell: code span, pipes escaped, long commands cut with an ellipsis."""
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[:limit - 1] + "…"
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`" if text else ""


def header_facts(lines):
    facts = {}
    for line in lines:
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].partition(":")
        if sep:
            facts.setdefault(key.strip().lower(), value.strip())
    return facts


def rows_of(path):
    """[(commit, date, command)] for one CSV file (one entry per distinct commit)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    facts = header_facts(lines)
    if "commit" in facts:
        return [(facts["commit"], facts.get("date", ""), facts.get("command", ""))]
    body = [line for line in lines if not line.startswith("#")]
    reader = csv.DictReader(body)
    if not reader.fieldnames or "commit" not in reader.fieldnames:
        return [("not recorded", "", "")]
    runs = {}
    for r in reader:
        c = (r.get("commit") or "").strip() or "not recorded"
        run = runs.setdefault(c, {"dates": [], "commands": []})
        if r.get("date"):
            run["dates"].append(r["date"].strip())
        cmd = (r.get("command") or "").strip()
        if cmd and cmd not in run["commands"]:
            run["commands"].append(cmd)
    out = []
    for c, run in runs.items():
        dates = sorted(run["dates"])
        span = dates[0] if dates and dates[0] == dates[-1] else (f"{dates[0]} to {dates[-1]}" if dates else "")
        cmd = run["commands"][0] if run["commands"] else ""
        if len(run["commands"]) > 1:
            cmd += f" (and {len(run['commands']) - 1} more)"
        out.append((c, span, cmd))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for provenance.md")
    args = ap.parse_args()
    data = os.path.join(ROOT, "data")
    if not os.path.isdir(data):
        print(f"data_sources.py: error: no directory {data}", file=sys.stderr)
        return 2
    files = sorted(glob.glob(os.path.join(data, "*", "*.csv")))
    lines = ["| file | commit | date | command |",
             "|:--------------------|:-------|:------------|:--------------------------------------|"]
    for path in files:
        rel = os.path.relpath(path, ROOT)
        for i, (commit, date, command) in enumerate(rows_of(path)):
            lines.append(f"| {cell(rel) if i == 0 else ''} | {commit} | {date} | {cell(command)} |")
    lines += ["", f": Where each data file of the book comes from: {len(files)} CSV files under "
              "`data/`, each row read from the file's own provenance lines or columns "
              "(`paper/gen/data_sources.py`). A GPU table that holds rows of several runs has one "
              "line per commit; long commands are cut (the file holds them whole)."]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "provenance.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"provenance.py: {len(files)} data files -> {os.path.join(args.out, 'provenance.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
