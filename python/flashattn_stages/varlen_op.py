"""varlen_op.py -- packed sequences of different lengths as a PyTorch op with
autograd: FlashAttention's flash_attn_varlen_func (flash_attn_interface.py
holds the public call).

    from flashattn_stages import flash_attn_varlen_func
    cu = torch.tensor([0, 5, 5, 12], dtype=torch.int32, device="cuda")   # lengths 5, 0, 7
    out = flash_attn_varlen_func(q, k, v, cu, cu, 7, 7, causal=True)   # q (12, H, d)

Layout (core/fa_gpu.h, fa_varlen): q (total_q, H, d), k and v (total_k,
H_kv, d), the rows of sequence b at cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1
(and cu_seqlens_k for keys), int32 CUDA tensors of B + 1 entries, 0 first,
non-decreasing, the totals last; max_seqlen_q, max_seqlen_k the longest
sequence. Each sequence is masked as its own problem (core/mask.h:
causal aligned to its own last query and key when its lengths differ; the
window; grouped heads from k's shape). out (total_q, H, d) contiguous;
softmax_lse (H, total_q) fp32, FlashAttention's varlen layout, -inf for a
row that sees no key (its out row is 0, its gradients 0).

How: two operators registered with torch.library in flash_op's namespace,
varlen_fwd (Q, K, V, cu_seqlens -> O, L) and varlen_bwd (dO, Q, K, V, O, L,
cu_seqlens -> dQ, dK, dV), each with a fake (meta) implementation and the
backward registered as the forward's autograd formula, so torch.compile
(fullgraph=True) and CUDA graphs take them as two opaque nodes. They call
fa_forward_varlen and fa_backward_varlen of libfa_gpu.so through fa.py on
torch's current stream; the version is dispatch.choose_version's (the one
chooser of every entry) with fa_check_varlen as the test: the highest of the
table that runs the packed problem, rows that say `prefer` first (backward 3
on Hopper, then 4), chosen once per signature; the plans are kept per thread
(dispatch.plan_cache), as the dense entry's are.

Errors: ValueError of one line. flash_attn_varlen_func checks shapes,
dtypes and devices of every argument before any launch. The contents of
cu_seqlens are the caller's guarantee, as in FlashAttention: reading them
would copy the arrays to the host and synchronize every call (a training
step's CPU could no longer run ahead of its GPU). check_cu_seqlens=True (a
keyword of ours, after FlashAttention's arguments) reads them in eager
mode -- that one synchronization a call -- and refuses bad ones in one line
(fa_varlen_check, the C check of core/varlen.h: first entry 0,
non-decreasing, last entry the total, no sequence longer than max_seqlen);
under torch.compile or CUDA graph capture there are no values to read.
Unchecked, the kernels stay inside the tensors whatever the arrays hold
(core/varlen.h) but compute nothing meaningful from bad ones.
"""
import ctypes
import math

from . import dispatch, fa, flash_op   # dispatch first: it says in one line when torch is missing

import torch
import torch.nn.functional as F

NS = flash_op.NAMESPACE


def _fail(msg):
    raise ValueError("flash_attn_varlen_func: " + msg)


_NOT_READ = 16   # a non-NULL device address that fa_check_varlen never dereferences


def _plan(pass_, q, k, B, max_q, max_k, scale, left, right, requested, deterministic):
    """(version, params, varlen struct, ptrs, workspace bytes, dtype) of this
    signature, from this thread's cache (dispatch.plan_cache("varlen"))."""
    total_q, H, d = q.shape
    total_k, H_kv = k.shape[0], k.shape[1]
    dt = flash_op.DTYPE_CODES[q.dtype]
    key = (pass_, dt, B, H, H_kv, total_q, total_k, max_q, max_k, d, scale, left, right, requested,
           deterministic, q.get_device())
    plans = dispatch.plan_cache("varlen")
    pl = plans.get(key)
    if pl is None:
        p = fa.Params(B, H, H_kv, max(max_q, 1), max(max_k, 1), d, scale, left, right)
        # the check reads no array: placeholders until a call sets the real ones
        vl = fa.Varlen(_NOT_READ, _NOT_READ, total_q, total_k)
        got = dispatch.cached_version(pass_, dt, p, ("varlen",) + key, requested, deterministic, vl, _fail)
        ws = fa.library().fa_workspace_bytes_varlen(pass_, got, dt, ctypes.byref(p), ctypes.byref(vl))
        pl = plans[key] = (got, p, vl, fa.Ptrs(), ws, dt)
    return pl


