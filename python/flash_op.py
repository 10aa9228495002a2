"""flash_op.py -- the project's CUDA kernels as a PyTorch op with autograd.

    import sys; sys.path.insert(0, "python")        # from the repository root
    from flash_op import flash_attention
    o = flash_attention(q, k, v, causal=True)        # as F.scaled_dot_product_attention
    o.float().pow(2).sum().backward()                # dQ, dK, dV from our backward

Shapes are SDPA's: q (B, H, seqlen_q, d); k, v (B, H_kv, seqlen_k, d) with
H a multiple of H_kv (grouped-query attention: query head h reads key/value
head h // (H / H_kv)); the output o has q's shape and dtype. dtypes: float32,
float16, bfloat16, as far as the chosen kernel version takes them. The mask
is FlashAttention's window_size = (left, right), -1 unbounded, aligned
bottom-right when seqlen_q != seqlen_k (src/mask.h); causal=True is right = 0.
A query row that sees no key gets o = 0 and zero gradients (stage 6's
convention), never NaN.

How: FlashAttentionFunction (a torch.autograd.Function) calls fa_forward and
fa_backward of build/libfa_gpu.so (kernels/fa_gpu.h) through the one ctypes
mirror of that header, scripts/fa.py, on torch's current CUDA stream, with
torch tensors' device pointers and workspace taken from torch's allocator.
The forward saves Q, K, V, O and the logsumexp L (B, H, seqlen_q) fp32 --
O(seqlen_q) numbers beyond the tensors autograd keeps anyway -- and the
backward recomputes P = exp(S - L) tile by tile from them, as the chapter's
backward pass does; no seqlen_q x seqlen_k matrix is kept between the passes.

Errors: a ValueError of one line naming what is wrong (shape, dtype, device,
window, a problem no kernel version runs), raised before any launch;
fa.FaError (a RuntimeError) when a CUDA call fails. Build the library first:
make build/libfa_gpu.so. Nothing here needs a GPU to import.
"""
import ctypes
import math
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import fa  # noqa: E402  (scripts/fa.py: the one ctypes mirror of kernels/fa_gpu.h)

DTYPE_CODES = {torch.float32: fa.FP32, torch.float16: fa.FP16, torch.bfloat16: fa.BF16}
PASS_NAMES = {fa.FORWARD: "forward", fa.BACKWARD: "backward"}
_LIB = None
# True: outputs start as NaN instead of uninitialized memory (which may hold
# a previous call's right answer), so an element a kernel never writes shows.
# The tests set it; it costs one fill per output.
poison_outputs = False


def _empty_like(t, shape=None, dtype=None):
    shape = t.shape if shape is None else shape
    dtype = t.dtype if dtype is None else dtype
    if poison_outputs:
        return torch.full(shape, float("nan"), dtype=dtype, device=t.device)
    return torch.empty(shape, dtype=dtype, device=t.device)


def library():
    """build/libfa_gpu.so, loaded once (ValueError of one line when it is not built)."""
    global _LIB
    if _LIB is None:
        path = os.path.join(ROOT, "build", "libfa_gpu.so")
        if not os.path.exists(path):
            raise ValueError(f"flash_attention: {path} is not built (make build/libfa_gpu.so)")
        _LIB = fa.load(path)
    return _LIB


def _fail(msg):
    raise ValueError("flash_attention: " + msg)


def window_of(causal, window_size):
    """(left, right) of src/mask.h from SDPA-style arguments: causal=True means
    right = 0 (left stays as given: (W - 1, 0) is a causal window of W keys)."""
    try:
        left, right = (int(w) for w in window_size)
    except (TypeError, ValueError):
        _fail(f"window_size={window_size!r}: expected a pair (left, right) of ints, -1 unbounded")
    if left < -1 or right < -1:
        _fail(f"window_size={window_size!r}: each side is -1 (unbounded) or >= 0")
    if causal:
        if right not in (-1, 0):
            _fail(f"causal=True with window_size={window_size!r}: causal means right = 0")
        right = 0
    return left, right


def problem(q, k, causal=False, window_size=(-1, -1), softmax_scale=None):
    """The attn_params (scripts/fa.py's Params) of q, k and the mask."""
    B, H, seqlen_q, d = q.shape
    H_kv, seqlen_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    return fa.Params(B, H, H_kv, seqlen_q, seqlen_k, d, scale, *window_of(causal, window_size))


