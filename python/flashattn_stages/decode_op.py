"""decode_op.py -- FlashAttention's flash_attn_with_kvcache over stage 8's decode
kernels, and those kernels as an entry of their own (kvcache_decode).

    from flashattn_stages import flash_attn_with_kvcache
    out = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens,
                                  rotary_cos=cos, rotary_sin=sin, causal=True)

flash_attn_with_kvcache takes FlashAttention 2's arguments (release 2.8.3),
names, order and defaults: q (B, seqlen_q, H, d); k_cache, v_cache (B_cache,
seqlen_cache, H_kv, d), or paged (num_pages, page_size, H_kv, d) with
block_table (B, pages_per_seq) int32; k, v (B, seqlen_new, H_kv, d) written
into the cache in place at rows cache_seqlens[b] .. + seqlen_new - 1 (of
cache row cache_batch_idx[b], or through block_table), after rotary
embedding of k when rotary_cos, rotary_sin (seqlen_ro, rotary_dim / 2) are
given: k at positions cache_seqlens[b] + i; q likewise where causal or a
window is set, else every query at cache_seqlens[b]; pairs (0, 1), (2, 3)
... when rotary_interleaved, else (i, i + rotary_dim / 2); the last d -
rotary_dim columns untouched. The keys of sequence b are then cache rows
cache_leftpad[b] (0 without it) .. cache_seqlens[b] + seqlen_new - 1, masked
as their own problem (core/mask.h, aligned bottom-right; causal sets
window right = 0). cache_seqlens: an int, a (B,) int32 tensor, or None (the
whole cache). out (B, seqlen_q, H, d); with return_softmax_lse also
softmax_lse (B, H, seqlen_q) fp32, -inf for a row that sees no key (its out
row 0). softcap > 0 and alibi_slopes are refused in one line.

How: the rotary embedding and the cache update are torch operations here
(exact: the same arithmetic as a reference in fp32, rounded once to the
cache's dtype). The attention runs the decode kernels (kvcache_decode)
where they take the problem as it stands (fa_decode_check: fp16, bf16, d 64
or 128, at most 16 query rows, pages of 16 to 256 keys, no leftpad or batch
index); any other problem has its keys gathered packed and runs through
the varlen entry (varlen_op.varlen_any: every head dimension and dtype the
dense passes take), without autograd.

kvcache_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, ...)
is the decode kernels alone: shapes as above but seqlen_q 1 to 16, fp16
and bf16, d = 64 or 128, a paged cache with pages a power of two in [16,
256] or, without block_table, (B, seqlen_cache, H_kv, d) with seqlen_cache a
multiple of 16 (pages of the largest such power of two that divides it, in
order). num_splits=0 takes the split count of decode_num_splits
(core/decode_plan.h) for this GPU's SMs and the kernel's CTAs per SM; 1
runs without the combine.

How: the kernels of kernels/stage8_decode.cu in build/libfa_gpu.so, loaded
once by fa.library() (one handle for every entry), called
through ctypes on torch's current stream with the tensors' device pointers
and a workspace for the partials (dispatch.workspace, kept per stream).
Per signature (shapes, dtype, pages, mask, scale, split count, device) the
problem's structure, the split count and the library's check are made once
(dispatch.plan_cache); one query row needs no layout copy (q and O
(B, 1, H, d) hold the kernel's (B, H, 1, d) as they are), and without k, v
the caller's cache_seqlens reaches the kernel as it is. A serving loop's
step -- one query row, contiguous tensors, nothing appended or rotated, no
check_tables -- whose signature (the types, shapes, strides, dtypes and
devices of q, the caches, cache_seqlens and block_table; the scale, mask
and split count) the kernels took before goes straight to the launch: two
outputs allocated, the pointers written, one ctypes call. Every check of
the full path reads only that signature, so it holds again. Inference
only: no autograd (decoding needs none).

Errors: a ValueError of one line starting "flash_attn_with_kvcache:" naming
what is wrong (shape, dtype, page size, a block-table entry outside the pool,
a cache length past the table's capacity, a split count out of range),
raised before any launch. Neither entry reads device memory on the host by
default, so a step can be captured in a CUDA graph and replayed with new
q, k, v and cache_seqlens: the split count comes from the cache's capacity,
and cache_seqlens, cache_leftpad, cache_batch_idx, the block table and the
rotary positions are the caller's guarantee, as in FlashAttention.
check_tables=True (a keyword of ours, after FlashAttention's arguments)
reads them on the host first -- one synchronization a call -- and refuses
the first that does not fit the cache in one line. fa.FaError when a CUDA
call fails.
"""
import contextlib
import ctypes
import math

