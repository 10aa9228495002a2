/*
 * stage8_decode.cu -- stage 8 on the GPU: decoding against a paged KV cache
 * (decode_plan.h), split-KV, grouped heads, the partials merged by merge.h's
 * rule. The interface is core/fa_decode.h.
 *
 * Two kernels:
 *   decode_split_kernel  one CTA (one warp group, 128 threads) per (split s,
 *                        key/value head g, sequence b), and per chunk of
 *                        MR = 64 of the group's rows when G seqlen_q > 64.
 *                        Its rows are the G query heads of the group times
 *                        the seqlen_q query rows (the M dimension), so each
 *                        K/V tile it loads serves the whole group: the cache
 *                        is read once per group, not once per query head.
 *                        Tiles of BT = 32 keys come in as 16-byte vectors,
 *                        each key row looked up in the block table; the next
 *                        tile's loads are issued into registers before the
 *                        current tile is computed, so that they are in
 *                        flight during the arithmetic. Scores, the online
 *                        softmax (stage 2's update, one warp per row) and
 *                        O += P V in fp32; the end writes O (the dtype) and
 *                        L directly when num_splits = 1, else the partial
 *                        (O_s, L_s) in fp32.
 *   decode_combine_kernel one CTA of d threads per query row: the
 *                        num_splits partials merged in split order into an
 *                        empty accumulator with merge_plan_of/merge_elem
 *                        (merge.h, in double, as stage 7's ring merge), then
 *                        rounded once to the dtype.
 * With num_splits = 1 the combine does not run; with more splits, a
 * sequence whose keys all fall in split 0 gets split 0's fp32 result back
 * unchanged (the other partials are empty: MERGE_TAKE_B then MERGE_KEEP_A),
 * rounded the same way: bit for bit what one split writes.
 *
 * Bytes (HBM): the visible cache rows once per (group, row chunk), Q once
 * per split with a key, the partials written and read (fp32, d + 1 per row
 * and split), O and L once: stage8_decode.h's model on the CPU with these
 * element sizes. The arithmetic is a few FLOPs per byte: the kernel is meant
 * to be bound by the cache's bytes, and the split count (decode_num_splits,
 * told how many of these CTAs an SM holds at once) is what gives a small
 * batch enough CTAs to keep every SM loading.
 */
#include "gpu_common.cuh"
#include "merge.h"
#include "fa_decode.h"

