"""src/cpu/reference/attention_ref.py -- NumPy versions of the CPU stages' algorithms.

These exist to check the C code from the outside, never to replace it: a
second implementation, written with NumPy's own matrix products and reductions
(so with a different order of rounding), of

  naive_forward / naive_backward   stage 1: S and P materialized
  online_softmax_weighted_sum      stage 2: one streaming pass, O(d) state
  tiled_forward / tiled_backward   stage 3: Br x Bc tiles, L = m + log l, P = exp(S - L)

Shapes, one head: Q, dO (seqlen_q, d) float64; K, V (seqlen_k, d); S, P
(seqlen_q, seqlen_k); L (seqlen_q,). `window` is FlashAttention's
(window_size_left, window_size_right), -1 unbounded, causal = (-1, 0), with
the last query aligned to the last key. Which keys a query sees is not
written here: mask() and the block ranges come from core/mask.h itself,
compiled into build/libfa_mask.so (make build/libfa_mask.so) and called
through ctypes, so the NumPy reference and the C stages share one definition.
A query row that sees no key gets O = 0, L = -inf and gives nothing to the
gradients: no NaN anywhere. tests/test_reference.py runs the C programs on
the same .npy inputs and compares.
"""
import ctypes
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NO_MASK = (-1, -1)
CAUSAL = (-1, 0)
_lib = None


class AttnParams(ctypes.Structure):
    """attn_params of core/attn_params.h, the argument of fa_mask_fill (the
    mask ABI that libfa_mask.so and libfa_gpu.so share)."""
    _fields_ = [(n, ctypes.c_int) for n in ("B", "H", "H_kv", "seqlen_q", "seqlen_k", "d")] + \
        [("softmax_scale", ctypes.c_double)] + \
        [(n, ctypes.c_int) for n in ("window_size_left", "window_size_right")]


def _mask_lib():
    """build/libfa_mask.so (or $FA_MASK_LIB), loaded once."""
    global _lib
    if _lib is None:
        path = os.environ.get("FA_MASK_LIB") or os.path.join(ROOT, "build", "libfa_mask.so")
        if not os.path.exists(path):
            raise RuntimeError(f"{path} is missing: run `make build/libfa_mask.so` (core/mask.h as a library)")
        lib = ctypes.CDLL(path)
        i, p = ctypes.c_int, ctypes.POINTER(ctypes.c_int)
        lib.fa_mask_fill.argtypes = [ctypes.POINTER(AttnParams), ctypes.c_void_p]
        lib.fa_mask_fill.restype = i
        lib.fa_mask_key_blocks.argtypes = [i, i, i, i, i, i, i, p, p]
        lib.fa_mask_key_blocks.restype = i
        lib.fa_mask_query_blocks.argtypes = [i, i, i, i, i, i, i, p, p]
        lib.fa_mask_query_blocks.restype = i
        lib.fa_mask_tiles_visited.argtypes = [i, i, i, i, i, i]
        lib.fa_mask_tiles_visited.restype = ctypes.c_int64
        _lib = lib
    return _lib


def mask(seqlen_q, seqlen_k, window=NO_MASK):
    """(seqlen_q, seqlen_k) boolean: True where key j is visible to query i
    (mask_visible of core/mask.h)."""
    out = np.zeros((seqlen_q, seqlen_k), dtype=np.uint8)
    p = AttnParams(1, 1, 1, seqlen_q, seqlen_k, 1, 1.0, window[0], window[1])
    if _mask_lib().fa_mask_fill(ctypes.byref(p), out.ctypes.data) != 0:
        raise ValueError(f"mask of seqlen_q {seqlen_q}, seqlen_k {seqlen_k}, window {window}: malformed")
    return out.astype(bool)


def key_blocks(seqlen_q, seqlen_k, window, i0, i1, Bc):
    """The key blocks (size Bc) that query rows i0..i1-1 visit (mask_key_blocks)."""
    b, e = ctypes.c_int(), ctypes.c_int()
    _mask_lib().fa_mask_key_blocks(seqlen_q, seqlen_k, window[0], window[1], i0, i1, Bc,
                                   ctypes.byref(b), ctypes.byref(e))
    return range(b.value, e.value)


def query_blocks(seqlen_q, seqlen_k, window, j0, j1, Br):
    """The query blocks (size Br) that see a key of j0..j1-1 (mask_query_blocks)."""
    b, e = ctypes.c_int(), ctypes.c_int()
    _mask_lib().fa_mask_query_blocks(seqlen_q, seqlen_k, window[0], window[1], j0, j1, Br,
                                     ctypes.byref(b), ctypes.byref(e))
    return range(b.value, e.value)


def tiles_visited(seqlen_q, seqlen_k, window, Br, Bc):
    return int(_mask_lib().fa_mask_tiles_visited(seqlen_q, seqlen_k, window[0], window[1], Br, Bc))


def naive_forward(Q, K, V, softmax_scale, window=NO_MASK):
    """Stage 1 forward. Returns O (Sq, d), L (Sq,), P (Sq, Sk)."""
    S = np.where(mask(len(Q), len(K), window), (Q @ K.T) * softmax_scale, -np.inf)
    m = S.max(axis=1, keepdims=True)
    E = np.exp(S - np.where(np.isneginf(m), 0.0, m))    # a row of -inf only: E = 0, not NaN
    l = E.sum(axis=1, keepdims=True)
    P = E / np.where(l == 0.0, 1.0, l)
    L = np.where(l == 0.0, -np.inf, m + np.log(np.where(l == 0.0, 1.0, l)))
    return P @ V, L[:, 0], P


