/*
 * stage5_backward.cu -- Stage 5: the attention backward pass on the GPU.
 *
 * What it adds over stage 4: gradients. Given Q, K, V, the forward's O and
 * L = softmax_lse, and the upstream gradient dO, every version computes
 *
 *     P  = exp(softmax_scale Q K^T - L)     (rebuilt, never stored by the forward)
 *     dV = P^T dO                            D  = rowsum(dO * O)
 *     dP = dO V^T                            dS = P * (dP - D)
 *     dQ = softmax_scale dS K                dK = softmax_scale dS^T Q
 *
 * (the chapter's backward; stage 3's flash_backward is the CPU model), with
 * the masks, seqlen_q != seqlen_k and grouped heads of core/mask.h and
 * core/attn_params.h. Four versions, chosen by --kernel K (one row each in
 * core/versions.def; version 4 lives in stage5_bwd_v4.cu):
 *
 *   version | what
 *   --------+-----------------------------------------------------------------
 *   0       | materialized, cuBLAS: S, dP and dS of every head in fp32 in the
 *           | workspace, P in the dtype (as a materialized backward in that
 *           | dtype keeps it); elementwise kernels rebuild P from S and L
 *           | (masked entries 0, through mask_visible) and form dS
 *   1       | tiled on the CUDA cores, fp32 arithmetic: one thread block per
 *           | (key block, key/value head) holds K_j, V_j in shared memory and
 *           | dK_j, dV_j in registers while it walks the query blocks that see
 *           | its keys; P and dS tiles in shared memory; dQ added into an fp32
 *           | accumulator
 *   2       | the same schedule on the tensor cores (FlashAttention-2's
 *           | backward): mma.sync m16n8k16 for the five products, S^T and dP^T
 *           | in registers, only dS through shared memory (for dQ); Q_i, dO_i
 *           | tiles double-buffered with cp.async; fp16/bf16
 *   3       | version 2 on blocks of 128 keys and 8 warps (one block per SM):
 *           | Q_i, dO_i, L_i, D_i loaded once for twice the keys, all by
 *           | cp.async; dQ added 16 bytes at a time (stage5_bwd_v4.cu)
 *
 * Every version runs the pre-pass D = rowsum(dO * O) (fp32, workspace),
 * which with K centered (FA_BWD_CENTER_K, bwd-center) also forms c, K_c and
 * L' (bwd_prepass; a version of another file calls bwd_prepass_at); with
 * FA_BWD_DQ_PASS the pass of stage5_bwd_dq.cu then forms D from fp32 P and
 * dP, and after the kernel replaces its dQ (tiled_backward, version 0). In
 * versions 1 to 3 the blocks of different key blocks run at once and all
 * add into the same dQ rows, so dQ is accumulated in fp32 (atomicAdd; a
 * post-pass rounds it to the dtype): the order of those additions, and so the
 * last bits of dQ, changes from run to run. deterministic = 1 orders them:
 * the key blocks that see a query block add their share one after another,
 * in key-block order, through a counter per (query head, query block) in the
 * workspace (bwd-dq-order). dK and dV are summed in registers in a fixed
 * order, and version 0 is cuBLAS's fixed-order products, so both are
 * deterministic in either mode. With grouped heads one block loops over the
 * H / H_kv query heads of its key/value head, so dK and dV need no extra
 * reduction.
 *
 * Conventions (mask.h): a row that sees no key (L = -inf) gets a zero dQ row
 * and adds nothing to dK, dV; a key no query sees gets zero dK, dV rows; no
 * NaN for finite inputs. P's exponent S - L is formed first and only then
 * changed to base 2, and clamped at 0 (P <= 1 exactly: L >= S for every key
 * the row sees), so rounding can never make a P above 1 or an infinity.
 *
 * K and V may be any block of a longer sequence's keys (stage 7 calls this
 * once per shard pair): P is rebuilt from the L given, never renormalized
 * over the keys given, and D from the O given, so with O and L of the full
 * row the call returns exactly that block's share of dQ and the block's dK,
 * dV. The mask must then describe the block (seqlen_k = the block's keys).
 *
 * IO model (bytes of slow memory per call; es = element size of the dtype,
 * 4 for fp32, 2 for fp16/bf16; L, D and every accumulator fp32; each kernel
 * reads each operand once and writes its result once, the accounting of
 * stage 1 and stage 3; Sq = seqlen_q, Sk = seqlen_k, g = H / H_kv):
 *
 *   version 0, per key/value head (M = g Sq rows of its query heads):
 *       (28 + 3 es) M Sk                      S, P, dP, dS written and read
 *     + es (5 M d + 3 Sk d)                   Q, K (S), dO, V (dP), dO (dV),
 *                                             O, dO (D), dV written
 *     + 12 M                                  L read, D written and read
 *     + 8 M d + 8 Sk d  (fp32)                dQ, dK products: Q, K read, dQ, dK written
 *     + (16 + 2 es)(M d + Sk d)  (fp16/bf16)  Q, K widened to fp32, read; dQ, dK
 *                                             written in fp32 and narrowed
 *   versions 1 to 3, per query head (R = query rows read, summed over key
 *   blocks = mask_query_rows_read(Br, Bc); Sq Tc without a mask):
 *       es 2 Sq d + 4 Sq                      pre-pass: O, dO read, D written
 *     + 4 Sq d                                dQ accumulator zeroed
 *     + R (2 es d + 8 + 8 d)                  per tile: Q_i, dO_i, L_i, D_i read;
 *                                             dQ_i read and written (atomics)
 *     + (4 + es) Sq d  (fp16/bf16)            post-pass: dQ accumulator -> dQ
 *   plus, per key/value head (Kr = rows of the key blocks some query sees;
 *   Sk without a mask):
 *       2 es Kr d + 2 es Sk d                 K_j, V_j read once, dK, dV written
 *   The deterministic mode's counters (4 bytes per query block) are left out.
 *   Against stage 3's count (elements, one type): in fp32 the model is 4
 *   bytes times stage 3's count plus 8 R' d per query head, R' the rows some
 *   key block adds to (mask_query_rows_active; Sq without a mask): the
 *   accumulator's zeroing and the first key block's dQ read, which stage 3
 *   skips and an atomic addition cannot know to skip. ./stage5 --sweep model
 *   checks it.
 *
 * Tiles: version 1 Br = 64 query rows, Bc = 64 keys (32 when d > 64);
 * version 2 Br = Bc = 64, 4 warps of 16 keys each; version 4 Br = 64,
 * Bc = 128, 8 warps of 16 keys each.
 *
 * What the tiled versions share with version 4 (kernels/stage5_bwd_v4.cu)
 * is in stage5_backward.cuh: bwd_args, P's exponent, the deterministic
 * mode's turns, the tensor-core fragment helpers and the declarations of the
 * tiled launch, workspace and IO model defined here.
 *
 * Build:   make stage5        (the host program src/stage5_main.c links this)
 * Run:     ./stage5 [--kernel K] [--dtype fp32|fp16|bf16] [--deterministic] ...
 * Cost:    2.5 times the forward's FLOPs (5 products of 2 Sq Sk d instead of
 *          2), version 0 needs (4 + es) B H Sq Sk bytes of workspace, versions
 *          1 to 3 O(B H Sq d).
 */
#include "stage5_backward.cuh"

#include <limits.h>

/* ========================================================================= */
/* Shared by every version                                                   */
/* ========================================================================= */

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
 * eighth of the memory's bandwidth at d = 64 (data/gpu/bwd_hopper_steps.md). */
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

/* dst[i] = src[i] in another type (fp32 accumulators to the dtype, or the
 * dtype to fp32 for version 0's fp32 products); round to nearest even. */
template <typename S, typename T>
__global__ void __launch_bounds__(256) bwd_convert_kernel(const S *__restrict__ src, T *__restrict__ dst,
                                                          size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = from_f<T>(to_f(src[i]));
}

/* The same for fp32 accumulators into a 16-bit dtype, eight elements a
 * thread: two 16-byte loads, one 16-byte store. The pass streams 6 bytes an
 * element; one element a thread ran it at a quarter of the memory's
 * bandwidth (data/gpu/bwd_hopper_steps.md). */
template <typename T> __device__ __forceinline__ uint4 pack8(float4 a, float4 b)
{
    return make_uint4(pack2<T>(a.x, a.y), pack2<T>(a.z, a.w), pack2<T>(b.x, b.y), pack2<T>(b.z, b.w));
}

template <typename T>
__global__ void __launch_bounds__(256) bwd_convert8_kernel(const float *__restrict__ src, T *__restrict__ dst,
                                                           size_t n8)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        const float4 a = __ldg(reinterpret_cast<const float4 *>(src) + 2 * i);
        const float4 b = __ldg(reinterpret_cast<const float4 *>(src) + 2 * i + 1);
        reinterpret_cast<uint4 *>(dst)[i] = pack8<T>(a, b);
    }
}

