"""fa_plugin.py -- a pytest plugin of ours that runs FlashAttention's own test
suite (third_party/flash-attention/tests/test_flash_attn.py, tests/fa_suite/
fetch.sh) through flashattn_stages, the `flash_attn` shim beside it turning
its imports to our package.

    PYTHONPATH=python:tests/fa_suite python3 -m pytest -p fa_plugin \\
        third_party/flash-attention/tests/test_flash_attn.py \\
        --fa-sample 600 --fa-seed 0 --fa-log data/gpu/fa_suite.log

What it does, after collection:
  1. leaves out, by parameter, exactly the cases that need what this
     project does not compute -- dropout (dropout_p > 0), ALiBi (alibi
     True), soft-capping (softcap > 0) -- and says how many, per reason;
  2. with --fa-sample N (N > 0), keeps N of the rest, spread evenly over
     the test functions and drawn with random.Random(--fa-seed) from the
     node ids in sorted order, so the same N and seed pick the same cases
     on every machine (0: all);
  3. with --fa-log PATH, writes the provenance (the suite's tag, commit and
     sha256 from third_party/flash-attention/PROVENANCE; this repository's
     commit; GPU, torch, Python; the command) and, per test function, the
     cases collected, left out, not sampled, run, passed, failed, refused
     (failed by a ValueError of flashattn_stages: a call it does not take)
     and skipped (by the suite's own pytest.skip), then each failure's
     first line.
Without a CUDA GPU the suite's module cannot be imported (it asks the
device's compute capability at import); the make targets say so in one
line before calling pytest. --fa-collect-as-sm90 lets collection run on a
machine without one (counts only: nothing can run there).
"""
import collections
import datetime
import os
import random
import subprocess
import sys

import pytest

NEEDS = (("dropout", "dropout_p", lambda x: x is not None and float(x) > 0),
         ("ALiBi", "alibi", lambda x: bool(x)),
         ("softcap", "softcap", lambda x: x is not None and float(x) > 0))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROVENANCE = os.path.join(ROOT, "third_party", "flash-attention", "PROVENANCE")


def pytest_addoption(parser):
    g = parser.getgroup("fa_suite", "FlashAttention's suite through flashattn_stages")
    g.addoption("--fa-sample", type=int, default=0, help="run N sampled cases (0: every case)")
    g.addoption("--fa-seed", type=int, default=0, help="the sample's seed")
    g.addoption("--fa-log", default=None, help="write the log with provenance and counts here")
    g.addoption("--fa-collect-as-sm90", action="store_true",
                help="without a GPU, answer the suite's compute-capability question with 9.0 (collection only)")


def pytest_configure(config):
    config._fa = {"collected": collections.Counter(), "left_out": collections.defaultdict(collections.Counter),
                  "not_sampled": collections.Counter(), "outcome": collections.defaultdict(collections.Counter),
                  "failures": [], "needs_total": 0}
    if config.getoption("--fa-collect-as-sm90"):
        import torch
        if not torch.cuda.is_available():
            torch.cuda.get_device_capability = lambda *a, **k: (9, 0)


def _function(item):
    return getattr(item, "originalname", None) or item.name.split("[")[0]