from . import dispatch, fa, flash_op, varlen_op   # dispatch first: it says in one line when torch is missing

import torch

NAME = "flash_attn_with_kvcache"
DTYPES = {torch.float16: fa.FP16, torch.bfloat16: fa.BF16}
MAX_SPLITS = 128      # DECODE_MAX_SPLITS
PAGE_SIZES = (256, 128, 64, 32, 16)


DecodeParams, DecodePtrs = fa.DecodeParams, fa.DecodePtrs


def _new_output(shape, dtype, device):
    return flash_op.new_output(shape, dtype, device)


def library():
    """The library (fa.library(), the handle every entry shares), which must carry the decode kernels."""
    lib = fa.library()
    if not lib.has_decode:
        _fail(f"{fa.library_path()} has no decode kernels (rebuild it: make build/libfa_gpu.so)")
    return lib


def _fail(msg):
    raise ValueError(f"{NAME}: {msg}")


def _as_pages(k_cache, v_cache, block_table):
    """(k_pages, v_pages, block_table) in the paged layout."""
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        _fail(f"k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)}: expected two equal 4-d shapes")
    if block_table is not None:
        return k_cache, v_cache, block_table
    B, S = k_cache.shape[0], k_cache.shape[1]
    page = next((p for p in PAGE_SIZES if S % p == 0), None)
    if page is None:
        _fail(f"k_cache of {S} keys per sequence and no block_table: {S} must be a multiple of 16 "
              "(pages of 16 to 256 keys)")
    n = S // page
    kc = k_cache.contiguous().view(B * n, page, *k_cache.shape[2:])
    vc = v_cache.contiguous().view(B * n, page, *v_cache.shape[2:])
    return kc, vc, _dense_table(B, n, k_cache.device)


_TABLES = {}   # (B, pages per sequence, device) -> the dense cache's block table, pages in order


def _dense_table(B, n, device):
    """The block table (B, n) int32 of a dense cache seen as pages in
    order: made once per shape and device (an arange per call cost a launch),
    but made afresh while a CUDA graph is captured (the graph's memory)."""
    key = (B, n, device)
    t = _TABLES.get(key)
    if t is None:
        t = torch.arange(B * n, dtype=torch.int32, device=device).view(B, n)
        if not torch.cuda.is_current_stream_capturing():
            if len(_TABLES) >= 64:
                _TABLES.clear()
            _TABLES[key] = t
    return t


class _Plan:
    """One decode signature's cached call: the problem (DecodeParams), the
    split count, the workspace's bytes, the pointers' structure (written
    per call), and whether the kernels take it (error: the library's reason,
    None when they do)."""
    __slots__ = ("params", "p_ref", "ptrs", "x_ref", "dtype_code", "num_splits", "ws_bytes", "error")


def _check_splits(num_splits):
    """One line unless num_splits is 0 (the rule) or a count the kernels take."""
    if not isinstance(num_splits, int) or not 0 <= num_splits <= MAX_SPLITS:
        _fail(f"num_splits={num_splits!r}: expected 0 (the rule) or 1 to {MAX_SPLITS}")


