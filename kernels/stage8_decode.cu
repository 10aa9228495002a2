/*
 * stage8_decode.cu -- stage 8 on the GPU: decoding against a paged KV cache
 * (decode_plan.h), split-KV, grouped heads, the partials merged by merge.h's
 * rule. The interface is core/fa_decode.h.
 *
 * The kernel is bound by one thing, the bytes of the cache; everything in it
 * is arranged so that those bytes stream in at the memory's rate:
 *
 *   - read once: one CTA per (row chunk, split s, key/value head g,
 *     sequence b) holds all the rows of the group, its G = H / H_kv query
 *     heads times the seqlen_q new rows (up to RT = 16 rows: a decoding step
 *     of up to 16 heads per group, or 4 heads with 4 drafted rows), so each
 *     K and V row is loaded once for all of them. A larger group takes
 *     ceil(G seqlen_q / 16) CTAs; they are adjacent in the grid and run
 *     together, so the repeats are served by the L2.
 *   - wide and coalesced: every load is 16 bytes; a warp's loads of a key
 *     row cover it in 64-byte (K) or 128-byte (V) runs, every sector whole.
 *   - enough in flight: by Little's law an SM must have about 4.3 TB/s x
 *     ~0.8 us / 132 SMs = ~26 KB of loads outstanding. Each of the four
 *     warps of a CTA takes its own 16 of every 64 keys and keeps the next
 *     keys' loads in flight while it computes on the current ones (K's
 *     next loads go out as soon as the scores are done with K's registers,
 *     V's as soon as P V is done with V's): about 8 KB per warp, two or
 *     three CTAs (8 to 12 warps) per SM.
 *   - arithmetic off the critical path: the products run on the tensor
 *     cores, mma.sync m16n8k16 with the group's rows as M (padded to 16),
 *     straight from the registers the loads filled (no shared memory on the
 *     way in; see the fragment layout below). The online softmax is stage
 *     2's, in the base-2 form (exp2 of scores pre-scaled by log2 e).
 *   - splits fill the GPU: decode_num_splits (decode_plan.h) cuts the keys
 *     so that B H_kv num_splits CTAs fill the SMs' slots, each split at
 *     least two 64-key blocks long.
 *
 * Each warp ends with its own partial state (m, l, o) for the 16 rows over
 * its keys; the four are merged through shared memory (stage 2's form of the
 * merge rule: rescale by exp2(m_w - max m), add), giving the CTA's result
 * over the split. With num_splits = 1 the CTA writes O (the dtype) and L
 * directly, else the partial (O_s, L_s) in fp32, and decode_combine_kernel
 * merges the partials of each row. The combine is launched with
 * programmatic dependent launch: it is scheduled while the split kernel
 * runs and waits (griddepcontrol.wait) for the split kernel's writes, so no
 * launch gap separates the two.
 *
 * With num_splits > 1, a sequence whose keys all fall in split 0 gets split
 * 0's fp32 result back unchanged (weight exactly 1, the other partials
 * empty), rounded once as one split rounds it: bit for bit what one split
 * writes.
 *
 * Bytes (HBM): the visible cache rows once per (group, row chunk), Q once
 * per split with a key, the partials written and read (fp32, d + 1 per row
 * and split), O and L once: stage8_decode.h's model on the CPU with these
 * element sizes.
 */
#include "gpu_common.cuh"
#include "merge.h"
#include "fa_decode.h"