def _needs(item):
    """The reasons (dropout, ALiBi, softcap) this case's parameters ask for."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return [why for why, name, on in NEEDS if name in params and on(params[name])]


def _sample(items, n, seed):
    """n of items, the same on every machine for one seed, spread evenly over
    the test functions: each function's cases shuffled (node ids sorted,
    then random.Random(seed)), then taken one per function in turn until n
    (a function with fewer cases gives what it has)."""
    rng = random.Random(seed)
    by_fn = collections.defaultdict(list)
    for it in sorted(items, key=lambda it: it.nodeid):
        by_fn[_function(it)].append(it)
    queues = []
    for fn in sorted(by_fn):
        rng.shuffle(by_fn[fn])
        queues.append(by_fn[fn])
    out = []
    while len(out) < n:
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop())
    return out


def pytest_collection_modifyitems(session, config, items):
    st = config._fa
    keep, dropped = [], []
    for it in items:
        fn = _function(it)
        st["collected"][fn] += 1
        why = _needs(it)
        if why:
            for w in why:
                st["left_out"][fn][w] += 1
            st["left_out"][fn]["any"] += 1
            st["needs_total"] += 1
            dropped.append(it)
        else:
            keep.append(it)
    n = config.getoption("--fa-sample")
    if 0 < n < len(keep):
        chosen = set(id(it) for it in _sample(keep, n, config.getoption("--fa-seed")))
        for it in keep:
            if id(it) not in chosen:
                st["not_sampled"][_function(it)] += 1
                dropped.append(it)
        keep = [it for it in keep if id(it) in chosen]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
    by = {w: sum(st["left_out"][f][w] for f in st["left_out"]) for w in ("dropout", "ALiBi", "softcap", "any")}
    print(f"\nfa_plugin: {sum(st['collected'].values())} cases collected; {by['any']} left out for dropout "
          f"({by['dropout']}), ALiBi ({by['ALiBi']}) or softcap ({by['softcap']}); "
          f"{sum(st['not_sampled'].values())} not sampled; {len(keep)} to run")


def pytest_runtest_logreport(report):
    cfg = pytest_runtest_logreport.config
    if cfg is None:
        return
    st = cfg._fa
    fn = report.nodeid.split("::")[-1].split("[")[0]
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        if report.skipped:
            st["outcome"][fn]["skipped"] += 1
        elif report.passed:
            st["outcome"][fn]["passed"] += 1
        else:
            st["outcome"][fn]["failed"] += 1
            text = str(report.longrepr) if report.longrepr is not None else ""
            refused = "ValueError" in text and "flashattn_stages" in text
            if refused:
                st["outcome"][fn]["refused"] += 1
            line = next((ln.strip() for ln in text.splitlines() if ln.startswith("E ")), text[:200])
            st["failures"].append((report.nodeid, ("refused: " if refused else "") + line[:240]))


pytest_runtest_logreport.config = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    pytest_runtest_logreport.config = session.config


def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--fa-log")
    if not path:
        return
    st = session.config._fa
    import torch
    prov = dict(ln.split(" ", 1) for ln in open(PROVENANCE).read().splitlines() if " " in ln) \
        if os.path.exists(PROVENANCE) else {}
    # FA_COMMIT names the commit where the copy of the tree has no .git (the
    # lent GPU machine), as for every file of data/gpu/
    commit = os.environ.get("FA_COMMIT") or _run(["git", "rev-parse", "--short=12", "HEAD"]) or "unknown"
    dirty = "" if os.environ.get("FA_COMMIT") else \
        (" (with uncommitted changes)" if _run(["git", "status", "--porcelain", "--untracked-files=no"]) else "")
    command = " ".join(["python3 -m pytest"] + sys.argv[1:])
    prov_line = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu", "provenance.py"),
                                "--line", command], capture_output=True, text=True).stdout.strip()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA GPU"
    fns = sorted(st["collected"])
    tot = collections.Counter()
    for fn in fns:
        for k, v in st["outcome"][fn].items():
            tot[k] += v
    left = {w: sum(st["left_out"][f][w] for f in fns) for w in ("dropout", "ALiBi", "softcap", "any")}
    lines = [prov_line] if prov_line.startswith("# provenance:") else []
    lines += [
        "# FlashAttention's own test suite through flashattn_stages (tests/fa_suite/fa_plugin.py)",
        f"# suite: {prov.get('repository', 'Dao-AILab/flash-attention')} {prov.get('file', 'tests/test_flash_attn.py')}"
        f" at {prov.get('tag', '?')}, commit {prov.get('commit', '?')}, sha256 {prov.get('sha256', '?')}",
        f"# ours: commit {commit}{dirty}; library {os.environ.get('FA_GPU_LIB') or 'build/libfa_gpu.so'}",
        f"# machine: {gpu}; torch {torch.__version__}; Python {sys.version.split()[0]}; "
        f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"# command: {command}",
        f"# selection: {sum(st['collected'].values())} collected; {left['any']} left out because they need "
        f"dropout ({left['dropout']}), ALiBi ({left['ALiBi']}) or softcap ({left['softcap']}) (a case may need "
        f"several); {sum(st['not_sampled'].values())} not in the sample "
        f"(--fa-sample {session.config.getoption('--fa-sample')} --fa-seed {session.config.getoption('--fa-seed')})",
        f"# outcome: {tot['passed']} passed, {tot['failed']} failed ({tot['refused']} of them refused by "
        f"flashattn_stages), {tot['skipped']} skipped by the suite's own pytest.skip",
        "test_function,collected,left_out_dropout_alibi_softcap,not_sampled,run,passed,failed,refused,skipped",
    ]
    for fn in fns:
        o = st["outcome"][fn]
        run = o["passed"] + o["failed"] + o["skipped"]
        lines.append(f"{fn},{st['collected'][fn]},{st['left_out'][fn]['any']},{st['not_sampled'][fn]},{run},"
                     f"{o['passed']},{o['failed']},{o['refused']},{o['skipped']}")
    if st["failures"]:
        lines.append(f"# failures ({len(st['failures'])}; the first 100):")
        lines += [f"# {nid}: {msg}" for nid, msg in st["failures"][:100]]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