template <typename S, typename T>
static int bwd_convert(const S *src, T *dst, size_t n, cudaStream_t st)
{
    if constexpr (std::is_same<S, float>::value && sizeof(T) == 2) {
        if (n % 8 == 0 && aligned16(src) && aligned16(dst)) {
            const size_t blocks = (n / 8 + 255) / 256;
            bwd_convert8_kernel<T><<<(unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16), 256, 0, st>>>(
                src, dst, n / 8);
            LAUNCH_CHECK();
            return FA_OK;
        }
    }
    const size_t blocks = (n + 255) / 256;
    bwd_convert_kernel<S, T><<<(unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16), 256, 0, st>>>(src, dst, n);
    LAUNCH_CHECK();
    return FA_OK;
}

/* dst = src in the dtype, src contiguous (B, H, Sq, d) fp32, dst through
 * its strides (a dQ that is a (B, seqlen, H, d) view). */
template <typename T>
__global__ void __launch_bounds__(256) bwd_convert_rows_kernel(const float *__restrict__ src, T *__restrict__ dst,
                                                               long long rows, int d, long long H,
                                                               long long Sq, fa_stride s)
{
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const long long i = row % Sq, bh = row / Sq, h = bh % H, b = bh / H;
        T *out = dst + b * s.batch + h * s.head + i * s.row;
        for (int c = threadIdx.x; c < d; c += blockDim.x) out[c] = from_f<T>(src[row * d + c]);
    }
}

/* The same eight elements a thread (bwd_convert8_kernel's loads and
 * store), d / 8 threads a row, for a 16-bit dtype whose rows start on 16
 * bytes. */
template <typename T>
__global__ void __launch_bounds__(256) bwd_convert_rows8_kernel(const float *__restrict__ src, T *__restrict__ dst,
                                                                long long rows, int d, long long H,
                                                                long long Sq, fa_stride s)
{
    const int tpr = d / 8;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < rows * tpr;
         g += (long long)gridDim.x * blockDim.x) {
        const long long row = g / tpr, i = row % Sq, bh = row / Sq, h = bh % H, b = bh / H;
        const int c = (int)(g % tpr) * 8;
        const float4 *in = reinterpret_cast<const float4 *>(src + row * d + c);
        const float4 x = __ldg(in), y = __ldg(in + 1);
        *reinterpret_cast<uint4 *>(dst + b * s.batch + h * s.head + i * s.row + c) = pack8<T>(x, y);
    }
}

template <typename T>
static int bwd_convert_rows(const float *src, T *dst, const attn_params *p, fa_stride s, cudaStream_t st)
{
    const long long rows = (long long)attn_rows(p);
    if constexpr (sizeof(T) == 2) {
        if (p->d % 8 == 0 && aligned16(src) && aligned16(dst) && s.batch % 8 == 0 && s.head % 8 == 0 &&
            s.row % 8 == 0) {
            const long long blocks = (rows * (p->d / 8) + 255) / 256;
            bwd_convert_rows8_kernel<T><<<(unsigned)(blocks < 1 << 20 ? blocks : 1 << 20), 256, 0, st>>>(
                src, dst, rows, p->d, p->H, p->seqlen_q, s);
            LAUNCH_CHECK();
            return FA_OK;
        }
    }
    bwd_convert_rows_kernel<T><<<(unsigned)(rows < 1 << 20 ? rows : 1 << 20), 128, 0, st>>>(
        src, dst, rows, p->d, p->H, p->seqlen_q, s);
    LAUNCH_CHECK();
    return FA_OK;
}

/* Carve a workspace into 256-byte aligned pieces; base NULL only measures. */
struct ws_carver {
    char *base;
    size_t used;
    template <typename X> X *take(size_t count)
    {
        size_t at = used;
        used += (count * sizeof(X) + 255) & ~(size_t)255;
        return base ? reinterpret_cast<X *>(base + at) : nullptr;
    }
};

//> bwd-center
/* Centering K over the keys. Every row of the exact dS sums to zero over the
 * keys the row sees (sum_j P_ij dP_ij = D_i and sum_j P_ij = 1), so
 * dQ_i = softmax_scale sum_j dS_ij (K_j - c) for any vector c; but an error
 * in dS (D formed from the O stored in 16 bits; dS rounded for the tensor-core
 * products) reaches dQ multiplied by K itself, and a large part of K common
 * to all keys multiplies it by that part's size (src/stage3_accuracy.c
 * measures this on the CPU). With c near the mean of K's rows, the backward
 * runs unchanged on K_c = K - c and L'_i = L_i - softmax_scale Q_i . c (the
 * scores drop a constant per row, which L' drops too), so P, dK and dV are
 * those of K, and dQ's errors are multiplied by K_c's size instead.
 *
 * c is per (batch, key/value head) and column k, chosen so that every
 * K_jk - c_k is exact in the dtype: by Sterbenz's lemma x - y is exact when
 * y/2 <= x <= 2 y, so c_k is the column's mean rounded to the dtype and then
 * clamped into [max|K_.k| / 2, 2 min|K_.k|] with the column's sign, and 0
 * where that range is empty (a column that changes sign, holds a zero, or
 * spreads over more than a factor of 4, which centering would not help
 * much). K_c in the dtype is then exactly K shifted: the shift changes
 * nothing but the cancellation. The rule needs only each column's sum,
 * minimum and maximum, so K is read twice:
 *   stats  blocks of BWD_CEN_ROWS keys x BWD_CEN_COLS columns, 16-byte loads,
 *          fp32 sums, minima and maxima per block (row slots reduced in a
 *          fixed order, so a call's c is the same on every run)
 *   mean   the blocks' partials per column in fp64, in block order, and the
 *          rule: c (B, H_kv, d) fp32
 *   shift  K_c = K - c, written once, contiguous, in the dtype
 * and L' comes with D in the pre-pass over the query rows (bwd-dot). */
#define BWD_CEN_ROWS 256
#define BWD_CEN_COLS 128
__device__ __forceinline__ double round_to(double x, float) { return (double)__double2float_rn(x); }
__device__ __forceinline__ double round_to(double x, __half) { return (double)__half2float(__double2half(x)); }
__device__ __forceinline__ double round_to(double x, __nv_bfloat16)
{
    return (double)__bfloat162float(__double2bfloat16(x));
}

/* W consecutive elements at p as fp32: one 16-byte load when W is 16 bytes'
 * worth (p then 16-byte aligned), else one element. */
template <typename T, int W> __device__ __forceinline__ void load_w(const T *p, float *out)
{
    if constexpr (W == 1) out[0] = to_f(*p);
    else load16(p, out);
}

template <typename T, int W>
__global__ void __launch_bounds__(256)
    bwd_center_stats_kernel(const T *__restrict__ K, float *__restrict__ part, int H_kv, int Sk, int d,
                            fa_stride sk, int chunks, size_t plane)
{
    constexpr int GT = BWD_CEN_COLS / W, RS = 256 / GT;   /* column groups, row slots */
    __shared__ float s_sum[RS][BWD_CEN_COLS], s_min[RS][BWD_CEN_COLS], s_max[RS][BWD_CEN_COLS];
    const int bh = blockIdx.x, chunk = blockIdx.y, c0 = blockIdx.z * BWD_CEN_COLS;
    const int g = threadIdx.x % GT, r = threadIdx.x / GT, col = c0 + g * W;
    const int j0 = chunk * BWD_CEN_ROWS, j1 = min(Sk, j0 + BWD_CEN_ROWS);
    const T *k = K + (long long)(bh / H_kv) * sk.batch + (long long)(bh % H_kv) * sk.head + col;
    float sum[W], mn[W], mx[W];
#pragma unroll
    for (int w = 0; w < W; w++) sum[w] = 0.f, mn[w] = INFINITY, mx[w] = -INFINITY;
    if (col < d)   /* W > 1 only when W divides d */
        for (int j = j0 + r; j < j1; j += RS) {
            float x[W];
            load_w<T, W>(k + (long long)j * sk.row, x);
#pragma unroll
            for (int w = 0; w < W; w++) sum[w] += x[w], mn[w] = fminf(mn[w], x[w]), mx[w] = fmaxf(mx[w], x[w]);
        }
#pragma unroll
    for (int w = 0; w < W; w++) s_sum[r][g * W + w] = sum[w], s_min[r][g * W + w] = mn[w], s_max[r][g * W + w] = mx[w];
    __syncthreads();
    const int t = threadIdx.x;
    if (t < BWD_CEN_COLS && c0 + t < d) {
        float a = 0.f, lo = INFINITY, hi = -INFINITY;
        for (int q = 0; q < RS; q++) a += s_sum[q][t], lo = fminf(lo, s_min[q][t]), hi = fmaxf(hi, s_max[q][t]);
        const size_t at = ((size_t)bh * chunks + chunk) * d + c0 + t;
        part[at] = a;
        part[plane + at] = lo;
        part[2 * plane + at] = hi;
    }
}

/* The rule of the header for one column: mean of the sum, range [lo, hi]. A
 * NaN or infinity anywhere in the column (fminf, fmaxf skip NaN; the sum does
 * not) leaves it uncentered. */
