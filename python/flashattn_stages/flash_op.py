"""flash_op.py -- the project's CUDA kernels as a PyTorch op with autograd.

    from flashattn_stages import flash_attention      # pip install ., or PYTHONPATH=python
    o = flash_attention(q, k, v, causal=True)          # as F.scaled_dot_product_attention
    o.float().pow(2).sum().backward()                  # dQ, dK, dV from our backward

Shapes are SDPA's: q (B, H, seqlen_q, d); k, v (B, H_kv, seqlen_k, d) with
H a multiple of H_kv (grouped-query attention: query head h reads key/value
head h // (H / H_kv)); the output o has q's shape and dtype. dtypes: float32,
float16, bfloat16, as far as the chosen kernel version takes them. The mask
is FlashAttention's window_size = (left, right), -1 unbounded, aligned
bottom-right when seqlen_q != seqlen_k (core/mask.h); causal=True is right = 0.
A query row that sees no key gets o = 0 and zero gradients (stage 6's
convention), never NaN. Empty sequences are SDPA's: seqlen_q = 0 gives an
empty o; seqlen_k = 0 gives o = 0, L = -inf and zero gradients; neither
launches a kernel of ours. For the (B, seqlen, heads, d) layout of
FlashAttention's own interface see flash_attn_interface.py.

How: two operators registered with torch.library, flashattn_stages::fwd
(Q, K, V -> O, L) and flashattn_stages::bwd (dO, Q, K, V, O, L -> dQ, dK,
dV), each with a fake (meta) implementation that gives the outputs' shapes
and strides without running anything, and the backward registered as the
forward's autograd formula; torch.compile(fullgraph=True) therefore sees two
opaque nodes and no graph break, and CUDA graphs capture the launches. In
eager mode flash_attention calls the same two implementations through a
torch.autograd.Function instead of the dispatcher (the dispatcher's Python
layers cost more than the kernels at small shapes; bench_overhead.py times
both); the numbers are the same bit for bit (tests/gpu/test_flash_op.py).

The implementations call fa_forward and fa_backward of libfa_gpu.so
(core/fa_gpu.h) through fa.py, on torch's current CUDA stream of the
tensors' device, with torch tensors' device pointers. Per problem signature
(pass, dtype, shapes, mask, scale, device) the chosen version and the
filled ctypes structures are cached (a plan), so a call fills in only the
pointers; the backward's workspace is workspace()'s. The forward saves Q,
K, V, O and the logsumexp L (B, H, seqlen_q) fp32, and the backward
recomputes P = exp(S - L) tile by tile from them, as the chapter's backward
pass does: no seqlen_q x seqlen_k matrix is kept between the passes.

Strides: a version whose table row says `strided` (the Hopper forward and
the wide tensor-core backward, the defaults on an H200) reads q, k, v, o and
dO and writes o through their row, head and batch strides, so (B, seqlen,
heads, d) views and slices of a packed QKV tensor run without copies. Any
version gets a copy of an operand it cannot read in place (_operands): one
not contiguous or not 16-byte aligned for the others, one whose strides are
not multiples of 16 bytes for any.

Errors: a ValueError of one line naming what is wrong (shape, dtype, device,
window, a problem no kernel version runs), raised before any launch;
fa.FaError (a RuntimeError) when a CUDA call fails or the library cannot be
loaded. Nothing here needs a GPU to import; the library is fa.library(),
the one handle the varlen and decode entries share.

What the three entries (dense here, varlen_op, decode_op) share on the way
to a launch -- the version chooser, the per-thread plan caches, the
workspace, the stream, the launch on the tensors' device -- is dispatch.py's;
the output allocator (new_output) and the checks of q, k, v are here.
"""
import ctypes
import math

from . import dispatch, fa   # dispatch first: it says in one line when torch is missing

import torch

DTYPE_CODES = {torch.float32: fa.FP32, torch.float16: fa.FP16, torch.bfloat16: fa.BF16}
NAMESPACE = "flashattn_stages"   # the operators' namespace: torch.ops.flashattn_stages
# True: outputs start as NaN instead of uninitialized memory (which may hold
# a previous call's right answer), so an element a kernel never writes shows.
# The tests set it; it costs one fill per output.
poison_outputs = False
# False: eager calls go through the registered operators too (the tests
# compare both paths; bench_overhead.py times both).
eager_fast_path = True


def _fail(msg):
    raise ValueError("flash_attention: " + msg)