namespace {

constexpr int WARPS = 4, THREADS = 32 * WARPS;
constexpr int RT = 16;   /* the group's rows per CTA: the M of one m16n8k16 tile */
constexpr int KB = 16;   /* keys per warp step: two n8 tiles of S, the k16 of P V */
static_assert(DECODE_BLOCK_N == WARPS * KB, "one 64-key block is one step of the four warps");

struct decode_kargs {
    decode_params p;           /* sizes, window, softmax_scale */
    int G, chunks, num_splits, page_shift;
    float scale_log2;          /* softmax_scale log2(e): the scores in base 2 */
};

/* D += A B on the tensor cores for one warp (PTX mma.sync.m16n8k16, fp32
 * accumulators): A 16 x 16 in a[4], B 16 x 8 in b0, b1, D 16 x 8 in c[4],
 * two 16-bit elements per 32-bit register. Lane = 4 gr + tq holds
 *   a[0]: A[gr][2tq, 2tq+1]   a[1]: A[gr+8][2tq, 2tq+1]
 *   a[2]: A[gr][2tq+8, +9]    a[3]: A[gr+8][2tq+8, +9]
 *   b0:   B[2tq, 2tq+1][gr]   b1:   B[2tq+8, +9][gr]
 *   c:    D[gr][2tq], D[gr][2tq+1], D[gr+8][2tq], D[gr+8][2tq+1]. */
template <typename T> __device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma16816<__nv_bfloat16>(float *c, const uint32_t *a, uint32_t b0,
                                                                    uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma16816<__half>(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two fp32 values rounded to the dtype (to nearest even), lo in the low half. */
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* Programmatic dependent launch (sm_90): the split kernel lets the combine
 * be scheduled once all its CTAs are running; the combine waits for the
 * split kernel's completion (and its writes) before it reads a partial. */
__device__ __forceinline__ void pdl_launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

//> decode-split-kernel
/* Word w (0..3) of a 16-byte vector: elements 2w (low half) and 2w + 1. */
__device__ __forceinline__ uint32_t word_of(const uint4 &v, int w)
{
    return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

/* The fragments come straight from 16-byte loads, by two free choices:
 *  - S = Q K^T sums over d in any order, so the k16 columns of step kk =
 *    2m + h are taken as the d's that make each lane's fragment one 16-byte
 *    load: lane (gr, tq) loads chunk 4m + tq (elements 8(4m + tq) .. + 7) of
 *    its Q rows gr, gr + 8 and of its keys gr, gr + 8 of the 16; words x, y
 *    are step 2m's registers, z, w step 2m + 1's.
 *  - O = P V: S's accumulator tiles are already P's A fragment (keys 2tq,
 *    2tq + 1 and 2tq + 8, + 9 of the 16: the classic register reuse); V's B
 *    fragment wants two keys' values of one column in a register, so a lane
 *    loads chunk gr + 8h of those four keys and pairs them with one byte
 *    permute (prmt) per register. Column n of O's tile j = 8h + e is then
 *    d = 8(n + 8h) + e.
 * Each lane issues 16-byte loads only: K as 8 rows x 64 contiguous bytes per
 * warp instruction, V as 4 rows x 128 bytes. */
template <typename T, int D>
__global__ void __launch_bounds__(THREADS, 2)
    decode_split_kernel(decode_kargs a, const T *__restrict__ Q, const T *__restrict__ Kc,
                        const T *__restrict__ Vc, const int *__restrict__ table,
                        const int *__restrict__ lens, T *__restrict__ O, float *__restrict__ L,
                        float *__restrict__ O_part, float *__restrict__ L_part)
{
    constexpr int KM = D / 32;    /* 16-byte chunks of a K (and Q) row per lane */
    constexpr int VH = D / 64;    /* 16-byte chunks of a V row per lane */
    constexpr int NT = D / 8;     /* n8 tiles of O's columns */
    constexpr int OP = D + 4;     /* shared row of the warps' merge, padded against bank conflicts */
    static_assert(D % 64 == 0 && THREADS % D == 0, "d = 64 or 128");
    __shared__ float Os[WARPS][RT][OP];          /* each warp's o, unnormalized */
    __shared__ float Ms[WARPS][RT], Ls[WARPS][RT];   /* each warp's m (base 2) and l */

    const decode_params &p = a.p;
    const int chunk = blockIdx.x % a.chunks, s = blockIdx.x / a.chunks, g = blockIdx.y, b = blockIdx.z;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
    const int Sq = p.seqlen_q, H = p.H;
    const int r0 = chunk * RT, M = min(RT, a.G * Sq - r0);
    const int len = lens[b];
    int lo, hi, k0, k1;
    decode_key_range(&p, len, &lo, &hi);
    decode_split_range(hi - lo, a.num_splits, s, &k0, &k1);
    k0 += lo;
    k1 += lo;
    const attn_mask mask = decode_mask(&p, len);
    const int *pages = table + (size_t)b * p.pages_per_seq;
    const size_t kstride = (size_t)p.H_kv * D;   /* elements from one key row to the next */
    pdl_launch_dependents();

    /* Row r of the chunk is query head g G + (r0 + r) / Sq, query row (r0 + r) % Sq. */
    auto row_of = [&](int r) {
        int R = r0 + r;
        return ((size_t)b * H + (size_t)g * a.G + R / Sq) * Sq + R % Sq;
    };
    const bool vA = gr < M, vB = gr + 8 < M;     /* the lane's rows gr, gr + 8 exist */
    const int iA = (r0 + gr) % Sq, iB = (r0 + gr + 8) % Sq;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);

    /* The 16-key steps of the split, 16-aligned (so that one never crosses a
     * page: pages hold 16 or more keys, a power of two); warp w takes steps
     * w, w + 4, ...; keys outside [k0, k1) are not loaded (zero) and masked. */
    const int a0 = k0 & ~(KB - 1), nsteps = k1 > k0 ? (k1 - a0 + KB - 1) / KB : 0;
    uint4 qa[KM], qb[KM];
#pragma unroll
    for (int m = 0; m < KM; m++) qa[m] = qb[m] = zero;
    if (nsteps > 0)
#pragma unroll
        for (int m = 0; m < KM; m++) {
            if (vA) qa[m] = __ldg(reinterpret_cast<const uint4 *>(Q + row_of(gr) * D + (4 * m + tq) * 8));
            if (vB) qb[m] = __ldg(reinterpret_cast<const uint4 *>(Q + row_of(gr + 8) * D + (4 * m + tq) * 8));
        }

    auto base_of = [&](int j0) {   /* the element offset of key j0's row for head g */
        return (((size_t)pages[j0 >> a.page_shift] << a.page_shift) + (j0 & (p.page_size - 1))) * kstride +
               (size_t)g * D;
    };
    uint4 kr[2][KM], vr[4][VH];
    auto load_k = [&](int j0, size_t base) {   /* keys j0 + 8n + gr, chunks 4m + tq */
#pragma unroll
        for (int n = 0; n < 2; n++) {
            int c = 8 * n + gr, j = j0 + c;
            bool in = j >= k0 && j < k1;
#pragma unroll
            for (int m = 0; m < KM; m++)
                kr[n][m] = in ? __ldg(reinterpret_cast<const uint4 *>(Kc + base + c * kstride + (4 * m + tq) * 8))
                              : zero;
        }
    };
    auto load_v = [&](int j0, size_t base) {   /* keys j0 + 2tq, + 1, + 8, + 9, chunks gr + 8h */
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int c = (u >> 1) * 8 + 2 * tq + (u & 1), j = j0 + c;
            bool in = j >= k0 && j < k1;
#pragma unroll
            for (int h = 0; h < VH; h++)
                vr[u][h] = in ? __ldg(reinterpret_cast<const uint4 *>(Vc + base + c * kstride + (gr + 8 * h) * 8))
                              : zero;
        }
    };

    float mA = -INFINITY, mB = -INFINITY, lA = 0.f, lB = 0.f;   /* rows gr, gr + 8; l is this lane's share */
    float o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    int n = warp;
    if (n < nsteps) {
        size_t base = base_of(a0 + n * KB);
        load_k(a0 + n * KB, base);
        load_v(a0 + n * KB, base);
    }
#pragma unroll 1
    for (; n < nsteps; n += WARPS) {
        const int j0 = a0 + n * KB;
        const bool more = n + WARPS < nsteps;
        const size_t next = more ? base_of(j0 + WARPS * KB) : 0;

        /* S = Q K^T, two n8 tiles of keys */
        float sc[2][4];
#pragma unroll
        for (int t = 0; t < 2; t++) {
            sc[t][0] = sc[t][1] = sc[t][2] = sc[t][3] = 0.f;
#pragma unroll
            for (int m = 0; m < KM; m++) {
                const uint32_t a_lo[4] = {qa[m].x, qb[m].x, qa[m].y, qb[m].y};
                const uint32_t a_hi[4] = {qa[m].z, qb[m].z, qa[m].w, qb[m].w};
                mma16816<T>(sc[t], a_lo, kr[t][m].x, kr[t][m].y);
                mma16816<T>(sc[t], a_hi, kr[t][m].z, kr[t][m].w);
            }
        }
        if (more) load_k(j0 + WARPS * KB, next);   /* K's registers are free: the next keys go out now */

        /* stage 2's update in base 2: the visible scores, each row's new max
         * over its four lanes, alpha, the probabilities; a row that has seen
         * no key keeps alpha = 1 and adds nothing */
        float mxA = mA, mxB = mB;
#pragma unroll
        for (int t = 0; t < 2; t++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int j = j0 + 8 * t + 2 * tq + e;
                bool in = j >= k0 && j < k1;
                sc[t][e] = in && vA && mask_visible(mask, iA, j) ? sc[t][e] * a.scale_log2 : -INFINITY;
                sc[t][2 + e] = in && vB && mask_visible(mask, iB, j) ? sc[t][2 + e] * a.scale_log2 : -INFINITY;
                mxA = fmaxf(mxA, sc[t][e]);
                mxB = fmaxf(mxB, sc[t][2 + e]);
            }
        mxA = fmaxf(mxA, __shfl_xor_sync(0xffffffffu, mxA, 1));
        mxA = fmaxf(mxA, __shfl_xor_sync(0xffffffffu, mxA, 2));
        mxB = fmaxf(mxB, __shfl_xor_sync(0xffffffffu, mxB, 1));
        mxB = fmaxf(mxB, __shfl_xor_sync(0xffffffffu, mxB, 2));
        const float alA = mxA == -INFINITY ? 1.f : exp2f(mA - mxA);
        const float alB = mxB == -INFINITY ? 1.f : exp2f(mB - mxB);
        mA = mxA;
        mB = mxB;
        float sumA = 0.f, sumB = 0.f;
#pragma unroll
        for (int t = 0; t < 2; t++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                sc[t][e] = mxA == -INFINITY ? 0.f : exp2f(sc[t][e] - mxA);
                sc[t][2 + e] = mxB == -INFINITY ? 0.f : exp2f(sc[t][2 + e] - mxB);
                sumA += sc[t][e];
                sumB += sc[t][2 + e];
            }
        lA = lA * alA + sumA;
        lB = lB * alB + sumB;
        const uint32_t pa[4] = {pack2<T>(sc[0][0], sc[0][1]), pack2<T>(sc[0][2], sc[0][3]),
                                pack2<T>(sc[1][0], sc[1][1]), pack2<T>(sc[1][2], sc[1][3])};

        /* O = alpha O + P V */
#pragma unroll
        for (int j = 0; j < NT; j++) {
            o[j][0] *= alA;
            o[j][1] *= alA;
            o[j][2] *= alB;
            o[j][3] *= alB;
        }
#pragma unroll
        for (int h = 0; h < VH; h++)
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const unsigned sel = e & 1 ? 0x7632u : 0x5410u;   /* the high or the low halves */
                uint32_t b0 = __byte_perm(word_of(vr[0][h], e / 2), word_of(vr[1][h], e / 2), sel);
                uint32_t b1 = __byte_perm(word_of(vr[2][h], e / 2), word_of(vr[3][h], e / 2), sel);
                mma16816<T>(o[8 * h + e], pa, b0, b1);
            }
        if (more) load_v(j0 + WARPS * KB, next);   /* and V's */
    }

    /* The four warps' partials merged (stage 2's form: rescale to the
     * largest m, add), then O = o / l and L = m + log l (natural log); a row
     * that saw no key: O = 0, L = -inf. */
    lA += __shfl_xor_sync(0xffffffffu, lA, 1);
    lA += __shfl_xor_sync(0xffffffffu, lA, 2);
    lB += __shfl_xor_sync(0xffffffffu, lB, 1);
    lB += __shfl_xor_sync(0xffffffffu, lB, 2);
#pragma unroll
    for (int j = 0; j < NT; j++) {
        int c = 8 * (2 * tq + 8 * (j / 8)) + j % 8;
        Os[warp][gr][c] = o[j][0];
        Os[warp][gr][c + 8] = o[j][1];
        Os[warp][gr + 8][c] = o[j][2];
        Os[warp][gr + 8][c + 8] = o[j][3];
    }
    if (tq == 0) {
        Ms[warp][gr] = mA;
        Ms[warp][gr + 8] = mB;
        Ls[warp][gr] = lA;
        Ls[warp][gr + 8] = lB;
    }
    __syncthreads();
    const size_t rows_all = (size_t)p.B * H * Sq;
    const int col = threadIdx.x % D;
    for (int r = threadIdx.x / D; r < M; r += THREADS / D) {
        float mx = -INFINITY, l = 0.f, acc = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; w++) mx = fmaxf(mx, Ms[w][r]);
#pragma unroll
        for (int w = 0; w < WARPS; w++)
            if (Ms[w][r] != -INFINITY) {
                float f = exp2f(Ms[w][r] - mx);
                l = fmaf(f, Ls[w][r], l);
                acc = fmaf(f, Os[w][r][col], acc);
            }
        const bool empty = l == 0.f;
        const float out = empty ? 0.f : acc / l;
        const float Lr = empty ? -INFINITY : (mx + log2f(l)) * 0.69314718055994531f;
        const size_t row = row_of(r);
        if (a.num_splits == 1) {
            O[row * D + col] = from_f<T>(out);
            if (col == 0) L[row] = Lr;
        } else {
            O_part[((size_t)s * rows_all + row) * D + col] = out;
            if (col == 0) L_part[(size_t)s * rows_all + row] = Lr;
        }
    }
}
//< decode-split-kernel