template <typename T> __device__ double bwd_center_of(double mean, float lo, float hi)
{
    if (!isfinite(mean) || !isfinite(lo) || !isfinite(hi) || (lo <= 0.f && hi >= 0.f)) return 0.0;
    const bool neg = hi < 0.f;
    const double amin = neg ? -(double)hi : lo, amax = neg ? -(double)lo : hi;   /* range of |K_jk| */
    double m = fmin(fmax(round_to(fabs(mean), T()), amax / 2), 2 * amin);
    if (m < amax / 2 || round_to(m, T()) != m) return 0.0;   /* empty range; a bound not in the dtype */
    return neg ? -m : m;
}

template <typename T>
__global__ void __launch_bounds__(128)
    bwd_center_mean_kernel(const float *__restrict__ part, float *__restrict__ c, int Sk, int d, int chunks,
                           size_t plane)
{
    const int bh = blockIdx.y, col = blockIdx.x * 128 + threadIdx.x;
    if (col >= d) return;
    double s = 0;
    float lo = INFINITY, hi = -INFINITY;
    for (int q = 0; q < chunks; q++) {
        const size_t at = ((size_t)bh * chunks + q) * d + col;
        s += part[at];
        lo = fminf(lo, part[plane + at]);
        hi = fmaxf(hi, part[2 * plane + at]);
    }
    c[(size_t)bh * d + col] = (float)bwd_center_of<T>(s / Sk, lo, hi);
}

/* K_c = K - c, exact (the rule), W elements a thread, written contiguous. */
template <typename T, int W>
__global__ void __launch_bounds__(256)
    bwd_center_shift_kernel(const T *__restrict__ K, const float *__restrict__ c, T *__restrict__ Kc, int H_kv,
                            int Sk, int d, fa_stride sk, long long n_vec)
{
    const int G = d / W;
    for (long long v = (long long)blockIdx.x * 256 + threadIdx.x; v < n_vec; v += (long long)gridDim.x * 256) {
        const int g = (int)(v % G);
        const long long row = v / G, bh = row / Sk;   /* row of (B, H_kv, Sk) */
        const int j = (int)(row % Sk);
        const T *src = K + (bh / H_kv) * sk.batch + (bh % H_kv) * sk.head + j * sk.row + g * W;
        const float *cc = c + bh * d + g * W;
        float x[W];
        load_w<T, W>(src, x);
        if constexpr (W == 1) {
            Kc[row * d + g] = from_f<T>(x[0] - cc[0]);
        } else {
            uint4 raw;
            T *e = reinterpret_cast<T *>(&raw);
#pragma unroll
            for (int w = 0; w < W; w++) e[w] = from_f<T>(x[w] - cc[w]);
            *reinterpret_cast<uint4 *>(Kc + row * d + g * W) = raw;
        }
    }
}
//< bwd-center

/* The centering's workspace, a piece of every version's (bwd_center_carve):
 * K_c in the dtype, the stats kernel's partials (sum, min, max planes of
 * B H_kv chunks d floats), c, L'. */
struct bwd_center_ws {
    void *Kc;
    float *part, *c, *Lc;
};
static int bwd_center_chunks(const attn_params *p) { return (p->seqlen_k + BWD_CEN_ROWS - 1) / BWD_CEN_ROWS; }
static size_t bwd_center_plane(const attn_params *p)
{
    return (size_t)p->B * p->H_kv * bwd_center_chunks(p) * p->d;
}
static void bwd_center_carve(ws_carver *c, int dtype, const attn_params *p, bwd_center_ws *w)
{
    w->Kc = c->take<char>(attn_kv_numel(p) * fa_dtype_bytes(dtype));
    w->part = c->take<float>(3 * bwd_center_plane(p));
    w->c = c->take<float>((size_t)p->B * p->H_kv * p->d);
    w->Lc = c->take<float>(attn_rows(p));
}

/* Whether a backward call centers K: fa_api.cu has turned FA_BWD_CENTER_AUTO
 * into FA_BWD_CENTER_K or nothing (fa_bwd_center_cost); centering needs keys. */
static inline bool bwd_centers(int flags, const attn_params *p)
{
    return (flags & FA_BWD_CENTER_K) && p->seqlen_k > 0;
}

/* c and K_c from K read through its strides sk (stats, mean, shift). */
template <typename T>
static int bwd_center_k(const attn_params *p, const T *K, fa_stride sk, const bwd_center_ws &w, cudaStream_t st)
{
    const int chunks = bwd_center_chunks(p), tiles = (p->d + BWD_CEN_COLS - 1) / BWD_CEN_COLS;
    const long long bhk = (long long)p->B * p->H_kv;
    if (chunks > 65535 || tiles > 65535)
        return fa_set_error(FA_ERR_UNSUPPORTED, "backward: centering K takes seqlen_k < %d and d < %d",
                            65535 * BWD_CEN_ROWS, 65535 * BWD_CEN_COLS);
    const size_t plane = bwd_center_plane(p);
    constexpr int V = vec16<T>::n;
    const bool vec = aligned16(K) && p->d % V == 0 && sk.batch % V == 0 && sk.head % V == 0 && sk.row % V == 0;
    const dim3 grid((unsigned)bhk, (unsigned)chunks, (unsigned)tiles);
    const int Hk = p->H_kv, Sk = p->seqlen_k, d = p->d;
    if (vec) bwd_center_stats_kernel<T, V><<<grid, 256, 0, st>>>(K, w.part, Hk, Sk, d, sk, chunks, plane);
    else bwd_center_stats_kernel<T, 1><<<grid, 256, 0, st>>>(K, w.part, Hk, Sk, d, sk, chunks, plane);
    LAUNCH_CHECK();
    bwd_center_mean_kernel<T><<<dim3((unsigned)((d + 127) / 128), (unsigned)bhk), 128, 0, st>>>(
        w.part, w.c, Sk, d, chunks, plane);
    LAUNCH_CHECK();
    const long long n_vec = (long long)attn_kv_numel(p) / (vec ? V : 1);
    const unsigned blocks = (unsigned)((n_vec + 255) / 256 < (1 << 20) ? (n_vec + 255) / 256 : (1 << 20));
    if (vec) bwd_center_shift_kernel<T, V><<<blocks, 256, 0, st>>>(K, w.c, (T *)w.Kc, Hk, Sk, d, sk, n_vec);
    else bwd_center_shift_kernel<T, 1><<<blocks, 256, 0, st>>>(K, w.c, (T *)w.Kc, Hk, Sk, d, sk, n_vec);
    LAUNCH_CHECK();
    return FA_OK;
}

/* core/fa_gpu.h states the rule and its constants; the bytes are those of
 * bwd_center_k and bwd_prepass above, the rate the version's row's. */
extern "C" double fa_bwd_center_cost(int version, int dtype, const attn_params *p)
{
    const fa_version_info *v = fa_version(FA_BACKWARD, version);
    if (!v) return INFINITY;
    const double es = (double)fa_dtype_bytes(dtype), d = p->d;
    const double kv = (double)p->B * p->H_kv * p->seqlen_k * d, rows = (double)attn_rows(p);
    const double bytes = es * (3 * kv + rows * d) + 8 * rows + 2 * 12.0 * (double)bwd_center_plane(p);
    const double flops = fa_flops(FA_BACKWARD, p);
    if (!(flops > 0)) return INFINITY;
    const double rate = v->center_rate > 0 ? v->center_rate : FA_BWD_CENTER_RATE;
    return (bytes / FA_BWD_CENTER_BW + FA_BWD_CENTER_LAUNCH_S) / (flops / rate);
}
extern "C" int fa_bwd_center_auto(int version, int dtype, const attn_params *p)
{
    return p->seqlen_k > 0 && fa_bwd_center_cost(version, dtype, p) < FA_BWD_CENTER_MAX_COST;
}

/* The pre-pass of every version: D (fp32, B H Sq) from dO and O, and when
 * the flags center K, c and K_c first and L' with D. On return *K, *L and
 * *sk are what the version's kernel must read: K_c (contiguous) and L', or
 * x's K, its strides and L. A version calls this once before its kernel
 * and carves bwd_center_ws into its workspace; nothing else of the
 * centering is version-specific. */
