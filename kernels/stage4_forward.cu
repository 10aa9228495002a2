/*
 * stage4_forward.cu -- Stage 4: the attention forward pass on the GPU.
 *
 * What it adds: the first CUDA code of the project. Three versions of the same
 * function O = softmax(softmax_scale Q K^T) V (and L = logsumexp per row),
 * selected by a number (--kernel K), each kernel beside its launcher and its
 * row of the table of versions (core/versions.def). Repeated deliberately:
 * versions 1 and 2 open with the same few lines (the block's rows, its heads,
 * the key blocks the mask lets it see) and version 2's softmax update has the
 * shape of version 3's (stage4_fwd_v3_hopper.cu), so that each kernel of chapter
 * 4's and 4c's listings reads whole; the rows of the table have one shape
 * because each stands beside its kernel.
 *
 *   version | what                                   | slow-memory traffic (per head)
 *   --------+----------------------------------------+---------------------------------
 *   0       | materialized: cuBLAS S = scale Q K^T,  | es (4 N^2 + 4 N d) + 4 N bytes
 *           | row softmax kernel S -> P, L, cuBLAS   | (S and P written and read back)
 *           | O = P V                                |
 *   1       | tiled FlashAttention (Algorithm 1 of   | es (2 N d + 2 N d Tr) + 4 N bytes
 *           | the paper, FlashAttention-2 loop       | (Q once, K and V once per query
 *           | order): Br = 64 query rows per block,  | block, O and L once), Tr = ceil(N/64)
 *           | K/V tiles in shared memory, online     |
 *           | softmax in registers, fp32 CUDA cores  |
 *   2       | the same tiled algorithm on the tensor | as version 1, with Br = 128:
 *           | cores (FlashAttention-2 style): mma.sync| Tr = ceil(N/128)
 *           | m16n8k16 for Q K^T and P V, P stays in  |
 *           | registers, cp.async double-buffered K/V |
 *           | tiles; fp16/bf16, d = 16, 32, ..., 128  |
 *   3       | Hopper's wgmma and the tensor copy     | kernels/stage4_fwd_v3_hopper.cu
 *           | engine                                 |
 *
 * es is the element size of the dtype (fp32 4, fp16 and bf16 2); L is fp32.
 * Inputs fp32, fp16 or bf16; every product and sum is accumulated in fp32.
 * The harness these kernels share (errors, dtypes, mma/ldmatrix/cp.async)
 * is kernels/gpu_common.cuh; the entry points are kernels/fa_api.cu.
 *
 * Build:   make stage4          (the host program src/stage4_main.c links this)
 *          make build/libfa_gpu.so   (the same launchers for Python/ctypes)
 * Run:     ./stage4 [--kernel K] [--dtype fp32|fp16|bf16] [--random --n N --d D ...]
 * Cost:    4 B H N^2 d FLOPs in every version; version 0 also needs 2 B H N^2
 *          elements of workspace (S and P), versions 1 and 2 need none.
 */
#include "gpu_common.cuh"

#include <math.h>
#include <stdio.h>

#define FA_V1_BR 64   /* query rows per thread block in version 1 */
/* ========================================================================= */
/* Version 0: the materialized baseline                                      */
/* ========================================================================= */

//> v0-softmax
/* P = softmax(S) row by row, L = logsumexp(S), one warp per row of seqlen_k
 * entries; S is fp32 and already scaled (cuBLAS applied softmax_scale), so
 * fp16 inputs cannot overflow it. Pass 1 keeps a running max and sum per
 * lane (stage 2's online softmax, in base 2) over the keys the row sees
 * (mask.h's range), the warp merges the 32 partial (m, l) pairs; pass 2 reads
 * S again and writes P = 2^(y - log2 sum) in the dtype, 0 for masked keys.
 * y = S log2(e) is rounded once (__fmul_rn: never contracted into an FMA) in
 * both passes, so the max and the exponent come from the same value and no
 * exponent is positive even when S is ~1e10. The second read of a row mostly
 * hits L2; the IO model counts S once. Row r of the (B H seqlen_q) rows is
 * query r % seqlen_q. */
