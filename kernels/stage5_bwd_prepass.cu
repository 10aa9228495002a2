/*
 * stage5_bwd_prepass.cu -- the pre-pass every backward version runs before
 * its kernel: D = rowsum(dO * O) in fp32 (bwd-dot), and, when the flags
 * center K, c and K_c first (stage5_bwd_center.cu) and L' with D.
 * Entry point: bwd_prepass (stage5_backward.cuh); the equations are in
 * stage5_backward.cuh's header.
 */
#include "stage5_backward.cuh"

//> bwd-dot
/* The pre-pass: D_i = dO_i . O_i for every query row, in fp32. D_i equals
 * sum_j P_ij dP_ij (the softmax Jacobian's row term) without reading P:
 * FlashAttention-2's choice, and stage 3's. With K centered (bwd-center) the
 * same threads also read Q_i and write L'_i = L_i - softmax_scale Q_i . c,
 * so that Q costs one more read in a pass that runs anyway rather than a
 * pass of its own.
 *
 * The pass only streams dO and O, so it is worth what its loads are: TPR
 * threads share a row, each reading 16 bytes of it (vec16), their partial
 * sums added by shuffles inside the group. TPR = d / vec16 is a power of two
 * up to 32 for every head dimension the tensor-core versions take; where it
 * is not, or a row does not start on 16 bytes, TPR = 32 reads one element a
 * lane (bwd_dot_tpr). One element a lane for every d left the pass at an
 * eighth of the memory's bandwidth at d = 64 (data/gpu/studies/bwd_v3_steps/steps.md). */
/* Where row `row` (of B H Sq, in (b, h, i) order) of dO, O and Q starts,
 * from their strides: a (B, seqlen, H, d) view is read in place. */
struct bwd_rows_at {
    long long H, Sq;
    fa_stride sdo, so, sq;
    __device__ long long at(long long row, fa_stride s) const
    {
        const long long i = row % Sq, bh = row / Sq, h = bh % H, b = bh / H;
        return b * s.batch + h * s.head + i * s.row;
    }
};
/* The shift of L, when K is centered: c (B, H_kv, d) fp32, L in, L' out. */
template <typename T> struct bwd_lse_shift {
    const T *Q;        /* NULL: no shift */
    const float *c, *L;
    float *Lc;
    long long group;   /* H / H_kv */
    double softmax_scale;
};