//> decode-combine-kernel
/* One CTA of D threads per query row; thread k holds element k. The merge
 * rule over all num_splits partials at once: with Lmax the largest L_s,
 *     L = Lmax + log sum_s exp(L_s - Lmax),   O = sum_s exp(L_s - L) O_s,
 * the weights computed once per split (one thread each). An
 * empty partial (L_s = -inf) weighs exactly 0 and is skipped; a row with a
 * single non-empty partial gets it back bit for bit (weight exactly 1). */
template <typename T, int D>
__global__ void __launch_bounds__(D) decode_combine_kernel(size_t rows, int num_splits,
                                                           const float *__restrict__ O_part,
                                                           const float *__restrict__ L_part,
                                                           T *__restrict__ O, float *__restrict__ L)
{
    __shared__ double w[DECODE_MAX_SPLITS];
    const size_t row = blockIdx.x;
    const int k = threadIdx.x;
    pdl_wait();   /* every partial of the split kernel is written */
    for (int s = k; s < num_splits; s += D) w[s] = (double)L_part[(size_t)s * rows + row];
    __syncthreads();
    double Lmax = -INFINITY;
    for (int s = 0; s < num_splits; s++) Lmax = fmax(Lmax, w[s]);
    __syncthreads();   /* every thread has read w */
    if (Lmax == -INFINITY) {   /* the row sees no key */
        O[row * D + k] = from_f<T>(0.f);
        if (k == 0) L[row] = -INFINITY;
        return;
    }
    /* the weights' exponentials in fp32 (1e-7 relative: far below the
     * dtype's rounding; expf(0) = 1 and expf(-inf) = 0 exactly), the sums in
     * double */
    for (int s = k; s < num_splits; s += D) w[s] = (double)expf((float)(w[s] - Lmax));
    __syncthreads();
    double sum = 0.0;
    for (int s = 0; s < num_splits; s++) sum += w[s];
    const double inv = 1.0 / sum;
    /* the partials read 8 at a time, the 8 loads issued before the first
     * is used so that their memory latencies overlap (a load behind the skip
     * of an empty partial waits for the previous sum: one latency per
     * split). Every split writes its partial (O_s = 0 where empty), so the
     * loads read written memory; the sum and its order are the merge rule's. */
    double o = 0.0;
    bool first = true;
    for (int s0 = 0; s0 < num_splits; s0 += 8) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = s0 + j < num_splits ? O_part[((size_t)(s0 + j) * rows + row) * D + k] : 0.f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int s = s0 + j;
            if (s >= num_splits || w[s] == 0.0) continue;
            double x = w[s] * inv * (double)v[j];
            o = first ? x : o + x;
            first = false;
        }
    }
    O[row * D + k] = from_f<T>((float)o);
    if (k == 0) L[row] = (float)(Lmax + log(sum));
}
//< decode-combine-kernel

