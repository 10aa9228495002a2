/*
 * stage4_fwd_v1.cu -- Stage 4, forward version 1: tiled FlashAttention
 * (Algorithm 1 of the paper, FlashAttention-2's loop order) on the CUDA
 * cores, fp32 arithmetic: Br = 64 query rows per block, K/V tiles in shared
 * memory, the online softmax in registers. Slow-memory traffic per head:
 * es (2 N d + 2 N d Tr) + 4 N bytes (Q once, K and V once per query block,
 * O and L once), Tr = ceil(N / 64).
 *
 * Repeated deliberately: versions 1 and 2 open with the same few lines (the
 * block's rows, its heads, the key blocks the mask lets it see) and version
 * 2's softmax update has the shape of version 3's (stage4_fwd_v3_hopper.cu),
 * so that each kernel of the listings of chapters/20-gpu-forward.md and
 * chapters/23-hopper.md (the appendix chapters/90-listings.md) reads whole.
 *
 * es is the element size of the dtype (fp32 4, fp16 and bf16 2); L is fp32.
 * Every product and sum is accumulated in fp32. The harness the forward
 * kernels share (errors, dtypes, mma/ldmatrix/cp.async) is
 * kernels/gpu_common.cuh; the entry points are kernels/fa_api.cu.
 * Inputs fp32, fp16 or bf16. Cost: 4 B H N^2 d FLOPs, no workspace.
 *
 * Build:   make stage4          (the host program src/programs/stage4_main.c links this)
 *          make build/libfa_gpu.so   (the same launchers for Python/ctypes)
 * Run:     ./stage4 --kernel 1 [--dtype fp32|fp16|bf16] [--random --n N --d D ...]
 */
#include "gpu_common.cuh"

#include <math.h>

#define FA_V1_BR 64   /* query rows per thread block in version 1 */

/* The register tiles (S_ij here; dQ_i in the backward's version 1,
 * stage5_bwd_v1.cu) are zeroed and filled with the same unrolled loops in
 * both kernels, deliberately: each chapter shows its kernel whole. */
//> v1-kernel
/* One thread block of 256 threads computes Br = 64 rows of O and L for one
 * head (blockIdx.y = b H + h, blockIdx.x = query block i). Thread (ty, tx),
 * ty = 0..15, tx = 0..15, owns query rows 4 ty .. 4 ty + 3; for those rows
 * it holds the scores of key columns tx + 16 k of the current tile, and
 * output columns (D/16 of them) in registers. The 16 threads of one row
 * group are half a warp, so row maxima and sums are shuffles.
 *
 * D: head dimension rounded up to the template (16, 32, 64, 80, 96, 128);
 * Bc: key rows per tile (64, or 32 when D > 64 so that two blocks fit an SM).
 * Scores are kept in base 2: Q is pre-multiplied by softmax_scale log2(e),
 * so exp(x) becomes exp2f, one MUFU instruction.
 *
 * Masks (mask.h): the block visits only the key blocks its rows can see
 * (mask_key_blocks); a block whose rows see no key writes O = 0, L = -inf
 * and reads nothing; scores of invisible keys are -inf only on the tiles
 * that mask_tile_unmasked says need it. */
template <typename T, int D, int BC>
__global__ void __launch_bounds__(256, 2)
    fwd_v1_kernel(const T *__restrict__ Q, const T *__restrict__ K, const T *__restrict__ V,
                  T *__restrict__ O, float *__restrict__ L, fa_kargs a, bool vec)
{
    const int Nq = a.seqlen_q, Nk = a.seqlen_k, d = a.d;
    constexpr int BR = FA_V1_BR;
    /* Row stride D + 4 floats: rows stay 16-byte aligned for float4, and
     * 8 consecutive rows fall in 8 different 16-byte bank groups, so the
     * float4 reads of K by 8 threads of a quarter warp do not conflict. */
    constexpr int LDQ = D + 4, LDP = BR + 4;
    constexpr int NS = BC / 16;   /* score columns per thread */
    constexpr int NO = D / 16;    /* output columns per thread */
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4);   /* Br x D   */
    float *Ks = Qs + BR * LDQ;                      /* Bc x D   */
    float *Vs = Ks + BC * LDQ;                      /* Bc x D   */
    float *Pt = Vs + BC * LDQ;                      /* Bc x Br: P_ij transposed */

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int i0 = blockIdx.x * BR, i1 = min(i0 + BR, Nq);
    const T *Qh = Q + a.q_off(blockIdx.y), *Kh = K + a.kv_off(blockIdx.y), *Vh = V + a.kv_off(blockIdx.y);
    T *Oh = O + a.q_off(blockIdx.y);
    float *Lh = L + a.row_off(blockIdx.y);
    int jb0 = 0, jb1 = (Nk + BC - 1) / BC;
    if (a.masked && mask_key_blocks(a.mask, i0, i1, BC, &jb0, &jb1) == 0) {
        write_empty_rows(Oh, Lh, i0, i1, d);
        return;
    }

    load_rows_f32<T, D, BR>(Qs, LDQ, Qh, i0, Nq, d, vec, a.scale_log2);

    float m[4], l[4], o[4][NO];   /* running max (base 2), this thread's share of l, O_i */
