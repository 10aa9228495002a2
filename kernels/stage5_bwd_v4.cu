/*
 * stage5_bwd_v4.cu -- backward version 4: version 2's schedule on blocks of
 * 128 keys and 8 warps, on mma.sync. Numbered 4 because a number names one
 * technique in both passes and 3 is Hopper's (wgmma, TMA: forward version 3).
 * Its loop repeats version 2's (stage5_bwd_v2.cu) in places, deliberately:
 * chapters/21-gpu-backward.md sets the two kernels side by side, and each
 * reads whole.
 *
 * What it computes is version 2's (stage5_backward.cuh's header: the
 * equations, the masks, the conventions, the deterministic mode), with the
 * same D pre-pass, fp32 dQ accumulator and post-pass (tiled_backward). What
 * changes is how one thread block is laid out:
 *
 *   version 2                           version 4
 *   Bc = 64 keys, 4 warps, 2 blocks/SM   Bc = 128 keys, 8 warps, 1 block/SM
 *   Q_i, dO_i tiles feed 64 keys         the same tiles feed 128 keys: half
 *                                        the loads of Q_i, dO_i, L_i, D_i and
 *                                        half the dQ additions per FLOP
 *   L_i, D_i by plain loads (each step   L_i, D_i by cp.async with Q_i, dO_i:
 *   waits for them)                      the next step's arrive while this
 *                                        one computes
 *   3 barriers per query block           2 (a third protected nothing the
 *                                        next step's first barrier does not)
 *   dQ: warp w adds rows 16 w..,         dQ: warp w adds 16 rows x half of d;
 *   8-byte atomics (red .v2)             lanes swap halves with their
 *                                        neighbour so each holds 4
 *                                        consecutive floats: 16-byte atomics
 *                                        (red .v4, sm_90), half as many
 *   per-tile mask test for the block     per warp (its 16 keys): more of a
 *                                        causal diagonal takes the fast path
 *   every key block walks the query      key block jb starts at the
 *   blocks from the first                (jb mod nq)-th (default mode): the
 *                                        blocks running at once add into
 *                                        different dQ tiles
 *
 * Unchanged: warp w owns keys 16 w .. 16 w + 15 of the block and keeps their
 * rows of dK_j, dV_j in registers (d = 128: 128 registers); S^T and dP^T are
 * formed 32 queries at a time so that dS = P (dP - D) takes P in fp32; K_j,
 * V_j stay in registers as A fragments for d <= 64; Q_i, dO_i tiles are
 * double-buffered with cp.async; dS^T goes through shared memory for dQ_i.
 *
 * The loop's bookkeeping is kept off the integer pipes, because at the same
 * IPC every instruction that is not an HMMA costs time: the step's head and
 * block come from a cursor (no integer division), the 16-byte copies are an
 * unrolled loop with one pointer per thread and no bound test when the
 * block is inside Sq, the dQ product's ldmatrix addresses are per-lane bases
 * plus compile-time offsets, a dQ tile takes one branch on the mode per step
 * (red.v4 where no result is wanted), and without a window the full-tile
 * test is a flag. How this was measured and what each change saved is in
 * data/gpu/studies/bwd_v4_steps/steps.md.
 *
 * Tiles: Br = 64 query rows, Bc = 128 keys, d = 16 to 128 in multiples of
 * 16. Shared memory (16-bit elements, rows padded by 8): K_j, V_j (2 x 128
 * rows), two stages of Q_i, dO_i (4 x 64 rows), dS^T (128 x 72), two stages
 * of L_i, D_i: 155 KiB at d = 128, 91 KiB at d = 64; one block of 256
 * threads per SM (__launch_bounds__(256, 1): up to 255 registers).
 *
 * IO model: the tiled one of stage5_backward.cuh's header (tiled_bwd_model)
 * with Br = 64, Bc = 128: R, the query rows read summed over key blocks, is
 * Sq Tc with Tc = ceil(Sk / 128), half of version 2's.
 *
 * Needs: fp16 or bf16; 16-byte aligned Q, K, V, dO; compute capability 8.0
 * (the 16-byte atomics are sm_90's; older GPUs add 4 bytes at a time).
 */
#include "stage5_backward.cuh"

#include <atomic>