template <typename T>
__global__ void __launch_bounds__(256) fwd_v0_softmax_kernel(const float *__restrict__ S, T *__restrict__ P,
                                                             float *__restrict__ L, long long rows,
                                                             attn_mask mask, bool vec)
{
    const float LOG2E = 1.4426950408889634f;
    const int Sk = mask.seqlen_k;
    long long row = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float *s = S + row * Sk;
    T *p = P + row * Sk;
    const int i = (int)(row % mask.seqlen_q);
    const int lo = mask_key_first(mask, i), hi = mask_key_last(mask, i);   /* empty if lo > hi */

    float m = -INFINITY, l = 0.f;   /* base-2 running max and sum of this lane */
    auto update = [&](float y) {    /* y = S * log2(e), finite */
        if (y > m) { l = l * exp2f(m - y) + 1.f; m = y; }
        else l += exp2f(y - m);
    };
    if (vec) {   /* every key visible, rows 16-byte aligned */
        for (int c = lane * 4; c < Sk; c += 32 * 4) {
            float4 x = __ldg(reinterpret_cast<const float4 *>(s + c));
            update(__fmul_rn(x.x, LOG2E)); update(__fmul_rn(x.y, LOG2E));
            update(__fmul_rn(x.z, LOG2E)); update(__fmul_rn(x.w, LOG2E));
        }
    } else {
        for (int c = lo + lane; c <= hi; c += 32) update(__fmul_rn(s[c], LOG2E));
    }
    /* Merge lanes: (m, l) and (m2, l2) -> (max, l 2^(m-max) + l2 2^(m2-max)).
     * A lane that saw no entry has m = -inf and contributes nothing. */
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off), l2 = __shfl_xor_sync(0xffffffffu, l, off);
        float mn = fmaxf(m, m2);
        l = (m == -INFINITY ? 0.f : l * exp2f(m - mn)) + (m2 == -INFINITY ? 0.f : l2 * exp2f(m2 - mn));
        m = mn;
    }
    /* log2 of sum_j 2^(y_j); a row that sees no key: -inf + log2(0) = -inf */
    float lse2 = m + log2f(l);
    if (lane == 0) L[row] = lse2 * 0.6931471805599453f;
    if (vec) {
        constexpr int VEC = vec16<T>::n;
        for (int c = lane * VEC; c < Sk; c += 32 * VEC) {
            alignas(16) T out[VEC];
#pragma unroll
            for (int u = 0; u < VEC; u++) out[u] = from_f<T>(exp2f(__fmul_rn(s[c + u], LOG2E) - lse2));
            *reinterpret_cast<uint4 *>(p + c) = *reinterpret_cast<const uint4 *>(out);
        }
    } else {
        for (int c = lane; c < Sk; c += 32)
            p[c] = from_f<T>(c >= lo && c <= hi ? exp2f(__fmul_rn(s[c], LOG2E) - lse2) : 0.f);
    }
}
//< v0-softmax