template <typename T>
static int bwd_prepass(const attn_params *p, const fa_ptrs *x, int flags, float *D, const bwd_center_ws &w,
                       const T **K, const float **L, fa_stride *sk, cudaStream_t st)
{
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

/* The same pre-pass for a version of another file (stage5_backward.cuh):
 * its workspace piece at cen, bwd_center_bytes long. */
size_t bwd_center_bytes(int dtype, const attn_params *p)
{
    ws_carver c = {nullptr, 0};
    bwd_center_ws w;
    bwd_center_carve(&c, dtype, p, &w);
    return c.used;
}
template <typename T>
int bwd_prepass_at(const attn_params *p, const fa_ptrs *x, int flags, float *D, void *cen, const T **K,
                   const float **L, fa_stride *sk, cudaStream_t st)
{
    ws_carver c = {(char *)cen, 0};
    bwd_center_ws w;
    const int dtype = std::is_same<T, float>::value ? FA_FP32 : std::is_same<T, __half>::value ? FA_FP16 : FA_BF16;
    bwd_center_carve(&c, dtype, p, &w);
    return bwd_prepass<T>(p, x, flags, D, w, K, L, sk, st);
}
#define BWD_PREPASS_AT(T)                                                                                    \
    template int bwd_prepass_at<T>(const attn_params *, const fa_ptrs *, int, float *, void *, const T **,   \
                                   const float **, fa_stride *, cudaStream_t);
BWD_PREPASS_AT(float)
BWD_PREPASS_AT(__half)
BWD_PREPASS_AT(__nv_bfloat16)

/* ========================================================================= */
/* Version 0: the materialized baseline                                      */
/* ========================================================================= */

//> bwd-v0-probs
/* P = exp(S - L) where the mask lets query i see key j, 0 elsewhere; one
 * block per row of S (already scaled, fp32), P in the dtype. With grouped
 * heads the rows of one key/value head's query heads are consecutive, and
 * row r of the whole problem is query i = r mod seqlen_q. */
template <typename T>
__global__ void __launch_bounds__(256)
    bwd_v0_probs_kernel(const float *__restrict__ S, T *__restrict__ P, const float *__restrict__ L,
                        long long rows, int Sq, int Sk, attn_mask m, bool masked)
{
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        int i = (int)(row % Sq);
        float l = lse_guard(L[row]);
        const float *s = S + row * Sk;
        T *p = P + row * Sk;
        for (int j = threadIdx.x; j < Sk; j += blockDim.x) {
            bool visible = !masked || mask_visible(m, i, j);
            p[j] = from_f<T>(visible ? expf(fminf(s[j] - l, 0.f)) : 0.f);
        }
    }
}

/* dS = P (dP - D) in place over dP (fp32), from the P the dV product used.
 * A zero P gives a zero dS even if dP is not finite (0 * inf is NaN). */
template <typename T>
__global__ void __launch_bounds__(256)
    bwd_v0_ds_kernel(float *__restrict__ dPdS, const T *__restrict__ P, const float *__restrict__ D,
                     long long rows, int Sk)
{
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        float Di = D[row];
        float *x = dPdS + row * Sk;
        const T *p = P + row * Sk;
        for (int j = threadIdx.x; j < Sk; j += blockDim.x) {
            float pj = to_f(p[j]);
            x[j] = pj == 0.f ? 0.f : pj * (x[j] - Di);
        }
    }
}
//< bwd-v0-probs