def choose_version(pass_, dtype_code, p, deterministic=False):
    """The highest-numbered version of the table (kernels/versions.def) that
    runs this problem and dtype on this GPU: the table numbers versions from
    the materialized baseline (0) up through the tiled (1), tensor-core (2)
    and Hopper (3) kernels, so the highest that accepts the problem is the
    fastest one it has. ValueError listing each version's reason otherwise."""
    lib = library()
    why = {}   # version name -> the library's reason
    for row in sorted(fa.versions(lib, pass_), key=lambda r: -r.version):
        name = row.name.decode()
        if deterministic and not row.deterministic:
            why[name] = "no deterministic mode"
        elif lib.fa_check_supported(pass_, row.version, dtype_code, ctypes.byref(p)) == fa.OK:
            return row.version
        else:
            why[name] = lib.fa_error_string().decode()
    if not why:
        _fail(f"the library has no {PASS_NAMES[pass_]} version")
    if len(set(why.values())) == 1:   # one reason for all: say it once
        _fail(f"no {PASS_NAMES[pass_]} version runs this problem: {next(iter(why.values()))}")
    _fail(f"no {PASS_NAMES[pass_]} version runs this problem ("
          + "; ".join(f"{n}: {w}" for n, w in why.items()) + ")")


def check_version(pass_, version, dtype_code, p, deterministic=False):
    """ValueError of one line unless `version` runs this problem here."""
    lib = library()
    if lib.fa_check_supported(pass_, version, dtype_code, ctypes.byref(p)) != fa.OK:
        _fail(f"version={version}: {lib.fa_error_string().decode()}")
    if deterministic and not lib.fa_version(pass_, version).contents.deterministic:
        _fail(f"deterministic=True: {PASS_NAMES[pass_]} version {version} has no deterministic mode")
    return version


def _launch(pass_, version, dtype_code, p, ptrs, deterministic, device):
    """One call of fa_forward/fa_backward on torch's current stream of `device`,
    with the workspace the version asks for allocated by torch (stream-ordered,
    so it is free for reuse only after the kernels that use it)."""
    lib = library()
    nbytes = lib.fa_workspace_bytes(pass_, version, dtype_code, ctypes.byref(p))
    ws = torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes else None
    ptrs.workspace, ptrs.workspace_bytes = (ws.data_ptr() if ws is not None else None), nbytes
    with torch.cuda.device(device):   # the library launches on the current device
        stream = torch.cuda.current_stream(device).cuda_stream
        if pass_ == fa.FORWARD:
            rc = lib.fa_forward(version, dtype_code, ctypes.byref(p), ctypes.byref(ptrs), stream)
        else:
            rc = lib.fa_backward(version, dtype_code, ctypes.byref(p), ctypes.byref(ptrs),
                                 int(deterministic), stream)
    fa.check(lib, rc)


#> autograd-function
class FlashAttentionFunction(torch.autograd.Function):
    """O, L = attention(Q, K, V) forward and dQ, dK, dV backward, by our kernels.

    forward(q, k, v, p, versions, flags): q, k, v contiguous CUDA
    tensors of one dtype (layout at the top of this file), p the problem
    (fa.Params), versions = (forward, backward) version numbers, flags the
    backward's (fa_backward: 1 deterministic, 2 K centered). Returns O
    (q's shape and dtype) and L = softmax_lse (B, H, seqlen_q) fp32, the
    natural-log logsumexp of each row of softmax_scale Q K^T over the keys it
    sees (-inf for a row that sees none); L is not differentiable.
    """

    @staticmethod
    def forward(ctx, q, k, v, p, versions, deterministic):
        dt = DTYPE_CODES[q.dtype]
        o = _empty_like(q)
        lse = _empty_like(q, q.shape[:3], torch.float32)
        _launch(fa.FORWARD, versions[0], dt, p,
                fa.Ptrs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                        softmax_lse=lse.data_ptr()), False, q.device)
        # What the backward needs: the inputs, O for D = rowsum(dO * O), and
        # L to rebuild P = exp(softmax_scale Q K^T - L) without the N x N matrix.
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.p, ctx.bwd_version, ctx.deterministic = p, versions[1], deterministic
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable   # our backward is not itself differentiable
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        if ctx.bwd_version is None:
            _fail("the backward was not prepared (no version chosen at the forward)")
        do = do.to(q.dtype).contiguous()   # a view of O's gradient may be strided
        dq, dk, dv = _empty_like(q), _empty_like(k), _empty_like(v)
        _launch(fa.BACKWARD, ctx.bwd_version, DTYPE_CODES[q.dtype], ctx.p,
                fa.Ptrs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                        softmax_lse=lse.data_ptr(), do_=do.data_ptr(), dq=dq.data_ptr(),
                        dk=dk.data_ptr(), dv=dv.data_ptr()), ctx.deterministic, q.device)
        return dq, dk, dv, None, None, None