template <typename T, int D>
int launch(const decode_kargs &a, const fa_decode_ptrs *x, cudaStream_t st)
{
    const decode_params &p = a.p;
    dim3 grid((unsigned)(a.chunks * a.num_splits), (unsigned)p.H_kv, (unsigned)p.B);
    float *Op = static_cast<float *>(x->workspace);
    size_t rows = (size_t)p.B * p.H * p.seqlen_q;
    float *Lp = a.num_splits > 1 ? Op + (size_t)a.num_splits * rows * D : nullptr;
    decode_split_kernel<T, D><<<grid, THREADS, 0, st>>>(
        a, static_cast<const T *>(x->q), static_cast<const T *>(x->k_cache), static_cast<const T *>(x->v_cache),
        x->block_table, x->cache_seqlens, static_cast<T *>(x->o), x->softmax_lse, a.num_splits > 1 ? Op : nullptr,
        Lp);
    LAUNCH_CHECK();
    if (a.num_splits > 1) {
        /* launched as a programmatic dependent of the split kernel: its
         * scheduling overlaps the split kernel's tail (pdl_wait orders the
         * reads) */
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = dim3((unsigned)rows);
        cfg.blockDim = dim3(D);
        cfg.dynamicSmemBytes = 0;
        cfg.stream = st;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        if (cudaLaunchKernelEx(&cfg, decode_combine_kernel<T, D>, rows, a.num_splits, (const float *)Op,
                               (const float *)Lp, static_cast<T *>(x->o), x->softmax_lse) != cudaSuccess) {
            /* a device or driver without it: an ordinary launch (pdl_wait
             * then returns at once, the stream orders the two kernels) */
            (void)cudaGetLastError();
            decode_combine_kernel<T, D><<<(unsigned)rows, D, 0, st>>>(rows, a.num_splits, Op, Lp,
                                                                     static_cast<T *>(x->o), x->softmax_lse);
        }
        LAUNCH_CHECK();
    }
    return FA_OK;
}