static cudaDataType_t cuda_type(int dtype)
{
    return dtype == FA_FP32 ? CUDA_R_32F : dtype == FA_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

//> v0-launch
/* Version 0. cuBLAS is column-major: a row-major (rows, d) block is a
 * column-major d x rows matrix, so S (row-major, S[i][j] = q_i . k_j) is the
 * column-major product K^T Q (op T, op N), and O (row-major) the product
 * V P. Grouped heads: the H / H_kv query heads that share a K/V head are
 * consecutive in Q, so their rows form one (H/H_kv seqlen_q, d) matrix, and
 * one strided-batched call over the B H_kv K/V heads covers everything.
 * S is kept in fp32 whatever the dtype (fp16 would overflow at |S| > 65504);
 * P is in the dtype, as the second product takes it. */
static int v0_forward(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic,
                      cudaStream_t stream)
{
    (void)deterministic;
    const int Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d;
    const int rows_g = (p->H / p->H_kv) * Sq;   /* query rows per K/V head */
    const int batch = p->B * p->H_kv;
    const size_t es = fa_dtype_bytes(dtype);
    const long long sq_k = (long long)rows_g * Sk;
    float *S = (float *)x->workspace;
    void *P = (char *)x->workspace + (size_t)batch * sq_k * sizeof(float);
    cublasHandle_t h;
    if (int rc = fa_cublas(&h, stream)) return rc;
    cudaDataType_t t = cuda_type(dtype);
    float alpha = (float)p->softmax_scale, one = 1.f, zero = 0.f;
    /* S = softmax_scale Q K^T, fp32 accumulation, fp32 result */
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, Sk, rows_g, d, &alpha, x->k, t,
                                          d, (long long)Sk * d, x->q, t, d, (long long)rows_g * d,
                                          &zero, S, CUDA_R_32F, Sk, sq_k, batch, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
    long long rows = (long long)batch * rows_g;
    unsigned blocks = (unsigned)((rows + 7) / 8);
    attn_mask mask = attn_mask_of(p);
    /* The vector path reads and writes every key of a row, so it needs every
     * pair visible: no mask, or a window that covers every key (which must
     * give the unmasked result bit for bit, so it takes the same path). And
     * rows of S and P that start 16-byte aligned. */
    bool all_visible = !attn_is_masked(p) || mask_tile_unmasked(mask, 0, Sq, 0, Sk);
    bool vec = all_visible && Sk % 8 == 0;
    int rc = fa_dispatch_dtype(dtype, [&](auto zero_of_T) -> int {
        using T = decltype(zero_of_T);
        fwd_v0_softmax_kernel<T><<<blocks, 256, 0, stream>>>(S, (T *)P, x->softmax_lse, rows, mask, vec);
        LAUNCH_CHECK();
        return FA_OK;
    });
    if (rc) return rc;
    /* O = P V */
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, d, rows_g, Sk, &one, x->v, t,
                                          d, (long long)Sk * d, P, t, Sk, sq_k, &zero, x->o, t, d,
                                          (long long)rows_g * d, batch, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
    (void)es;
    return FA_OK;
}
//< v0-launch

/* ========================================================================= */
/* Version 1: tiled FlashAttention forward on the CUDA cores                 */
/* ========================================================================= */

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

/* ========================================================================= */
/* Version 2: the same algorithm on the tensor cores (mma.sync)              */
/* ========================================================================= */
/* FlashAttention-2's forward with warp-level matrix instructions (sm_80 and
 * later; Hopper's wgmma comes in a later version). fp16/bf16 only, d a
 * multiple of 16 up to 128. A block of 4 warps owns Br = 128 query rows (32
 * per warp, see v2_cfg); K/V tiles of Bc = 64 rows are copied into shared
 * memory with
 * cp.async, two stages deep, so the copy of tile j+1 overlaps the work on
 * tile j. Per warp and tile:
 *   S = Q K^T   mma.m16n8k16: A = Q (registers, loaded once with ldmatrix),
 *               B = K (ldmatrix from shared memory); 16 x 64 fp32 in registers
 *   online softmax on those registers (a row lives in 4 lanes: two shuffles)
 *   O += P V    the S accumulators are repacked in place as the A operand
 *               (the m16n8 accumulator layout is the m16n8k16 A layout), so P
 *               never touches shared memory; B = V via ldmatrix.trans.
 * P is rounded to the input dtype before P V, as in FlashAttention-2;
 * every sum is fp32. Shared tiles: see v2_smem (swizzled or padded rows). */

/* Shared-memory layout of a tile row r, element column c (c a multiple of
 * 8, one 16-byte chunk). Default: rows padded by 8 elements (16 bytes), so
 * the 8 rows one ldmatrix reads at the same column fall in 8 different
 * 16-byte bank groups. With -DFA_V2_SWIZZLE=1 (d = 64 and 128 only) rows
 * stay dense and chunk c/8 of row r goes to (c/8) ^ (r % 8) instead, the
 * layout FlashAttention-2 uses. Measured on the H200 (data/gpu/README.md):
 * the padded rows make the L1 split each warp's cp.async into partial-line
 * L2 requests (about 2.3 sectors per request instead of 4), so v2 requests
 * about 1.46x its model's bytes from L2; the swizzle gives whole lines but,
 * as written here (XOR on lane-dependent offsets in the inner loops, more
 * registers), runs slower, so padding is the default. */
#ifndef FA_V2_SWIZZLE
#define FA_V2_SWIZZLE 0
#endif
template <int D> struct v2_smem {
    static constexpr bool SWZ = FA_V2_SWIZZLE && D % 64 == 0;
    static constexpr int LD = SWZ ? D : D + 8;   /* row stride, elements */
    static __device__ __forceinline__ int at(int r, int c)
    {
        if constexpr (SWZ) return r * LD + ((((c >> 3) ^ (r & 7))) << 3);
        else return r * LD + c;
    }
};

/* rows [row0, row0 + ROWS) of a (N, D) matrix into a ROWS x LD shared tile;
 * rows past N are zero-filled by cp.async itself (source size 0). */
template <typename T, int D, int ROWS>
__device__ __forceinline__ void v2_load_tile(T *dst, const T *__restrict__ src, int row0, int N)
{
    constexpr int CH = D / 8;
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += 128) {
        int r = idx / CH, c = (idx % CH) * 8;
        bool ok = row0 + r < N;
        cp_async16(dst + v2_smem<D>::at(r, c), ok ? src + (size_t)(row0 + r) * D + c : src, ok ? 16 : 0);
    }
}

