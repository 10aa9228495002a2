/*
 * stage5_bwd_center.cu -- centering K over the keys for the backward
 * (FA_BWD_CENTER_K, --accurate-dq): why and how in bwd-center below; the
 * pieces of workspace it takes (bwd_center_bytes, bwd_center_carve), the
 * three kernels' launch (bwd_center_k, called by the pre-pass,
 * stage5_bwd_prepass.cu), and the host rule that decides when
 * FA_BWD_CENTER_AUTO centers (fa_bwd_center_cost, fa_bwd_center_auto; core/
 * fa_gpu.h states it).
 */
#include "stage5_backward.cuh"

//> bwd-center
/* Centering K over the keys. Every row of the exact dS sums to zero over the
 * keys the row sees (sum_j P_ij dP_ij = D_i and sum_j P_ij = 1), so
 * dQ_i = softmax_scale sum_j dS_ij (K_j - c) for any vector c; but an error
 * in dS (D formed from the O stored in 16 bits; dS rounded for the tensor-core
 * products) reaches dQ multiplied by K itself, and a large part of K common
 * to all keys multiplies it by that part's size (src/cpu/stage3_accuracy.c
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

static int bwd_center_chunks(const attn_params *p) { return (p->seqlen_k + BWD_CEN_ROWS - 1) / BWD_CEN_ROWS; }
static size_t bwd_center_plane(const attn_params *p)
{
    return (size_t)p->B * p->H_kv * bwd_center_chunks(p) * p->d;
}
static void bwd_center_take(ws_carver *c, int dtype, const attn_params *p, bwd_center_ws *w)
{
    w->Kc = c->take<char>(attn_kv_numel(p) * fa_dtype_bytes(dtype));
    w->part = c->take<float>(3 * bwd_center_plane(p));
    w->c = c->take<float>((size_t)p->B * p->H_kv * p->d);
    w->Lc = c->take<float>(attn_rows(p));
}
bwd_center_ws bwd_center_carve(int dtype, const attn_params *p, void *cen)
{
    ws_carver c = {(char *)cen, 0};
    bwd_center_ws w;
    bwd_center_take(&c, dtype, p, &w);
    return w;
}
size_t bwd_center_bytes(int dtype, const attn_params *p)
{
    ws_carver c = {nullptr, 0};
    bwd_center_ws w;
    bwd_center_take(&c, dtype, p, &w);
    return c.used;
}

/* c and K_c from K read through its strides sk (stats, mean, shift). */
template <typename T>
int bwd_center_k(const attn_params *p, const T *K, fa_stride sk, const bwd_center_ws &w, cudaStream_t st)
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
template int bwd_center_k<float>(const attn_params *, const float *, fa_stride, const bwd_center_ws &, cudaStream_t);
template int bwd_center_k<__half>(const attn_params *, const __half *, fa_stride, const bwd_center_ws &,
                                  cudaStream_t);
template int bwd_center_k<__nv_bfloat16>(const attn_params *, const __nv_bfloat16 *, fa_stride,
                                         const bwd_center_ws &, cudaStream_t);

/* core/fa_gpu.h states the rule and its constants; the bytes are those of
 * bwd_center_k above and bwd_prepass (stage5_bwd_prepass.cu), the rate the version's row's. */
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
