#!/usr/bin/env python3
"""scripts/chapter_example.py -- the textbook's own online-softmax example, run here.

    python3 scripts/chapter_example.py [--csv data/cpu/chapter_example.csv]

The chapter checks its streaming softmax on one row: 37 logits drawn from
N(0, 5^2) and 37 x 8 values from N(0, 1), both from NumPy's default_rng(0),
streamed in blocks of 4, and reports the largest difference from the
two-pass softmax as "~1e-16". That is a single row. To set like beside like,
this script draws the same row (same generator, seed and order of draws) and
streams it through the project's NumPy reference
(src/reference/attention_ref.py, an implementation of our own, not the
chapter's code), against a two-pass softmax, and writes

    case,N,d,block,seed,max_abs_error,max_abs_V,error_over_eps_maxV,numpy

with '#' provenance lines on top. The property tests (build/test_cpu) give
the same comparison for 1000 fresh rows of this shape in C: the median row
and the maximum are in data/cpu/exactness.csv. Rounding depends on the BLAS
behind NumPy's products, so the figure may differ by an ulp or so between
machines; the numpy column and the machine line say where it was made.
"""
import datetime
import os
import platform
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src", "reference"))
import attention_ref as ref  # noqa: E402

SEED, N, D, SPREAD, BLOCK = 0, 37, 8, 5.0, 4


def main(argv):
    out = None
    if "--csv" in argv:
        out = argv[argv.index("--csv") + 1]
    rng = np.random.default_rng(SEED)
    x = rng.normal(0, SPREAD, size=N)       # the chapter draws the logits first,
    V = rng.normal(0, 1, size=(N, D))       # then the values
    p = np.exp(x - x.max())
    p /= p.sum()
    two_pass = p @ V
    streamed, _ = ref.online_softmax_weighted_sum(x, V, BLOCK)
    err = float(np.abs(streamed - two_pass).max())
    vmax = float(np.abs(V).max())
    eps = float(np.finfo(np.float64).eps)
    row = (f"chapter_row,{N},{D},{BLOCK},{SEED},{err:.6e},{vmax:.6f},{err / (eps * vmax):.3f},"
           f"{np.__version__}")
    print(f"chapter_example.py: the chapter's row (default_rng({SEED}), N = {N}, d = {D}, "
          f"blocks of {BLOCK}): max abs error {err:.2e} = {err / eps:.2f} eps")
    if out:
        try:
            commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip() or "unknown"
        except OSError:
            commit = "unknown"
        with open(out, "w") as f:
            f.write(f"# commit: {commit}\n")
            f.write("# date: " + datetime.datetime.now(datetime.timezone.utc)
                    .strftime("%Y-%m-%dT%H:%M:%SZ") + "\n")
            f.write(f"# machine: {platform.system()} {platform.release()} {platform.machine()}; "
                    f"Python {platform.python_version()}, NumPy {np.__version__}\n")
            f.write("# command: python3 scripts/chapter_example.py --csv " + out + "\n")
            f.write("case,N,d,block,seed,max_abs_error,max_abs_V,error_over_eps_maxV,numpy\n")
            f.write(row + "\n")


if __name__ == "__main__":
    main(sys.argv)
