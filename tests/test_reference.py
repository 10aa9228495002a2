"""tests/test_reference.py -- the C stages against the NumPy reference.

Runs ./stage1, ./stage3 and ./stage6 on .npy inputs (fresh random ones, with
and without masks, seqlen_q != seqlen_k, fewer key/value heads, Fortran-order
files, and the real model input), reads their .npy outputs and compares them
with src/cpu/reference/attention_ref.py, which shares no arithmetic with the C
(it asks core/mask.h, through build/libfa_mask.so, only which keys a query
sees). Errors are relative to the magnitudes each output's rounding scales
with (as flash_errors_vs in src/cpu/stage3_tiled.c). Prints one PASS/FAIL line
per comparison (tests/run.sh protocol); SKIP when NumPy is missing (the
set-up command installs it).

    python3 tests/test_reference.py [--seed S]
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP NumPy reference comparisons: numpy is not installed (run make setup)")
    sys.exit(0)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src", "cpu", "reference"))
import attention_ref as ref  # noqa: E402

FWD_TOL, BWD_TOL = 1e-13, 1e-12
failures = 0


def result(ok, name, detail):
    global failures
    print(("PASS %s (%s)" if ok else "FAIL %s: %s") % (name, detail))
    failures += not ok


def run(args, expect=0):
    p = subprocess.run([os.path.join(ROOT, args[0])] + args[1:], capture_output=True, text=True)
    if p.returncode != expect:
        raise RuntimeError("%s exited %d: %s" % (" ".join(args), p.returncode, (p.stdout + p.stderr)[-600:]))
    return p.stdout


def naive_head(q, k, v, do, scale, window):
    O, L, P = ref.naive_forward(q, k, v, scale, window)
    return (O, L) + ref.naive_backward(q, k, v, O, P, do, scale)


def tiled_head(q, k, v, do, scale, Br, Bc, window):
    O, L = ref.tiled_forward(q, k, v, scale, Br, Bc, window)
    return (O, L) + ref.tiled_backward(q, k, v, O, L, do, scale, Br, Bc, window)


def rel_err(got, want, scale):
    """max |got - want| / scale; matching infinities count 0, others inf."""
    inf = np.isinf(got) | np.isinf(want)
    if np.any(got[inf] != want[inf]) or np.any(np.isnan(got)) or np.any(np.isnan(want)):
        return np.inf
    d = np.abs(got[~inf] - want[~inf])
    return (float(d.max()) if d.size else 0.0) / (scale if scale > 0 else 1.0)


def errors(got, want, Q, K, V, dO, scale):
    """(forward, backward) errors of (O, L, dQ, dK, dV) against want."""
    amax = lambda x: float(np.max(np.abs(x[np.isfinite(x)]))) if np.any(np.isfinite(x)) else 0.0
    mV, mdO = amax(V), amax(dO)
    s = scale * mdO * mV
    fwd = max(rel_err(got[0], want[0], mV), rel_err(got[1], want[1], max(1.0, amax(want[1]))))
    bwd = max(rel_err(got[2], want[2], max(amax(want[2]), s * amax(K))),
              rel_err(got[3], want[3], max(amax(want[3]), s * amax(Q))),
              rel_err(got[4], want[4], max(amax(want[4]), mdO)))
    return fwd, bwd


def check_program(tmp, name, args, inputs, scale, window, fortran=False):
    """Run a stage with --q/--k/--v/--do (or the default input when inputs is
    None) and compare every output file with the NumPy naive reference."""
    files = {t: os.path.join(tmp, t + ".npy") for t in ("out", "lse", "dq", "dk", "dv")}
    cmd = list(args)
    if inputs is not None:
        for t in ("q", "k", "v", "do"):
            path = os.path.join(tmp, "in_" + t + ".npy")
            np.save(path, np.asfortranarray(inputs[t]) if fortran else inputs[t])
            cmd += ["--" + t, path]
        Q, K, V, dO = (inputs[t].astype(np.float64) for t in ("q", "k", "v", "do"))
    else:
        Q, K, V, dO = (np.load(os.path.join(ROOT, "data", "input", t + ".npy")).astype(np.float64)
                       for t in ("q", "k", "v", "do"))
    if window != ref.NO_MASK:
        cmd += ["--window", "%d,%d" % window]
    for t, path in files.items():
        cmd += ["--" + t, path]
    run(cmd)
    want = ref.all_heads(naive_head, Q, K, V, dO, scale, window)
    got = []
    for (t, path), w in zip(files.items(), want):
        got.append(np.load(path))
        if got[-1].shape != w.shape:
            result(False, name, "%s has shape %s, expected %s" % (t, got[-1].shape, w.shape))
            return
    fwd, bwd = errors(got, want, Q, K, V, dO, scale)
    nan = sum(int(np.isnan(g).sum()) for g in got)
    result(fwd <= FWD_TOL and bwd <= BWD_TOL and nan == 0, name,
           "relative error forward %.2e (<= %g), backward %.2e (<= %g), NaN %d" % (fwd, FWD_TOL, bwd, BWD_TOL, nan))


def random_window(rng, Sq, Sk):
    kind = int(rng.integers(0, 4))
    if kind == 0:
        return ref.NO_MASK
    if kind == 1:
        return ref.CAUSAL
    return (int(rng.integers(-1, Sk + 3)), int(rng.integers(-1, 8)))


def main():
    if "--help" in sys.argv or "-h" in sys.argv:
        print(__doc__.strip())
        print("\nEach run draws a fresh seed and prints it; replay with --seed S.")
        return 0
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else int.from_bytes(os.urandom(4), "little")
    print("test_reference: seed %d" % seed)
    rng = np.random.default_rng(seed)
    try:
        ref.mask(1, 1)
    except (RuntimeError, OSError) as e:
        result(False, "core/mask.h as a library", str(e))
        return 1

    # The NumPy reference agrees with itself: tiled == naive under every kind
    # of mask, and never produces a NaN (rows that see no key included).
    worst, nan, empty = 0.0, 0, 0
    for _ in range(40):
        Sq, Sk, d = int(rng.integers(1, 70)), int(rng.integers(1, 70)), int(rng.integers(1, 20))
        Br, Bc = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        window = random_window(rng, Sq, Sk)
        q, do = rng.normal(size=(Sq, d)), rng.normal(size=(Sq, d))
        k, v = rng.normal(size=(Sk, d)), rng.normal(size=(Sk, d))
        a = naive_head(q, k, v, do, d ** -0.5, window)
        b = tiled_head(q, k, v, do, d ** -0.5, Br, Bc, window)
        f, bw = errors(b, a, q, k, v, do, d ** -0.5)
        worst = max(worst, f, bw)
        nan += sum(int(np.isnan(x).sum()) for x in a + b)
        rows = ~ref.mask(Sq, Sk, window).any(axis=1)
        empty += int(rows.sum())
        if rows.any() and not (np.all(a[0][rows] == 0) and np.all(np.isneginf(a[1][rows])) and np.all(a[2][rows] == 0)):
            nan += 1
    result(worst <= BWD_TOL and nan == 0, "NumPy tiled vs NumPy naive, masks and seqlen_q != seqlen_k",
           "40 random shapes, max relative %.2e, NaN or wrong empty row %d, %d empty rows" % (worst, nan, empty))

    # The chapter's own online-softmax case, with its generator: seed 0, N = 37, d = 8.
    g = np.random.default_rng(0)
    x, V = g.normal(0, 5, size=37), g.normal(0, 1, size=(37, 8))
    p = np.exp(x - x.max())
    o_two_pass = (p / p.sum()) @ V
    err = max(float(np.max(np.abs(ref.online_softmax_weighted_sum(x, V, b)[0] - o_two_pass))) for b in (1, 2, 4, 8, 37))
    result(err <= 1e-15, "online softmax, the chapter's case (default_rng(0))", "max abs %.2e over blocks 1, 2, 4, 8, 37" % err)

    with tempfile.TemporaryDirectory() as tmp:
        for trial in range(4):
            B, H = int(rng.integers(1, 3)), int(rng.integers(1, 3))
            N, d = int(rng.integers(1, 160)), int(rng.integers(1, 48))
            window = ref.CAUSAL if trial % 2 == 1 else ref.NO_MASK
            inputs = {t: rng.normal(size=(B, H, N, d)) for t in ("q", "k", "v", "do")}
            if trial == 3:   # float32 files: the C widens them exactly
                inputs = {t: a.astype(np.float32) for t, a in inputs.items()}
            shape = "(%d,%d,%d,%d)%s%s" % (B, H, N, d, " causal" if trial % 2 else "", " float32" if trial == 3 else "")
            Br, Bc = int(rng.integers(1, 50)), int(rng.integers(1, 50))
            try:
                check_program(tmp, "stage1 vs NumPy " + shape, ["stage1"], inputs, d ** -0.5, window)
                check_program(tmp, "stage3 Br=%d Bc=%d vs NumPy %s" % (Br, Bc, shape),
                              ["stage3", "--br", str(Br), "--bc", str(Bc)], inputs, d ** -0.5, window)
            except RuntimeError as e:
                result(False, "C stage on " + shape, str(e))
        # Masks, other key lengths, grouped heads, Fortran-order files.
        for trial in range(5):
            B, H_kv = int(rng.integers(1, 3)), int(rng.integers(1, 3))
            H = H_kv * int(rng.integers(1, 4))
            Sq, Sk, d = int(rng.integers(1, 120)), int(rng.integers(1, 120)), int(rng.integers(1, 33))
            window = random_window(rng, Sq, Sk)
            inputs = {"q": rng.normal(size=(B, H, Sq, d)), "do": rng.normal(size=(B, H, Sq, d)),
                      "k": rng.normal(size=(B, H_kv, Sk, d)), "v": rng.normal(size=(B, H_kv, Sk, d))}
            Br, Bc = int(rng.integers(1, 40)), int(rng.integers(1, 40))
            fortran = trial == 4
            shape = "B=%d H=%d H_kv=%d Sq=%d Sk=%d d=%d window=%s%s" % (B, H, H_kv, Sq, Sk, d, window,
                                                                       " Fortran-order files" if fortran else "")
            try:
                check_program(tmp, "stage6 Br=%d Bc=%d vs NumPy %s" % (Br, Bc, shape),
                              ["stage6", "--br", str(Br), "--bc", str(Bc)], inputs, d ** -0.5, window, fortran)
                if trial < 2:
                    check_program(tmp, "stage1 vs NumPy " + shape, ["stage1"], inputs, d ** -0.5, window, fortran)
            except RuntimeError as e:
                result(False, "C stage on " + shape, str(e))
        try:
            check_program(tmp, "stage3 vs NumPy on the real input (1,12,148,32)", ["stage3"], None, 32 ** -0.5, ref.NO_MASK)
            check_program(tmp, "stage3 vs NumPy on the real input, causal", ["stage3", "--sram", "4000"], None, 32 ** -0.5, ref.CAUSAL)
        except RuntimeError as e:
            result(False, "stage3 on the real input", str(e))
        faults(tmp)
    return 1 if failures else 0


def faults(tmp):
    """Inputs from public bug reports, each with its right value."""
    # Values in the hundreds: stage 3's self-check once compared with an
    # absolute 1e-14 and failed a correctly rounded O.
    q = np.array([[1.0], [0.0]])
    k = np.array([[-2.0], [0.25]])
    v = np.array([[-1000.0], [30.0]])
    for t, a in (("q", q), ("k", k), ("v", v), ("do", np.ones((2, 1)))):
        np.save(os.path.join(tmp, "f_" + t + ".npy"), a)
    out = os.path.join(tmp, "f_out.npy")
    try:
        run(["stage3", "--q", os.path.join(tmp, "f_q.npy"), "--k", os.path.join(tmp, "f_k.npy"),
             "--v", os.path.join(tmp, "f_v.npy"), "--do", os.path.join(tmp, "f_do.npy"), "--out", out])
        O = np.load(out)
        result(O[0, 0, 0, 0] == -68.20994884608278, "stage3 on V = [-1000, 30] (N = 2, d = 1) exits 0",
               "O[0] = %.17g, the correctly rounded -68.20994884608278" % O[0, 0, 0, 0])
    except RuntimeError as e:
        result(False, "stage3 on V = [-1000, 30] (N = 2, d = 1) exits 0", str(e))
    # Logits near -120 at N = 704: |L| about 113, one ulp of L 1.4e-14; the
    # tiled and the naive L differ by that ulp with 32 x 32 tiles (this
    # generator's seed 1 failed the absolute 1e-14 of the old self-check).
    rng = np.random.default_rng(1)
    N = 704
    q = np.column_stack([np.full(N, 11.0), rng.normal(size=N)])
    k = np.column_stack([np.full(N, -11.0 * 2 ** 0.5 * 120 / 121), rng.normal(size=N)])
    args = []
    for t, a in (("q", q), ("k", k), ("v", rng.normal(size=(N, 2))), ("do", rng.normal(size=(N, 2)))):
        np.save(os.path.join(tmp, "g_" + t + ".npy"), a)
        args += ["--" + t, os.path.join(tmp, "g_" + t + ".npy")]
    lse = os.path.join(tmp, "g_lse.npy")
    try:
        run(["stage3", "--br", "32", "--bc", "32"] + args + ["--lse", lse])
        L = np.load(lse)
        result(True, "stage3 with logits near -120 (N = 704) exits 0", "max |L| = %.1f" % np.max(np.abs(L)))
    except RuntimeError as e:
        result(False, "stage3 with logits near -120 (N = 704) exits 0", str(e))


if __name__ == "__main__":
    sys.exit(main())