def naive_backward(Q, K, V, O, P, dO, softmax_scale):
    """Stage 1 backward from the stored P. Returns dQ (Sq, d), dK, dV (Sk, d)."""
    dV = P.T @ dO
    dP = dO @ V.T
    D = np.sum(dO * O, axis=1, keepdims=True)
    dS = P * (dP - D)
    return (dS @ K) * softmax_scale, (dS.T @ Q) * softmax_scale, dV


def online_softmax_weighted_sum(x, V, block):
    """Stage 2: sum_i softmax(x)_i V[i] and logsumexp(x) in one pass over blocks."""
    m, l, o = -np.inf, 0.0, np.zeros(V.shape[1])
    for j0 in range(0, len(x), block):
        xb, Vb = x[j0:j0 + block], V[j0:j0 + block]
        m_new = max(m, xb.max())
        if m_new == -np.inf:
            continue
        alpha = np.exp(m - m_new)
        p = np.exp(xb - m_new)
        l = alpha * l + p.sum()
        o = alpha * o + p @ Vb
        m = m_new
    if l == 0.0:
        return np.zeros_like(o), -np.inf
    return o / l, m + np.log(l)


def tiled_forward(Q, K, V, softmax_scale, Br, Bc, window=NO_MASK):
    """Stage 3 forward, whole tiles at a time, visiting only the key blocks
    mask.h gives. Returns O (Sq, d), L (Sq,)."""
    Sq, Sk, d = len(Q), len(K), Q.shape[1]
    visible = mask(Sq, Sk, window)
    O, L = np.empty((Sq, d)), np.empty(Sq)
    for i0 in range(0, Sq, Br):
        Qi = Q[i0:i0 + Br]
        m = np.full(len(Qi), -np.inf)
        l = np.zeros(len(Qi))
        acc = np.zeros((len(Qi), d))
        for jb in key_blocks(Sq, Sk, window, i0, i0 + len(Qi), Bc):
            j0 = jb * Bc
            S = np.where(visible[i0:i0 + Br, j0:j0 + Bc], (Qi @ K[j0:j0 + Bc].T) * softmax_scale, -np.inf)
            m_new = np.maximum(m, S.max(axis=1))
            safe = np.where(np.isneginf(m_new), 0.0, m_new)     # only where S and m are all -inf
            alpha = np.where(np.isneginf(m), 0.0, np.exp(m - safe))
            P = np.exp(S - safe[:, None])
            l = alpha * l + P.sum(axis=1)
            acc = alpha[:, None] * acc + P @ V[j0:j0 + Bc]
            m = m_new        # the max itself, -inf while a row has seen nothing (not the guard's 0)
        empty = l == 0.0
        O[i0:i0 + Br] = np.where(empty[:, None], 0.0, acc / np.where(empty, 1.0, l)[:, None])
        L[i0:i0 + Br] = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, l)))
    return O, L


def tiled_backward(Q, K, V, O, L, dO, softmax_scale, Br, Bc, window=NO_MASK):
    """Stage 3 backward: key blocks outer, only the query blocks mask.h gives,
    P rebuilt as exp(S - L) (0 where hidden or L = -inf)."""
    Sq, Sk = len(Q), len(K)
    visible = mask(Sq, Sk, window)
    dQ, dK, dV = np.zeros(Q.shape), np.zeros(K.shape), np.zeros(V.shape)
    D = np.sum(dO * O, axis=1)
    for j0 in range(0, Sk, Bc):
        Kj, Vj = K[j0:j0 + Bc], V[j0:j0 + Bc]
        for ib in query_blocks(Sq, Sk, window, j0, j0 + len(Kj), Br):
            i0 = ib * Br
            Qi, dOi, Li = Q[i0:i0 + Br], dO[i0:i0 + Br], L[i0:i0 + Br, None]
            keep = visible[i0:i0 + Br, j0:j0 + Bc] & np.isfinite(Li)
            P = np.where(keep, np.exp((Qi @ Kj.T) * softmax_scale - np.where(keep, Li, 0.0)), 0.0)
            dV[j0:j0 + Bc] += P.T @ dOi
            dS = P * (dOi @ Vj.T - D[i0:i0 + Br, None])
            dK[j0:j0 + Bc] += (dS.T @ Qi) * softmax_scale
            dQ[i0:i0 + Br] += (dS @ Kj) * softmax_scale
    return dQ, dK, dV


def all_heads(fn, Q, K, V, dO, *a, **kw):
    """Run a one-head function fn(q, k, v, do, ...) -> (O, L, dQ, dK, dV) over
    (B, H, Sq, d) queries and (B, H_kv, Sk, d) keys: query head h reads key/value
    head h // (H // H_kv); dK, dV of a key/value head sum its group's."""
    B, H = Q.shape[:2]
    G = H // K.shape[1]
    O, L, dQ = np.empty(Q.shape), np.empty(Q.shape[:3]), np.empty(Q.shape)
    dK, dV = np.zeros(K.shape), np.zeros(V.shape)
    for b in range(B):
        for h in range(H):
            o, l, dq, dk, dv = fn(Q[b, h], K[b, h // G], V[b, h // G], dO[b, h], *a, **kw)
            O[b, h], L[b, h], dQ[b, h] = o, l, dq
            dK[b, h // G] += dk
            dV[b, h // G] += dv
    return O, L, dQ, dK, dV
