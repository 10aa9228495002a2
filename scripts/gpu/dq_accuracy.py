"""scripts/gpu/dq_accuracy.py -- the backward's accuracy when every logit sits near
-120, on the GPU: every backward version of ours (with K centered over the
keys, FA_BWD_CENTER_K, labelled ours_*, with K as given, the default,
labelled ours_*_keep_k, and with the dQ pass, FA_BWD_DQ_PASS, labelled
ours_*_full) beside PyTorch SDPA's flash,
cuDNN, efficient and math backends, against an fp64 reference; and the
centering's cost in time at the shapes of data/gpu/bench_bwd.csv (B N =
16384, H = 32 at d = 64, H = 16 at d = 128, N = 512 to 16384, causal and
not, bf16) for every tensor-core backward version, beside the cost the
library predicts for that version (fa_bwd_center_cost, core/fa_gpu.h: the
rule of the auto mode).

Inputs (src/cpu/stage3_accuracy.c models them on the CPU): one head, d = 64,
q_i = (1, 0.1 z), k_j = (-120 sqrt(d), 0.1 z), V, dO ~ N(0, 1), rounded to
the dtype; the reference is the fp64 attention of the rounded inputs and its
autograd gradients. Ours runs our forward (the highest version taking the
problem) for O and L, then each backward version, as a training step would.
Error: max|X - X_ref| / max|X_ref| for X = dQ, dK, dV; nan where an output
holds a NaN or infinity (counted in nonfinite).

    python3 scripts/gpu/dq_accuracy.py --csv data/gpu/dq_accuracy.csv
    python3 scripts/gpu/dq_accuracy.py --rule-only data/gpu/dq_accuracy.csv

--rule-only rewrites only the kind=time rows' predicted_ratio and auto of
an existing file from the library's rule as built now (host code: no GPU,
no torch), keeping every measured column, and says so in a `# rule:`
comment line: the rule's columns follow the rule, the measurements do not
move.

Rows: kind=error (seqlen, causal, dtype, impl, err_dQ, err_dK, err_dV,
nonfinite) and kind=time (impl, seqlen, d, causal, B, H, ms with and
without centering, their ratio, predicted_ratio = 1 + the predicted cost,
ms_full with the dQ pass and full_ratio = ms_full / ms_keep_k,
auto = 1 where the auto mode centers); provenance columns (GPU, driver, CUDA, torch, commit, date,
command) on every row. Needs a CUDA GPU, torch and build/libfa_gpu.so.
"""
import argparse
import csv
import ctypes
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from flashattn_stages import fa  # noqa: E402
import provenance as prov   # noqa: E402

try:   # --rule-only needs neither torch nor a GPU
    import torch                     # noqa: E402
    import torch.nn.functional as F  # noqa: E402
    from torch.nn.attention import SDPBackend, sdpa_kernel   # noqa: E402
except ImportError:
    torch = None

CENTER_K = fa.BWD_CENTER_K
DQ_PASS = fa.BWD_DQ_PASS
TIME_TOKENS = 16384                       # B N of bench_bwd.csv's shapes
TIME_HEADS = ((64, 32), (128, 16))        # (d, H) of bench_bwd.csv's shapes
TIME_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
SEQLENS = (64, 192, 704, 1024)
BACKENDS = (() if torch is None else
            (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
             ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION), ("sdpa_math", SDPBackend.MATH)))


def inputs(N, d, dtype, gen, a=120.0):
    dev = "cuda"
    q = 0.1 * torch.randn(1, 1, N, d, generator=gen, dtype=torch.float64, device=dev)
    k = 0.1 * torch.randn(1, 1, N, d, generator=gen, dtype=torch.float64, device=dev)
    q[..., 0] = 1.0
    k[..., 0] = -a * math.sqrt(d)
    v = torch.randn(1, 1, N, d, generator=gen, dtype=torch.float64, device=dev)
    do = torch.randn(1, 1, N, d, generator=gen, dtype=torch.float64, device=dev)
    return [t.to(dtype) for t in (q, k, v, do)]