def window_of(causal, window_size):
    """(left, right) of core/mask.h from FlashAttention's arguments:
    window_size any pair of ints (tuple, list, a tensor of two), -1
    unbounded; causal=True sets right = 0 whatever right was, as
    FlashAttention does (left stays: (W - 1, 0) is a causal window of W keys)."""
    # (indexing, not a generator: torch.compile traces this function)
    if isinstance(window_size, torch.Tensor):
        if window_size.numel() != 2:
            _fail(f"window_size of shape {tuple(window_size.shape)}: expected a pair (left, right)")
        window_size = window_size.reshape(2).tolist()
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        _fail(f"window_size={window_size!r}: expected a pair (left, right) of ints, -1 unbounded")
    try:
        left, right = int(window_size[0]), int(window_size[1])
    except (TypeError, ValueError):
        _fail(f"window_size={window_size!r}: expected a pair (left, right) of ints, -1 unbounded")
    if left < -1 or right < -1:
        _fail(f"window_size={window_size!r}: each side is -1 (unbounded) or >= 0")
    if causal:
        right = 0
    return left, right


def problem(q, k, causal=False, window_size=(-1, -1), softmax_scale=None):
    """The attn_params (fa.Params) of q, k (SDPA layout) and the mask."""
    B, H, seqlen_q, d = q.shape
    H_kv, seqlen_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    return fa.Params(B, H, H_kv, seqlen_q, seqlen_k, d, scale, *window_of(causal, window_size))


class _Plan:
    """One signature's cached call: the version, its row's `strided`, and the
    ctypes structures (problem filled, strides filled, pointers per call)."""
    __slots__ = ("version", "strided", "params", "ptrs", "p_ref", "x_ref", "ws_bytes", "strides_set", "backward_runs")


def _plan(pass_, q, k, scale, left, right, requested, deterministic):
    """The cached plan of this problem: version chosen once per signature."""
    B, H, Sq, d = q.shape
    H_kv, Sk = k.shape[1], k.shape[2]
    dt = DTYPE_CODES[q.dtype]
    key = (pass_, dt, B, H, H_kv, Sq, Sk, d, scale, left, right, requested, deterministic,
           q.get_device())
    plans = dispatch.plan_cache("dense")
    pl = plans.get(key)
    if pl is None:
        p = fa.Params(B, H, H_kv, Sq, Sk, d, scale, left, right)
        pl = _Plan()
        pl.version = dispatch.cached_version(pass_, dt, p, ("dense",) + key, requested, deterministic,
                                             fail=_fail)
        pl.strided = bool(dispatch.row(pass_, pl.version).strided)
        pl.params, pl.ptrs = p, fa.Ptrs()
        pl.p_ref, pl.x_ref = ctypes.byref(pl.params), ctypes.byref(pl.ptrs)
        pl.ws_bytes = fa.library().fa_workspace_bytes(pass_, pl.version, dt, pl.p_ref)
        pl.strides_set = False   # the structure's strides are all zero (contiguous)
        pl.backward_runs = set()   # (backward version, deterministic) checked for a forward plan
        plans[key] = pl
    return pl


def _kernel_strides(t):
    """(batch, head, row) element strides of a (B, heads, seqlen, d) tensor
    as a strided kernel reads them, or None when it cannot (d not contiguous,
    a stride or the address not a multiple of 16 bytes). A dimension of size
    1 is never stepped over: its stride is set to the contiguous layout's, so
    that the copy engine's rules hold whatever torch left there."""
    B, Hh, S, d = t.shape
    sb, sh, sr, sc = t.stride()
    if d > 1 and sc != 1:
        return None
    if S <= 1:
        sr = d
    if Hh <= 1:
        sh = S * sr
    if B <= 1:
        sb = Hh * sh
    per16 = 16 // t.element_size()
    if sr % per16 or sh % per16 or sb % per16 or t.data_ptr() % 16 or sr < d:
        return None
    return sb, sh, sr


def _copy(t, out):
    """A contiguous, aligned tensor of t's shape: t's values, or (out) none."""
    return _new(t.shape, t) if out else t.clone(memory_format=torch.contiguous_format)


def _readable(t, st, out=False):
    """t as a strided kernel reads (or, out, writes) it, its strides written
    into st (an fa.Stride): t itself, or a contiguous _copy where
    _kernel_strides says the kernel cannot use it in place."""
    s = _kernel_strides(t)
    if s is None:
        t = _copy(t, out)
        s = _kernel_strides(t)
    st.batch, st.head, st.row = s
    return t