/* Query rows per warp: 32, two m-tiles of 16, so that every K and V
 * fragment read from shared memory feeds two mma instructions (with one
 * m-tile per warp, ldmatrix traffic bounded the kernel: 246 TFLOP/s at
 * d = 128 against 290 at d = 64 with two). Q stays in registers as A
 * fragments when d <= 64 (QREG); above that O, S and Q of 32 rows do not fit
 * 255 registers, so Q fragments are re-read from shared memory at each
 * step of the d loop. */
template <int D> struct v2_cfg {
    static constexpr int MT = 2, BR = 64 * MT;
    static constexpr bool QREG = D <= 64;
};

/* Deliberate copy: version 2 opens as version 1 does (the tile's rows, the
 * head's tensors, the run of key blocks); chapter 4 reads each version's
 * kernel whole, one listing each. */
//> v2-kernel
template <typename T, int D>
__global__ void __launch_bounds__(128, 2)
    fwd_v2_kernel(const T *__restrict__ Q, const T *__restrict__ K, const T *__restrict__ V,
                  T *__restrict__ O, float *__restrict__ L, fa_kargs a)
{
    const int Nq = a.seqlen_q, Nk = a.seqlen_k;
    const float scale_log2 = a.scale_log2;
    constexpr int MT = v2_cfg<D>::MT, BR = v2_cfg<D>::BR, BC = 64, LD = v2_smem<D>::LD;
    using S = v2_smem<D>;
    constexpr int KD = D / 16, NT = BC / 8, DT = D / 8;
    constexpr bool QREG = v2_cfg<D>::QREG;
    constexpr int KQ = QREG ? KD : 1;   /* Q fragments held in registers */
    extern __shared__ uint4 smem_v2[];
    T *Qs = reinterpret_cast<T *>(smem_v2);   /* BR x LD */
    T *Ks = Qs + BR * LD;                     /* 2 stages of BC x LD */
    T *Vs = Ks + 2 * BC * LD;                 /* 2 stages of BC x LD */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;   /* the mma fragment coordinates */
    const int i0 = blockIdx.x * BR, i1 = min(i0 + BR, Nq);
    const T *Qh = Q + a.q_off(blockIdx.y), *Kh = K + a.kv_off(blockIdx.y), *Vh = V + a.kv_off(blockIdx.y);
    T *Oh = O + a.q_off(blockIdx.y);
    float *Lh = L + a.row_off(blockIdx.y);
    /* key blocks [jb0, jb1): all of them, or those the mask lets the rows see */
    int jb0 = 0, jb1 = (Nk + BC - 1) / BC;
    if (a.masked && mask_key_blocks(a.mask, i0, i1, BC, &jb0, &jb1) == 0) {
        write_empty_rows(Oh, Lh, i0, i1, D);
        return;
    }

    v2_load_tile<T, D, BR>(Qs, Qh, i0, Nq);
    v2_load_tile<T, D, BC>(Ks, Kh, jb0 * BC, Nk);
    v2_load_tile<T, D, BC>(Vs, Vh, jb0 * BC, Nk);
    cp_async_commit();

    /* m-tile mt of this warp holds block rows warp 16 MT + 16 mt + (0..15) */
    unsigned qf[MT][KQ][4];             /* Q as A fragments (all of d when QREG) */
    float o[MT][DT][4];                 /* O accumulators */
    float m[MT][2], l[MT][2];           /* rows g and g + 8 of each m-tile */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.f;
#pragma unroll
        for (int c = 0; c < DT; c++) o[mt][c][0] = o[mt][c][1] = o[mt][c][2] = o[mt][c][3] = 0.f;
    }

    for (int j = jb0; j < jb1; j++) {
        const int st = (j - jb0) & 1, j0 = j * BC;
        if (j + 1 < jb1) {   /* prefetch the next tile into the other stage */
            v2_load_tile<T, D, BC>(Ks + (st ^ 1) * BC * LD, Kh, j0 + BC, Nk);
            v2_load_tile<T, D, BC>(Vs + (st ^ 1) * BC * LD, Vh, j0 + BC, Nk);
            cp_async_commit();
            cp_async_wait<1>();   /* everything but the prefetch has landed */
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (QREG && j == jb0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kd = 0; kd < KD; kd++)
                    ldsm_x4(qf[mt][QREG ? kd : 0][0], qf[mt][QREG ? kd : 0][1],
                            qf[mt][QREG ? kd : 0][2], qf[mt][QREG ? kd : 0][3],
                            Qs + S::at(warp * 16 * MT + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                       kd * 16 + (lane >> 4) * 8));
        }
        const T *Kt = Ks + st * BC * LD, *Vt = Vs + st * BC * LD;

        /* S = Q K^T: 16 MT rows x 64 keys per warp */
        float s[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < NT; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
        for (int kd = 0; kd < KD; kd++) {
            if constexpr (!QREG) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    ldsm_x4(qf[mt][0][0], qf[mt][0][1], qf[mt][0][2], qf[mt][0][3],
                            Qs + S::at(warp * 16 * MT + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                       kd * 16 + (lane >> 4) * 8));
            }
#pragma unroll
            for (int n2 = 0; n2 < NT / 2; n2++) {
                unsigned b0, b1, b2, b3;
                ldsm_x4(b0, b1, b2, b3,
                        Kt + S::at(n2 * 16 + (lane & 7) + (lane >> 4) * 8,
                                   kd * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<T>(s[mt][2 * n2], qf[mt][QREG ? kd : 0], b0, b1);
                    mma16816<T>(s[mt][2 * n2 + 1], qf[mt][QREG ? kd : 0], b2, b3);
                }
            }
        }
        if (j0 + BC > Nk) {   /* keys past seqlen_k: only in the last tile */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (j0 + n * 8 + 2 * t + (e & 1) >= Nk) s[mt][n][e] = -INFINITY;
        }
        /* the mask, only on the tiles it cuts */
        if (a.masked && !mask_tile_unmasked(a.mask, i0, i1, j0, min(j0 + BC, Nk))) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (!mask_visible(a.mask, i0 + warp * 16 * MT + mt * 16 + g + 8 * (e >> 1),
                                          j0 + n * 8 + 2 * t + (e & 1)))
                            s[mt][n][e] = -INFINITY;
        }

        /* online softmax; s[.][n][0..1] belong to row g, s[.][n][2..3] to row g + 8.
         * Each score is scaled once, x = s * scale_log2 rounded, and both
         * the running max and the exponent x - m use that same x: the
         * exponent is then never positive and is exactly 0 at the max, so
         * l >= 1. (An FMA s * scale_log2 - m against a separately rounded
         * max, as FlashAttention-2 writes it, can be +-half an ulp of the
         * product off: about 1000 for scaled logits near 2e10, where 2^1000
         * overflows and 2^-1000 underflows the whole row.) softmax_ref_max
         * guards rows that have seen only masked keys (m = -inf). */
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float mx = -INFINITY;
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; e++) {
                        s[mt][n][e] *= scale_log2;
                        mx = fmaxf(mx, s[mt][n][e]);
                    }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                float m_new = fmaxf(m[mt][h], mx);
                float m_ref = softmax_ref_max(m_new);
                float alpha = ex2(m[mt][h] - m_ref);
                m[mt][h] = m_new;
                float rs = 0.f;
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; e++) {
                        s[mt][n][e] = ex2(s[mt][n][e] - m_ref);
                        rs += s[mt][n][e];
                    }
                l[mt][h] = l[mt][h] * alpha + rs;