namespace {

constexpr int THREADS = 128;   /* one warp group */
constexpr int MR = 64;         /* the group's rows per CTA */
constexpr int BT = 32;         /* keys per tile */
static_assert(DECODE_BLOCK_N % BT == 0, "a split holds whole tiles");

struct decode_kargs {
    decode_params p;           /* sizes, window, softmax_scale */
    int G, chunks, num_splits, page_shift;
    float softmax_scale;
};

/* Eight 2-byte elements of a 16-byte vector, widened to fp32. */
template <typename T> __device__ __forceinline__ void unpack8(uint4 raw, float *out)
{
    const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
    for (int u = 0; u < 8; u++) out[u] = to_f(e[u]);
}

//> decode-split-kernel
template <typename T, int D>
__global__ void __launch_bounds__(THREADS)
    decode_split_kernel(decode_kargs a, const T *__restrict__ Q, const T *__restrict__ Kc,
                        const T *__restrict__ Vc, const int *__restrict__ table,
                        const int *__restrict__ lens, T *__restrict__ O, float *__restrict__ L,
                        float *__restrict__ O_part, float *__restrict__ L_part)
{
    /* A row of D + 8 elements: 16 bytes of padding put the rows of one
     * 16-byte access phase (8 threads, 8 different keys) on different
     * banks. */
    constexpr int DP = D + 8, VR = D / 8;
    constexpr int LOADS = BT * VR / THREADS;    /* 16-byte vectors of K (and V) per thread per tile */
    constexpr int STEP = THREADS / D;           /* rows between one thread's output elements */
    constexpr int ACC = MR / STEP;              /* output elements per thread */
    static_assert(BT * VR % THREADS == 0 && THREADS % D == 0, "tile shape");
    __shared__ __align__(16) T Qs[MR * DP];
    __shared__ __align__(16) T Ks[BT * DP];
    __shared__ __align__(16) T Vs[BT * DP];
    __shared__ float Ps[MR][BT + 1];             /* scores, then probabilities */
    __shared__ float rs[MR];                     /* per row: alpha, then 1 / l */
    __shared__ float ms[MR], ls[MR];             /* per row: running max m and denominator l */

    const decode_params &p = a.p;
    const int s = blockIdx.x, g = blockIdx.y / a.chunks, chunk = blockIdx.y % a.chunks, b = blockIdx.z;
    const int tid = threadIdx.x, Sq = p.seqlen_q, H = p.H;
    const int r0 = chunk * MR, M = min(MR, a.G * Sq - r0);
    const int len = lens[b];
    int lo, hi, k0, k1;
    decode_key_range(&p, len, &lo, &hi);
    decode_split_range(hi - lo, a.num_splits, s, &k0, &k1);
    k0 += lo;
    k1 += lo;
    const attn_mask mask = decode_mask(&p, len);
    const int *pages = table + (size_t)b * p.pages_per_seq;
    const int pmask = p.page_size - 1;

    /* The chunk's query rows; row r is head g G + (r0 + r) / Sq, query (r0 + r) % Sq. */
    if (k1 > k0)
        for (int v = tid; v < M * VR; v += THREADS) {
            int r = v / VR, c = v % VR, R = r0 + r;
            size_t row = ((size_t)b * H + g * a.G + R / Sq) * Sq + R % Sq;
            *reinterpret_cast<uint4 *>(&Qs[r * DP + c * 8]) =
                __ldg(reinterpret_cast<const uint4 *>(Q + row * D + c * 8));
        }

    if (tid < MR) {                              /* no key seen yet */
        ms[tid] = -INFINITY;
        ls[tid] = 0.f;
    }
    float acc[ACC];
#pragma unroll
    for (int u = 0; u < ACC; u++) acc[u] = 0.f;
    const int col = tid % D, rsub = tid / D;     /* output column; rows rsub + u STEP */

    /* K and V rows of keys [j0, j0 + BT) as 16-byte vectors into registers;
     * keys past the split's end are zero (a probability 0 times a finite 0). */
    uint4 kr[LOADS], vr[LOADS];
    auto fetch = [&](int j0) {
#pragma unroll
        for (int u = 0; u < LOADS; u++) {
            int v = tid + u * THREADS, c = v / VR, q = v % VR, j = j0 + c;
            if (j < k1) {
                size_t at = ((((size_t)pages[j >> a.page_shift] << a.page_shift) + (j & pmask)) * p.H_kv + g) * D +
                            q * 8;
                kr[u] = __ldg(reinterpret_cast<const uint4 *>(Kc + at));
                vr[u] = __ldg(reinterpret_cast<const uint4 *>(Vc + at));
            } else {
                kr[u] = vr[u] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
    };

    const int ntiles = (k1 - k0 + BT - 1) / BT;
    if (ntiles > 0) fetch(k0);
    for (int t = 0; t < ntiles; t++) {
        const int j0 = k0 + t * BT;
        __syncthreads();   /* the previous tile is consumed (and Qs is written) */
#pragma unroll
        for (int u = 0; u < LOADS; u++) {
            int v = tid + u * THREADS, c = v / VR, q = v % VR;
            *reinterpret_cast<uint4 *>(&Ks[c * DP + q * 8]) = kr[u];
            *reinterpret_cast<uint4 *>(&Vs[c * DP + q * 8]) = vr[u];
        }
        __syncthreads();
        if (t + 1 < ntiles) fetch(j0 + BT);   /* in flight while this tile is computed */

        /* S = softmax_scale Q K^T on the visible pairs, -inf elsewhere */
        for (int e = tid; e < M * BT; e += THREADS) {
            int r = e / BT, c = e % BT, j = j0 + c;
            float x = -INFINITY;
            if (j < k1 && mask_visible(mask, (r0 + r) % Sq, j)) {
                float dot = 0.f;
#pragma unroll
                for (int q = 0; q < VR; q++) {
                    float qf[8], kf[8];
                    unpack8<T>(*reinterpret_cast<const uint4 *>(&Qs[r * DP + q * 8]), qf);
                    unpack8<T>(*reinterpret_cast<const uint4 *>(&Ks[c * DP + q * 8]), kf);
#pragma unroll
                    for (int w = 0; w < 8; w++) dot = fmaf(qf[w], kf[w], dot);
                }
                x = dot * a.softmax_scale;
            }
            Ps[r][c] = x;
        }
        __syncthreads();

        /* stage 2's update, one warp per row and one lane per key (BT = 32):
         * the row's max and sum by shuffles; a row that has seen no key yet
         * keeps alpha = 1 and adds nothing */
        for (int r = tid / 32; r < M; r += THREADS / 32) {   /* the same r in every lane */
            const int lane = tid % 32;
            float x = Ps[r][lane], m_old = ms[r], mx = x;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            mx = fmaxf(mx, m_old);
            float pc = mx == -INFINITY ? 0.f : expf(x - mx), sum = pc;
            Ps[r][lane] = pc;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            __syncwarp();   /* every lane has read ms[r] before lane 0 writes it */
            if (lane == 0) {
                float al = mx == -INFINITY ? 1.f : expf(m_old - mx);
                ls[r] = ls[r] * al + sum;
                ms[r] = mx;
                rs[r] = al;
            }
        }
        __syncthreads();

        /* O = alpha O + P V */
#pragma unroll
        for (int u = 0; u < ACC; u++) {
            if (rsub + u * STEP >= M) break;
            acc[u] *= rs[rsub + u * STEP];
        }
        for (int c = 0; c < BT; c++) {
            float v = to_f(Vs[c * DP + col]);
#pragma unroll
            for (int u = 0; u < ACC; u++) {
                if (rsub + u * STEP >= M) break;
                acc[u] = fmaf(Ps[rsub + u * STEP][c], v, acc[u]);
            }
        }
    }

    /* O = o / l, L = m + log l; a row that saw no key: O = 0, L = -inf */
    __syncthreads();
    const size_t rows_all = (size_t)p.B * H * Sq;
    if (tid < M) {
        int R = r0 + tid;
        size_t row = ((size_t)b * H + g * a.G + R / Sq) * Sq + R % Sq;
        float l = ls[tid];
        bool empty = l == 0.f;
        float Lr = empty ? -INFINITY : ms[tid] + logf(l);
        rs[tid] = empty ? 0.f : 1.f / l;
        if (a.num_splits == 1) L[row] = Lr;
        else L_part[(size_t)s * rows_all + row] = Lr;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < ACC; u++) {
        int r = rsub + u * STEP;
        if (r >= M) break;
        int R = r0 + r;
        size_t row = ((size_t)b * H + g * a.G + R / Sq) * Sq + R % Sq;
        float o = acc[u] * rs[r];
        if (a.num_splits == 1) O[row * D + col] = from_f<T>(o);
        else O_part[((size_t)s * rows_all + row) * D + col] = o;
    }
}
//< decode-split-kernel

//> decode-combine-kernel
/* One CTA of D threads per query row; thread k holds element k. */
template <typename T, int D>
__global__ void __launch_bounds__(D) decode_combine_kernel(size_t rows, int num_splits,
                                                           const float *__restrict__ O_part,
                                                           const float *__restrict__ L_part,
                                                           T *__restrict__ O, float *__restrict__ L)
{
    size_t row = blockIdx.x;
    int k = threadIdx.x;
    double o = 0.0, Lacc = -INFINITY;   /* the empty result */
    for (int s = 0; s < num_splits; s++) {
        merge_plan m = merge_plan_of(Lacc, (double)L_part[(size_t)s * rows + row]);
        o = merge_elem(m, o, (double)O_part[((size_t)s * rows + row) * D + k]);
        Lacc = m.L;
    }
    O[row * D + k] = from_f<T>((float)o);
    if (k == 0) L[row] = (float)Lacc;
}
//< decode-combine-kernel

template <typename T, int D>
int launch(const decode_kargs &a, const fa_decode_ptrs *x, cudaStream_t st)
{
    const decode_params &p = a.p;
    dim3 grid((unsigned)a.num_splits, (unsigned)(p.H_kv * a.chunks), (unsigned)p.B);
    float *Op = static_cast<float *>(x->workspace);
    size_t rows = (size_t)p.B * p.H * p.seqlen_q;
    float *Lp = a.num_splits > 1 ? Op + (size_t)a.num_splits * rows * D : nullptr;
    decode_split_kernel<T, D><<<grid, THREADS, 0, st>>>(
        a, static_cast<const T *>(x->q), static_cast<const T *>(x->k_cache), static_cast<const T *>(x->v_cache),
        x->block_table, x->cache_seqlens, static_cast<T *>(x->o), x->softmax_lse, a.num_splits > 1 ? Op : nullptr,
        Lp);
    LAUNCH_CHECK();
    if (a.num_splits > 1) {
        decode_combine_kernel<T, D><<<(unsigned)rows, D, 0, st>>>(rows, a.num_splits, Op, Lp,
                                                                 static_cast<T *>(x->o), x->softmax_lse);
        LAUNCH_CHECK();
    }
    return FA_OK;
}

int chunks_of(const decode_params *p) { return ((p->H / p->H_kv) * p->seqlen_q + MR - 1) / MR; }

} // namespace

extern "C" int fa_decode_rows_per_cta(void) { return MR; }

extern "C" int fa_decode_ctas_per_sm(int dtype, int d)
{
    int n = 0;
    cudaError_t e = cudaErrorInvalidValue;
    if (dtype == FA_FP16 && d == 64)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_split_kernel<__half, 64>, THREADS, 0);
    else if (dtype == FA_FP16 && d == 128)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_split_kernel<__half, 128>, THREADS, 0);
    else if (dtype == FA_BF16 && d == 64)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_split_kernel<__nv_bfloat16, 64>, THREADS, 0);
    else if (dtype == FA_BF16 && d == 128)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_split_kernel<__nv_bfloat16, 128>, THREADS, 0);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();   /* no GPU here: the rule's one-CTA view */
        return 1;
    }
    return n > 0 ? n : 1;
}