def _operands(pl, ts, fields, outputs=0):
    """ts ((B, heads, seqlen, d); the last `outputs` written by the kernel)
    as the plan's version uses them, strides in its fa_ptrs `fields`: all
    as they are with zero strides when all are contiguous and 16-byte
    aligned (the common case, one test); else a strided version's in place
    through their strides, the others' contiguous; a _copy where the
    version cannot use one (the caller copies an output's back)."""
    contiguous, addresses = True, 0
    for t in ts:
        contiguous = contiguous and t.is_contiguous()
        addresses |= t.data_ptr()
    if contiguous and not addresses & 15:
        if pl.strides_set:
            _zero_strides(pl.ptrs)
            pl.strides_set = False
        return ts
    first_out = len(ts) - outputs
    if pl.strided:
        pl.strides_set = True
        return [_readable(t, getattr(pl.ptrs, f), i >= first_out) for i, (t, f) in enumerate(zip(ts, fields))]
    return [t if t.is_contiguous() and not t.data_ptr() & 15 else _copy(t, i >= first_out)
            for i, t in enumerate(ts)]


def _call(pass_, pl, dt, flags, index):
    """One call of fa_forward/fa_backward on torch's current stream of GPU `index`."""
    lib = fa.library()
    x = pl.ptrs
    stream = dispatch.raw_stream(index)
    if pl.ws_bytes:
        x.workspace, x.workspace_bytes = dispatch.workspace(pl.ws_bytes, index, stream).data_ptr(), pl.ws_bytes
    if pass_ == fa.FORWARD:
        rc = dispatch.on_device(index, lib.fa_forward, pl.version, dt, pl.p_ref, pl.x_ref, stream)
    else:
        rc = dispatch.on_device(index, lib.fa_backward, pl.version, dt, pl.p_ref, pl.x_ref, flags, stream)
    if rc != fa.OK:
        fa.check(lib, rc)


def _zero_strides(x):
    for n in fa.STRIDE_FIELDS:
        st = getattr(x, n)
        st.batch = st.head = st.row = 0


def new_output(shape, dtype, device):
    """An output tensor of every entry (dense, varlen, decode): uninitialized,
    or NaN-filled when poison_outputs is set (the tests set it, so an
    element a kernel never writes shows)."""
    if poison_outputs:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _new(shape, like, dtype=None):
    return new_output(shape, like.dtype if dtype is None else dtype, like.device)


def _out_strides(q, out_bshd):
    """O's strides for q's logical shape (B, H, seqlen_q, d): contiguous, or
    with out_bshd FlashAttention's memory layout (B, seqlen_q, H, d) seen
    as (B, H, seqlen_q, d). The fake implementation uses the same rule, so
    compiled graphs know O's strides."""
    B, H, S, d = q.shape
    if out_bshd:
        return (S * H * d, d, H * d, 1)
    return (H * S * d, S * d, d, 1)


def _out_like(q, out_bshd):
    o = torch.empty_strided(q.shape, _out_strides(q, out_bshd), dtype=q.dtype, device=q.device)
    return o.fill_(float("nan")) if poison_outputs else o


def _fwd_impl(q, k, v, softmax_scale, window_left, window_right, out_bshd, fwd_version,
              bwd_version, need_bwd, deterministic, center=0):
    B, H, Sq, d = q.shape
    Sk = k.shape[2]
    o = _out_like(q, out_bshd)
    lse = _new((B, H, Sq), q, torch.float32)
    if o.numel() == 0 or Sk == 0:
        # nothing to compute: no key gives o = 0 and L = -inf (SDPA's zeros)
        if o.numel():
            o.zero_()
            lse.fill_(-math.inf)
        return o, lse
    fa.library()
    dt = DTYPE_CODES[q.dtype]
    pl = _plan(fa.FORWARD, q, k, softmax_scale, window_left, window_right, fwd_version, False)
    if need_bwd and (bwd_version, deterministic) not in pl.backward_runs:
        # refuse a backward that cannot run now, not after the forward
        _plan(fa.BACKWARD, q, k, softmax_scale, window_left, window_right, bwd_version, deterministic)
        pl.backward_runs.add((bwd_version, deterministic))
    # O is ours, contiguous or (out_bshd) FlashAttention's layout
    q, k, v, o_run = _operands(pl, (q, k, v, o), ("sq", "sk", "sv", "so"), outputs=1)
    x = pl.ptrs
    x.q, x.k, x.v, x.o, x.softmax_lse = (q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                         o_run.data_ptr(), lse.data_ptr())
    _call(fa.FORWARD, pl, dt, 0, q.get_device())
    if o_run is not o:
        o.copy_(o_run)
    return o, lse