def _strides(t, st):
    """t (rows, heads, d) as the kernels read it, its (head, row) strides into
    st (batch 0): t itself when d is contiguous and the strides and address are
    multiples of 16 bytes, else a contiguous copy. A dimension of size 1 is
    never stepped over: its stride is set to the packed layout's."""
    def of(t):
        n, h, d = t.shape
        sr, sh, sc = t.stride()
        if h <= 1:
            sh = d
        if n <= 1:
            sr = h * sh
        per16 = 16 // t.element_size()
        if (d > 1 and sc != 1) or sr % per16 or sh % per16 or t.data_ptr() % 16 or sr < d:
            return None
        return sh, sr
    s = of(t)
    if s is None:
        t = t.contiguous() if not t.is_contiguous() else t.clone()
        s = of(t)
    st.batch, st.head, st.row = 0, s[0], s[1]
    return t


def _new(shape, like, dtype=None):
    return flash_op.new_output(shape, like.dtype if dtype is None else dtype, like.device)


def _run(pass_, pl, flags, index):
    version, p, vl, x, ws, dt = pl
    lib = fa.library()
    stream = dispatch.raw_stream(index)
    if ws:
        x.workspace, x.workspace_bytes = dispatch.workspace(ws, index, stream).data_ptr(), ws
    refs = (ctypes.byref(p), ctypes.byref(vl), ctypes.byref(x))
    if pass_ == fa.FORWARD:
        rc = dispatch.on_device(index, lib.fa_forward_varlen, version, dt, *refs, stream)
    else:
        rc = dispatch.on_device(index, lib.fa_backward_varlen, version, dt, *refs, flags, stream)
    if rc != fa.OK:
        fa.check(lib, rc)


def _fwd_impl(q, k, v, cu_q, cu_k, max_q, max_k, scale, left, right, fwd_version, bwd_version, need_bwd,
              deterministic):
    total_q, H, d = q.shape
    total_k = k.shape[0]
    B = cu_q.shape[0] - 1
    o = _new(q.shape, q)
    lse = _new((H, total_q), q, torch.float32)
    if total_q == 0 or total_k == 0:
        # no query row, or no key at all: o = 0, L = -inf (nothing launched)
        if total_q:
            o.zero_()
            lse.fill_(-math.inf)
        return o, lse
    if need_bwd:   # refuse a backward that cannot run now, not after the forward
        _plan(fa.BACKWARD, q, k, B, max_q, max_k, scale, left, right, bwd_version, deterministic)
    pl = _plan(fa.FORWARD, q, k, B, max_q, max_k, scale, left, right, fwd_version, False)
    x, vl = pl[3], pl[2]
    q, k, v = _strides(q, x.sq), _strides(k, x.sk), _strides(v, x.sv)
    _strides(o, x.so)
    cu_q, cu_k = cu_q.contiguous(), cu_k.contiguous()
    vl.cu_seqlens_q, vl.cu_seqlens_k = cu_q.data_ptr(), cu_k.data_ptr()
    x.q, x.k, x.v, x.o, x.softmax_lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    _run(fa.FORWARD, pl, 0, q.get_device())
    return o, lse


def _bwd_impl(do, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, scale, left, right, bwd_version, deterministic):
    B = cu_q.shape[0] - 1
    dq, dk, dv = _new(q.shape, q), _new(k.shape, k), _new(v.shape, v)
    if q.shape[0] == 0 or k.shape[0] == 0:
        for t in (dq, dk, dv):
            if t.numel():
                t.zero_()
        return dq, dk, dv
    pl = _plan(fa.BACKWARD, q, k, B, max_q, max_k, scale, left, right, bwd_version, deterministic)
    x, vl = pl[3], pl[2]
    do = do.to(q.dtype)
    q, k, v = _strides(q, x.sq), _strides(k, x.sk), _strides(v, x.sv)
    o, do = _strides(o, x.so), _strides(do, x.sdo)
    _strides(dq, x.sdq), _strides(dk, x.sdk), _strides(dv, x.sdv)
    lse = lse.contiguous()
    cu_q, cu_k = cu_q.contiguous(), cu_k.contiguous()
    vl.cu_seqlens_q, vl.cu_seqlens_k = cu_q.data_ptr(), cu_k.data_ptr()
    x.q, x.k, x.v, x.o, x.softmax_lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    x.do_, x.dq, x.dk, x.dv = do.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    _run(fa.BACKWARD, pl, 1 if deterministic else 0, q.get_device())
    return dq, dk, dv