#pragma unroll
                for (int c = 0; c < DT; c++) {
                    o[mt][c][2 * h] *= alpha;
                    o[mt][c][2 * h + 1] *= alpha;
                }
            }

        /* O += P V, 16 keys per step; P repacked from the S registers */
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            unsigned a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                a[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int c2 = 0; c2 < DT / 2; c2++) {
                unsigned b0, b1, b2, b3;
                ldsm_x4_t(b0, b1, b2, b3,
                          Vt + S::at(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                     c2 * 16 + (lane >> 4) * 8));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<T>(o[mt][2 * c2], a[mt], b0, b1);
                    mma16816<T>(o[mt][2 * c2 + 1], a[mt], b2, b3);
                }
            }
        }
        __syncthreads();   /* this stage is refilled two iterations on */
    }

    /* normalize once, write O and L (a row that saw no key: O = 0, L = -inf) */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float lt = l[mt][h];
            lt += __shfl_xor_sync(0xffffffffu, lt, 1);
            lt += __shfl_xor_sync(0xffffffffu, lt, 2);
            int row = i0 + warp * 16 * MT + mt * 16 + g + 8 * h;
            if (row >= Nq) continue;
            float inv = lt > 0.f ? 1.f / lt : 0.f;
#pragma unroll
            for (int c = 0; c < DT; c++)
                *reinterpret_cast<unsigned *>(Oh + (size_t)row * D + c * 8 + 2 * t) =
                    pack2<T>(o[mt][c][2 * h] * inv, o[mt][c][2 * h + 1] * inv);
            if (t == 0) Lh[row] = lt > 0.f ? (m[mt][h] + log2f(lt)) * 0.6931471805599453f : -INFINITY;
        }
}
//< v2-kernel

