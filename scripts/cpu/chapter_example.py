#!/usr/bin/env python3
"""scripts/cpu/chapter_example.py -- the textbook's own online-softmax example, run here.

    python3 scripts/cpu/chapter_example.py [--csv data/cpu/chapter_example.csv]
                                       [--gradcheck-csv data/cpu/chapter_gradcheck.csv]

The chapter checks its streaming softmax on one row: 37 logits drawn from
N(0, 5^2) and 37 x 8 values from N(0, 1), both from NumPy's default_rng(0),
streamed in blocks of 4, and reports the largest difference from the
two-pass softmax as "~1e-16". That is a single row. To set like beside like,
this script draws the same row (same generator, seed and order of draws) and
streams it through the project's NumPy reference
(src/cpu/reference/attention_ref.py, an implementation of our own, not the
chapter's code), against a two-pass softmax, and writes

    case,N,d,block,seed,max_abs_error,max_abs_V,error_over_eps_maxV,numpy

with '#' provenance lines on top. The property tests (build/test_cpu) give
the same comparison for 1000 fresh rows of this shape in C: the median row
and the maximum are in data/cpu/exactness.csv. Rounding depends on the BLAS
behind NumPy's products, so the figure may differ by an ulp or so between
machines; the numpy column and the machine line say where it was made.

The chapter's gradient check is the same kind of single case: default_rng(2),
N = 48, d = 8, causal, Q, K, V then dO drawn from N(0, 1), 16 x 16 tiles, and
three entries (dQ[3, 2], dK[5, 1], dV[7, 4]) against central differences of
f = sum(dO * O) with step 1e-5, the largest absolute difference reported as
"~1e-7". --gradcheck-csv draws the same tensors in the same order and runs
the same check on the project's reference (tiled backward against a central
difference of the naive forward), writing

    case,N,d,causal,Br,Bc,seed,step,max_abs_error,abs_f,max_abs_grad,u_f_over_h,numpy

u_f_over_h being u |f| / h, the rounding error of the difference quotient
(u = 2^-53), so that the chapter's figure can be set beside its own
setting's error and scale.
"""
import datetime
import os
import platform
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "src", "cpu", "reference"))
import attention_ref as ref  # noqa: E402

SEED, N, D, SPREAD, BLOCK = 0, 37, 8, 5.0, 4
# the chapter's gradient check: its seed, shape, tiles, step and entries
G_SEED, G_N, G_D, G_B, G_STEP = 2, 48, 8, 16, 1e-5
G_ENTRIES = (("Q", (3, 2)), ("K", (5, 1)), ("V", (7, 4)))


def gradcheck_row():
    """The chapter's gradient check on the project's reference: one CSV row."""
    rng = np.random.default_rng(G_SEED)
    T = {n: rng.normal(size=(G_N, G_D)) for n in ("Q", "K", "V")}
    dO = rng.normal(size=(G_N, G_D))
    scale = 1.0 / np.sqrt(G_D)
    O, L = ref.tiled_forward(T["Q"], T["K"], T["V"], scale, G_B, G_B, ref.CAUSAL)
    grads = dict(zip(("Q", "K", "V"),
                     ref.tiled_backward(T["Q"], T["K"], T["V"], O, L, dO, scale, G_B, G_B, ref.CAUSAL)))

    def f(**over):
        X = {**T, **over}
        return float(np.sum(dO * ref.naive_forward(X["Q"], X["K"], X["V"], scale, ref.CAUSAL)[0]))

    err = 0.0
    for name, idx in G_ENTRIES:
        plus, minus = T[name].copy(), T[name].copy()
        plus[idx] += G_STEP
        minus[idx] -= G_STEP
        num = (f(**{name: plus}) - f(**{name: minus})) / (2 * G_STEP)
        err = max(err, abs(num - grads[name][idx]))
    abs_f = abs(f())
    gmax = max(float(np.abs(g).max()) for g in grads.values())
    u = 2.0 ** -53
    return (f"chapter_gradcheck,{G_N},{G_D},1,{G_B},{G_B},{G_SEED},{G_STEP:g},{err:.6e},{abs_f:.6f},"
            f"{gmax:.6f},{u * abs_f / G_STEP:.6e},{np.__version__}"), err


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
        write_csv(out, "--csv", "case,N,d,block,seed,max_abs_error,max_abs_V,error_over_eps_maxV,numpy", row)
    if "--gradcheck-csv" in argv:
        gout = argv[argv.index("--gradcheck-csv") + 1]
        grow, gerr = gradcheck_row()
        print(f"chapter_example.py: the chapter's gradient check (default_rng({G_SEED}), N = {G_N}, "
              f"d = {G_D}, causal, three entries): max abs error {gerr:.2e}")
        write_csv(gout, "--gradcheck-csv", "case,N,d,causal,Br,Bc,seed,step,max_abs_error,abs_f,"
                  "max_abs_grad,u_f_over_h,numpy", grow)


def write_csv(out, flag, header, row):
    """One row with the '#' provenance lines on top."""
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
        f.write(f"# command: python3 scripts/cpu/chapter_example.py {flag} {out}\n")
        f.write(header + "\n")
        f.write(row + "\n")


if __name__ == "__main__":
    main(sys.argv)