#pragma unroll
    for (int r = 0; r < 4; r++) {
        m[r] = -INFINITY;
        l[r] = 0.f;
#pragma unroll
        for (int c = 0; c < NO; c++) o[r][c] = 0.f;
    }

    for (int j = jb0; j < jb1; j++) {
        const int j0 = j * BC;
        __syncthreads();   /* the previous tile's K, V, P are no longer read */
        load_rows_f32<T, D, BC>(Ks, LDQ, Kh, j0, Nk, d, vec, 1.f);
        load_rows_f32<T, D, BC>(Vs, LDQ, Vh, j0, Nk, d, vec, 1.f);
        __syncthreads();

        /* S_ij = Q_i K_j^T (already times softmax_scale log2 e): a 4 x NS
         * block per thread, 4 dimensions per step from float4 reads. */
        float s[4][NS];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int k = 0; k < NS; k++) s[r][k] = 0.f;
#pragma unroll 4
        for (int e = 0; e < D; e += 4) {
            float4 q[4], kk[NS];
#pragma unroll
            for (int r = 0; r < 4; r++) q[r] = *reinterpret_cast<const float4 *>(Qs + (4 * ty + r) * LDQ + e);
#pragma unroll
            for (int k = 0; k < NS; k++) kk[k] = *reinterpret_cast<const float4 *>(Ks + (tx + 16 * k) * LDQ + e);
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int k = 0; k < NS; k++) {
                    s[r][k] = fmaf(q[r].x, kk[k].x, s[r][k]);
                    s[r][k] = fmaf(q[r].y, kk[k].y, s[r][k]);
                    s[r][k] = fmaf(q[r].z, kk[k].z, s[r][k]);
                    s[r][k] = fmaf(q[r].w, kk[k].w, s[r][k]);
                }
        }
        /* Keys past seqlen_k exist only in the last tile; masked keys only
         * in the tiles the mask cuts. */
        if (j0 + BC > Nk) {
#pragma unroll
            for (int k = 0; k < NS; k++)
                if (j0 + tx + 16 * k >= Nk)
#pragma unroll
                    for (int r = 0; r < 4; r++) s[r][k] = -INFINITY;
        }
        if (a.masked && !mask_tile_unmasked(a.mask, i0, i1, j0, min(j0 + BC, Nk))) {
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int k = 0; k < NS; k++)
                    if (!mask_visible(a.mask, i0 + 4 * ty + r, j0 + tx + 16 * k)) s[r][k] = -INFINITY;
        }

        /* Online softmax (stage 2), per row: m_new = max(m, rowmax),
         * alpha = 2^(m - m_new) rescales l and O, P = 2^(S - m_new). A row
         * that has seen only masked keys so far has m_new = -inf: it is
         * rescaled against 0 instead (softmax_ref_max), which keeps l = 0 and
         * O = 0 rather than -inf - (-inf) = NaN. */
#pragma unroll
        for (int r = 0; r < 4; r++) {
            float mx = s[r][0];
#pragma unroll
            for (int k = 1; k < NS; k++) mx = fmaxf(mx, s[r][k]);
#pragma unroll
            for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            float m_new = fmaxf(m[r], mx);
            float m_ref = softmax_ref_max(m_new);
            float alpha = exp2f(m[r] - m_ref);
            m[r] = m_new;
            float rs = 0.f;
#pragma unroll
            for (int k = 0; k < NS; k++) {
                s[r][k] = exp2f(s[r][k] - m_ref);
                rs += s[r][k];
            }
            l[r] = l[r] * alpha + rs;   /* summed across the row group once, at the end */
#pragma unroll
            for (int c = 0; c < NO; c++) o[r][c] *= alpha;
        }
        /* P to shared memory, transposed, so that the P V loop reads the four
         * rows of a key in one float4. */
#pragma unroll
        for (int k = 0; k < NS; k++)
            *reinterpret_cast<float4 *>(Pt + (tx + 16 * k) * LDP + 4 * ty) =
                make_float4(s[0][k], s[1][k], s[2][k], s[3][k]);
        __syncthreads();

        /* O_i += P_ij V_j */