#> varlen-op
@torch.library.custom_op(f"{NS}::varlen_fwd", mutates_args=(), device_types="cuda")
def varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
               cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
               window_left: int, window_right: int, fwd_version: int, bwd_version: int, need_bwd: bool,
               deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """O (total_q, H, d), L (H, total_q) fp32 of packed sequences (module docstring)."""
    return _fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                     window_left, window_right, fwd_version, bwd_version, need_bwd, deterministic)


@varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, window_left,
      window_right, fwd_version, bwd_version, need_bwd, deterministic):
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.custom_op(f"{NS}::varlen_bwd", mutates_args=(), device_types="cuda")
def varlen_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
               lse: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
               max_seqlen_k: int, softmax_scale: float, window_left: int, window_right: int,
               bwd_version: int, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV (contiguous, the shapes of q, k, v) from dO and what the forward saved."""
    return _bwd_impl(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     softmax_scale, window_left, window_right, bwd_version, deterministic)


@varlen_bwd.register_fake
def _(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
      window_left, window_right, bwd_version, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k, scale, left, right, _fv, bv, _need, det = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
    ctx.args = (max_q, max_k, scale, left, right, bv, det)


def _backward(ctx, do, _dlse):   # L is not differentiable
    q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
    max_q, max_k, scale, left, right, bv, det = ctx.args
    dq, dk, dv = varlen_bwd(do, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, scale, left, right, bv, det)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None


varlen_fwd.register_autograd(_backward, setup_context=_setup_context)
#< varlen-op


def _fake(*ts):
    """True when the tensors are fake (traced by make_fx or export): no values."""
    try:
        from torch._guards import detect_fake_mode
        return detect_fake_mode(ts) is not None
    except ImportError:   # pragma: no cover
        return False


def check_arguments(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, check_values=False):
    """One line naming the first argument the kernels cannot take; with
    check_values, in eager mode, the contents of cu_seqlens too
    (fa_varlen_check, one host copy: a synchronization)."""
    flash_op.check_qkv(q, k, v, "total, heads, d", _fail)
    if q.shape[2] != k.shape[2] or q.shape[2] < 1:
        _fail(f"q {tuple(q.shape)} and k {tuple(k.shape)}: the head dimension must agree")
    if k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        _fail(f"q has {q.shape[1]} heads, k and v {k.shape[1]}: the query heads must be a multiple of "
              "the key/value heads")
    for name, c in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(c, torch.Tensor):
            _fail(f"{name} is a {type(c).__name__}, not a torch.Tensor")
        if c.dtype != torch.int32:
            _fail(f"{name} has dtype {c.dtype}: expected torch.int32")
        if c.dim() != 1 or c.shape[0] < 2:
            _fail(f"{name} has shape {tuple(c.shape)}: expected (B + 1,) with B >= 1 sequences")
        if c.device != q.device:
            _fail(f"{name} is on {c.device}, q on {q.device}: expected one device")
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        _fail(f"cu_seqlens_q has {cu_seqlens_q.shape[0]} entries, cu_seqlens_k {cu_seqlens_k.shape[0]}: "
              "expected B + 1 each")
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not isinstance(m, int) or isinstance(m, bool) or m < 0:
            _fail(f"{name}={m!r}: expected an int >= 0")
    if max(q.shape[0], k.shape[0]) >= 2**31 - 2 * cu_seqlens_q.shape[0]:
        _fail("a total does not fit the kernels' 32-bit sizes")
    if (not check_values or torch.compiler.is_compiling() or _fake(cu_seqlens_q, cu_seqlens_k)
            or torch.cuda.is_current_stream_capturing()):
        return   # no values to read: traced, or captured into a graph
    both = torch.cat([cu_seqlens_q, cu_seqlens_k]).cpu()
    B = cu_seqlens_q.shape[0] - 1
    lib = fa.library()
    base = both.data_ptr()
    if lib.fa_varlen_check(base, base + 4 * (B + 1), B, q.shape[0], k.shape[0], max_seqlen_q,
                           max_seqlen_k) != fa.OK:
        _fail(fa.error_text(lib))


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
                     left=-1, right=-1, version=None, deterministic=False):
    """O, L of packed q, k, v, after autocast; the arguments as varlen_any
    checked them (check_arguments, its one caller's first step)."""
    q, k, v, scale = flash_op.autocast_and_scale(q, k, v, softmax_scale, _fail)
    fv, bv = flash_op._versions_of(version)
    need = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    return varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), scale,
                      left, right, fv, bv, need, bool(deterministic))