template <typename T, int D>
static int v2_launch_d(const void *Q, const void *K, const void *V, void *O, float *L,
                       const attn_params *p, cudaStream_t stream)
{
    constexpr int BR = v2_cfg<D>::BR;
    size_t smem = sizeof(T) * (size_t)(BR + 4 * 64) * v2_smem<D>::LD;
    CUDA_TRY(cudaFuncSetAttribute(fwd_v2_kernel<T, D>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p->seqlen_q + BR - 1) / BR, p->B * p->H);
    fwd_v2_kernel<T, D><<<grid, 128, smem, stream>>>((const T *)Q, (const T *)K, (const T *)V,
                                                        (T *)O, L, fa_kargs_make(p));
    LAUNCH_CHECK();
    return FA_OK;
}

static int v2_block_rows(int d) { (void)d; return v2_cfg<64>::BR; }
static int v2_block_cols(int d) { (void)d; return 64; }

template <typename T>
static int v2_launch(const fa_ptrs *x, const attn_params *p, cudaStream_t st)
{
    const void *Q = x->q, *K = x->k, *V = x->v;
    void *O = x->o;
    float *L = x->softmax_lse;
    switch (p->d) {
    case 16: return v2_launch_d<T, 16>(Q, K, V, O, L, p, st);
    case 32: return v2_launch_d<T, 32>(Q, K, V, O, L, p, st);
    case 48: return v2_launch_d<T, 48>(Q, K, V, O, L, p, st);
    case 64: return v2_launch_d<T, 64>(Q, K, V, O, L, p, st);
    case 80: return v2_launch_d<T, 80>(Q, K, V, O, L, p, st);
    case 96: return v2_launch_d<T, 96>(Q, K, V, O, L, p, st);
    case 112: return v2_launch_d<T, 112>(Q, K, V, O, L, p, st);
    default: return v2_launch_d<T, 128>(Q, K, V, O, L, p, st);
    }
}