def reference(q, k, v, do, causal):
    q, k, v = (t.double().requires_grad_(True) for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    o.backward(do.double())
    return q.grad, k.grad, v.grad


def errors(got, ref):
    out, bad = [], 0
    for g, r in zip(got, ref):
        g = g.double()
        nf = int((~torch.isfinite(g)).sum())
        bad += nf
        out.append(float("nan") if nf else float((g - r).abs().max() / r.abs().max()))
    return out, bad


class Ours:
    """Our forward (fwd_version) then backward (bwd_version, flags) on torch tensors."""

    def __init__(self, lib, fwd_version, bwd_version, q, k, v, do, causal):
        self.lib, self.fv, self.bv = lib, fwd_version, bwd_version
        B, H, N, d = q.shape
        self.dcode = {torch.float16: fa.FP16, torch.bfloat16: fa.BF16}[q.dtype]
        self.p = fa.params(B, H, N, d, window=(-1, 0) if causal else (-1, -1))
        self.pp = ctypes.byref(self.p)
        self.o, self.dq = torch.empty_like(q), torch.empty_like(q)
        self.dk, self.dv = torch.empty_like(k), torch.empty_like(v)
        self.L = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
        wsb = max(lib.fa_workspace_bytes(fa.FORWARD, fwd_version, self.dcode, self.pp),
                  lib.fa_workspace_bytes(fa.BACKWARD, bwd_version, self.dcode, self.pp))
        self.ws = torch.empty(max(wsb, 1), dtype=torch.uint8, device=q.device)
        self.keep = (q, k, v, do)
        self.x = fa.Ptrs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=self.o.data_ptr(),
                         softmax_lse=self.L.data_ptr(), do_=do.data_ptr(), dq=self.dq.data_ptr(),
                         dk=self.dk.data_ptr(), dv=self.dv.data_ptr(), workspace=self.ws.data_ptr(),
                         workspace_bytes=wsb)
        stream = torch.cuda.current_stream().cuda_stream
        fa.check(lib, lib.fa_forward(fwd_version, self.dcode, self.pp, ctypes.byref(self.x), stream))

    def backward(self, flags):
        for t in (self.dq, self.dk, self.dv):
            t.fill_(float("nan"))
        stream = torch.cuda.current_stream().cuda_stream
        fa.check(self.lib, self.lib.fa_backward(self.bv, self.dcode, self.pp, ctypes.byref(self.x), flags,
                                                stream))
        torch.cuda.synchronize()
        return self.dq, self.dk, self.dv

    def time(self, flags, repeats):
        ms = ctypes.c_double()
        fa.check(self.lib, self.lib.fa_time(fa.BACKWARD, self.bv, self.dcode, self.pp, ctypes.byref(self.x), 1,
                                            flags, repeats, 1, ctypes.byref(ms)))
        return ms.value


def sdpa(backend, q, k, v, do, causal):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(backend):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        o.backward(do)
    torch.cuda.synchronize()
    return q.grad, k.grad, v.grad


def forward_version(lib, dcode, p):
    best = None
    for info in fa.versions(lib, fa.FORWARD):
        if lib.fa_check_supported(fa.FORWARD, info.version, dcode, ctypes.byref(p)) == 0:
            best = info.version
    return best


def version_of(impl):
    """2 for ours_v2_mma: the backward version a time row measured."""
    return int(impl.split("_")[1][1:])


def rule(lib, version, p):
    """(predicted_ratio, auto) of backward `version` on p: the library's rule, bf16."""
    pp = ctypes.byref(p)
    return 1 + lib.fa_bwd_center_cost(version, fa.BF16, pp), lib.fa_bwd_center_auto(version, fa.BF16, pp)


