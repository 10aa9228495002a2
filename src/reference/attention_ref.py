"""src/reference/attention_ref.py -- NumPy versions of the CPU stages' algorithms.

These exist to check the C code from the outside, never to replace it: a
second implementation, written with NumPy's own matrix products and reductions
(so with a different order of rounding), of

  naive_forward / naive_backward   stage 1: S and P materialized
  online_softmax_weighted_sum      stage 2: one streaming pass, O(d) state
  tiled_forward / tiled_backward   stage 3: Br x Bc tiles, L = m + log l, P = exp(S - L)

Shapes: Q, K, V, dO are (N, d) float64; S, P are (N, N); L is (N,).
Causal means query i sees keys j <= i. tests/test_reference.py runs the C
programs on the same .npy inputs and compares.
"""
import numpy as np


def causal_mask(N):
    """(N, N) boolean: True where key j is visible to query i (j <= i)."""
    return np.tril(np.ones((N, N), dtype=bool))


def naive_forward(Q, K, V, softmax_scale, causal=False):
    """Stage 1 forward. Returns O (N, d), L (N,), P (N, N)."""
    S = (Q @ K.T) * softmax_scale
    if causal:
        S = np.where(causal_mask(len(Q)), S, -np.inf)
    m = S.max(axis=1, keepdims=True)
    E = np.exp(S - m)
    l = E.sum(axis=1, keepdims=True)
    P = E / l
    return P @ V, (m + np.log(l))[:, 0], P


def naive_backward(Q, K, V, O, P, dO, softmax_scale):
    """Stage 1 backward from the stored P. Returns dQ, dK, dV (N, d)."""
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


def _scores(Qi, Kj, i0, j0, softmax_scale, causal):
    S = (Qi @ Kj.T) * softmax_scale
    if causal:
        rows = np.arange(i0, i0 + len(Qi))[:, None]
        cols = np.arange(j0, j0 + len(Kj))[None, :]
        S = np.where(cols <= rows, S, -np.inf)
    return S


def tiled_forward(Q, K, V, softmax_scale, Br, Bc, causal=False):
    """Stage 3 forward, whole tiles at a time. Returns O (N, d), L (N,)."""
    N, d = Q.shape
    O, L = np.empty((N, d)), np.empty(N)
    for i0 in range(0, N, Br):
        Qi = Q[i0:i0 + Br]
        m = np.full(len(Qi), -np.inf)
        l = np.zeros(len(Qi))
        acc = np.zeros((len(Qi), d))
        for j0 in range(0, N, Bc):
            if causal and j0 >= i0 + len(Qi):   # entirely in the future
                break
            S = _scores(Qi, K[j0:j0 + Bc], i0, j0, softmax_scale, causal)
            m_new = np.maximum(m, S.max(axis=1))
            safe = np.where(np.isneginf(m_new), 0.0, m_new)
            alpha = np.where(np.isneginf(m), 0.0, np.exp(m - safe))
            P = np.exp(S - safe[:, None])
            l = alpha * l + P.sum(axis=1)
            acc = alpha[:, None] * acc + P @ V[j0:j0 + Bc]
            m = m_new
        empty = l == 0.0
        O[i0:i0 + Br] = np.where(empty[:, None], 0.0, acc / np.where(empty, 1.0, l)[:, None])
        L[i0:i0 + Br] = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, l)))
    return O, L


def tiled_backward(Q, K, V, O, L, dO, softmax_scale, Br, Bc, causal=False):
    """Stage 3 backward: key blocks outer, P rebuilt as exp(S - L)."""
    N, d = Q.shape
    dQ, dK, dV = np.zeros((N, d)), np.zeros((N, d)), np.zeros((N, d))
    D = np.sum(dO * O, axis=1)
    for j0 in range(0, N, Bc):
        Kj, Vj = K[j0:j0 + Bc], V[j0:j0 + Bc]
        for i0 in range(0, N, Br):
            if causal and i0 + Br - 1 < j0:    # query block ends before this key block
                continue
            Qi, dOi = Q[i0:i0 + Br], dO[i0:i0 + Br]
            S = _scores(Qi, Kj, i0, j0, softmax_scale, causal)
            P = np.exp(S - L[i0:i0 + Br, None])
            dV[j0:j0 + Bc] += P.T @ dOi
            dS = P * (dOi @ Vj.T - D[i0:i0 + Br, None])
            dK[j0:j0 + Bc] += (dS.T @ Qi) * softmax_scale
            dQ[i0:i0 + Br] += (dS @ Kj) * softmax_scale
    return dQ, dK, dV