template <typename T, int TPR, bool VEC>
__global__ void __launch_bounds__(256) bwd_dot_kernel(const T *__restrict__ dO, const T *__restrict__ O,
                                                      float *__restrict__ D, long long rows, int d,
                                                      bwd_rows_at rat, bwd_lse_shift<T> sh)
{
    constexpr int V = VEC ? vec16<T>::n : 1;
    const long long row = ((long long)blockIdx.x * 256 + threadIdx.x) / TPR;
    const int part = threadIdx.x % TPR;
    const bool live = row < rows;   /* the shuffles need every lane of the group */
    float s = 0.f;
    if (live) {
        const T *a = dO + rat.at(row, rat.sdo), *b = O + rat.at(row, rat.so);
        for (int c = part * V; c < d; c += TPR * V) {
            float x[V], y[V];
            if (VEC) {
                load16(a + c, x);
                load16(b + c, y);
            } else {
                x[0] = to_f(a[c]);
                y[0] = to_f(b[c]);
            }
#pragma unroll
            for (int u = 0; u < V; u++) s = fmaf(x[u], y[u], s);
        }
    }
#pragma unroll
    for (int off = TPR / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (live && part == 0) D[row] = s;
    if (!sh.Q) return;
    /* Q_i . c in fp64, rounded once: L' is small where L and the shift are
     * both large, and an fp32 sum would leave L's rounding in it */
    double t = 0;
    if (live) {
        const T *q = sh.Q + rat.at(row, rat.sq);
        const float *cv = sh.c + (row / rat.Sq / sh.group) * d;   /* (b, h / group) = (b H + h) / group */
        for (int c = part * V; c < d; c += TPR * V) {
            float x[V];
            if (VEC) load16(q + c, x);
            else x[0] = to_f(q[c]);
#pragma unroll
            for (int u = 0; u < V; u++) t += (double)x[u] * (double)cv[c + u];
        }
    }
#pragma unroll
    for (int off = TPR / 2; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
    if (live && part == 0)
        sh.Lc[row] = sh.L[row] == -INFINITY ? -INFINITY : (float)((double)sh.L[row] - sh.softmax_scale * t);
}

/* Threads per row of the pre-pass: d / vec16 where that is a power of two
 * up to 32 and every row of dO, O (and Q where it is read) starts on 16
 * bytes; 0 for the one-element-a-lane kernel. */
template <typename T>
static int bwd_dot_tpr(int d, const void *const ptrs[3], const fa_stride strides[3])
{
    const int V = vec16<T>::n, tpr = d / V;
    if (d % V || tpr < 1 || tpr > 32 || (tpr & (tpr - 1))) return 0;
    for (int i = 0; i < 3; i++) {
        if (ptrs[i] && (!aligned16(ptrs[i]) || strides[i].batch % V || strides[i].head % V || strides[i].row % V))
            return 0;
    }
    return tpr;
}

//< bwd-dot

template <typename T>
static void bwd_dot_launch(const T *dO, const T *O, float *D, long long rows, int d, bwd_rows_at rat,
                           bwd_lse_shift<T> sh, cudaStream_t st)
{
    const void *ptrs[3] = {dO, O, sh.Q};
    const fa_stride strides[3] = {rat.sdo, rat.so, rat.sq};
    const int tpr = bwd_dot_tpr<T>(d, ptrs, strides);
    const unsigned blocks = (unsigned)((rows * (tpr ? tpr : 32) + 255) / 256);
    switch (tpr) {
    case 1: bwd_dot_kernel<T, 1, true><<<blocks, 256, 0, st>>>(dO, O, D, rows, d, rat, sh); break;
    case 2: bwd_dot_kernel<T, 2, true><<<blocks, 256, 0, st>>>(dO, O, D, rows, d, rat, sh); break;
    case 4: bwd_dot_kernel<T, 4, true><<<blocks, 256, 0, st>>>(dO, O, D, rows, d, rat, sh); break;
    case 8: bwd_dot_kernel<T, 8, true><<<blocks, 256, 0, st>>>(dO, O, D, rows, d, rat, sh); break;
    case 16: bwd_dot_kernel<T, 16, true><<<blocks, 256, 0, st>>>(dO, O, D, rows, d, rat, sh); break;
    case 32: bwd_dot_kernel<T, 32, true><<<blocks, 256, 0, st>>>(dO, O, D, rows, d, rat, sh); break;
    default: bwd_dot_kernel<T, 32, false><<<blocks, 256, 0, st>>>(dO, O, D, rows, d, rat, sh); break;
    }
}

/* The pre-pass of every version: D (fp32, B H Sq) from dO and O, and when
 * the flags center K, c and K_c first and L' with D. On return *K, *L and
 * *sk are what the version's kernel must read: K_c (contiguous) and L', or
 * x's K, its strides and L. A version calls this once before its kernel
 * with bwd_center_bytes of its workspace at cen; nothing else of the
 * centering is version-specific. */
template <typename T>
int bwd_prepass(const attn_params *p, const fa_ptrs *x, int flags, float *D, void *cen, const T **K,
                const float **L, fa_stride *sk, cudaStream_t st)
{
    const int dtype = std::is_same<T, float>::value ? FA_FP32 : std::is_same<T, __half>::value ? FA_FP16 : FA_BF16;
    const bwd_center_ws w = bwd_center_carve(dtype, p, cen);
    fa_stride s[8];
    fa_strides_of(p, x, s);
    *K = (const T *)x->k;
    *L = x->softmax_lse;
    *sk = s[1];
    bwd_lse_shift<T> sh = {nullptr, nullptr, nullptr, nullptr, 1, 0.0};
    if (bwd_centers(flags, p)) {
        if (int rc = bwd_center_k<T>(p, (const T *)x->k, s[1], w, st)) return rc;
        sh = {(const T *)x->q, w.c, x->softmax_lse, w.Lc, (long long)(p->H / p->H_kv), p->softmax_scale};
        *K = (const T *)w.Kc;
        *L = w.Lc;
        *sk = fa_stride{(int64_t)p->H_kv * p->seqlen_k * p->d, (int64_t)p->seqlen_k * p->d, p->d};
    }
    const bwd_rows_at rat = {p->H, p->seqlen_q, s[4], s[3], s[0]};   /* do_, o, q */
    const long long rows = (long long)attn_rows(p);
    bwd_dot_launch<T>((const T *)x->do_, (const T *)x->o, D, rows, p->d, rat, sh, st);
    LAUNCH_CHECK();
    return FA_OK;
}
#define BWD_PREPASS(T)                                                                                       \
    template int bwd_prepass<T>(const attn_params *, const fa_ptrs *, int, float *, void *, const T **,      \
                                const float **, fa_stride *, cudaStream_t);
BWD_PREPASS(float)
BWD_PREPASS(__half)
BWD_PREPASS(__nv_bfloat16)