def _bwd_impl(do, q, k, v, o, lse, softmax_scale, window_left, window_right, bwd_version,
              deterministic, center=0):
    Sq, Sk = q.shape[2], k.shape[2]
    dq, dk, dv = _new(q.shape, q), _new(k.shape, k), _new(v.shape, v)
    if dq.numel() == 0 or Sk == 0:
        # no query row or no key: every gradient that exists is zero
        for t in (dq, dk, dv):
            if t.numel():
                t.zero_()
        return dq, dk, dv
    del Sq
    fa.library()
    dt = DTYPE_CODES[q.dtype]
    pl = _plan(fa.BACKWARD, q, k, softmax_scale, window_left, window_right, bwd_version,
               deterministic)
    # dO from autograd may be strided or even expanded (stride 0): a strided
    # version reads what it can in place (dQ, dK, dV are written contiguous,
    # as the fake implementation says); the others get contiguous copies.
    if do.dtype != q.dtype:
        do = do.to(q.dtype)
    q, k, v, o, do = _operands(pl, (q, k, v, o, do), ("sq", "sk", "sv", "so", "sdo"))
    x, lse = pl.ptrs, lse.contiguous()
    x.q, x.k, x.v, x.o, x.softmax_lse = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                         lse.data_ptr())
    x.do_, x.dq, x.dk, x.dv = do.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    # fa_backward's flags: FA_BWD_DETERMINISTIC, and center (center_flag: K centered, auto or as given)
    _call(fa.BACKWARD, pl, dt, (fa.BWD_DETERMINISTIC if deterministic else 0) | center, q.get_device())
    return dq, dk, dv


#> custom-op
@torch.library.custom_op(f"{NAMESPACE}::fwd", mutates_args=(), device_types="cuda")
def flash_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float,
              window_left: int, window_right: int, out_bshd: bool, fwd_version: int,
              bwd_version: int, need_bwd: bool, deterministic: bool, center: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """O, L = attention(Q, K, V): q (B, H, seqlen_q, d), k, v (B, H_kv,
    seqlen_k, d) CUDA tensors of one dtype, any strides with d contiguous;
    O q's shape (out_bshd: FlashAttention's memory layout), L (B, H,
    seqlen_q) fp32 natural-log logsumexp (-inf where a row sees no key).
    Versions -1: the fastest that runs the problem. need_bwd: also check now
    that a backward version runs it."""
    return _fwd_impl(q, k, v, softmax_scale, window_left, window_right, out_bshd, fwd_version,
                     bwd_version, need_bwd, deterministic, center)


@flash_fwd.register_fake
def _(q, k, v, softmax_scale, window_left, window_right, out_bshd, fwd_version, bwd_version,
      need_bwd, deterministic, center):
    B, H, Sq, d = q.shape
    o = torch.empty_strided(q.shape, _out_strides(q, out_bshd), dtype=q.dtype, device=q.device)
    return o, q.new_empty((B, H, Sq), dtype=torch.float32)


@torch.library.custom_op(f"{NAMESPACE}::bwd", mutates_args=(), device_types="cuda")
def flash_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              o: torch.Tensor, lse: torch.Tensor, softmax_scale: float, window_left: int,
              window_right: int, bwd_version: int, deterministic: bool, center: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV (contiguous, the shapes of q, k, v) from dO and what the
    forward saved; deterministic: bitwise the same on every call."""
    return _bwd_impl(do, q, k, v, o, lse, softmax_scale, window_left, window_right, bwd_version,
                     deterministic, center)


@flash_bwd.register_fake
def _(do, q, k, v, o, lse, softmax_scale, window_left, window_right, bwd_version, deterministic,
      center):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, scale, left, right, _out_bshd, _fv, bv, _need, det, center = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.args = (scale, left, right, bv, det, center)


def _backward(ctx, do, _dlse):   # L is not differentiable: its gradient is ignored
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = flash_bwd(do, q, k, v, o, lse, *ctx.args)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None


flash_fwd.register_autograd(_backward, setup_context=_setup_context)
#< custom-op


#> autograd-function
class FlashAttentionFunction(torch.autograd.Function):
    """The eager path: the same two implementations as the registered
    operators, without the dispatcher. apply(q, k, v, args) with args the
    operators' scalar arguments (softmax_scale, window_left, window_right,
    out_bshd, fwd_version, bwd_version, need_bwd, deterministic,
    center: center_flag's bits). Returns O and L (not differentiable)."""

    @staticmethod
    def forward(ctx, q, k, v, args):
        scale, left, right, out_bshd, fv, bv, need, det, center = args
        o, lse = _fwd_impl(q, k, v, scale, left, right, out_bshd, fv, bv, need, det, center)
        # What the backward needs: the inputs, O for D = rowsum(dO * O), and
        # L to rebuild P = exp(softmax_scale Q K^T - L) without the N x N matrix.
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (scale, left, right, bv, det, center)
        ctx.mark_non_differentiable(lse)
        # L's gradient is never used: no zero tensor made for it per backward
        ctx.set_materialize_grads(False)
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable   # our backward is not itself differentiable
    def backward(ctx, do, _dlse):
        if do is None:   # no gradient reached O (L has none): none flows back
            return None, None, None, None
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _bwd_impl(do, q, k, v, o, lse, *ctx.args)
        return dq, dk, dv, None