extern "C" int fa_decode_num_splits(int dtype, const decode_params *p, int max_seqlen_k, int sm_count)
{
    return decode_num_splits(p->B, p->H_kv, max_seqlen_k, sm_count, fa_decode_ctas_per_sm(dtype, p->d));
}

extern "C" size_t fa_decode_workspace_bytes(const decode_params *p, int num_splits)
{
    if (num_splits <= 1) return 0;
    return (size_t)num_splits * p->B * p->H * p->seqlen_q * (size_t)(p->d + 1) * sizeof(float);
}

extern "C" int fa_decode_check(int dtype, const decode_params *p, int num_splits)
{
    char why[256];
    if (decode_params_check(p, why, sizeof why)) return fa_set_error(FA_ERR_UNSUPPORTED, "%s", why);
    if (dtype != FA_FP16 && dtype != FA_BF16)
        return fa_set_error(FA_ERR_UNSUPPORTED, "--dtype %s: the decode kernels run fp16 and bf16",
                            fa_dtype_name(dtype));
    if (p->d != 64 && p->d != 128)
        return fa_set_error(FA_ERR_UNSUPPORTED, "--d %d: the decode kernels take d = 64 or 128", p->d);
    if (p->page_size < 16 || p->page_size > 256)
        return fa_set_error(FA_ERR_UNSUPPORTED, "--page-size %d: the decode kernels take pages of 16 to 256 keys",
                            p->page_size);
    if (decode_splits_check(num_splits, why, sizeof why)) return fa_set_error(FA_ERR_UNSUPPORTED, "%s", why);
    if (p->B > 65535 || (long)p->H_kv * chunks_of(p) > 65535)
        return fa_set_error(FA_ERR_UNSUPPORTED, "--batch %d, --kv-heads %d: more CTAs than a grid dimension holds",
                            p->B, p->H_kv);
    if ((size_t)p->B * p->H * p->seqlen_q > 0x7fffffffu)
        return fa_set_error(FA_ERR_UNSUPPORTED, "%d x %d x %d query rows: too many for one launch", p->B, p->H,
                            p->seqlen_q);
    return FA_OK;
}