def _plan(q, H_kv, page, pages_per_seq, num_pages, scale, left, right, num_splits):
    """The plan of q (B, seqlen_q, H, d) over a paged cache, built once per
    signature in this thread's plan cache (dispatch.plan_cache): the split
    rule (num_splits = 0) at the table's capacity for this GPU's SMs, and
    fa_decode_check at that count, so that a call repeats neither."""
    B, Sq, H, d = q.shape
    index = q.get_device()
    key = (q.dtype, B, Sq, H, d, H_kv, page, pages_per_seq, num_pages, scale, left, right, num_splits, index)
    plans = dispatch.plan_cache("decode")
    pl = plans.get(key)
    if pl is None:
        lib = library()
        pl = _Plan()
        pl.dtype_code = DTYPES[q.dtype]
        pl.params = DecodeParams(B, H, H_kv, d, Sq, page, pages_per_seq, num_pages, scale, left, right)
        pl.p_ref = ctypes.byref(pl.params)
        pl.ptrs = DecodePtrs()
        pl.x_ref = ctypes.byref(pl.ptrs)
        if num_splits == 0:
            sms = torch.cuda.get_device_properties(index).multi_processor_count
            # the rule at the table's capacity, known on the host: reading the
            # lengths would synchronize and break CUDA-graph capture
            num_splits = lib.fa_decode_num_splits(pl.dtype_code, pl.p_ref, pages_per_seq * page if B else 0, sms)
        pl.num_splits = num_splits
        pl.error = None   # the library's check covers the rule's count too
        if lib.fa_decode_check(pl.dtype_code, pl.p_ref, num_splits) != fa.OK:
            pl.error = fa.error_text(lib)
        pl.ws_bytes = lib.fa_decode_workspace_bytes(pl.p_ref, num_splits) if pl.error is None else 0
        plans[key] = pl
    return pl


def kvcache_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, softmax_scale=None, causal=False,
                   window_size=(-1, -1), num_splits=0, return_softmax_lse=False, check_tables=False):
    """One decoding step of the decode kernels against a (paged) KV cache;
    see the module's text for shapes and rules."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or not t.is_cuda:
            _fail(f"{name} must be a CUDA tensor")
    if q.dtype not in DTYPES or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        _fail(f"dtypes q {q.dtype}, k_cache {k_cache.dtype}, v_cache {v_cache.dtype}: expected one of "
              "float16, bfloat16 for all three")
    if q.dim() != 4:
        _fail(f"q {tuple(q.shape)}: expected (B, seqlen_q, H, d)")
    B, Sq, H, d = q.shape
    kc, vc, table = _as_pages(k_cache, v_cache, block_table)
    num_pages, page, H_kv, dk = kc.shape
    if dk != d:
        _fail(f"k_cache head dimension {dk} != q's {d}")
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or table.shape[0] != B or \
            table.dtype != torch.int32 or table.device != q.device:
        _fail(f"block_table: expected a ({B}, pages_per_seq) int32 tensor on {q.device}")
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=q.device)
    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.shape != (B,) or \
            cache_seqlens.dtype != torch.int32 or cache_seqlens.device != q.device:
        _fail(f"cache_seqlens: expected an int or a ({B},) int32 tensor on {q.device}")
    left, right = flash_op.window_of(causal, window_size)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    _check_splits(num_splits)
    if check_tables:
        cap = table.shape[1] * page
        lens = cache_seqlens.cpu()
        bad = ((lens < 0) | (lens > cap)).nonzero()
        if len(bad):
            b = int(bad[0])
            _fail(f"cache_seqlens[{b}] = {int(lens[b])}: must be in [0, {cap}] ({table.shape[1]} pages of {page} keys)")
        _check_pages(table, lens, page, num_pages)
    pl = _plan(q, H_kv, page, table.shape[1], num_pages, scale, left, right, num_splits)
    if pl.error is not None:
        _fail(pl.error)
    kc, vc = kc.contiguous(), vc.contiguous()
    table, cache_seqlens = table.contiguous(), cache_seqlens.contiguous()
    # one query row: q (B, 1, H, d) and O (B, 1, H, d) contiguous hold the
    # kernel's (B, H, 1, d) layout as they are, no copy in or out
    one_row = Sq == 1 and q.is_contiguous()
    qh = q if one_row else q.transpose(1, 2).contiguous()      # (B, H, seqlen_q, d) in memory
    o = _new_output((B, Sq, H, d) if one_row else (B, H, Sq, d), q.dtype, q.device)
    lse = _new_output((B, H, Sq), torch.float32, q.device)
    _launch(pl, q.get_device(), qh, kc, vc, table, cache_seqlens, o, lse)
    out = o if one_row else o.transpose(1, 2).contiguous()    # (B, seqlen_q, H, d)
    return (out, lse) if return_softmax_lse else out


def _launch(pl, index, qh, kc, vc, table, cache_seqlens, o, lse):
    """fa_decode of plan pl on GPU `index`, torch's current stream: the
    tensors' pointers (qh, o (B, H, seqlen_q, d); kc, vc the pages; table,
    cache_seqlens int32; lse (B, H, seqlen_q)) written into the plan's
    structure, the workspace of the plan's size; FaError when it fails."""
    stream = dispatch.raw_stream(index)
    x = pl.ptrs
    x.q, x.k_cache, x.v_cache, x.block_table, x.cache_seqlens = (qh.data_ptr(), kc.data_ptr(), vc.data_ptr(),
                                                                 table.data_ptr(), cache_seqlens.data_ptr())
    x.o, x.softmax_lse = o.data_ptr(), lse.data_ptr()
    if pl.ws_bytes:
        x.workspace, x.workspace_bytes = dispatch.workspace(pl.ws_bytes, index, stream).data_ptr(), pl.ws_bytes
    else:
        x.workspace, x.workspace_bytes = None, 0
    lib = fa.library()
    fa.check(lib, dispatch.on_device(index, lib.fa_decode, pl.dtype_code, pl.p_ref, pl.num_splits, pl.x_ref, stream))