#< autograd-function


_CHECKED = set()   # signatures (shapes, dtypes, devices) that passed _check_tensors


def check_qkv(q, k, v, layout, fail=_fail):
    """What every entry asks of q, k, v, one line (fail) naming the first
    thing the kernels cannot take: torch tensors with one dimension per
    name of layout (e.g. "B, heads, seqlen, d"), on one CUDA device, of one
    dtype the kernels take, k and v of one shape."""
    dims = len(layout.split(","))
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            fail(f"{name} is a {type(t).__name__}, not a torch.Tensor")
        if t.dim() != dims:
            fail(f"{name} has shape {tuple(t.shape)}: expected {dims} dimensions ({layout})")
        if not t.is_cuda:
            fail(f"{name} is on {t.device}: the kernels take CUDA tensors")
    if not (q.device == k.device == v.device):
        fail(f"q, k, v are on {q.device}, {k.device}, {v.device}: expected one device")
    if not (q.dtype == k.dtype == v.dtype):
        fail(f"q, k, v have dtypes {q.dtype}, {k.dtype}, {v.dtype}: expected one dtype")
    if q.dtype not in DTYPE_CODES:
        fail(f"dtype {q.dtype}: the kernels take float32, float16 or bfloat16")
    if k.shape != v.shape:
        fail(f"k {tuple(k.shape)} and v {tuple(v.shape)}: expected the same shape")


def autocast_and_scale(q, k, v, softmax_scale, fail=_fail):
    """q, k, v in the autocast dtype where autocast is on (as SDPA's are), and
    softmax_scale, 1/sqrt(d) by default (d: q's last dimension), checked."""
    if torch.is_autocast_enabled("cuda"):
        at = torch.get_autocast_dtype("cuda")
        q, k, v = q.to(at), k.to(at), v.to(at)
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    if not (scale > 0 and math.isfinite(scale)):
        fail(f"softmax_scale={softmax_scale!r}: must be finite and > 0")
    return q, k, v, scale


def _check_tensors(q, k, v):
    """One line naming the first thing about q, k, v that the kernels cannot take."""
    check_qkv(q, k, v, "B, heads, seqlen, d")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        _fail(f"q {tuple(q.shape)} and k {tuple(k.shape)}: batch and head dimension must agree")
    if q.shape[3] < 1:
        _fail(f"q {tuple(q.shape)}: the head dimension d must be >= 1")
    if k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        _fail(f"q has {q.shape[1]} heads, k and v {k.shape[1]}: the query heads must be a "
              "multiple of the key/value heads")
    if max(q.shape) >= 2**31 or max(k.shape) >= 2**31:
        _fail("a dimension does not fit the kernels' 32-bit sizes")


def _versions_of(version):
    fwd, bwd = version if isinstance(version, (tuple, list)) else (version, version)
    return (-1 if fwd is None else int(fwd)), (-1 if bwd is None else int(bwd))


def center_flag(accurate_dq):
    """fa_backward's accuracy bits for accurate_dq: True FA_BWD_CENTER_K (K
    centered), "full" FA_BWD_DQ_PASS (K centered, and D and dQ formed
    without 16-bit roundings in a pass of their own: dQ as an fp32
    backward's, at a measured cost, chapters/21-gpu-backward.md), False
    none (K as given), None FA_BWD_CENTER_AUTO (centered where the
    library's rule, fa_bwd_center_cost in core/fa_gpu.h, predicts the
    pre-pass under 3% of the time of the backward version that runs; the
    rule is read there, never restated here)."""
    if accurate_dq is None:
        return fa.BWD_CENTER_AUTO
    if accurate_dq == "full":
        return fa.BWD_DQ_PASS
    if accurate_dq in (True, False):
        return fa.BWD_CENTER_K if accurate_dq else 0
    _fail(f"accurate_dq={accurate_dq!r}: must be None (auto), True, False or \"full\"")


