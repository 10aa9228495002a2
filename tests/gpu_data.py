"""tests/gpu_data.py -- the files of data/gpu/ that the paper reads come from one commit.

`make gpu-data` writes every canonical file of data/gpu/ (the lists
GPU_DATA_FILES_<part> of kernels/gpu_data.mk) at one commit on one H200. This
test reads the commit each file names -- a CSV's `commit` column on every row,
else the `# provenance:` line that opens a log (scripts/gpu/provenance.py), a
folder's env.txt -- and fails when a file is missing, names no commit or
several, or when the files do not all name the same one. Not checked: the
ring (ring.csv, ring_scale.log: two GPUs, `make ring-gpu`, its own commit),
the tools' raw output beside a file that names the commit (GPU_DATA_RAW), the
typed files (GPU_DATA_TYPED) and data/gpu/studies/ (each study keeps the
commit its README names). It first checks on made-up files that it would
catch a second commit and a file without one.

    python3 tests/gpu_data.py [DIR]     PASS/FAIL lines (tests/run.sh protocol); DIR defaults to data/gpu
"""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
import data_readme  # noqa: E402  (canonical_files, commits_of, mk_lists)


def checked_files(mk=data_readme.MK):
    """The canonical files whose commit is checked, relative to the data folder."""
    lists = data_readme.mk_lists(open(mk).read())
    skip = set(lists.get("GPU_DATA_RAW", []))
    return [f for part, f in data_readme.canonical_files(mk) if part != "ring" and f not in skip]


def problems(data_dir, files):
    """(commit -> [files], [problem lines]) of the files in data_dir."""
    by_commit, bad = {}, []
    for f in files:
        p = os.path.join(data_dir, f)
        if not os.path.exists(p):
            bad.append(f"{f}: missing (make gpu-data writes it)")
            continue
        commits, _ = data_readme.commits_of(p)
        commits.discard("unknown")
        if not commits:
            bad.append(f"{f}: names no commit (no commit column, no `# provenance:` line)")
        elif len(commits) > 1:
            bad.append(f"{f}: names {len(commits)} commits ({', '.join(sorted(commits))})")
        else:
            by_commit.setdefault(next(iter(commits)), []).append(f)
    return by_commit, bad


def self_check():
    """Made-up files: one at commit b, one without a commit; both must be caught."""
    with tempfile.TemporaryDirectory() as d:
        made = {"a.csv": "gpu,commit,date\nH200,aaaaaaa,2026-01-01\nH200,aaaaaaa,2026-01-01\n",
                "b.log": "# provenance: gpu=H200; commit=bbbbbbb; date=2026-01-01; command=x\nPASS x\n",
                "c.log": "PASS y\n",
                "e/env.txt": "# provenance: gpu=H200; commit=aaaaaaa; date=2026-01-01; command=x\n"}
        for rel, text in made.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        by_commit, bad = problems(d, ["a.csv", "b.log", "c.log", "e/", "missing.csv"])
    return sorted(by_commit) == ["aaaaaaa", "bbbbbbb"] and len(bad) == 2 and by_commit["aaaaaaa"] == ["a.csv", "e/"]


def main():
    if not self_check():
        print("FAIL gpu data one commit self-check: made-up files at two commits, or without one, not caught")
        return 1
    print("PASS gpu data one commit self-check: a second commit, a file without one and a missing file caught")
    data_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "data", "gpu")
    try:
        files = checked_files()
    except (OSError, ValueError) as e:
        print(f"FAIL gpu data one commit: {e}")
        return 1
    by_commit, bad = problems(data_dir, files)
    for b in bad:
        print(f"FAIL gpu data file: {b}")
    if len(by_commit) > 1:
        print("FAIL gpu data one commit: the files the paper reads name " + str(len(by_commit)) + " commits: " +
              "; ".join(f"{c}: {', '.join(fs[:4])}{' ...' if len(fs) > 4 else ''}" for c, fs in sorted(by_commit.items())))
    elif by_commit and not bad:
        c = next(iter(by_commit))
        print(f"PASS gpu data one commit: the {len(files)} canonical files of data/gpu/ all name commit {c}")
    return 1 if bad or len(by_commit) > 1 else 0


if __name__ == "__main__":
    sys.exit(main())