def check_block_table(block_table, B, page_size, num_pages, cu_seqlens_k=None, lens=None):
    """One line (ValueError) unless block_table is a (B, pages_per_seq)
    int32 CUDA tensor whose entries for each sequence's keys (lens, or the
    differences of cu_seqlens_k) are pages in [0, num_pages) and fit its
    row. Reads the table and the lengths on the host."""
    if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 or block_table.shape[0] != B \
            or block_table.dtype != torch.int32 or not block_table.is_cuda:
        _fail(f"block_table: expected a ({B}, pages_per_seq) int32 CUDA tensor")
    if lens is None:
        lens = cu_seqlens_k.long().diff()
    lens = lens.cpu().long()
    cap = block_table.shape[1] * page_size
    bad = (lens > cap).nonzero()
    if len(bad):
        b = int(bad[0])
        _fail(f"sequence {b} has {int(lens[b])} keys: past block_table's {block_table.shape[1]} pages "
              f"of {page_size}")
    _check_pages(block_table, lens, page_size, num_pages)


def _check_pages(table, lens, page_size, num_pages):
    """One line unless every entry of table (B, pages_per_seq) that holds
    keys of its sequence (lens (B,) on the host) is a page in [0, num_pages)."""
    t = table.cpu()
    used = torch.arange(t.shape[1])[None, :] < ((lens + page_size - 1) // page_size)[:, None]
    bad = (((t < 0) | (t >= num_pages)) & used).nonzero()
    if len(bad):
        b, j = (int(x) for x in bad[0])
        _fail(f"block_table[{b}][{j}] = {int(t[b, j])}: must be a page in [0, {num_pages})")


def apply_rotary(x, cos, sin, offsets, interleaved, per_row=True, check=False):
    """x (B, S, heads, d) with its first rotary_dim = 2 * cos.shape[1]
    columns rotated by the angles of rows offsets[b] + i of cos, sin
    (seqlen_ro, rotary_dim / 2) (per_row False: row offsets[b] for every i):
    pairs (2j, 2j + 1) when interleaved, else (j, j + rotary_dim / 2);
    x1' = x1 cos - x2 sin, x2' = x1 sin + x2 cos in fp32, rounded once to
    x's dtype. The other columns are x's. check: first read the positions
    on the host (one synchronization) and refuse one past cos's rows."""
    S, half = x.shape[1], cos.shape[1]
    steps = torch.arange(S, device=x.device) if per_row else torch.zeros(S, dtype=torch.long, device=x.device)
    pos = offsets.to(device=x.device, dtype=torch.long)[:, None] + steps[None, :]
    if check and pos.numel() and int(pos.max()) >= cos.shape[0]:
        _fail(f"rotary_cos has {cos.shape[0]} rows: position {int(pos.max())} needs more")
    c = cos.float()[pos][:, :, None, :]                           # (B, S, 1, rotary_dim / 2)
    sn = sin.float()[pos][:, :, None, :]
    xr = x[..., :2 * half].float()
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([x1 * c - x2 * sn, x1 * sn + x2 * c], dim=-1).flatten(-2)
    else:
        x1, x2 = xr[..., :half], xr[..., half:]
        out = torch.cat([x1 * c - x2 * sn, x1 * sn + x2 * c], dim=-1)
    return torch.cat([out.to(x.dtype), x[..., 2 * half:]], dim=-1)


def _append(k_cache, v_cache, k, v, lens, block_table, cache_batch_idx):
    """k, v (B, seqlen_new, H_kv, d) written into the caches in place at
    positions lens[b] .. lens[b] + seqlen_new - 1 of sequence b: through
    block_table's pages, or in cache row cache_batch_idx[b] (b without it)."""
    B, S_new = k.shape[0], k.shape[1]
    dev = k.device
    b_of = torch.repeat_interleave(torch.arange(B, device=dev), S_new)
    pos = lens.to(dev)[b_of] + torch.arange(S_new, device=dev).repeat(B)
    if block_table is not None:
        page = k_cache.shape[1]
        idx = (block_table.long()[b_of, pos // page], pos % page)
    else:
        idx = (b_of if cache_batch_idx is None else cache_batch_idx.long()[b_of], pos)
    k_cache.index_put_(idx, k.reshape(B * S_new, *k.shape[2:]))
    v_cache.index_put_(idx, v.reshape(B * S_new, *v.shape[2:]))


def _attend_packed(q, k_cache, v_cache, start, total, block_table, cache_batch_idx, scale, left, right):
    """out (B, seqlen_q, H, d), lse (B, H, seqlen_q) of q over the keys
    start[b] .. total[b] - 1 of each sequence's cache, gathered packed
    (varlen_op.gather_pages) and run by the varlen entry (varlen_any)."""
    B, Sq, H, d = q.shape
    dev = q.device
    n = total - start
    cu_k = torch.zeros(B + 1, dtype=torch.int32, device=dev)
    cu_k[1:] = torch.cumsum(n, 0)
    kp = varlen_op.gather_pages(k_cache, block_table, cu_k, start, cache_batch_idx)
    vp = varlen_op.gather_pages(v_cache, block_table, cu_k, start, cache_batch_idx)
    cu_q = torch.arange(B + 1, dtype=torch.int32, device=dev) * Sq
    o, L = varlen_op.varlen_any(q.reshape(B * Sq, H, d), kp, vp, cu_q, cu_k, Sq, int(n.max()) if B else 0,
                                scale, left, right)
    return o.view(B, Sq, H, d), L.view(H, B, Sq).permute(1, 0, 2).contiguous()


def _decode_takes(q, page, H_kv, pages_per_seq, num_pages, scale, left, right, num_splits, leftpad, batch_idx):
    """True when the decode kernels take this problem as it stands: the
    layout, and fa_decode_check through the signature's cached plan."""
    if not fa.library().has_decode or q.dtype not in DTYPES or leftpad is not None or batch_idx is not None:
        return False
    if page is None or page not in PAGE_SIZES:
        return False
    return _plan(q, H_kv, page, pages_per_seq, num_pages, scale, left, right, num_splits).error is None


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False,
                            *, check_tables=False):
    """FlashAttention's flash_attn_with_kvcache: append k, v (rotated) to the
    cache in place, then attention of q (rotated) over each sequence's keys;
    see the module's text for shapes and rules."""
    step_key = None
    if k is None and rotary_cos is None and rotary_sin is None and cache_batch_idx is None and \
            cache_leftpad is None and alibi_slopes is None and not check_tables and _is_zero(softcap):
        step_key = _step_key(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal, window_size,
                             num_splits)
        if step_key is not None:
            st = dispatch.plan_cache("decode_step").get(step_key)
            if st is not None:
                return _run_step(st, q, k_cache, v_cache, cache_seqlens, block_table, return_softmax_lse)
    from .flash_attn_interface import check_extras   # (that module imports this one)
    check_extras(NAME, 0.0, softcap, alibi_slopes)
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or not t.is_cuda or t.dim() != 4:
            _fail(f"{name} must be a 4-d CUDA tensor")
    if k_cache.shape != v_cache.shape or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        _fail(f"k_cache {tuple(k_cache.shape)} {k_cache.dtype}, v_cache {tuple(v_cache.shape)} {v_cache.dtype}: "
              f"expected one shape and q's dtype {q.dtype}")
    B, Sq, H, d = q.shape
    H_kv = k_cache.shape[2]
    if k_cache.shape[3] != d:
        _fail(f"k_cache head dimension {k_cache.shape[3]} != q's {d}")
    if H_kv < 1 or H % H_kv:
        _fail(f"q has {H} heads, k_cache {H_kv}: the query heads must be a multiple of the key/value heads")
    if (k is None) != (v is None):
        _fail("k and v: give both or neither")
    _check_splits(num_splits)
    dev = q.device
    paged = block_table is not None
    if paged:
        num_pages, page = k_cache.shape[0], k_cache.shape[1]
        if cache_batch_idx is not None:
            _fail("cache_batch_idx with block_table: the table names each sequence's pages, give one or the other")
        cap = block_table.shape[1] * page if isinstance(block_table, torch.Tensor) and block_table.dim() == 2 else 0
    else:
        cap = k_cache.shape[1]
    if cache_seqlens is None:
        cache_seqlens = cap
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=dev)
    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.shape != (B,) or \
            cache_seqlens.dtype != torch.int32 or cache_seqlens.device != dev:
        _fail(f"cache_seqlens: expected an int or a ({B},) int32 tensor on {dev}")
    for name, t in (("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad)):
        if t is not None and (not isinstance(t, torch.Tensor) or t.shape != (B,) or t.dtype != torch.int32
                              or t.device != dev):
            _fail(f"{name}: expected a ({B},) int32 tensor on {dev}")
    S_new = 0
    if k is not None:
        if k.dim() != 4 or k.shape != v.shape or k.shape[0] != B or k.shape[2:] != k_cache.shape[2:] \
                or k.dtype != q.dtype or v.dtype != q.dtype:
            _fail(f"k {tuple(k.shape)}, v {tuple(v.shape)}: expected ({B}, seqlen_new, {H_kv}, {d}) in {q.dtype}")
        S_new = k.shape[1]
    left, right = flash_op.window_of(causal, window_size)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)
    # the keys of each sequence once k, v are appended (int32; the caller's
    # tensor itself when nothing is appended: no launch)
    total = cache_seqlens if S_new == 0 else cache_seqlens + S_new
    if check_tables:
        _check_kvcache_tables(total, _starts(cache_leftpad, total), S_new, cap, k_cache, block_table,
                              cache_batch_idx)
    if rotary_cos is not None or rotary_sin is not None:
        if rotary_cos is None or rotary_sin is None or rotary_cos.shape != rotary_sin.shape \
                or rotary_cos.dim() != 2 or 2 * rotary_cos.shape[1] > d:
            _fail("rotary_cos, rotary_sin: expected two (seqlen_ro, rotary_dim / 2) tensors, rotary_dim <= d")
        per_row = causal or (left, right) != (-1, -1)
        q = apply_rotary(q, rotary_cos, rotary_sin, cache_seqlens, rotary_interleaved, per_row, check_tables)
        if k is not None:
            k = apply_rotary(k, rotary_cos, rotary_sin, cache_seqlens, rotary_interleaved, check=check_tables)
    with torch.no_grad():
        if k is not None:
            _append(k_cache, v_cache, k, v, cache_seqlens, block_table, cache_batch_idx)
        if not paged and k_cache.shape[0] == B and cap % 16 == 0:
            page_dense = next(p for p in PAGE_SIZES if cap % p == 0)
            takes = _decode_takes(q, page_dense, H_kv, cap // page_dense, B * (cap // page_dense), scale,
                                  left, right, num_splits, cache_leftpad, cache_batch_idx)
        elif paged:
            takes = _decode_takes(q, page, H_kv, block_table.shape[1], num_pages, scale, left, right, num_splits,
                                  cache_leftpad, None)
        else:
            takes = False
        if takes:
            out, lse = kvcache_decode(q, k_cache, v_cache, total, block_table, scale, causal, (left, right),
                                      num_splits, True)
            if step_key is not None:
                _remember_step(step_key, q, k_cache, v_cache, total, block_table, scale, left, right, num_splits)
        else:
            out, lse = _attend_packed(q, k_cache, v_cache, _starts(cache_leftpad, total), total, block_table,
                                      cache_batch_idx, scale, left, right)
    return (out, lse) if return_softmax_lse else out


class _Step:
    """A decoding step's signature that the kernels took as it stands
    (one query row, every tensor contiguous, nothing appended or rotated):
    the plan, the device, the outputs' shapes, and for a dense cache the
    (B, pages_per_seq) of its block table."""
    __slots__ = ("pl", "index", "dtype", "device", "out_shape", "lse_shape", "dense")


def _is_zero(x):
    return isinstance(x, (int, float)) and x == 0


def _step_key(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal, window_size, num_splits):
    """The signature of a step: every property of its tensors and arguments
    that flash_attn_with_kvcache's checks and choices read (types, shapes,
    strides, dtypes, devices, the mask, the scale, the split count), none
    they do not (the values); None for arguments of a kind no signature
    holds (a list for window_size, a tensor for the scale). The types are in
    it, so an object that only looks like a tensor never matches a step the
    checks took. Written out, not looped: it runs on every step."""
    if type(window_size) is not tuple or type(causal) is not bool or type(num_splits) is not int or \
            not (softmax_scale is None or type(softmax_scale) is float):
        return None
    t = block_table
    try:
        return (type(q), q.shape, q.stride(), q.dtype, q.device,
                type(k_cache), k_cache.shape, k_cache.stride(), k_cache.dtype, k_cache.device,
                type(v_cache), v_cache.shape, v_cache.stride(), v_cache.dtype, v_cache.device,
                type(cache_seqlens), cache_seqlens.shape, cache_seqlens.stride(), cache_seqlens.dtype,
                cache_seqlens.device,
                None if t is None else (type(t), t.shape, t.stride(), t.dtype, t.device),
                softmax_scale, causal, window_size, num_splits)
    except (AttributeError, TypeError):
        return None


def _remember_step(step_key, q, k_cache, v_cache, lens, block_table, scale, left, right, num_splits):
    """Keep the step's plan under its signature when kvcache_decode took its
    tensors as they are (no copy, no table made but a dense cache's), so
    that the next call with this signature goes straight to the launch."""
    B, Sq, H, d = q.shape
    tensors = (q, k_cache, v_cache, lens) + (() if block_table is None else (block_table,))
    if Sq != 1 or not all(t.is_contiguous() for t in tensors):
        return
    st = _Step()
    if block_table is None:
        cap = k_cache.shape[1]
        page = next(p for p in PAGE_SIZES if cap % p == 0)
        pps, num_pages, st.dense = cap // page, B * (cap // page), (B, cap // page)
    else:
        page, pps, num_pages, st.dense = k_cache.shape[1], block_table.shape[1], k_cache.shape[0], None
    st.pl = _plan(q, k_cache.shape[2], page, pps, num_pages, scale, left, right, num_splits)
    st.index, st.dtype, st.device = q.get_device(), q.dtype, q.device
    st.out_shape, st.lse_shape = (B, 1, H, d), (B, H, 1)
    dispatch.plan_cache("decode_step")[step_key] = st


def _run_step(st, q, k_cache, v_cache, cache_seqlens, block_table, return_softmax_lse):
    """A step whose signature was taken before: the outputs, the pointers,
    the launch, and nothing else on the host (every check of the first call
    holds again: the signature is what they read)."""
    table = block_table if st.dense is None else _dense_table(st.dense[0], st.dense[1], st.device)
    o = _new_output(st.out_shape, st.dtype, st.device)
    lse = _new_output(st.lse_shape, torch.float32, st.device)
    _launch(st.pl, st.index, q, k_cache, v_cache, table, cache_seqlens, o, lse)
    return (o, lse) if return_softmax_lse else o


def _starts(cache_leftpad, total):
    """The first key of each sequence (int64): cache_leftpad, or 0."""
    return cache_leftpad.long() if cache_leftpad is not None else torch.zeros_like(total, dtype=torch.long)


def _check_kvcache_tables(total, start, S_new, cap, k_cache, block_table, cache_batch_idx):
    """flash_attn_with_kvcache's check_tables: the lengths, left pads, batch
    indices and block table read on the host (one synchronization) and the
    first entry that does not fit the cache refused in one line."""
    host_total, host_start = total.cpu(), start.cpu()
    bad = ((host_total > cap) | (host_start < 0) | (host_start > host_total - S_new) |
           (host_total < S_new)).nonzero()
    if len(bad):
        b = int(bad[0])
        _fail(f"sequence {b}: cache_leftpad {int(host_start[b])}, cache_seqlens {int(host_total[b]) - S_new} "
              f"and {S_new} new keys do not fit a cache of {cap} (0 <= leftpad <= cache_seqlens, "
              f"cache_seqlens + seqlen_new <= {cap})")
    if cache_batch_idx is not None:
        rows = cache_batch_idx.cpu()
        if bool(((rows < 0) | (rows >= k_cache.shape[0])).any()):
            _fail(f"cache_batch_idx: entries must be in [0, {k_cache.shape[0]})")
    if block_table is not None:
        check_block_table(block_table, len(host_total), k_cache.shape[1], k_cache.shape[0], lens=host_total)


def dense_from_pages(cache, block_table, b, length):
    """(length, H_kv, d): the keys (or values) of sequence b gathered from its pages."""
    page = cache.shape[1]
    n = (length + page - 1) // page
    pages = cache[block_table[b, :n].long()]                  # (n, page, H_kv, d)
    return pages.reshape(n * page, *cache.shape[2:])[:length]


def reference_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale=None, causal=False,
                      window_size=(-1, -1), dtype=torch.float64):
    """The same step by PyTorch's SDPA math, per sequence, in `dtype` (float64: the
    reference; q's dtype: PyTorch's own error in that dtype), on the dense K, V
    gathered from the pages, with core/mask.h's mask (flash_op.visible_mask).
    Returns out (B, seqlen_q, H, d) in `dtype` and lse (B, H, seqlen_q) float64."""
    import torch.nn.functional as F
    B, Sq, H, d = q.shape
    H_kv = k_cache.shape[2]
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    out = torch.zeros(B, Sq, H, d, dtype=dtype, device=q.device)
    lse = torch.full((B, H, Sq), -math.inf, dtype=torch.float64, device=q.device)
    lens = cache_seqlens.tolist()
    for b in range(B):
        n = lens[b]
        if n == 0:
            continue
        k = dense_from_pages(k_cache, block_table, b, n).transpose(0, 1).to(dtype)   # (H_kv, n, d)
        v = dense_from_pages(v_cache, block_table, b, n).transpose(0, 1).to(dtype)
        k = k.repeat_interleave(H // H_kv, dim=0)
        v = v.repeat_interleave(H // H_kv, dim=0)
        qb = q[b].transpose(0, 1).to(dtype)                                          # (H, Sq, d)
        m = flash_op.visible_mask(Sq, n, causal, window_size, device=q.device)
        rows = m.any(dim=1)
        s = (qb.double() @ k.double().transpose(1, 2)) * scale
        s = s.masked_fill(~m, -math.inf)
        lse[b] = torch.where(rows, torch.logsumexp(s, dim=-1), torch.tensor(-math.inf, device=q.device,
                                                                           dtype=torch.float64))
        # float64 runs only in the math backend; another dtype takes whichever
        # fused backend SDPA picks for a masked problem (PyTorch's own kernel)
        ctx = (torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH) if dtype == torch.float64
               else contextlib.nullcontext())
        with ctx:
            o = F.scaled_dot_product_attention(qb[None], k[None], v[None], attn_mask=m, scale=scale)[0]
        o = torch.where(rows[None, :, None], o, torch.zeros((), dtype=dtype, device=q.device))
        out[b] = o.transpose(0, 1)
    return out, lse