template <int D> struct bwd_v4_cfg {
    static constexpr int BR = BWD_TILED_BR, BC = 128, NT = 256;
    static constexpr int LD = D + 8;        /* row stride of K, V, Q, dO tiles */
    static constexpr int LDS = BR + 8;      /* row stride of the dS^T tile */
    static constexpr bool KVREG = D <= 64;  /* K_j, V_j held as A fragments in registers */
    static constexpr int KD = D / 16;       /* 16-column groups of d */
    static constexpr int KH = (KD + 1) / 2; /* ... of them per warp in the dQ product */
    static constexpr size_t smem_bytes()
    {
        return 2 * ((2 * (size_t)BC + 4 * (size_t)BR) * LD + (size_t)BC * LDS) + 4 * 4 * (size_t)BR;
    }
};

/* 4 bytes global -> shared, asynchronously; src_bytes 0 writes a zero. */
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
                 "r"(src_bytes));
}

/* Rows [row0, row0 + ROWS) of a (row_end, D) head into a ROWS x LD tile:
 * the copies of cp_async_rows (gpu_common.cuh), the same 16 bytes by the
 * same thread, with the loop over a thread's copies unrolled at compile time.
 * cp_async_rows's runtime loop costs, per step, a signed division of every
 * index by D / 8 and a remainder loop (ptxas cannot know the trip count);
 * here the thread's row and column come from threadIdx.x once, and each
 * further copy is a constant number of rows further. */
template <typename T, int D, int ROWS, int LD, int NT>
__device__ __forceinline__ void cp_async_tile(T *dst, const T *__restrict__ src, int row0, int row_end,
                                              long long gs)
{
    constexpr int CH = D / 8, N = ROWS * CH;
    if constexpr (NT % CH == 0) {
        /* d / 8 divides the thread count: a thread keeps its column, and its
         * copy number `it` lies it * NT / CH rows below its first, in shared
         * and in global memory */
        constexpr int RS = NT / CH;
        const int r = (int)(threadIdx.x / CH), c = (int)(threadIdx.x % CH) * 8;
        const T *g = src + (row0 + r) * gs + c;   /* gs: the row stride in elements */
        T *sh = dst + r * LD + c;
        if (row0 + ROWS <= row_end) {   /* every row inside: no bound test, no select per copy */
#pragma unroll
            for (int it = 0; it < (N + NT - 1) / NT; it++)
                if (N % NT == 0 || r + it * RS < ROWS) cp_async16(sh + it * RS * LD, g + it * RS * gs, 16);
        } else {
#pragma unroll
            for (int it = 0; it < (N + NT - 1) / NT; it++)
                if (N % NT == 0 || r + it * RS < ROWS) {
                    const bool ok = row0 + r + it * RS < row_end;
                    cp_async16(sh + it * RS * LD, ok ? g + it * RS * gs : src, ok ? 16 : 0);
                }
        }
    } else {
#pragma unroll
        for (int it = 0; it < (N + NT - 1) / NT; it++) {
            const unsigned idx = threadIdx.x + it * NT;
            if (N % NT == 0 || idx < (unsigned)N) {
                const int r = (int)(idx / CH), c = (int)(idx % CH) * 8;
                const bool ok = row0 + r < row_end;
                cp_async16(dst + r * LD + c, ok ? src + (row0 + r) * gs + c : src, ok ? 16 : 0);
            }
        }
    }
}

/* ldmatrix .x4 .trans from a shared-memory address already converted (a
 * base computed once per thread plus a compile-time offset, which ptxas
 * folds into the instruction's immediate). */