static cudaDataType_t bwd_cuda_type(int dtype)
{
    return dtype == FA_FP32 ? CUDA_R_32F : dtype == FA_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* Version 0's workspace: S/dP/dS (fp32), P (dtype), D, and for fp16/bf16
 * fp32 copies of Q, K and fp32 dQ, dK for the two fp32 products. */
struct v0_ws {
    float *A;           /* (B, H, Sq, Sk): S, then dP, then dS */
    void *P;            /* (B, H, Sq, Sk) in the dtype */
    float *D;           /* (B, H, Sq) */
    float *Q32, *K32;   /* fp16/bf16 only */
    float *dQ32, *dK32;
    bwd_center_ws cen;  /* centering (bwd-center) */
};
static size_t v0_ws_carve(int dtype, const attn_params *p, void *base, v0_ws *w)
{
    ws_carver c = {(char *)base, 0};
    size_t es = fa_dtype_bytes(dtype), sqk = attn_rows(p) * (size_t)p->seqlen_k;
    w->A = c.take<float>(sqk);
    w->P = c.take<char>(sqk * es);
    w->D = c.take<float>(attn_rows(p));
    w->Q32 = w->K32 = w->dQ32 = w->dK32 = nullptr;
    if (dtype != FA_FP32) {
        w->Q32 = c.take<float>(attn_q_numel(p));
        w->K32 = c.take<float>(attn_kv_numel(p));
        w->dQ32 = c.take<float>(attn_q_numel(p));
        w->dK32 = c.take<float>(attn_kv_numel(p));
    }
    bwd_center_carve(&c, dtype, p, &w->cen);
    return c.used;
}
static size_t v0_bwd_workspace(int dtype, const attn_params *p)
{
    v0_ws w;
    return v0_ws_carve(dtype, p, nullptr, &w);
}

//> bwd-v0-launch
/* Version 0. cuBLAS is column-major: a row-major (rows, cols) matrix is a
 * column-major cols x rows one. The g = H / H_kv query heads of one
 * key/value head are consecutive in Q, dO, dQ, so the M = g Sq rows of a
 * group are one matrix and one strided-batched call over the B H_kv groups
 * does each product; dV = P^T dO and dK = dS^T Q then sum over the group's
 * query heads inside the product. */
template <typename T>
static int v0_backward_t(int dtype, const attn_params *p, const fa_ptrs *x, int flags, cudaStream_t st)
{
    v0_ws w;
    v0_ws_carve(dtype, p, x->workspace, &w);
    const int Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d, batch = p->B * p->H_kv;
    const int M = (p->H / p->H_kv) * Sq;
    const long long mk = (long long)M * Sk, md = (long long)M * d, kd = (long long)Sk * d;
    const long long rows = (long long)p->B * p->H * Sq;
    const T *Q = (const T *)x->q, *V = (const T *)x->v, *dO = (const T *)x->do_;
    T *P = (T *)w.P;
    cublasHandle_t h;
    if (int rc = fa_cublas(&h, st)) return rc;
    const cudaDataType_t t = bwd_cuda_type(dtype), f32 = CUDA_R_32F;
    const float scale = (float)p->softmax_scale, one = 1.f, zero = 0.f;
    const unsigned row_blocks = (unsigned)(rows < 1 << 30 ? rows : 1 << 30);
    const attn_mask m = attn_mask_of(p);

    /* K, L: x's, or K_c and L' when centered; version 0 takes contiguous
     * tensors only (fa_api.cu), as K_c is */
    const T *K;
    const float *L;
    fa_stride sk;
    if (int rc = bwd_prepass<T>(p, x, flags, w.D, w.cen, &K, &L, &sk, st)) return rc;
    /* FA_BWD_DQ_PASS: D from fp32 P and dP, for dK */
    if (flags & FA_BWD_DQ_PASS) {
        if (int rc = bwd_dq_pass_check(dtype, p, x)) return rc;
        if (int rc = bwd_dq_pass<T>(0, p, x, K, sk, L, w.D, st)) return rc;
    }
    /* S = softmax_scale Q K^T, fp32 out: a scaled logit beyond 65504 must
     * not become an fp16 infinity. */
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, Sk, M, d, &scale, K, t, d, kd,
                                          Q, t, d, md, &zero, w.A, f32, Sk, mk, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    bwd_v0_probs_kernel<T><<<row_blocks, 256, 0, st>>>(w.A, P, L, rows, Sq, Sk, m,
                                                       attn_is_masked(p));
    LAUNCH_CHECK();
    /* dV = P^T dO */
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, d, Sk, M, &one, dO, t, d, md,
                                          P, t, Sk, mk, &zero, x->dv, t, d, kd, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    /* dP = dO V^T, fp32, over S */
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, Sk, M, d, &one, V, t, d, kd,
                                          dO, t, d, md, &zero, w.A, f32, Sk, mk, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    bwd_v0_ds_kernel<T><<<row_blocks, 256, 0, st>>>(w.A, P, w.D, rows, Sk);
    LAUNCH_CHECK();
    /* dQ = scale dS K and dK = scale dS^T Q with dS in fp32: cuBLAS takes
     * one type for both factors, so Q and K are widened to fp32 first. */
    const float *Q32 = (const float *)x->q, *K32 = (const float *)K;   /* K_c when centered */
    float *dQ32 = (float *)x->dq, *dK32 = (float *)x->dk;
    if (dtype != FA_FP32) {
        if (int rc = bwd_convert<T, float>(Q, w.Q32, attn_q_numel(p), st)) return rc;
        if (int rc = bwd_convert<T, float>(K, w.K32, attn_kv_numel(p), st)) return rc;
        Q32 = w.Q32; K32 = w.K32; dQ32 = w.dQ32; dK32 = w.dK32;
    }
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, d, M, Sk, &scale, K32, f32, d,
                                          kd, w.A, f32, Sk, mk, &zero, dQ32, f32, d, md, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, d, Sk, M, &scale, Q32, f32, d,
                                          md, w.A, f32, Sk, mk, &zero, dK32, f32, d, kd, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (dtype != FA_FP32) {
        if (int rc = bwd_convert<float, T>(w.dQ32, (T *)x->dq, attn_q_numel(p), st)) return rc;
        if (int rc = bwd_convert<float, T>(w.dK32, (T *)x->dk, attn_kv_numel(p), st)) return rc;
    }
    /* P went through the dtype before dS: the pass's dQ replaces this one */
    if (flags & FA_BWD_DQ_PASS) return bwd_dq_pass<T>(1, p, x, K, sk, L, w.D, st);
    return FA_OK;
}
//< bwd-v0-launch

static int v0_backward(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic,
                       cudaStream_t st)
{
    /* cuBLAS's products and these kernels have a fixed order: deterministic
     * either way; only FA_BWD_CENTER_K is read */
    return fa_dispatch_dtype(dtype, [&](auto zero) {
        using T = decltype(zero);
        return v0_backward_t<T>(dtype, p, x, deterministic, st);
    });
}

/* cuBLAS takes int sizes: the M = (H / H_kv) seqlen_q rows of a group. */
static int v0_bwd_check(int dtype, const attn_params *p)
{
    (void)dtype;
    if ((long long)(p->H / p->H_kv) * p->seqlen_q > INT_MAX)
        return fa_set_error(FA_ERR_UNSUPPORTED, "backward v0: (H / H_kv) seqlen_q = %lld rows "
                            "exceed cuBLAS's int sizes", (long long)(p->H / p->H_kv) * p->seqlen_q);
    return FA_OK;
}

/* The header's formula for version 0, term by term. */
static double v0_bwd_model(int dtype, const attn_params *p, int Br, int Bc)
{
    (void)Br; (void)Bc;
    double es = (double)fa_dtype_bytes(dtype), d = p->d, Sk = p->seqlen_k;
    double M = (double)(p->H / p->H_kv) * p->seqlen_q;
    double per = (28 + 3 * es) * M * Sk + es * (5 * M * d + 3 * Sk * d) + 12 * M;
    per += dtype == FA_FP32 ? 8 * M * d + 8 * Sk * d : (16 + 2 * es) * (M * d + Sk * d);
    return (double)p->B * p->H_kv * per;
}

/* ========================================================================= */
/* Versions 1 and 2: the tiled backward                                      */
/* ========================================================================= */
/* Their kernel arguments (bwd_args), the deterministic mode's turns
 * (bwd-dq-order) and the tensor-core fragment helpers are in
 * stage5_backward.cuh, which version 4 (stage5_bwd_v4.cu) shares. */

/* ------------------------------------------------------------------------- */
/* Version 1: CUDA cores                                                      */
/* ------------------------------------------------------------------------- */
#define BWD_V1_BR 64   /* query rows per tile */

template <int D, int BC> struct v1b_cfg {
    static constexpr int BR = BWD_V1_BR;
    static constexpr int LD = D + 4;     /* fp32 rows of K, V, Q, dO: float4-aligned, banks spread */
    static constexpr int LDP = BC + 4;   /* P tile, row-major BR x BC */
    static constexpr int LDT = BR + 4;   /* dS tile, transposed BC x BR */
    static constexpr size_t smem_bytes()
    {
        return sizeof(float) * (2 * (size_t)BC * LD + 2 * (size_t)BR * LD + (size_t)BR * LDP +
                                (size_t)BC * LDT + 2 * (size_t)BR);
    }
};

//> bwd-v1-kernel
/* One block of 256 threads per (key block j of Bc keys, key/value head);
 * thread (ty, tx), ty, tx = 0..15. Per query block i (Br = 64 rows) of each
 * query head of the group, the chapter's five steps on fp32 tiles:
 *   S, dP  rows 4 ty + r, keys tx + 16 k       (registers, as in the forward)
 *   P, dS  -> shared memory (P row-major, dS transposed)
 *   dV_j += P^T dO_i, dK_j += dS^T Q_i   keys NS ty + c, columns col(e)
 *                                        (registers for the whole block)
 *   dQ_i += dS K_j                       rows 4 ty + r, columns col(e), added
 *                                        to the fp32 accumulator
 * D = head dimension rounded up to a template size, NS = Bc / 16, NO = D / 16
 * columns per thread: 64 (e / 4) + 4 tx + e % 4 when NO % 4 == 0 (float4
 * rows), else NO tx + e. */
template <typename T, int D, int BC>
__global__ void __launch_bounds__(256) bwd_v1_kernel(bwd_args<T> x, bool vec)
{
    using C = v1b_cfg<D, BC>;
    constexpr int BR = C::BR, LD = C::LD, LDP = C::LDP, LDT = C::LDT;
    constexpr int NS = BC / 16, NO = D / 16;
    extern __shared__ float4 smem_bwd1[];
    float *Ks = reinterpret_cast<float *>(smem_bwd1);   /* Bc x LD */
    float *Vs = Ks + BC * LD;                            /* Bc x LD */
    float *Qs = Vs + BC * LD;                            /* Br x LD */
    float *dOs = Qs + BR * LD;                           /* Br x LD */
    float *Ps = dOs + BR * LD;                           /* Br x LDP */
    float *dSt = Ps + BR * LDP;                          /* Bc x LDT */
    float *Ls = dSt + BC * LDT;                          /* Br */
    float *Ds = Ls + BR;                                 /* Br */

    const fa_kargs &a = x.a;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int Sq = a.seqlen_q, Sk = a.seqlen_k, d = a.d;
    const int jb = blockIdx.x, j0 = jb * BC, j1 = min(j0 + BC, Sk);
    const int bkv = blockIdx.y, b = bkv / a.H_kv, hk = bkv % a.H_kv;
    const int Tr = (Sq + BR - 1) / BR;
    auto col = [&](int e) { return NO % 4 == 0 ? 64 * (e / 4) + 4 * tx + (e % 4) : NO * tx + e; };

    float dk[NS][NO], dv[NS][NO];
#pragma unroll
    for (int c = 0; c < NS; c++)
#pragma unroll
        for (int e = 0; e < NO; e++) dk[c][e] = dv[c][e] = 0.f;

    int ib_begin, ib_end;
    if (mask_query_blocks(a.mask, j0, j1, BR, &ib_begin, &ib_end) > 0) {
        load_rows_f32<T, D, BC>(Ks, LD, x.k + (size_t)bkv * Sk * d, j0, Sk, d, vec, 1.f);
        load_rows_f32<T, D, BC>(Vs, LD, x.v + (size_t)bkv * Sk * d, j0, Sk, d, vec, 1.f);
        for (int gi = 0; gi < a.h_per_kv; gi++) {
            const int bh = b * a.H + hk * a.h_per_kv + gi;
            for (int ib = ib_begin; ib < ib_end; ib++) {
                const int i0 = ib * BR, i1 = min(i0 + BR, Sq);
                __syncthreads();   /* the previous tile's Q, dO, P, dS are no longer read */
                load_rows_f32<T, D, BR>(Qs, LD, x.q + (size_t)bh * Sq * d, i0, Sq, d, vec, 1.f);
                load_rows_f32<T, D, BR>(dOs, LD, x.dO + (size_t)bh * Sq * d, i0, Sq, d, vec, 1.f);
                if (threadIdx.x < BR) {
                    int i = i0 + threadIdx.x;
                    Ls[threadIdx.x] = i < Sq ? lse_guard(x.L[(size_t)bh * Sq + i]) : INFINITY;
                    Ds[threadIdx.x] = i < Sq ? x.D[(size_t)bh * Sq + i] : 0.f;
                }
                __syncthreads();

                /* S = Q_i K_j^T and dP = dO_i V_j^T, 4 dimensions per step */
                float s[4][NS], dp[4][NS];
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int k = 0; k < NS; k++) s[r][k] = dp[r][k] = 0.f;
#pragma unroll 2
                for (int e = 0; e < D; e += 4) {
                    float4 q[4], o[4], kk[NS], vv[NS];
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        q[r] = *reinterpret_cast<const float4 *>(Qs + (4 * ty + r) * LD + e);
                        o[r] = *reinterpret_cast<const float4 *>(dOs + (4 * ty + r) * LD + e);
                    }
#pragma unroll
                    for (int k = 0; k < NS; k++) {
                        kk[k] = *reinterpret_cast<const float4 *>(Ks + (tx + 16 * k) * LD + e);
                        vv[k] = *reinterpret_cast<const float4 *>(Vs + (tx + 16 * k) * LD + e);
                    }
#pragma unroll
                    for (int r = 0; r < 4; r++)
#pragma unroll
                        for (int k = 0; k < NS; k++) {
                            s[r][k] = fmaf(q[r].x, kk[k].x, fmaf(q[r].y, kk[k].y,
                                      fmaf(q[r].z, kk[k].z, fmaf(q[r].w, kk[k].w, s[r][k]))));
                            dp[r][k] = fmaf(o[r].x, vv[k].x, fmaf(o[r].y, vv[k].y,
                                       fmaf(o[r].z, vv[k].z, fmaf(o[r].w, vv[k].w, dp[r][k]))));
                        }
                }
                /* P = exp(S - L), masked per element only on partial tiles;
                 * dS = P (dP - D). */
                const bool full = i1 - i0 == BR && j1 - j0 == BC &&
                                  mask_tile_unmasked(a.mask, i0, i1, j0, j1);
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int k = 0; k < NS; k++) {
                        const int rr = 4 * ty + r, cc = tx + 16 * k;
                        float p = exp2f(bwd_exponent2(s[r][k], a.softmax_scale, Ls[rr]));
                        if (!full && !(i0 + rr < Sq && j0 + cc < Sk && mask_visible(a.mask, i0 + rr, j0 + cc)))
                            p = 0.f;
                        Ps[rr * LDP + cc] = p;
                        dSt[cc * LDT + rr] = p * (dp[r][k] - Ds[rr]);
                    }
                __syncthreads();

                /* dV_j += P^T dO_i, dK_j += dS^T Q_i: keys NS ty + c */
#pragma unroll 4
                for (int r = 0; r < BR; r++) {
                    float pv[NS], sv[NS], orow[NO], qrow[NO];
#pragma unroll
                    for (int c = 0; c < NS; c++) {
                        pv[c] = Ps[r * LDP + NS * ty + c];
                        sv[c] = dSt[(NS * ty + c) * LDT + r];
                    }
#pragma unroll
                    for (int e = 0; e < NO; e++) {
                        orow[e] = dOs[r * LD + col(e)];
                        qrow[e] = Qs[r * LD + col(e)];
                    }
#pragma unroll
                    for (int c = 0; c < NS; c++)
#pragma unroll
                        for (int e = 0; e < NO; e++) {
                            dv[c][e] = fmaf(pv[c], orow[e], dv[c][e]);
                            dk[c][e] = fmaf(sv[c], qrow[e], dk[c][e]);
                        }
                }

                /* dQ_i += dS K_j: rows 4 ty + r */
                float dq[4][NO];
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int e = 0; e < NO; e++) dq[r][e] = 0.f;
#pragma unroll 4
                for (int c = 0; c < BC; c++) {
                    float4 sc = *reinterpret_cast<const float4 *>(dSt + c * LDT + 4 * ty);
                    float krow[NO];
#pragma unroll
                    for (int e = 0; e < NO; e++) krow[e] = Ks[c * LD + col(e)];
#pragma unroll
                    for (int e = 0; e < NO; e++) {
                        dq[0][e] = fmaf(sc.x, krow[e], dq[0][e]);
                        dq[1][e] = fmaf(sc.y, krow[e], dq[1][e]);
                        dq[2][e] = fmaf(sc.z, krow[e], dq[2][e]);
                        dq[3][e] = fmaf(sc.w, krow[e], dq[3][e]);
                    }
                }
                const bool ordered = x.deterministic;
                int *sem = x.sem + (size_t)bh * Tr + ib;
                if (ordered) dq_turn_wait(sem, dq_turn(a.mask, i0, i1, BC, jb));
                float *acc = x.dq_acc + (size_t)bh * Sq * d;
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int i = i0 + 4 * ty + r;
                    if (i >= Sq) continue;
#pragma unroll
                    for (int e = 0; e < NO; e++)
                        if (col(e) < d) dq_add(acc + (size_t)i * d + col(e), a.softmax_scale * dq[r][e], ordered);
                }
                if (ordered) dq_turn_pass(sem);
            }
        }
    }
    /* dK_j = softmax_scale dS^T Q summed, dV_j; zero rows for keys nobody sees */