#pragma unroll 4
        for (int jj = 0; jj < BC; jj++) {
            float4 p = *reinterpret_cast<const float4 *>(Pt + jj * LDP + 4 * ty);
            float v[NO];
            if constexpr (NO % 4 == 0) {
                /* columns 64 g + 4 tx + u: 16-byte reads, conflict-free */
#pragma unroll
                for (int g = 0; g < NO / 4; g++) {
                    float4 t = *reinterpret_cast<const float4 *>(Vs + jj * LDQ + 64 * g + 4 * tx);
                    v[4 * g] = t.x; v[4 * g + 1] = t.y; v[4 * g + 2] = t.z; v[4 * g + 3] = t.w;
                }
            } else {
                /* columns NO tx + c: NO is odd or 2, so 16 threads hit 16 banks */
#pragma unroll
                for (int c = 0; c < NO; c++) v[c] = Vs[jj * LDQ + NO * tx + c];
            }
#pragma unroll
            for (int c = 0; c < NO; c++) {
                o[0][c] = fmaf(p.x, v[c], o[0][c]);
                o[1][c] = fmaf(p.y, v[c], o[1][c]);
                o[2][c] = fmaf(p.z, v[c], o[2][c]);
                o[3][c] = fmaf(p.w, v[c], o[3][c]);
            }
        }
    }

    /* Normalize once: O = O / l, L = (m + log2 l) ln 2 (natural log); a row
     * that saw no key has l = 0: O = 0, L = -inf. */
#pragma unroll
    for (int r = 0; r < 4; r++) {
        float lt = l[r];
#pragma unroll
        for (int off = 8; off > 0; off >>= 1) lt += __shfl_xor_sync(0xffffffffu, lt, off);
        int row = i0 + 4 * ty + r;
        if (row >= Nq) continue;
        float inv = lt > 0.f ? 1.f / lt : 0.f;
#pragma unroll
        for (int c = 0; c < NO; c++) {
            int col = (NO % 4 == 0) ? 64 * (c / 4) + 4 * tx + (c % 4) : NO * tx + c;
            if (col < d) Oh[(size_t)row * d + col] = from_f<T>(o[r][c] * inv);
        }
        if (tx == 0) Lh[row] = lt > 0.f ? (m[r] + log2f(lt)) * 0.6931471805599453f : -INFINITY;
    }
}
//< v1-kernel

static int v1_block_rows(int d) { (void)d; return FA_V1_BR; }
static int v1_block_cols(int d) { return d > 64 ? 32 : 64; }

static size_t v1_smem_bytes(int D, int BC)
{
    return sizeof(float) * ((size_t)FA_V1_BR * (D + 4) + 2 * (size_t)BC * (D + 4) +
                            (size_t)BC * (FA_V1_BR + 4));
}

template <typename T, int D>
static int v1_launch_d(const T *Q, const T *K, const T *V, T *O, float *L, const attn_params *p,
                       cudaStream_t stream)
{
    const int d = p->d;
    constexpr int BC = D > 64 ? 32 : 64;
    size_t smem = v1_smem_bytes(D, BC);
    /* Above 48 KB a kernel must ask for its dynamic shared memory. */
    CUDA_TRY(cudaFuncSetAttribute(fwd_v1_kernel<T, D, BC>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    bool vec = d % vec16<T>::n == 0 && aligned16(Q) && aligned16(K) && aligned16(V);
    dim3 grid((p->seqlen_q + FA_V1_BR - 1) / FA_V1_BR, p->B * p->H);
    fwd_v1_kernel<T, D, BC><<<grid, 256, smem, stream>>>(Q, K, V, O, L, fa_kargs_make(p), vec);
    LAUNCH_CHECK();
    return FA_OK;
}

static int v1_forward(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic,
                      cudaStream_t st)
{
    (void)deterministic;
    return fa_dispatch_dtype(dtype, [&](auto zero) -> int {
        using T = decltype(zero);
        const T *q = (const T *)x->q, *k = (const T *)x->k, *v = (const T *)x->v;
        T *o = (T *)x->o;
        float *L = x->softmax_lse;
        const int d = p->d;
        if (d <= 16) return v1_launch_d<T, 16>(q, k, v, o, L, p, st);
        if (d <= 32) return v1_launch_d<T, 32>(q, k, v, o, L, p, st);
        if (d <= 64) return v1_launch_d<T, 64>(q, k, v, o, L, p, st);
        if (d <= 80) return v1_launch_d<T, 80>(q, k, v, o, L, p, st);
        if (d <= 96) return v1_launch_d<T, 96>(q, k, v, o, L, p, st);
        return v1_launch_d<T, 128>(q, k, v, o, L, p, st);
    });
}

/* The version's row of the table of versions (core/versions.def): one
 * shape by design, the same fields in every kernel file. */
const fa_row fa_row_fwd_v1 = {.info = {.pass = FA_FORWARD, .version = 1, .name = "v1",
    .what = "tiled (smem K/V, fp32 CUDA cores)", .dtypes = FA_DT(FA_FP32) | FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 16, .d_max = 128, .d_multiple = 1, .masks = 1, .deterministic = 0, .min_cc = 0, .slug = "tiled", .strided = 0},
    .run = v1_forward, .check = nullptr, .workspace = nullptr, .block_rows = v1_block_rows, .block_cols = v1_block_cols, .model_bytes = fa_model_tiled_forward};