__device__ __forceinline__ void ldsm_x4_t_u32(unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3, unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

/* dq_add_tile, dq_row_of (the 16-byte dQ additions): stage5_backward.cuh,
 * which backward version 3 shares. */


/* Deliberate copy: the two-stage pipeline of version 2's kernel
 * (stage5_bwd_v2.cu), written out again so that chapters/21-gpu-backward.md
 * reads each version's listing whole. */
//> bwd-v4-kernel
/* One block of 8 warps per (key block of 128, key/value head). Per query
 * block i (Br = 64) of each query head of the group, warp w runs version 2's
 * steps 1-5 on its 16 keys (S^T, P, dV, dP^T, dS, dK, dS^T to shared
 * memory); then, after one barrier, dQ_i += dS K_j with warp w taking query
 * rows 16 (w % 4) .. + 15 and the 16-column groups of d in its half
 * (w / 4), added 16 bytes at a time. */
template <typename T, int D, bool VL>
__global__ void __launch_bounds__(256, 1) bwd_v4_kernel(bwd_args<T> x)
{
    using C = bwd_v4_cfg<D>;
    constexpr int BR = C::BR, BC = C::BC, NT = C::NT, LD = C::LD, LDS = C::LDS, DT = D / 8;
    constexpr int KD = C::KD, KH = C::KH;
    constexpr bool KVREG = C::KVREG;
    extern __shared__ uint4 smem_bwd_v4[];
    T *Ks = reinterpret_cast<T *>(smem_bwd_v4);   /* Bc x LD */
    T *Vs = Ks + BC * LD;                       /* Bc x LD */
    T *Qs = Vs + BC * LD;                       /* 2 stages of Br x LD */
    T *dOs = Qs + 2 * BR * LD;                  /* 2 stages of Br x LD */
    T *dSs = dOs + 2 * BR * LD;                 /* Bc x LDS: dS^T, [key][query] */
    float *Ls = reinterpret_cast<float *>(dSs + BC * LDS);   /* 2 stages of Br (L as stored) */
    float *Ds = Ls + 2 * BR;                                 /* 2 stages of Br */

    const int bkv = blockIdx.y, b = bkv / x.a.H_kv, hk = bkv % x.a.H_kv;
    /* VL: sequence b as its own problem (bwd_view_of); else the call's */
    const bwd_view vw = bwd_view_of<VL>(x, b);
    const fa_kargs &a = VL ? vw.a : x.a;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
    const int Sq = a.seqlen_q, Sk = a.seqlen_k;
    const int jb = blockIdx.x, j0 = jb * BC, j1 = min(j0 + BC, Sk);
    if (VL && j0 >= Sk) return;   /* the grid is the longest sequence's */
    const int jw = j0 + 16 * warp;   /* this warp's first key */
    const int Tr = (Sq + BR - 1) / BR;
    const T *Kh = x.k + b * x.sk.batch + hk * x.sk.head + (long long)vw.k0 * x.sk.row;
    const T *Vh = x.v + b * x.sv.batch + hk * x.sv.head + (long long)vw.k0 * x.sv.row;
    /* VL: the sequence's first query row, read again at each use (L1)
     * rather than held across the loop, which at d = 128 has no register
     * to spare; rows of L, D and dq_acc of query head h (core/varlen.h's
     * layout (H, total_q) with VL) */
    auto q0_of = [&]() {
        if constexpr (!VL) return 0ll;
        int c;   /* a volatile load: never hoisted out of the loop into a register */
        asm volatile("ld.global.nc.s32 %0, [%1];" : "=r"(c) : "l"(x.cu_q + b));
        return (long long)varlen_clamp(c, 0, x.total_q);
    };
    auto lrow = [&](int h) { return VL ? h * x.l_head + q0_of() : (long long)(b * a.H + h) * Sq; };

    /* The steps: every query block that sees this key block (mask.h), for
     * each query head of the group. In the default mode key block jb starts
     * its walk over the nq query blocks at the (jb mod nq)-th: the key blocks
     * of one head that run at the same time then add into different query
     * blocks of dQ, where in query-block order (version 2's) they all start
     * on the same one and their atomic additions meet in the same L2 lines.
     * The deterministic mode keeps that order: its turns go in key-block
     * order, and a rotated walk would make each block wait for the previous
     * one at every step. */
    int ib_begin, ib_end;
    const int nq = mask_query_blocks(a.mask, j0, j1, BR, &ib_begin, &ib_end);
    const int steps = nq * a.h_per_kv;
    /* (VL at d = 128 has no register for it: the walk in order) */
    const int rot = x.deterministic || nq == 0 || (VL && D > 64) ? 0 : jb % nq;
    /* Step s is query head (s / nq) of the group and the (s mod nq)-th block
     * of the rotated walk; a cursor steps through them with one compare
     * each, where s / nq and s % nq would cost two integer divisions (some
     * 30 instructions each) per step. */
    struct step_at {
        int h, k;   /* query head of the group; position in the walk, 0 .. nq - 1 */
    };
    auto next_step = [&](step_at p) {
        if (++p.k == nq) { p.k = 0; p.h++; }
        return p;
    };
    auto head_of = [&](step_at p) { return b * a.H + hk * a.h_per_kv + p.h; };
    auto block_of = [&](step_at p) {
        const int k = p.k + rot;
        return ib_begin + (k < nq ? k : k - nq);
    };
    auto load_step = [&](step_at p, int stage) {   /* Q_i, dO_i, L_i, D_i, all by cp.async */
        const int i0 = block_of(p) * BR, h = hk * a.h_per_kv + p.h;
        cp_async_tile<T, D, BR, LD, NT>(Qs + stage * BR * LD,
                                        x.q + b * x.sq.batch + h * x.sq.head + q0_of() * x.sq.row, i0, Sq,
                                        x.sq.row);
        cp_async_tile<T, D, BR, LD, NT>(dOs + stage * BR * LD,
                                        x.dO + b * x.sdo.batch + h * x.sdo.head + q0_of() * x.sdo.row, i0,
                                        Sq, x.sdo.row);
        if (threadIdx.x < 2 * BR) {   /* rows past Sq get 0 (their P is masked to 0) */
            const int r = threadIdx.x & (BR - 1), i = i0 + r;
            const float *src = (threadIdx.x < BR ? x.L : x.D) + lrow(h);
            float *dst = (threadIdx.x < BR ? Ls : Ds) + stage * BR + r;
            cp_async4(dst, i < Sq ? src + i : src, i < Sq ? 4 : 0);
        }
    };

    float dk[DT][4], dv[DT][4];
#pragma unroll
    for (int c = 0; c < DT; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[c][e] = dv[c][e] = 0.f;
    unsigned kf[KVREG ? KD : 1][4], vf[KVREG ? KD : 1][4];

    /* The dQ product's ldmatrix addresses (step 6): this lane's row and
     * column in dS^T and K_j as shared-memory byte addresses, once; every
     * further tile is a compile-time offset from them. */
    const int rg = warp & 3, ch = warp >> 2;
    const bool unwindowed = mask_is_full(a.mask);
    const unsigned dS_lane = smem_u32(dSs + ((lane & 7) + (lane >> 4) * 8) * LDS + 16 * rg + ((lane >> 3) & 1) * 8);
    const unsigned K_lane = smem_u32(Ks + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + ch * KH * 16 + (lane >> 4) * 8);

    if (steps > 0) {
        cp_async_rows<T, D, BC, LD, NT>(Ks, Kh, j0, Sk, x.sk.row);
        cp_async_rows<T, D, BC, LD, NT>(Vs, Vh, j0, Sk, x.sv.row);
        load_step(step_at{0, 0}, 0);
        cp_async_commit();
    }
    step_at at = {0, 0};   /* step s's head and block */
    for (int s = 0; s < steps; s++) {
        const int stage = s & 1;
        const step_at at_next = next_step(at);
        /* The next step's tiles fly while this one computes. Their stage was
         * last read by the previous step's steps 1-5, which every warp
         * finished before the previous step's second barrier. */
        if (s + 1 < steps) {
            load_step(at_next, stage ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        /* This step's tiles are in; every warp is done reading the previous
         * step's dS^T (its dQ product), so it may be rewritten. */
        __syncthreads();
        if constexpr (KVREG)
            if (s == 0) bwd_load_kv_frags<T, KD, LD>(kf, vf, Ks, Vs, warp, lane);
        const int bh = head_of(at), ib = block_of(at), i0 = ib * BR, i1 = min(i0 + BR, Sq);
        const T *Qt = Qs + stage * BR * LD, *dOt = dOs + stage * BR * LD;
        const float *Lt = Ls + stage * BR, *Dt = Ds + stage * BR;
        /* No per-element mask when the whole 64 x 16 tile of this warp is
         * visible (rows and keys inside the problem). Without a window every
         * such tile is: mask_tile_unmasked's key_first is 0, its key_last
         * Sk - 1 >= jw + 15 and no row is empty, so its test (some 40
         * instructions of branches and constant loads per step) is skipped. */
        const bool inside = i1 - i0 == BR && jw + 16 <= Sk;
        const bool full = inside && (unwindowed || mask_tile_unmasked(a.mask, i0, i1, jw, jw + 16));

        /* Version 2's steps 1-5 (bwd_key_half) on the tile's queries in two
         * halves of 32; L as copied, the mask apart from the exponentials */
#pragma unroll
        for (int half = 0; half < 2; half++)
            bwd_key_half<T, D, LD, LDS, KVREG, true, true>(dk, dv, kf, vf, Ks, Vs, Qt, dOt, Lt, Dt, dSs, 32 * half, i0,
                                                          jw, Sq, Sk, full, a, warp, lane);
        __syncthreads();   /* dS^T complete: every key of the block, every query */

        /* 6. dQ_i += softmax_scale dS K_j over the block's 128 keys: warp w
         * takes query rows 16 rg .. 16 rg + 15 (rg = w % 4) and the 16-column
         * groups c2 = ch KH .. ch KH + KH - 1 of d (ch = w / 4; for odd
         * d / 16 the last group of half 1 is past d and skipped). A = dS
         * read transposed from dS^T, B = K_j (ldmatrix.trans). The products
         * are finished before the additions start, so that in deterministic
         * mode the turn is held only for the additions. */
        float qd[KH][2][4];
#pragma unroll
        for (int c = 0; c < KH; c++)
#pragma unroll
            for (int e = 0; e < 4; e++) qd[c][0][e] = qd[c][1][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            unsigned qa[4];
            ldsm_x4_t_u32(qa[0], qa[1], qa[2], qa[3], dS_lane + 2 * (kk * 16 * LDS));
#pragma unroll
            for (int c = 0; c < KH; c++) {
                const int c2 = ch * KH + c;
                if (KD % 2 == 0 || c2 < KD) {
                    unsigned b0, b1, b2, b3;
                    ldsm_x4_t_u32(b0, b1, b2, b3, K_lane + 2 * (kk * 16 * LD + c * 16));
                    mma16816<T>(qd[c][0], qa, b0, b1);
                    mma16816<T>(qd[c][1], qa, b2, b3);
                }
            }
        }
        /* The additions: this lane's row pointer and bound test once per
         * step, the mode's branch once per step (warp-uniform), not per
         * tile. */
        const bool ordered = x.deterministic;
        const int hq = bh - b * a.H;   /* the query head within the batch (VL) */
        /* (VL: the slot read again where used, not held in a register
         * across the loop, which at d = 128 has none to spare) */
        auto sem_of = [&]() {
            return VL ? x.sem + hq * x.sem_head + varlen_start(x.cu_q, x.total_q, b, BR) + ib
                      : x.sem + (size_t)bh * Tr + ib;
        };
        /* VL: the accumulator is laid out as the packed dQ, (total_q, H, d),
         * so that the post-pass is one conversion of the whole buffer */
        float *row = VL ? dq_row_of(x.dq_acc + (q0_of() * a.H + hq) * D, a.H * D, i0 + 16 * rg + g, lane)
                        : dq_row_of(x.dq_acc + (size_t)bh * Sq * D, D, i0 + 16 * rg + g, lane);
        const bool row_ok = i0 + 16 * rg + g + ((lane & 1) ? 8 : 0) < Sq;
        auto add_dq = [&](auto ordered_c, auto check_c) {   /* the 8 tiles, one mode */
#pragma unroll
            for (int c = 0; c < KH; c++)
                if (KD % 2 == 0 || ch * KH + c < KD)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        dq_add_tile<decltype(ordered_c)::value, decltype(check_c)::value>(
                            row, row_ok, 16 * (ch * KH + c) + 8 * h, qd[c][h], a.softmax_scale, lane);
        };
        if (ordered) {
            int *sem = sem_of();
            dq_turn_wait(sem, dq_turn(a.mask, i0, i1, BC, jb));
            add_dq(std::true_type(), std::true_type());
            dq_turn_pass(sem);
        } else if (i1 - i0 == BR) {   /* every row of the block inside Sq: no bound test */
            add_dq(std::false_type(), std::false_type());
        } else {
            add_dq(std::false_type(), std::true_type());
        }
        at = at_next;
    }

    /* dK_j, dV_j: zero for keys nobody sees */
    /* (VL: the sequence's first key read again, as the slot above) */
    bwd_store_dkdv<T, D>(x, dk, dv, bkv, jw, Sk, lane, VL ? bwd_view_of<VL>(x, b).k0 : 0);
}
//< bwd-v4-kernel

template <typename T, int D, bool VL>
static int bwd_v4_launch_d(const bwd_args<T> &x, int B, cudaStream_t st)
{
    using C = bwd_v4_cfg<D>;
    const size_t smem = C::smem_bytes();
    /* The shared-memory limit is a property of the kernel on each device: set
     * once per device (a bit each, devices 0-63; others every launch), not at
     * every call, where the driver call costs more than a small problem's
     * kernel. A second thread setting it again is harmless. */
    static std::atomic<unsigned long long> attr_done{0};
    int dev = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    const unsigned long long bit = dev < 64 ? 1ull << dev : 0;
    if (!bit || !(attr_done.load(std::memory_order_relaxed) & bit)) {
        CUDA_TRY(cudaFuncSetAttribute(bwd_v4_kernel<T, D, VL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem));
        attr_done.fetch_or(bit);
    }
    const dim3 grid((x.a.seqlen_k + C::BC - 1) / C::BC, (unsigned)(B * x.a.H_kv));
    bwd_v4_kernel<T, D, VL><<<grid, C::NT, smem, st>>>(x);
    LAUNCH_CHECK();
    return FA_OK;
}

template <typename T>
static int bwd_v4_launch(const bwd_args<T> &x, int B, cudaStream_t st)
{
    if (x.cu_q)   /* packed sequences: d = 64 or 128 (bwd_v4_check_varlen) */
        return x.a.d == 64 ? bwd_v4_launch_d<T, 64, true>(x, B, st) : bwd_v4_launch_d<T, 128, true>(x, B, st);
    return bwd_dispatch_d16(x.a.d, [&](auto dd) { return bwd_v4_launch_d<T, decltype(dd)::value, false>(x, B, st); });
}

static int bwd_v4_run(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic,
                      cudaStream_t st)
{
    return tiled_backward_mma("v4", dtype, p, x, deterministic, st, bwd_v4_launch<__half>,
                              bwd_v4_launch<__nv_bfloat16>);
}

/* Packed sequences (fa_backward_varlen): a grid of the longest sequence's
 * key blocks x B H_kv, each block working on its sequence alone
 * (bwd_view_of); d = 64 and 128, the head dimensions of the varlen forward. */
static int bwd_v4_check_varlen(int dtype, const attn_params *p, int flags)
{
    (void)dtype;
    if (p->d != 64 && p->d != 128)
        return fa_set_error(FA_ERR_UNSUPPORTED,
                            "backward version 4 runs variable lengths at d = 64 and 128, not d = %d", p->d);
    if (flags & FA_BWD_CENTER_K)
        return fa_set_error(FA_ERR_UNSUPPORTED, "FA_BWD_CENTER_K (accurate_dq) takes no variable lengths: "
                            "K's mean would be per sequence");
    return FA_OK;
}
static int bwd_v4_run_varlen(int dtype, const attn_params *p, const fa_varlen *vl, const fa_ptrs *x, int flags,
                             cudaStream_t st)
{
    return tiled_backward_mma_vl("v4", dtype, p, vl, x, flags, st, bwd_v4_launch<__half>,
                                 bwd_v4_launch<__nv_bfloat16>);
}

static int bwd_v4_block_rows(int d) { (void)d; return bwd_v4_cfg<64>::BR; }
static int bwd_v4_block_cols(int d) { (void)d; return bwd_v4_cfg<64>::BC; }

/* Version 4's row of the table (core/versions.def). */
const fa_row fa_row_bwd_v4 = {.info = {.pass = FA_BACKWARD, .version = 4, .name = "v4",
    .what = "tiled, tensor cores, 128-key blocks on 8 warps (mma.sync m16n8k16, 16-byte dQ atomics)", .dtypes = FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 16, .d_max = 128, .d_multiple = 16, .masks = 1, .deterministic = 1, .min_cc = 80, .slug = "mma8", .strided = 1, .varlen = 1, .center_rate = 230e12},
    .run = bwd_v4_run, .check = nullptr, .workspace = tiled_bwd_workspace, .block_rows = bwd_v4_block_rows, .block_cols = bwd_v4_block_cols, .model_bytes = tiled_bwd_model,
    .run_varlen = bwd_v4_run_varlen, .check_varlen = bwd_v4_check_varlen, .workspace_varlen = tiled_bwd_workspace_varlen};