extern "C" int fa_decode(int dtype, const decode_params *p, int num_splits, const fa_decode_ptrs *x, void *stream)
{
    int rc = fa_decode_check(dtype, p, num_splits);
    if (rc != FA_OK) return rc;
    size_t need = fa_decode_workspace_bytes(p, num_splits);
    if (need && (!x->workspace || x->workspace_bytes < need))
        return fa_set_error(FA_ERR_UNSUPPORTED, "fa_decode: %d splits need %zu bytes of workspace, got %zu",
                            num_splits, need, x->workspace ? x->workspace_bytes : (size_t)0);
    if (!aligned16(x->q) || !aligned16(x->k_cache) || !aligned16(x->v_cache) || !aligned16(x->o) ||
        !aligned16(x->workspace))
        return fa_set_error(FA_ERR_UNSUPPORTED, "fa_decode: q, k_cache, v_cache, o and the workspace must be "
                                                "16-byte aligned");
    decode_kargs a;
    a.p = *p;
    a.G = p->H / p->H_kv;
    a.chunks = chunks_of(p);
    a.num_splits = num_splits;
    a.page_shift = __builtin_ctz((unsigned)p->page_size);
    a.softmax_scale = (float)p->softmax_scale;
    cudaStream_t st = (cudaStream_t)stream;
    if (dtype == FA_FP16) return p->d == 64 ? launch<__half, 64>(a, x, st) : launch<__half, 128>(a, x, st);
    return p->d == 64 ? launch<__nv_bfloat16, 64>(a, x, st) : launch<__nv_bfloat16, 128>(a, x, st);
}