def _is_unsupported(e):
    """True for the chooser's "no ... version runs this varlen problem" (not a bad argument)."""
    return "version runs this varlen problem" in str(e)


def _per_sequence(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, left, right, deterministic):
    """O, L of packed q, k, v through the dense op, one sequence at a time:
    the same numbers per sequence (each is its own problem, core/mask.h),
    for what no varlen version runs (d above 128, fp32, a GPU without the
    varlen kernels). Autograd goes through the slices and the concatenation.
    Reads cu_seqlens on the host (one copy)."""
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    outs, lses = [], []
    for b in range(len(cq) - 1):
        qb = q[cq[b]:cq[b + 1]].unsqueeze(0).transpose(1, 2)   # (1, H, seqlen_q, d)
        kb = k[ck[b]:ck[b + 1]].unsqueeze(0).transpose(1, 2)
        vb = v[ck[b]:ck[b + 1]].unsqueeze(0).transpose(1, 2)
        o, lse = flash_op.attention(qb, kb, vb, softmax_scale, left, right, False, None, deterministic)
        outs.append(o[0].transpose(0, 1))                     # (seqlen_q, H, d)
        lses.append(lse[0])                                   # (H, seqlen_q)
    return torch.cat(outs, 0), torch.cat(lses, 1)


def varlen_any(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
               left=-1, right=-1, deterministic=False, check_values=False):
    """varlen_attention for every head dimension and dtype the dense op
    takes: the varlen kernels at d itself, else at d padded with zero
    columns up to a multiple of 64 they take (exact: a zero column adds
    nothing to Q K^T and gives a zero output column, cut off again;
    softmax_scale stays 1/sqrt(d)), else the dense op per sequence
    (_per_sequence). Returns O (total_q, H, d), L (H, total_q) fp32.
    check_values: read cu_seqlens on the host and refuse bad ones (once,
    here; check_arguments says how)."""
    check_arguments(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, check_values)
    d = q.shape[2]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    for d_run in [d] + [m for m in (64, 128) if m > d]:
        pad = (0, d_run - d)
        try:
            o, lse = varlen_attention(*(F.pad(t, pad) if d_run > d else t for t in (q, k, v)), cu_seqlens_q,
                                      cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, left, right, None,
                                      deterministic)
        except ValueError as e:
            if not _is_unsupported(e):
                raise
            continue
        return (o[..., :d] if d_run > d else o), lse
    q, k, v, scale = flash_op.autocast_and_scale(q, k, v, scale, _fail)
    return _per_sequence(q, k, v, cu_seqlens_q, cu_seqlens_k, scale, left, right, deterministic)


def gather_pages(cache, block_table, cu_seqlens_k, start=None, batch_index=None):
    """The keys (or values) of each sequence from a cache, packed
    (total_k, H_kv, d) as cu_seqlens_k lays them out: sequence b's j-th
    key is cache position start[b] + j (start: None for 0) of its pages,
    block_table (B, pages_per_seq) int32 into cache (num_pages, page_size,
    H_kv, d); without block_table, of cache[batch_index[b]] (B_cache,
    seqlen_cache, H_kv, d), batch_index None for b. An index copy
    (differentiable); the total is read on the host."""
    B = cu_seqlens_k.shape[0] - 1
    dev = cache.device
    cu = cu_seqlens_k.to(device=dev, dtype=torch.long)
    total = int(cu[-1])
    seq = torch.repeat_interleave(torch.arange(B, device=dev), cu[1:] - cu[:-1], output_size=total)
    pos = torch.arange(total, device=dev) - cu[:-1][seq]
    if start is not None:
        pos = pos + start.to(device=dev, dtype=torch.long)[seq]
    if block_table is not None:
        page = cache.shape[1]
        return cache[block_table.to(device=dev, dtype=torch.long)[seq, pos // page], pos % page]
    rows = seq if batch_index is None else batch_index.to(device=dev, dtype=torch.long)[seq]
    return cache[rows, pos]