def attention(q, k, v, softmax_scale, left, right, out_bshd, version, deterministic,
              accurate_dq=None):
    """O, L of (B, H, seqlen, d)-shaped q, k, v (any strides), checked, after
    autocast; the shared body of flash_attention and flash_attn_func."""
    compiling = torch.compiler.is_compiling()
    if compiling:
        _check_tensors(q, k, v)
    else:   # eager: each signature is checked once (the checks cost more than a small kernel)
        try:
            sig = (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, q.device, k.device, v.device)
        except AttributeError:   # not a tensor: _check_tensors says which
            sig = None
        if sig is None or sig not in _CHECKED:
            _check_tensors(q, k, v)
            if len(_CHECKED) >= dispatch.CACHE_LIMIT:
                _CHECKED.clear()
            _CHECKED.add(sig)
    q, k, v, scale = autocast_and_scale(q, k, v, softmax_scale)
    fv, bv = _versions_of(version)
    need = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    det, center = bool(deterministic), center_flag(accurate_dq)
    if compiling or not eager_fast_path:
        return flash_fwd(q, k, v, scale, left, right, out_bshd, fv, bv, need, det, center)
    if not need:
        return _fwd_impl(q, k, v, scale, left, right, out_bshd, fv, bv, False, det)
    return FlashAttentionFunction.apply(q, k, v, (scale, left, right, out_bshd, fv, bv, need, det, center))


#> flash-attention-call
def flash_attention(q, k, v, causal=False, window_size=(-1, -1), softmax_scale=None,
                    version=None, deterministic=False, return_lse=False, accurate_dq=None):
    """softmax(softmax_scale q k^T, masked) v by the project's kernels, with autograd.

    q (B, H, seqlen_q, d), k and v (B, H_kv, seqlen_k, d), CUDA, one dtype,
    any strides (d contiguous is what avoids a copy); returns o (B, H,
    seqlen_q, d) contiguous in that dtype, and with return_lse also L (B, H,
    seqlen_q) fp32. softmax_scale defaults to 1/sqrt(d). version: None (for
    each pass the highest version that runs the problem on this GPU), an int
    (that version for both passes) or a pair (forward, backward).
    deterministic: the backward's dQ, dK, dV bitwise the same on every call
    (only versions that have the mode). accurate_dq: True runs the backward
    on K centered over the keys (FA_BWD_CENTER_K, core/fa_gpu.h), which
    keeps dQ accurate when every logit is far from zero, at the cost of a
    pre-pass; "full" also forms D and dQ without 16-bit roundings (dQ as an
    fp32 backward's, for fp16/bf16 and d a multiple of 16; it costs several
    times the centering, chapters/21-gpu-backward.md); False keeps K as
    given; None (the default) centers where the pre-pass is predicted
    under 3% of the backward (fa_bwd_center_cost, per version: long
    sequences; center_flag). Under torch.autocast the inputs are cast to
    the autocast dtype first, as SDPA's are. Works under
    torch.compile(fullgraph=True) and CUDA graph capture.
    """
    left, right = window_of(causal, window_size)
    o, lse = attention(q, k, v, softmax_scale, left, right, False, version, deterministic,
                       accurate_dq)
    return (o, lse) if return_lse else o
#< flash-attention-call


def visible_mask(seqlen_q, seqlen_k, causal=False, window_size=(-1, -1), device=None):
    """The mask the kernels apply, as SDPA's boolean attn_mask (seqlen_q,
    seqlen_k), True where query i sees key j: read from core/mask.h through
    fa_mask_fill (fa.mask()), never spelled here."""
    left, right = window_of(causal, window_size)
    p = fa.Params(1, 1, 1, int(seqlen_q), int(seqlen_k), 1, 1.0, left, right)
    try:
        bits = fa.mask(fa.library(), p)
    except fa.FaError as e:
        _fail(str(e))
    m = torch.frombuffer(bytearray(bits), dtype=torch.uint8).view(seqlen_q, seqlen_k).bool()
    return m if device is None else m.to(device)