static int v2_forward(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic,
                      cudaStream_t st)
{
    (void)deterministic;
    if (!aligned16(x->q) || !aligned16(x->k) || !aligned16(x->v) || !aligned16(x->o))
        return fa_set_error(FA_ERR_UNSUPPORTED, "version 2 needs 16-byte aligned Q, K, V, O");
    if (dtype == FA_FP16) return v2_launch<__half>(x, p, st);
    return v2_launch<__nv_bfloat16>(x, p, st);
}

/* ========================================================================= */
/* The three rows of the table of versions                                   */
/* ========================================================================= */

/* Version 0 keeps S (fp32) and P (dtype) of every head: B H seqlen_q seqlen_k each. */
static size_t v0_workspace(int dtype, const attn_params *p)
{
    return (size_t)p->B * p->H * (size_t)p->seqlen_q * p->seqlen_k * (4 + fa_dtype_bytes(dtype));
}
/* stage1_naive.h's count, tensor by tensor, in bytes: S written and read
 * (fp32), P written and read (dtype), Q, K, V read and O written (dtype), L
 * written (fp32); per query head, with Sq = seqlen_q, Sk = seqlen_k:
 *   8 Sq Sk + 2 es Sq Sk + 2 es Sq d + 4 Sq,
 * K and V read once per K/V head (2 es Sk d), as the strided batch reads
 * them once for the whole group of query heads. */
static double v0_model(int dtype, const attn_params *p, int Br, int Bc)
{
    (void)Br; (void)Bc;
    double es = (double)fa_dtype_bytes(dtype), sq = p->seqlen_q, sk = p->seqlen_k, d = p->d;
    return (double)p->B * (p->H * (8 * sq * sk + 2 * es * sq * sk + 2 * es * sq * d + 4 * sq) +
                           p->H_kv * 2 * es * sk * d);
}

/* The rows of the table of versions: one shape by design (core/versions.def),
 * the same fields in every kernel file. */
const fa_row fa_row_fwd_v0 = {.info = {.pass = FA_FORWARD, .version = 0, .name = "v0",
    .what = "materialized (cuBLAS + softmax)", .dtypes = FA_DT(FA_FP32) | FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 1, .d_max = 1 << 20, .d_multiple = 1, .masks = 1, .deterministic = 0, .min_cc = 0, .slug = "materialized", .strided = 0},
    .run = v0_forward, .check = nullptr, .workspace = v0_workspace, .block_rows = nullptr, .block_cols = nullptr, .model_bytes = v0_model};
const fa_row fa_row_fwd_v1 = {.info = {.pass = FA_FORWARD, .version = 1, .name = "v1",
    .what = "tiled (smem K/V, fp32 CUDA cores)", .dtypes = FA_DT(FA_FP32) | FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 16, .d_max = 128, .d_multiple = 1, .masks = 1, .deterministic = 0, .min_cc = 0, .slug = "tiled", .strided = 0},
    .run = v1_forward, .check = nullptr, .workspace = nullptr, .block_rows = v1_block_rows, .block_cols = v1_block_cols, .model_bytes = fa_model_tiled_forward};
const fa_row fa_row_fwd_v2 = {.info = {.pass = FA_FORWARD, .version = 2, .name = "v2",
    .what = "tiled, tensor cores (mma.sync m16n8k16, cp.async)", .dtypes = FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 16, .d_max = 128, .d_multiple = 16, .masks = 1, .deterministic = 0, .min_cc = 80, .slug = "mma", .strided = 0},
    .run = v2_forward, .check = nullptr, .workspace = nullptr, .block_rows = v2_block_rows, .block_cols = v2_block_cols, .model_bytes = fa_model_tiled_forward};
