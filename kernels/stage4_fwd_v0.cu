/*
 * stage4_fwd_v0.cu -- Stage 4, forward version 0: the attention forward
 * pass on the GPU, materialized. The first CUDA code of the project: the
 * function O = softmax(softmax_scale Q K^T) V (and L = logsumexp per row)
 * as cuBLAS S = softmax_scale Q K^T, a row softmax kernel S -> P, L, and
 * cuBLAS O = P V, with S (fp32) and P (the dtype) in the workspace. Slow-
 * memory traffic per head: es (4 N^2 + 4 N d) + 4 N bytes (S and P
 * written and read back; v0_model counts it tensor by tensor). Versions 1
 * to 3 (stage4_fwd_v1.cu, stage4_fwd_v2.cu, stage4_fwd_v3_hopper.cu)
 * compute the same without S and P in memory.
 *
 * es is the element size of the dtype (fp32 4, fp16 and bf16 2); L is fp32.
 * Every product and sum is accumulated in fp32. The harness the forward
 * kernels share (errors, dtypes, mma/ldmatrix/cp.async) is
 * kernels/gpu_common.cuh; the entry points are kernels/fa_api.cu.
 * Inputs fp32, fp16 or bf16. Cost: 4 B H N^2 d FLOPs and 2 B H N^2
 * elements of workspace.
 *
 * Build:   make stage4          (the host program src/programs/stage4_main.c links this)
 *          make build/libfa_gpu.so   (the same launchers for Python/ctypes)
 * Run:     ./stage4 --kernel 0 [--dtype fp32|fp16|bf16] [--random --n N --d D ...]
 */
#include "gpu_common.cuh"

#include <math.h>

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

/* The version's row of the table of versions (core/versions.def): one
 * shape by design, the same fields in every kernel file. */
const fa_row fa_row_fwd_v0 = {.info = {.pass = FA_FORWARD, .version = 0, .name = "v0",
    .what = "materialized (cuBLAS + softmax)", .dtypes = FA_DT(FA_FP32) | FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 1, .d_max = 1 << 20, .d_multiple = 1, .masks = 1, .deterministic = 0, .min_cc = 0, .slug = "materialized", .strided = 0},
    .run = v0_forward, .check = nullptr, .workspace = v0_workspace, .block_rows = nullptr, .block_cols = nullptr, .model_bytes = v0_model};