#pragma unroll
    for (int c = 0; c < NS; c++) {
        const int j = j0 + NS * ty + c;
        if (j >= Sk) continue;
#pragma unroll
        for (int e = 0; e < NO; e++)
            if (col(e) < d) {
                x.dk[((size_t)bkv * Sk + j) * d + col(e)] = from_f<T>(a.softmax_scale * dk[c][e]);
                x.dv[((size_t)bkv * Sk + j) * d + col(e)] = from_f<T>(dv[c][e]);
            }
    }
}
//< bwd-v1-kernel

static int v1_bwd_block_rows(int d) { (void)d; return BWD_V1_BR; }
static int v1_bwd_block_cols(int d) { return d > 64 ? 32 : 64; }

template <typename T, int D>
static int v1_bwd_launch_d(const bwd_args<T> &x, dim3 grid, bool vec, cudaStream_t st)
{
    constexpr int BC = D > 64 ? 32 : 64;
    const size_t smem = v1b_cfg<D, BC>::smem_bytes();
    /* Above 48 KB a kernel must ask for its dynamic shared memory. */
    CUDA_TRY(cudaFuncSetAttribute(bwd_v1_kernel<T, D, BC>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    bwd_v1_kernel<T, D, BC><<<grid, 256, smem, st>>>(x, vec);
    LAUNCH_CHECK();
    return FA_OK;
}

template <typename T>
static int v1_bwd_launch(const bwd_args<T> &x, int B, cudaStream_t st)
{
    const int d = x.a.d, Bc = v1_bwd_block_cols(d);
    const dim3 grid((x.a.seqlen_k + Bc - 1) / Bc, (unsigned)(B * x.a.H_kv));
    const bool vec = d % vec16<T>::n == 0 && aligned16(x.q) && aligned16(x.k) && aligned16(x.v) &&
                     aligned16(x.dO);
    if (d <= 16) return v1_bwd_launch_d<T, 16>(x, grid, vec, st);
    if (d <= 32) return v1_bwd_launch_d<T, 32>(x, grid, vec, st);
    if (d <= 64) return v1_bwd_launch_d<T, 64>(x, grid, vec, st);
    if (d <= 80) return v1_bwd_launch_d<T, 80>(x, grid, vec, st);
    if (d <= 96) return v1_bwd_launch_d<T, 96>(x, grid, vec, st);
    return v1_bwd_launch_d<T, 128>(x, grid, vec, st);
}

/* ------------------------------------------------------------------------- */
/* Version 2: tensor cores                                                    */
/* ------------------------------------------------------------------------- */
/* Tiles of Br = 64 query rows and Bc = 64 keys; 4 warps, warp w owns keys
 * 16 w .. 16 w + 15 of the block (its rows of dK_j, dV_j live in its
 * registers). Shared memory (16-bit elements, rows padded by 8 elements so
 * the 8 rows one ldmatrix reads fall in 8 different bank groups): K_j, V_j,
 * two stages of Q_i and dO_i, the dS^T tile, two stages of L_i and D_i; at
 * d = 128 112 KiB, so that two blocks share an SM. */
template <int D> struct v2b_cfg {
    static constexpr int BR = 64, BC = 64, NT = 128;
    static constexpr int LD = D + 8;        /* row stride of K, V, Q, dO tiles */
    static constexpr int LDS = BR + 8;      /* row stride of the dS^T tile */
    static constexpr bool KVREG = D <= 64;  /* K_j, V_j held as A fragments in registers */
    static constexpr size_t smem_bytes()
    {
        return 2 * ((2 * (size_t)BC + 4 * (size_t)BR) * LD + (size_t)BC * LDS) + 4 * 4 * (size_t)BR;
    }
};

/* Deliberate copy: version 3 (stage5_bwd_v4.cu) writes this kernel's
 * two-stage pipeline out again beside its own steps, so that chapter 4b can
 * set the two listings side by side. */
//> bwd-v2-kernel
template <typename T, int D>
__global__ void __launch_bounds__(128, 2) bwd_v2_kernel(bwd_args<T> x)
{
    using C = v2b_cfg<D>;
    constexpr int BR = C::BR, BC = C::BC, LD = C::LD, LDS = C::LDS, DT = D / 8, KD = D / 16;
    constexpr bool KVREG = C::KVREG;
    extern __shared__ uint4 smem_bwd2[];
    T *Ks = reinterpret_cast<T *>(smem_bwd2);   /* Bc x LD */
    T *Vs = Ks + BC * LD;                       /* Bc x LD */
    T *Qs = Vs + BC * LD;                       /* 2 stages of Br x LD */
    T *dOs = Qs + 2 * BR * LD;                  /* 2 stages of Br x LD */
    T *dSs = dOs + 2 * BR * LD;                 /* Bc x LDS: dS^T, [key][query] */
    float *Ls = reinterpret_cast<float *>(dSs + BC * LDS);   /* 2 stages of Br */
    float *Ds = Ls + 2 * BR;                                 /* 2 stages of Br */

    const fa_kargs &a = x.a;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int Sq = a.seqlen_q, Sk = a.seqlen_k;
    const int jb = blockIdx.x, j0 = jb * BC, j1 = min(j0 + BC, Sk);
    const int bkv = blockIdx.y, b = bkv / a.H_kv, hk = bkv % a.H_kv;
    const int Tr = (Sq + BR - 1) / BR;
    const T *Kh = x.k + (size_t)bkv * Sk * D, *Vh = x.v + (size_t)bkv * Sk * D;

    /* The steps: every query block that sees this key block (mask.h), for
     * each query head of the group. */
    int ib_begin, ib_end;
    const int nq = mask_query_blocks(a.mask, j0, j1, BR, &ib_begin, &ib_end);
    const int steps = nq * a.h_per_kv;
    auto head_of = [&](int s) { return b * a.H + hk * a.h_per_kv + s / nq; };
    auto block_of = [&](int s) { return ib_begin + s % nq; };
    auto load_step = [&](int s, int stage) {   /* Q_i, dO_i by cp.async; L_i, D_i by plain loads */
        const int bh = head_of(s), i0 = block_of(s) * BR;
        cp_async_rows<T, D, BR, LD, 128>(Qs + stage * BR * LD, x.q + (size_t)bh * Sq * D, i0, Sq);
        cp_async_rows<T, D, BR, LD, 128>(dOs + stage * BR * LD, x.dO + (size_t)bh * Sq * D, i0, Sq);
        const int r = threadIdx.x & (BR - 1), i = i0 + r;
        if (threadIdx.x < BR) Ls[stage * BR + r] = i < Sq ? lse_guard(x.L[(size_t)bh * Sq + i]) : INFINITY;
        else Ds[stage * BR + r] = i < Sq ? x.D[(size_t)bh * Sq + i] : 0.f;
    };

    float dk[DT][4], dv[DT][4];
#pragma unroll
    for (int c = 0; c < DT; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[c][e] = dv[c][e] = 0.f;
    unsigned kf[KVREG ? KD : 1][4], vf[KVREG ? KD : 1][4];

    if (steps > 0) {
        cp_async_rows<T, D, BC, LD, 128>(Ks, Kh, j0, Sk);
        cp_async_rows<T, D, BC, LD, 128>(Vs, Vh, j0, Sk);
        load_step(0, 0);
        cp_async_commit();
    }
    for (int s = 0; s < steps; s++) {
        const int stage = s & 1;
        if (s + 1 < steps) {   /* the next step's tiles fly while this one computes */
            load_step(s + 1, stage ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if constexpr (KVREG)
            if (s == 0) bwd_load_kv_frags<T, KD, LD>(kf, vf, Ks, Vs, warp, lane);
        const int bh = head_of(s), ib = block_of(s), i0 = ib * BR, i1 = min(i0 + BR, Sq);
        const T *Qt = Qs + stage * BR * LD, *dOt = dOs + stage * BR * LD;
        const float *Lt = Ls + stage * BR, *Dt = Ds + stage * BR;
        const bool full = i1 - i0 == BR && j1 - j0 == BC && mask_tile_unmasked(a.mask, i0, i1, j0, j1);

        /* Steps 1-5 (bwd_key_half) on the tile's queries in two halves of 32 */
#pragma unroll
        for (int half = 0; half < 2; half++)
            bwd_key_half<T, D, LD, LDS, KVREG, false, false>(dk, dv, kf, vf, Ks, Vs, Qt, dOt, Lt, Dt, dSs, 32 * half,
                                                            i0, j0 + 16 * warp, Sq, Sk, full, a, warp, lane);
        __syncthreads();

        /* 6. dQ_i += softmax_scale dS K_j: warp w takes query rows 16 w..16 w + 15,
         * A = dS read transposed from dS^T, B = K_j (ldmatrix.trans), 16
         * columns at a time, each added into the fp32 accumulator */
        unsigned qa[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            ldsm_x4_t(qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3],
                      dSs + (kk * 16 + (lane & 7) + (lane >> 4) * 8) * LDS + 16 * warp + ((lane >> 3) & 1) * 8);
        const bool ordered = x.deterministic;
        int *sem = x.sem + (size_t)bh * Tr + ib;
        if (ordered) dq_turn_wait(sem, dq_turn(a.mask, i0, i1, BC, jb));
        const int r0 = i0 + 16 * warp + g;
        float *acc_r0 = x.dq_acc + ((size_t)bh * Sq + r0) * D, *acc_r8 = acc_r0 + 8 * D;
#pragma unroll
        for (int c2 = 0; c2 < D / 16; c2++) {
            float q0[4] = {0.f, 0.f, 0.f, 0.f}, q1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                unsigned b0, b1, b2, b3;
                ldsm_x4_t(b0, b1, b2, b3,
                          Ks + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + c2 * 16 + (lane >> 4) * 8);
                mma16816<T>(q0, qa[kk], b0, b1);
                mma16816<T>(q1, qa[kk], b2, b3);
            }
            const int c = 16 * c2 + 2 * t;
            const float sc = a.softmax_scale;
            if (r0 < Sq) {
                dq_add2(acc_r0 + c, sc * q0[0], sc * q0[1], ordered);
                dq_add2(acc_r0 + c + 8, sc * q1[0], sc * q1[1], ordered);
            }
            if (r0 + 8 < Sq) {
                dq_add2(acc_r8 + c, sc * q0[2], sc * q0[3], ordered);
                dq_add2(acc_r8 + c + 8, sc * q1[2], sc * q1[3], ordered);
            }
        }
        if (ordered) dq_turn_pass(sem);
        __syncthreads();   /* this stage's tiles and dS^T are rewritten next */
    }

    /* dK_j, dV_j: zero for keys nobody sees */
    bwd_store_dkdv<T, D>(x, dk, dv, bkv, j0 + 16 * warp, Sk, lane);
}
//< bwd-v2-kernel

template <typename T, int D>
static int v2_bwd_launch_d(const bwd_args<T> &x, int B, cudaStream_t st)
{
    const size_t smem = v2b_cfg<D>::smem_bytes();
    CUDA_TRY(cudaFuncSetAttribute(bwd_v2_kernel<T, D>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((x.a.seqlen_k + v2b_cfg<D>::BC - 1) / v2b_cfg<D>::BC, (unsigned)(B * x.a.H_kv));
    bwd_v2_kernel<T, D><<<grid, v2b_cfg<D>::NT, smem, st>>>(x);
    LAUNCH_CHECK();
    return FA_OK;
}

template <typename T>
static int v2_bwd_launch(const bwd_args<T> &x, int B, cudaStream_t st)
{
    return bwd_dispatch_d16(x.a.d, [&](auto dd) { return v2_bwd_launch_d<T, decltype(dd)::value>(x, B, st); });
}

/* ------------------------------------------------------------------------- */
/* The tiled backward: pre-pass, kernel, post-pass                            */
/* ------------------------------------------------------------------------- */
/* Workspace of the tiled versions: D, the fp32 dQ accumulator (fp16/bf16;
 * in fp32 dQ itself accumulates), the counters of the deterministic mode.
 * Every tiled version takes Br = BWD_TILED_BR = 64 query rows, which sizes
 * the counters. */
static_assert(BWD_V1_BR == BWD_TILED_BR && v2b_cfg<64>::BR == BWD_TILED_BR,
              "the deterministic mode's counters are per BWD_TILED_BR query rows");
struct tiled_ws {
    float *D, *dq_acc;
    int *sem;
    bwd_center_ws cen;  /* centering (bwd-center) */
};
/* sems: the counters' count, 0 for the dense problem's B H Tr (a varlen
 * call's p is the packed problem as one batch, packed_problem below) */
static size_t tiled_ws_carve(int dtype, const attn_params *p, void *base, tiled_ws *w, size_t sems = 0)
{
    ws_carver c = {(char *)base, 0};
    const size_t Tr = (size_t)(p->seqlen_q + BWD_TILED_BR - 1) / BWD_TILED_BR;
    w->D = c.take<float>(attn_rows(p));
    w->dq_acc = dtype == FA_FP32 ? nullptr : c.take<float>(attn_q_numel(p));
    w->sem = c.take<int>(sems ? sems : (size_t)p->B * p->H * Tr);
    bwd_center_carve(&c, dtype, p, &w->cen);
    return c.used;
}
size_t tiled_bwd_workspace(int dtype, const attn_params *p)
{
    tiled_ws w;
    return tiled_ws_carve(dtype, p, nullptr, &w);
}

/* Packed sequences: the rows of every sequence as one batch (B = 1,
 * seqlen = total), the shape D, the dQ accumulator and the post-pass see;
 * and the deterministic mode's counters, one per slot of core/varlen.h's
 * block map per query head. */
static attn_params packed_problem(const attn_params *p, const fa_varlen *vl)
{
    attn_params q = *p;
    q.B = 1;
    q.seqlen_q = vl->total_q;
    q.seqlen_k = vl->total_k;
    return q;
}
static size_t varlen_sems(const attn_params *p, const fa_varlen *vl)
{
    return (size_t)p->H * varlen_slots(vl->total_q, p->B, BWD_TILED_BR);
}
size_t tiled_bwd_workspace_varlen(int dtype, const attn_params *p, const fa_varlen *vl)
{
    tiled_ws w;
    const attn_params q = packed_problem(p, vl);
    return tiled_ws_carve(dtype, &q, nullptr, &w, varlen_sems(p, vl));
}

//> bwd-tiled-launch
template <typename T>
int tiled_backward(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic, cudaStream_t st,
                   bwd_launch_fn<T> launch, bool ds16)
{
    return tiled_backward_vl<T>(dtype, p, nullptr, x, deterministic, st, launch, ds16);
}

/* (vl: packed sequences; the rows D, the accumulator and the post-pass
 * touch are those of the packed problem, pk; the kernel gets p and the
 * arrays) */
template <typename T>
int tiled_backward_vl(int dtype, const attn_params *p0, const fa_varlen *vl, const fa_ptrs *x, int deterministic,
                      cudaStream_t st, bwd_launch_fn<T> launch, bool ds16)
{
    if (vl && (bwd_centers(deterministic, p0) || (deterministic & FA_BWD_DQ_PASS)))
        return fa_set_error(FA_ERR_UNSUPPORTED, "FA_BWD_CENTER_K and FA_BWD_DQ_PASS (accurate_dq) take no "
                            "variable lengths: K's mean would be per sequence");
    const bool dq_pass = (deterministic & FA_BWD_DQ_PASS) != 0;
    if (dq_pass)
        if (int rc = bwd_dq_pass_check(dtype, p0, x)) return rc;
    const attn_params pk = vl ? packed_problem(p0, vl) : *p0;
    const attn_params *p = &pk;
    tiled_ws w;
    tiled_ws_carve(dtype, p, x->workspace, &w, vl ? varlen_sems(p0, vl) : 0);
    bwd_args<T> a;
    a.q = (const T *)x->q; a.k = (const T *)x->k; a.v = (const T *)x->v; a.dO = (const T *)x->do_;
    a.L = x->softmax_lse; a.D = w.D;
    a.dq_acc = dtype == FA_FP32 ? (float *)x->dq : w.dq_acc;
    a.dk = (T *)x->dk; a.dv = (T *)x->dv;
    a.sem = w.sem; a.deterministic = (deterministic & FA_BWD_DETERMINISTIC) != 0;
    a.a = fa_kargs_make(p0);   /* varlen: the longest sequences (the grid), the window */
    const size_t nq = attn_q_numel(p);
    fa_stride s[8];
    fa_strides_of(p, x, s);   /* (varlen: x's, resolved by fa_api.cu) */
    a.sq = s[0]; a.sv = s[2]; a.sdo = s[4]; a.sdk = s[6]; a.sdv = s[7];
    a.cu_q = vl ? vl->cu_seqlens_q : nullptr;
    a.cu_k = vl ? vl->cu_seqlens_k : nullptr;
    a.total_q = vl ? vl->total_q : 0;
    a.total_k = vl ? vl->total_k : 0;
    const long long Tr = (p0->seqlen_q + BWD_TILED_BR - 1) / BWD_TILED_BR;
    a.l_batch = vl ? 0 : (long long)p->H * p->seqlen_q;
    a.l_head = vl ? vl->total_q : p->seqlen_q;
    a.sem_batch = vl ? 0 : p->H * Tr;
    a.sem_head = vl ? (long long)varlen_slots(vl->total_q, p0->B, BWD_TILED_BR) : Tr;
    const size_t sems = vl ? varlen_sems(p0, vl) : (size_t)p->B * p->H * Tr;
    /* D; with K centered also a.k = K_c (contiguous), a.L = L' */
    if (int rc = bwd_prepass<T>(p, x, deterministic, w.D, w.cen, &a.k, &a.L, &a.sk, st)) return rc;
    /* FA_BWD_DQ_PASS: D from fp32 P and dP for the kernel, and (ds16) the
     * kernel's dQ replaced by the pass's instead of converted */
    if (dq_pass)
        if (int rc = bwd_dq_pass<T>(0, p, x, a.k, a.sk, a.L, w.D, st)) return rc;
    CUDA_TRY(cudaMemsetAsync(a.dq_acc, 0, nq * sizeof(float), st));
    if (a.deterministic) CUDA_TRY(cudaMemsetAsync(w.sem, 0, sems * sizeof(int), st));
    int rc = launch(a, p0->B, st);
    if (dq_pass && ds16 && rc == FA_OK) return bwd_dq_pass<T>(1, p, x, a.k, a.sk, a.L, w.D, st);
    if constexpr (!std::is_same<T, float>::value) {
        if (vl && rc == FA_OK) {
            /* the varlen kernels accumulate in the packed layout (total_q, H,
             * d): one conversion when dQ is packed too, else row by row, the
             * rows seen as (total_q, H, 1, d) */
            if (s[5].head == p->d && s[5].row == (int64_t)p->H * p->d) {
                rc = bwd_convert<float, T>(w.dq_acc, (T *)x->dq, nq, st);
            } else {
                attn_params pr = *p;
                pr.B = vl->total_q;
                pr.seqlen_q = 1;
                rc = bwd_convert_rows<T>(w.dq_acc, (T *)x->dq, &pr, fa_stride{s[5].row, s[5].head, p->d}, st);
            }
        } else if (rc == FA_OK && s[5].row == p->d && s[5].head == (int64_t)p->seqlen_q * p->d &&
            s[5].batch == (int64_t)p->H * p->seqlen_q * p->d)
            rc = bwd_convert<float, T>(w.dq_acc, (T *)x->dq, nq, st);
        else if (rc == FA_OK)   /* dQ strided: row by row */
            rc = bwd_convert_rows<T>(w.dq_acc, (T *)x->dq, p, s[5], st);
    }
    return rc;
}
//< bwd-tiled-launch
template int tiled_backward<float>(int, const attn_params *, const fa_ptrs *, int, cudaStream_t,
                                   bwd_launch_fn<float>, bool);
template int tiled_backward<__half>(int, const attn_params *, const fa_ptrs *, int, cudaStream_t,
                                    bwd_launch_fn<__half>, bool);
template int tiled_backward<__nv_bfloat16>(int, const attn_params *, const fa_ptrs *, int, cudaStream_t,
                                           bwd_launch_fn<__nv_bfloat16>, bool);
template int tiled_backward_vl<__half>(int, const attn_params *, const fa_varlen *, const fa_ptrs *, int,
                                       cudaStream_t, bwd_launch_fn<__half>, bool);
template int tiled_backward_vl<__nv_bfloat16>(int, const attn_params *, const fa_varlen *, const fa_ptrs *, int,
                                              cudaStream_t, bwd_launch_fn<__nv_bfloat16>, bool);

static int v1_backward(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic,
                       cudaStream_t st)
{
    return fa_dispatch_dtype(dtype, [&](auto zero) {
        using T = decltype(zero);
        return tiled_backward<T>(dtype, p, x, deterministic, st, v1_bwd_launch<T>, false);
    });
}

static int v2_backward(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic,
                       cudaStream_t st)
{
    return tiled_backward_mma("v2", dtype, p, x, deterministic, st, v2_bwd_launch<__half>,
                              v2_bwd_launch<__nv_bfloat16>);
}

static int v2_bwd_block_rows(int d) { (void)d; return v2b_cfg<64>::BR; }
static int v2_bwd_block_cols(int d) { (void)d; return v2b_cfg<64>::BC; }

/* The header's formula for the tiled versions (1, 2, 3). Kr: rows of the
 * key blocks that some query sees (mask.h; the others only write zero dK,
 * dV). */
double tiled_bwd_model(int dtype, const attn_params *p, int Br, int Bc)
{
    const attn_mask m = attn_mask_of(p);
    double es = (double)fa_dtype_bytes(dtype), d = p->d, Sq = p->seqlen_q, Sk = p->seqlen_k;
    double R = (double)mask_query_rows_read(m, Br, Bc), Kr = (double)mask_key_rows_active(m, Bc);
    double per_q = es * 2 * Sq * d + 4 * Sq + 4 * Sq * d + R * (2 * es * d + 8 + 8 * d);
    if (dtype != FA_FP32) per_q += (4 + es) * Sq * d;
    double per_kv = 2 * es * Kr * d + 2 * es * Sk * d;
    return (double)p->B * (p->H * per_q + p->H_kv * per_kv);
}

/* ========================================================================= */
/* The three rows of the table of versions                                   */
/* ========================================================================= */
/* One shape by design, as the forward's rows in stage4_forward.cu: each row
 * stands beside its kernel and names every field. */
const fa_row fa_row_bwd_v0 = {.info = {.pass = FA_BACKWARD, .version = 0, .name = "v0",
    .what = "materialized (cuBLAS; S, dP, dS in fp32)", .dtypes = FA_DT(FA_FP32) | FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 1, .d_max = 1 << 20, .d_multiple = 1, .masks = 1, .deterministic = 1, .min_cc = 0, .slug = "materialized", .strided = 0},
    .run = v0_backward, .check = v0_bwd_check, .workspace = v0_bwd_workspace, .block_rows = nullptr, .block_cols = nullptr, .model_bytes = v0_bwd_model};
const fa_row fa_row_bwd_v1 = {.info = {.pass = FA_BACKWARD, .version = 1, .name = "v1",
    .what = "tiled (smem tiles, fp32 CUDA cores, dQ atomics)", .dtypes = FA_DT(FA_FP32) | FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 16, .d_max = 128, .d_multiple = 1, .masks = 1, .deterministic = 1, .min_cc = 0, .slug = "tiled", .strided = 0},
    .run = v1_backward, .check = nullptr, .workspace = tiled_bwd_workspace, .block_rows = v1_bwd_block_rows, .block_cols = v1_bwd_block_cols, .model_bytes = tiled_bwd_model};
const fa_row fa_row_bwd_v2 = {.info = {.pass = FA_BACKWARD, .version = 2, .name = "v2",
    .what = "tiled, tensor cores (mma.sync m16n8k16, FlashAttention-2 schedule)", .dtypes = FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 16, .d_max = 128, .d_multiple = 16, .masks = 1, .deterministic = 1, .min_cc = 80, .slug = "mma", .strided = 0, .center_rate = 162e12},
    .run = v2_backward, .check = nullptr, .workspace = tiled_bwd_workspace, .block_rows = v2_bwd_block_rows, .block_cols = v2_bwd_block_cols, .model_bytes = tiled_bwd_model};