int chunks_of(const decode_params *p) { return ((p->H / p->H_kv) * p->seqlen_q + RT - 1) / RT; }

} // namespace

extern "C" int fa_decode_rows_per_cta(void) { return RT; }
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
        return fa_set_error(FA_ERR_UNSUPPORTED, "the decode kernels run fp16 and bf16, not %s",
                            fa_dtype_name(dtype));
    if (p->d != 64 && p->d != 128)
        return fa_set_error(FA_ERR_UNSUPPORTED, "the decode kernels take d = 64 or 128, not d = %d", p->d);
    if (p->page_size < 16 || p->page_size > 256)
        return fa_set_error(FA_ERR_UNSUPPORTED, "the decode kernels take pages of 16 to 256 keys, not %d",
                            p->page_size);
    if (decode_splits_check(num_splits, why, sizeof why)) return fa_set_error(FA_ERR_UNSUPPORTED, "%s", why);
    if (p->B > 65535 || p->H_kv > 65535)
        return fa_set_error(FA_ERR_UNSUPPORTED, "B = %d, H_kv = %d: more CTAs than a grid dimension holds",
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
    a.scale_log2 = (float)(p->softmax_scale * 1.4426950408889634);
    cudaStream_t st = (cudaStream_t)stream;
    if (dtype == FA_FP16) return p->d == 64 ? launch<__half, 64>(a, x, st) : launch<__half, 128>(a, x, st);
    return p->d == 64 ? launch<__nv_bfloat16, 64>(a, x, st) : launch<__nv_bfloat16, 128>(a, x, st);
}
