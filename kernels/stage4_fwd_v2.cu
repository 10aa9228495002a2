/*
 * stage4_fwd_v2.cu -- Stage 4, forward version 2: version 1's tiled
 * algorithm on the tensor cores (FlashAttention-2 style): mma.sync m16n8k16
 * for Q K^T and P V, P stays in registers, cp.async double-buffered K/V
 * tiles; fp16/bf16, d = 16, 32, ..., 128. Slow-memory traffic per head as
 * version 1's with Br = 128: Tr = ceil(N / 128).
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
 * Cost: 4 B H N^2 d FLOPs, no workspace.
 *
 * Build:   make stage4          (the host program src/programs/stage4_main.c links this)
 *          make build/libfa_gpu.so   (the same launchers for Python/ctypes)
 * Run:     ./stage4 --kernel 2 [--dtype fp16|bf16] [--random --n N --d D ...]
 */
#include "gpu_common.cuh"

#include <math.h>

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
 * head's tensors, the run of key blocks); chapters/20-gpu-forward.md reads
 * each version's kernel whole, one listing each. Within it the loops over
 * the accumulator's fragments (mt, n, e) stand once per rule on the scores
 * (keys past seqlen_k, then the mask), each where the listing applies it. */
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

/* The version's row of the table of versions (core/versions.def): one
 * shape by design, the same fields in every kernel file. */
const fa_row fa_row_fwd_v2 = {.info = {.pass = FA_FORWARD, .version = 2, .name = "v2",
    .what = "tiled, tensor cores (mma.sync m16n8k16, cp.async)", .dtypes = FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 16, .d_max = 128, .d_multiple = 16, .masks = 1, .deterministic = 0, .min_cc = 80, .slug = "mma", .strided = 0},
    .run = v2_forward, .check = nullptr, .workspace = nullptr, .block_rows = v2_block_rows, .block_cols = v2_block_cols, .model_bytes = fa_model_tiled_forward};