#< autograd-function


def _check_tensors(q, k, v):
    """One line naming the first thing about q, k, v that the kernels cannot take."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            _fail(f"{name} is a {type(t).__name__}, not a torch.Tensor")
        if t.dim() != 4:
            _fail(f"{name} has shape {tuple(t.shape)}: expected 4 dimensions (B, heads, seqlen, d)")
        if not t.is_cuda:
            _fail(f"{name} is on {t.device}: the kernels take CUDA tensors")
    if not (q.device == k.device == v.device):
        _fail(f"q, k, v are on {q.device}, {k.device}, {v.device}: expected one device")
    if not (q.dtype == k.dtype == v.dtype):
        _fail(f"q, k, v have dtypes {q.dtype}, {k.dtype}, {v.dtype}: expected one dtype")
    if q.dtype not in DTYPE_CODES:
        _fail(f"dtype {q.dtype}: the kernels take float32, float16 or bfloat16")
    if k.shape != v.shape:
        _fail(f"k {tuple(k.shape)} and v {tuple(v.shape)}: expected the same shape")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        _fail(f"q {tuple(q.shape)} and k {tuple(k.shape)}: batch and head dimension must agree")
    if k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        _fail(f"q has {q.shape[1]} heads, k and v {k.shape[1]}: the query heads must be a "
              "multiple of the key/value heads")
    if max(q.shape) >= 2**31 or max(k.shape) >= 2**31:
        _fail("a dimension does not fit the kernels' 32-bit sizes")


#> flash-attention-call
def flash_attention(q, k, v, causal=False, window_size=(-1, -1), softmax_scale=None,
                    version=None, deterministic=False, return_lse=False, accurate_dq=False):
    """softmax(softmax_scale q k^T, masked) v by the project's kernels, with autograd.

    q (B, H, seqlen_q, d), k and v (B, H_kv, seqlen_k, d), CUDA, one dtype;
    returns o (B, H, seqlen_q, d) in that dtype, and with return_lse also
    L (B, H, seqlen_q) fp32. softmax_scale defaults to 1/sqrt(d).
    version: None (for each pass the highest version that runs the problem
    on this GPU), an int (that version for both passes) or a pair (forward,
    backward). deterministic: the backward's dQ, dK, dV bitwise the same on
    every call (only versions that have the mode). accurate_dq: the backward
    runs on K centered over the keys (FA_BWD_CENTER_K, kernels/fa_gpu.h),
    which keeps dQ accurate when every logit is far from zero, at the cost of
    a pre-pass. Under torch.autocast the inputs are cast to the autocast dtype
    first, as SDPA's are.
    """
    _check_tensors(q, k, v)
    if torch.is_autocast_enabled("cuda"):
        at = torch.get_autocast_dtype("cuda")
        q, k, v = q.to(at), k.to(at), v.to(at)
    p = problem(q, k, causal, window_size, softmax_scale)
    dt = DTYPE_CODES[q.dtype]
    fwd, bwd = version if isinstance(version, (tuple, list)) else (version, version)
    fwd = choose_version(fa.FORWARD, dt, p) if fwd is None else check_version(fa.FORWARD, fwd, dt, p)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad:   # refuse a backward that cannot run now, not after the forward
        bwd = (choose_version(fa.BACKWARD, dt, p, deterministic) if bwd is None
               else check_version(fa.BACKWARD, bwd, dt, p, deterministic))
    else:
        bwd = None
    # the backward's flags (fa_backward): 1 deterministic, 2 K centered
    flags = (1 if deterministic else 0) | (2 if accurate_dq else 0)
    o, lse = FlashAttentionFunction.apply(q.contiguous(), k.contiguous(), v.contiguous(), p,
                                          (fwd, bwd), flags)
    return (o, lse) if return_lse else o
#< flash-attention-call


def visible_mask(seqlen_q, seqlen_k, causal=False, window_size=(-1, -1), device=None):
    """The mask the kernels apply, as SDPA's boolean attn_mask (seqlen_q,
    seqlen_k), True where query i sees key j: read from src/mask.h through
    fa_mask_fill (scripts/fa.py's mask()), never spelled here."""
    left, right = window_of(causal, window_size)
    p = fa.Params(1, 1, 1, int(seqlen_q), int(seqlen_k), 1, 1.0, left, right)
    try:
        bits = fa.mask(library(), p)
    except fa.FaError as e:
        _fail(str(e))
    m = torch.frombuffer(bytearray(bits), dtype=torch.uint8).view(seqlen_q, seqlen_k).bool()
    return m if device is None else m.to(device)
