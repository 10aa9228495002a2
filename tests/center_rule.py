"""tests/center_rule.py -- the rule that decides where the backward centers
K by default (fa_bwd_center_cost, fa_bwd_center_auto in core/fa_gpu.h),
held to what the header and chapter 4b say of it, through the library's own
entry points (python/fa.py; host code, no GPU needed):
  bench     at data/gpu/bench_bwd.csv's shapes (bf16, B N = 16384, H d = 2048)
            the auto mode centers from N = 4096 without a mask and from
            N = 8192 causal, and nowhere below
  form      the cost is about 100 / N without a mask and 200 / N causal, the
            launches aside (within 10%, at 8 times the bench shapes' tokens,
            where the launches weigh about 1%)
  order     the cost falls as N grows; grouped heads (a smaller K) cost less;
            no keys: never centered
One PASS/FAIL line each (tests/run.sh); SKIP without build/libfa_gpu.so or
when it does not load (no CUDA runtime).
"""
import ctypes
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import fa  # noqa: E402

NAMES = ("center rule: bench shapes", "center rule: 100/N and 200/N", "center rule: order")


def main():
    path = os.path.join(ROOT, "build", "libfa_gpu.so")
    try:
        lib = fa.load(path)
    except OSError as e:
        for n in NAMES:
            print(f"SKIP {n}: {path} does not load here ({str(e).splitlines()[0][:80]})")
        return 0

    def cost(B, H, N, d, causal, H_kv=None, Sk=None):
        p = fa.params(B, H, N, d, H_kv=H_kv, seqlen_k=Sk, window=(-1, 0) if causal else (-1, -1))
        return lib.fa_bwd_center_cost(fa.BF16, ctypes.byref(p)), lib.fa_bwd_center_auto(fa.BF16, ctypes.byref(p))

    bad, on = [], {}
    for d in (64, 128):
        for causal in (0, 1):
            for N in (512, 1024, 2048, 4096, 8192, 16384):
                c, a = cost(16384 // N, 2048 // d, N, d, causal)
                want = N >= (8192 if causal else 4096)
                if bool(a) != want:
                    bad.append(f"d={d} {'causal' if causal else 'full'} N={N}: auto {a}, cost {c:.4f}")
                if a:
                    on.setdefault((d, causal), N)
    print(("PASS" if not bad else "FAIL") + f" {NAMES[0]}: first N centered "
          + ", ".join(f"d={d} {'causal' if c else 'full'} {n}" for (d, c), n in sorted(on.items()))
          + ("; " + "; ".join(bad) if bad else ""))
    bad = []
    for causal, k in ((0, 100.0), (1, 200.0)):
        for N in (2048, 4096, 16384):
            c, _ = cost(8 * 16384 // N, 16, N, 128, causal)
            if not abs(c * N / k - 1) <= 0.1:
                bad.append(f"{'causal' if causal else 'full'} N={N}: cost N = {c * N:.1f}, not ~{k:g}")
    print(("PASS" if not bad else "FAIL") + f" {NAMES[1]}" + (": " + "; ".join(bad) if bad else
          ": cost x N within 10% of 100 (full) and 200 (causal) at N = 2048 to 16384"))
    bad = []
    cs = [cost(1, 16, N, 128, 0)[0] for N in (256, 1024, 4096, 16384)]
    if not all(a > b for a, b in zip(cs, cs[1:])):
        bad.append(f"not falling with N: {cs}")
    mha, gqa = cost(2, 16, 4096, 128, 0)[0], cost(2, 16, 4096, 128, 0, H_kv=2)[0]
    if not gqa < mha:
        bad.append(f"grouped heads {gqa:.4f} not below {mha:.4f}")
    if cost(2, 16, 4096, 128, 0, Sk=0)[1] != 0:
        bad.append("seqlen_k = 0 centered")
    print(("PASS" if not bad else "FAIL") + f" {NAMES[2]}" + (": " + "; ".join(bad) if bad else
          f": falls with N ({cs[0]:.3f} .. {cs[-1]:.4f}), grouped heads {gqa:.4f} < {mha:.4f}, no keys left"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
