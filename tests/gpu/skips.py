"""tests/gpu/skips.py -- the SKIP side of tests/run.sh's protocol for the
Python GPU suites: where what a suite needs is missing (torch, a GPU, the
library), one `SKIP group: why` line for each of its groups and exit 0, so
that a machine without a GPU counts them skipped, never passed. Imported as
`skips` by the suites beside it (run as python3 tests/gpu/NAME.py)."""
import sys


def skip_all(groups, why):
    for g in groups:
        print(f"SKIP {g}: {why}")
    sys.exit(0)


def need_torch(groups):
    """The torch module, or every group skipped when torch is not installed."""
    try:
        import torch
    except ImportError:
        skip_all(groups, "torch is not installed (the GPU tests need it: pip install torch)")
    return torch