def rule_only(path):
    """Rewrite path's predicted_ratio and auto (kind=time rows) from the rule as built now."""
    lib = fa.load()
    with open(path, newline="") as f:
        lines = f.read().splitlines(keepends=True)
    notes = [ln for ln in lines if ln.startswith("#") and not ln.startswith("# rule:")]
    body = [ln for ln in lines if not ln.startswith("#")]
    rd = csv.DictReader(body)
    cols, rows = rd.fieldnames, list(rd)
    n = 0
    for r in rows:
        if r["kind"] != "time":
            continue
        p = fa.params(int(r["B"]), int(r["H"]), int(r["seqlen"]), int(r["d"]),
                      window=(-1, 0) if r["causal"] == "1" else (-1, -1))
        pred, auto = rule(lib, version_of(r["impl"]), p)
        r["predicted_ratio"], r["auto"] = repr(pred), str(auto)
        n += 1
    notes.append(f"# rule: predicted_ratio and auto of the kind=time rows recomputed by --rule-only at "
                 f"{prov.commit()}, {prov.utc_now()} (fa_bwd_center_cost, per version); the measured "
                 "columns are the run's above\n")
    with open(path, "w", newline="") as f:
        f.write("".join(notes))
        w = csv.DictWriter(f, fieldnames=cols, lineterminator="\r\n" if body[0].endswith("\r\n") else "\n")
        w.writeheader()
        w.writerows(rows)
    print(f"rewrote the rule's columns of {n} time rows in {path}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", help="output CSV (with provenance columns)")
    ap.add_argument("--rule-only", metavar="CSV", help="recompute an existing CSV's predicted_ratio and auto")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--repeats", type=int, default=20, help="timed runs per point (median)")
    args = ap.parse_args()
    if args.rule_only:
        return rule_only(args.rule_only)
    if not args.csv:
        ap.error("one of --csv and --rule-only is required")
    if torch is None or not torch.cuda.is_available():
        print("dq_accuracy: no CUDA GPU here; nothing to measure", file=sys.stderr)
        return 2
    lib = fa.load()
    pv = prov.record(sys.argv)
    cols = ["kind", "seqlen", "d", "causal", "dtype", "impl", "err_dQ", "err_dK", "err_dV", "nonfinite",
            "ms_centered", "ms_keep_k", "time_ratio", "note", "B", "H", "predicted_ratio", "auto",
            "ms_full", "full_ratio"] + list(pv)
    rows = []
    gen = torch.Generator(device="cuda")
    bwd = fa.versions(lib, fa.BACKWARD)
    for dtype, dname in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        for N in SEQLENS:
            for causal in (True, False):
                gen.manual_seed(args.seed + N + causal)
                q, k, v, do = inputs(N, 64, dtype, gen)
                ref = reference(q, k, v, do, causal)
                base = dict(kind="error", seqlen=N, d=64, causal=int(causal), dtype=dname)
                for name, backend in BACKENDS:
                    try:
                        e, nf = errors(sdpa(backend, q, k, v, do, causal), ref)
                        rows.append(dict(base, impl=name, err_dQ=e[0], err_dK=e[1], err_dV=e[2], nonfinite=nf))
                    except RuntimeError as ex:
                        rows.append(dict(base, impl=name, note="not run: " + str(ex).splitlines()[0][:120]))
                dcode = {torch.float16: fa.FP16, torch.bfloat16: fa.BF16}[dtype]
                p = fa.params(1, 1, N, 64, window=(-1, 0) if causal else (-1, -1))
                fv = forward_version(lib, dcode, p)
                for info in bwd:
                    label = info.label()
                    if lib.fa_check_supported(fa.BACKWARD, info.version, dcode, ctypes.byref(p)):
                        rows.append(dict(base, impl=label, note="not run: " + lib.fa_error_string().decode()))
                        continue
                    run = Ours(lib, fv, info.version, q, k, v, do, causal)
                    for flags, suffix in ((CENTER_K, ""), (0, "_keep_k"), (DQ_PASS, "_full")):
                        e, nf = errors(run.backward(flags), ref)
                        rows.append(dict(base, impl=label + suffix, err_dQ=e[0], err_dK=e[1], err_dV=e[2],
                                         nonfinite=nf, note=f"forward v{fv}"))
                print(f"{dname} N={N} {'causal' if causal else 'full'}: " +
                      ", ".join(f"{r['impl']} {r.get('err_dQ', float('nan')):.3g}" for r in rows
                                if r.get("seqlen") == N and r.get("dtype") == dname and r.get("causal") == int(causal)),
                      flush=True)
    # the centering's cost: the backward with and without it, at the bench shapes
    gen.manual_seed(args.seed)
    for d, H in TIME_HEADS:
        for N in TIME_SEQLENS:
            B = TIME_TOKENS // N
            for causal in (False, True):
                q, k, v, do = (torch.randn(B, H, N, d, generator=gen, device="cuda", dtype=torch.float32)
                               .to(torch.bfloat16) for _ in range(4))
                p = fa.params(B, H, N, d, window=(-1, 0) if causal else (-1, -1))
                pp = ctypes.byref(p)
                fv = forward_version(lib, fa.BF16, p)
                for info in bwd:
                    if info.version <= 1 or lib.fa_check_supported(fa.BACKWARD, info.version, fa.BF16, pp):
                        continue   # the materialized and CUDA-core versions are not what the rule is for
                    predicted, auto = rule(lib, info.version, p)
                    run = Ours(lib, fv, info.version, q, k, v, do, causal)
                    t_keep, t_c = run.time(0, args.repeats), run.time(CENTER_K, args.repeats)
                    t_keep = min(t_keep, run.time(0, args.repeats))   # both measured twice, interleaved
                    t_c = min(t_c, run.time(CENTER_K, args.repeats))
                    t_full = run.time(DQ_PASS, args.repeats)
                    rows.append(dict(kind="time", seqlen=N, d=d, causal=int(causal), dtype="bf16",
                                     impl=info.label(), ms_centered=t_c, ms_keep_k=t_keep, time_ratio=t_c / t_keep,
                                     B=B, H=H, predicted_ratio=predicted, auto=auto,
                                     ms_full=t_full, full_ratio=t_full / t_keep,
                                     note=f"B={B} H={H}; median of {args.repeats}, L2 flushed; "
                                          "the lower of two medians"))
                    print(f"time {info.label()} N={N} d={d} causal={int(causal)}: {t_c:.3f} ms centered, "
                          f"{t_keep:.3f} ms keep-k, ratio {t_c / t_keep:.4f}, predicted {predicted:.4f}, "
                          f"auto {auto}; full {t_full:.3f} ms, {t_full / t_keep:.3f}x", flush=True)
                    del run
                del q, k, v, do
    tmp = args.csv + ".tmp"   # a run that fails leaves the file as it was
    with open(tmp, "w", newline="") as f:
        f.write("".join(f"# {k_}: {v_}\n" for k_, v_ in pv.items()))
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({**{c: "" for c in cols}, **r, **pv})
    os.replace(tmp, args.csv)
    print(f"wrote {args.csv} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
