/*
 * stage4_fwd_v3_hopper.cu -- version 3 of the forward: Hopper's copy engine,
 * warpgroup matrix instructions and warp specialization (sm_90a only).
 *
 * What is new against version 2 (kernels/stage4_fwd_v2.cu), which is the
 * same online-softmax algorithm on Ampere's instructions:
 *   - copies: one thread asks the tensor memory accelerator (TMA) for a whole
 *     tile (cp.async.bulk.tensor, described by a CUtensorMap built on the
 *     host); the copy engine writes it into shared memory in the 128-byte
 *     swizzled layout the matrix unit reads without bank conflicts, and
 *     counts the bytes it delivered on an mbarrier that the consumers wait on.
 *     No thread computes an address or issues a load instruction per element.
 *   - products: wgmma, issued by a warpgroup (4 warps, 128 threads), 64 rows
 *     by N columns by 16 per instruction, asynchronous: the instruction
 *     returns at once, the threads go on with other work, and
 *     wgmma.wait_group blocks only when the result is needed. S = Q K^T
 *     reads both operands from shared memory; O += P V reads P from the
 *     registers where the softmax left it and V from shared memory through
 *     the transpose bit of the descriptor.
 *   - roles: a producer warpgroup only issues copies (and gives its registers
 *     away with setmaxnreg); two consumer warpgroups compute. They meet on
 *     mbarriers: "full" (the copy engine has delivered a stage) and "empty"
 *     (every consumer warp has finished reading it).
 *   - overlap: the two consumers take turns on the tensor cores (ping-pong,
 *     named barriers), and inside one consumer the softmax of key block j
 *     runs while the product P V of block j-1 is still in flight.
 * The steps that added these one by one stay selectable (v3_cfg below and
 * stage4_fwd_v3_hopper.h), so their speeds can be measured side by side.
 *
 * Numerics (as version 2, plus one rule): S is fp32 from the tensor cores;
 * x = S * softmax_scale * log2(e) is rounded once to fp32 (__fmul_rn: never
 * fused into the subtraction), the row maximum m is a maximum of those same
 * x, and P = 2^(x - m): the exponent's argument is never positive, so huge
 * logits (|S| ~ 1e11) give P in [0, 1], never inf or NaN. P is rounded to
 * the input dtype for P V (as FlashAttention does); O is divided by the
 * row sum once at the end; L = (m + log2 l) ln 2.
 *
 * Layout in shared memory: a tile of R rows x d columns is stored as d/64
 * column blocks of R rows x 128 bytes, each block in the 128-byte swizzle
 * (16-byte chunk c of row r sits at chunk c ^ (r % 8)), every block 1024-byte
 * aligned: the layout the TMA's CU_TENSOR_MAP_SWIZZLE_128B writes and the
 * layout wgmma's descriptors with swizzle mode "128B" read.
 *
 * Build: -gencode=arch=compute_90a,code=sm_90a (wgmma and setmaxnreg exist
 * only in the "a" target); kernels/gpu.mk gives these flags to this file
 * alone. On any other GPU its launcher refuses with one line. Version 3 is
 * one row of the table of versions (core/versions.def, fa_row_fwd_v3
 * below); the step runs is chosen by FA_V3_STEP in the environment.
 *
 * This file holds the kernel and its launcher; the instructions it is built
 * from (mbarrier, TMA, wgmma and its descriptors, the products S = Q K^T and
 * O += P V of one key tile) are device functions of hopper.cuh (shared with
 * backward version 3) and stage4_fwd_v3_hopper.cuh, which the piece tests
 * (tests/gpu/v3_check_cuda.cu) run one at a time.
 */
#include "stage4_fwd_v3_hopper.cuh"   /* hopper.cuh: the PTX wrappers, the two products of a key tile */

#include <cudaTypedefs.h>   /* PFN_cuTensorMapEncodeTiled */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

/* ------------------------------------------------------------------------- */
/* The steps                                                                  */
/* ------------------------------------------------------------------------- */
//> v3-config
/* One kernel template, one configuration per step. NWG consumer warpgroups
 * of 64 query rows each share every K/V tile; with WS a producer warpgroup
 * issues the copies, without it thread 0 of the one consumer does. Key tiles
 * are BC = 128 rows (176 at d = 128 from step 8); K and V have STAGES
 * buffers each (a ring). */
template <int D, int STEP> struct v3_cfg {
    static constexpr bool SHAPES = STEP >= 8;              /* tile shapes chosen per head dimension */
    static constexpr int NWG = STEP == 1 ? 1 : SHAPES && D == 64 ? 3 : 2;   /* consumer warpgroups */
    static constexpr bool WS = STEP >= 2;                  /* producer warpgroup + setmaxnreg */
    static constexpr bool PINGPONG = STEP >= 3;            /* consumers alternate on the MMA unit */
    static constexpr bool OVERLAP = STEP >= 4;             /* softmax(S_j) under P_{j-1} V_{j-1} */
    static constexpr bool PERSIST = STEP >= 5;             /* persistent grid, longest tiles first */
    static constexpr bool DYNAMIC = STEP >= 6;             /* ... handed out by a counter as blocks free */
    static constexpr bool LEAN = STEP >= 7;                /* fewer instructions per key block */
    static constexpr int BR = 64 * NWG, BC = SHAPES && D == 128 ? 176 : FA_V3_BC;
    static constexpr int STAGES = D == 64 ? 3 : 2;
    static constexpr int THREADS = 128 * (NWG + (WS ? 1 : 0));
    static constexpr int CB = D / 64;                      /* 128-byte column blocks per row */
    static constexpr int Q_BYTES = BR * D * 2, KV_BYTES = BC * D * 2;
    static constexpr int OFF_K = Q_BYTES, OFF_V = OFF_K + STAGES * KV_BYTES;
    static constexpr int OFF_BAR = OFF_V + STAGES * KV_BYTES;
    static constexpr int NBAR = 2 + 4 * STAGES + (DYNAMIC ? 4 : 0);   /* mbarriers */
    static constexpr int OFF_TILE = OFF_BAR + 8 * NBAR;    /* step 6: two tile numbers */
    static constexpr int SMEM = OFF_TILE + 8 + 1024;       /* + alignment slack */
    /* 128 PRODUCER_REGS + 128 NWG CONSUMER_REGS <= 64K. Step 6's producer
     * also maps tile numbers to tiles (integer divisions), which spills at
     * 24; three consumers get 160 each. */
    static constexpr int PRODUCER_REGS = NWG == 3 ? 32 : DYNAMIC ? 40 : 24;
    static constexpr int CONSUMER_REGS = NWG == 3 ? 160 : DYNAMIC ? 232 : 240;
    static_assert(128 * PRODUCER_REGS + 128 * NWG * CONSUMER_REGS <= 65536 || !WS, "register file");
    static_assert(SMEM <= 227 * 1024, "shared memory per block");
};
//< v3-config

/* ------------------------------------------------------------------------- */
/* The kernel                                                                 */
/* ------------------------------------------------------------------------- */
struct v3_args {
    void *O;
    float *L;
    attn_mask mask;
    int H, H_kv, BH;          /* BH = B H query heads */
    int seqlen_q, seqlen_k;
    int n_qblocks, n_tiles;   /* query blocks per head; n_qblocks * BH */
    int heads_per_group;      /* step 5, causal: heads whose K, V fit half the L2 */
    float scale_log2;         /* softmax_scale log2(e) */
    /* (after the fields of steps 1-5, so that their code is unchanged) */
    int group_q, group_r;     /* step 6: head groups of group_q + 1 heads (the first group_r) and group_q */
    unsigned *tile_counter;   /* step 6: next tile to hand out; zero at launch */
    long long o_batch, o_head, o_row;   /* O's strides in elements (fa_stride) */
    /* packed sequences (VL kernels, core/varlen.h): the tiles run over H heads x
     * varlen_slots(total_q, B, BR) query blocks, L is (H, total_q) */
    const int32_t *cu_q, *cu_k;
    int B, total_q, total_k;
};

//> v3-schedule
/* The tile (query head bh, query block qb) that CTA `cta` of `grid` takes as
 * its k-th. Steps 1-4: one tile per CTA, in launch order, the query blocks
 * of one head adjacent (they share K and V in L2). Step 5 (persistent): when
 * later query blocks see more keys (causal: window_size_left unbounded,
 * right bounded) the tiles go longest first inside groups of heads_per_group
 * heads (a group's K and V fit in half the L2, so the heads running at the
 * same time find their keys there), heads alternating within a query block;
 * waves alternate direction (CTA c takes tile c of even waves and grid-1-c
 * of odd ones) so that no CTA collects the longest tile of every wave.
 * Returns false when the CTA has no k-th tile. */
template <bool PERSIST>
__device__ __forceinline__ bool v3_tile(const v3_args &a, int cta, int grid, int k, int &bh,
                                        int &qb)
{
    int t;
    if constexpr (!PERSIST) {
        if (k > 0) return false;
        t = cta;
    } else {
        t = k * grid + ((k & 1) ? grid - 1 - cta : cta);
    }
    if (t >= a.n_tiles) return false;
    bool longest_first = PERSIST && mask_work_grows(a.mask);
    if (longest_first) {
        const int per_group = a.heads_per_group * a.n_qblocks;
        const int grp = t / per_group, u = t - grp * per_group;
        const int gsize = min(a.heads_per_group, a.BH - grp * a.heads_per_group);
        qb = a.n_qblocks - 1 - u / gsize;
        bh = grp * a.heads_per_group + u % gsize;
    } else {
        qb = t % a.n_qblocks;
        bh = t / a.n_qblocks;
    }
    return true;
}

/* The values pass through an empty asm, so the compiler takes them as new
 * each time: it then recomputes sums and products of kernel arguments where
 * they are used instead of keeping them in registers across the producer's
 * loop, which the 32 registers of step 8's producer cannot hold (ptxas
 * spilled four such values). A few instructions per tile. */
__device__ __forceinline__ void v3_opaque1(int &x) { asm volatile("" : "+r"(x)); }
template <typename... Ts> __device__ __forceinline__ void v3_opaque(Ts &...x) { (v3_opaque1(x), ...); }

/* Step 6: tile number t (handed out by a counter, 0, 1, 2, ... in the order
 * blocks ask) as (bh, qb). When later query blocks see more keys, longest
 * first inside head groups, as step 5, but the groups are of balanced size
 * (group_q + 1 heads for the first group_r groups, group_q for the rest, at
 * most half the L2 of K and V each), so that the last group is not a short
 * one whose long tiles start late; otherwise the natural order, the query
 * blocks of one head adjacent. */
__device__ __forceinline__ void v3_tile_coords(const v3_args &a, int t, int &bh, int &qb)
{
    int nqb = a.n_qblocks, gq = a.group_q, gr = a.group_r;
    v3_opaque(nqb, gq, gr);
    if (mask_work_grows(a.mask)) {
        const int big = (gq + 1) * nqb, nbig = gr * big;
        int g0, gs, u;
        if (t < nbig) {
            g0 = t / big * (gq + 1);
            gs = gq + 1;
            u = t % big;
        } else {
            const int small = gq * nqb, tt = t - nbig;
            g0 = gr * (gq + 1) + tt / small * gq;
            gs = gq;
            u = tt % small;
        }
        qb = nqb - 1 - u / gs;
        bh = g0 + u % gs;
    } else {
        qb = t % nqb;
        bh = t / nqb;
    }
}
//< v3-schedule

/* Shared-memory addresses of the ring: one Q tile, STAGES K and V tiles,
 * their mbarriers. */
template <int D, int STEP> struct v3_smem {
    using C = v3_cfg<D, STEP>;
    uint32_t base;
    __device__ uint32_t q() const { return base; }
    __device__ uint32_t k(int st) const { return base + C::OFF_K + st * C::KV_BYTES; }
    __device__ uint32_t v(int st) const { return base + C::OFF_V + st * C::KV_BYTES; }
    __device__ uint32_t bar(int i) const { return base + C::OFF_BAR + 8 * i; }
    __device__ uint32_t full_q() const { return bar(0); }
    __device__ uint32_t empty_q() const { return bar(1); }
    __device__ uint32_t full_k(int st) const { return bar(2 + st); }
    __device__ uint32_t empty_k(int st) const { return bar(2 + C::STAGES + st); }
    __device__ uint32_t full_v(int st) const { return bar(2 + 2 * C::STAGES + st); }
    __device__ uint32_t empty_v(int st) const { return bar(2 + 3 * C::STAGES + st); }
    /* step 6: the tile numbers the producer hands to the consumers, two slots */
    __device__ uint32_t tile_full(int i) const { return bar(2 + 4 * C::STAGES + i); }
    __device__ uint32_t tile_empty(int i) const { return bar(4 + 4 * C::STAGES + i); }
    __device__ uint32_t tile_slot(int i) const { return base + C::OFF_TILE + 4 * i; }
};

/* The key/value head query head bh reads (grouped-query attention), as the
 * tensor maps' coordinates {head, batch}. */
template <bool VL = false> __device__ __forceinline__ int2 v3_kv_head(const v3_args &a, int bh)
{
    int b = bh / a.H, h = bh % a.H;
    return make_int2(h / (a.H / a.H_kv), VL ? 0 : b);   /* varlen: one batch of packed rows */
}
/* Query head bh as the tensor map's coordinates {head, batch}. */
template <bool VL = false> __device__ __forceinline__ int2 v3_q_head(const v3_args &a, int bh)
{
    return make_int2(bh % a.H, VL ? 0 : bh / a.H);
}

/* Release a stage: one arrival per warp, after that warp's wait_group has
 * seen the wgmma that read it complete. */
__device__ __forceinline__ void v3_release(uint32_t bar)
{
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive(bar);
}

/* The same, only when `cond` holds, without a branch: a branch around the
 * arrival inside the loop is divergent to the compiler, which then
 * serializes the wgmma (ptxas C7520). */
__device__ __forceinline__ void v3_release_if(uint32_t bar, bool cond)
{
    __syncwarp();
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n"
                 "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
                 "r"((int)(cond && (threadIdx.x & 31) == 0))
                 : "memory");
}

__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v)
{
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
/* ld.shared in the threads where `cond` holds, 0 in the others (a
 * predicate, not a branch, as v3_release_if). */
__device__ __forceinline__ uint32_t ld_shared_u32_if(uint32_t addr, bool cond)
{
    uint32_t v = 0;
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n@p ld.shared.u32 %0, [%1];\n}\n"
                 : "+r"(v)
                 : "r"(addr), "r"((int)cond)
                 : "memory");
    return v;
}

/* Why step 6's tile-slot hand-off (v3_next_tile) is ordered, in the terms of
 * the PTX memory model, and in terms compute-sanitizer's racecheck can check.
 * A slot is one 32-bit word of shared memory that only the generic proxy
 * touches (st.shared by the producer thread, ld.shared by the consumers; no
 * copy engine, so no fence.proxy.async is involved).
 *   Store before read (tile k, slot i = k % 2): the producer stores, then
 *   arrives on tile_full(i); mbarrier.arrive has release semantics at CTA
 *   scope, the consumers' try_wait that sees the phase complete has acquire
 *   semantics, and their read follows the wait.
 *   Read before the next store (tile k + 2 reuses slot i): the producer
 *   stores only after its wait on tile_empty(i) (acquire) saw that phase
 *   complete, and the phase needs one arrival (release) from every consumer
 *   warp, made after the warp's read.
 * Lane 0 alone reads, and lane 0 is the lane that arrives, so each read is
 * ordered before the next store by its own thread's program order and one
 * release/acquire pair; the other lanes take the number by __shfl_sync. Were
 * every lane to read, lanes 1-31 would be ordered before lane 0's arrival
 * only through the __syncwarp in v3_release (bar.warp.sync orders memory
 * among the lanes it joins): still correct under the memory model, but
 * racecheck does not chain a warp barrier with another thread's mbarrier
 * arrival, and reports those reads as racing with the producer's next store
 * into the slot, on every launch where some block takes a second tile (its
 * producer then writes slot 0 again, with the number after it); see
 * data/gpu/studies/fwd_v3_race/race.md. */


/* Where a tile lies: query head bh = b H + h, query block qb of its
 * sequence, the sequence's first rows in the packed Q (O) and K (V) and its
 * mask. Without variable lengths q0 = k0 = 0 and the mask is the call's. */
struct v3_where {
    int bh, qb, q0, k0;
    attn_mask mask;
};

/* Tile number t of a varlen call: (head, slot) as v3_tile_coords numbers
 * them (BH = H heads, n_qblocks = slots), the slot's sequence and block by
 * core/varlen.h's map; false for an unused slot. */
template <int BR>
__device__ __forceinline__ bool v3_varlen_tile(const v3_args &a, int t, v3_where &w)
{
    int h, u, b, qb;
    v3_tile_coords(a, t, h, u);
    /* opaque, as in v3_tile_coords: read where used, not held in the
     * producer's 32 registers across its loop */
    const int32_t *cu_q = a.cu_q, *cu_k = a.cu_k;
    int B = a.B, total_q = a.total_q, total_k = a.total_k, H = a.H;
    int wl = a.mask.window_size_left, wr = a.mask.window_size_right;
    asm volatile("" : "+l"(cu_q), "+l"(cu_k));
    v3_opaque(B, total_q, total_k, H, wl, wr);
    if (!varlen_block(cu_q, B, total_q, BR, u, &b, &qb)) return false;
    const varlen_seq sq = varlen_seq_of(cu_q, cu_k, total_q, total_k, b);
    w.bh = b * H + h;
    w.qb = qb;
    w.q0 = sq.q0;
    w.k0 = sq.k0;
    w.mask = varlen_mask(sq, wl, wr);
    return true;
}

//> v3-dynamic
/* The k-th tile of this block. Steps 1-5 compute it (v3_tile), the producer
 * and the consumers alike. From step 6 the producer asks a counter in device
 * memory for the next tile number of the whole grid, so a block that
 * finishes early takes more tiles, and passes the number on to the consumers
 * through a two-slot ring in shared memory: a slot is written after the
 * consumers released its previous use (tile_empty) and published by an
 * arrival on tile_full, whose release semantics make the store visible to
 * the threads that wait on it; in each consumer warp the lane that reads it
 * is the lane that releases it. The number past the last tile is passed on
 * too: it ends the consumers' loop. */
template <int D, int STEP, bool PRODUCER, bool VL>
__device__ __forceinline__ bool v3_next_tile(const v3_smem<D, STEP> &sm, const v3_args &a, int k,
                                             v3_where &w)
{
    using C = v3_cfg<D, STEP>;
    static_assert(!VL || C::DYNAMIC, "variable lengths take the counter's tiles (step 6 on)");
    w.q0 = w.k0 = 0;
    w.mask = a.mask;
    int &bh = w.bh, &qb = w.qb;
    if constexpr (!C::DYNAMIC) {
        return v3_tile<C::PERSIST>(a, blockIdx.x, gridDim.x, k, bh, qb);
    } else {
        const int i = k & 1;
        int t;
        if constexpr (PRODUCER) {
            mbar_wait(sm.tile_empty(i), ((k >> 1) & 1) ^ 1);
            t = (int)atomicAdd(a.tile_counter, 1u);
            /* varlen: unused slots are passed over here, never handed on */
            if constexpr (VL)
                while (t < a.n_tiles && !v3_varlen_tile<C::BR>(a, t, w)) t = (int)atomicAdd(a.tile_counter, 1u);
            st_shared_u32(sm.tile_slot(i), (uint32_t)t);
            mbar_arrive(sm.tile_full(i));
        } else {
            mbar_wait(sm.tile_full(i), (k >> 1) & 1);
            /* lane 0 reads the slot and is the lane whose arrival releases
             * it (the reasoning above); its warp takes the number from it. A
             * value broadcast from lane 0 is the same in every lane, and the
             * compiler knows it: the tile, its loop bounds and the ring
             * positions live in uniform registers, where wgmma takes its
             * descriptors from (no register-to-uniform moves per product) */
            const bool lane0 = (threadIdx.x & 31) == 0;
            t = (int)__shfl_sync(0xffffffffu, ld_shared_u32_if(sm.tile_slot(i), lane0), 0);
            v3_release(sm.tile_empty(i));
        }
        if (t >= a.n_tiles) return false;
        if constexpr (VL) {
            if constexpr (!PRODUCER) v3_varlen_tile<C::BR>(a, t, w);   /* the producer has it */
        } else {
            v3_tile_coords(a, t, bh, qb);
        }
        return true;
    }
}
//< v3-dynamic

//> v3-producer
/* Load number n of the K ring (is_v false) or the V ring goes to stage
 * n % STAGES. Before reusing a stage the producer waits for the consumers to
 * have released the load that used it STAGES loads ago: the empty barrier's
 * phase (n / STAGES - 1), whose parity is (n / STAGES + 1) & 1; for the
 * first STAGES loads that names the phase "before the first", which a fresh
 * barrier counts as complete. */
template <int D, int STEP>
__device__ __forceinline__ void produce(const v3_smem<D, STEP> &sm, const CUtensorMap *map, bool is_v,
                                        int n, int jb, int2 kvh, bool issue = true, int k0 = 0)
{
    using C = v3_cfg<D, STEP>;
    const int st = n % C::STAGES, ph = (n / C::STAGES) & 1;
    mbar_wait(is_v ? sm.empty_v(st) : sm.empty_k(st), ph ^ 1);
    tma_tile<C::CB, C::BC>(map, is_v ? sm.v(st) : sm.k(st), is_v ? sm.full_v(st) : sm.full_k(st),
                           k0 + jb * C::BC, kvh, issue);
}

/* The producer warpgroup's one working thread: for every tile of this CTA,
 * Q once (after the consumers released the previous Q), then K and V of
 * every key block the mask leaves, in the order the consumers use them. */
template <int D, int STEP, bool VL>
__device__ void v3_producer(const v3_smem<D, STEP> &sm, const CUtensorMap *tmQ,
                            const CUtensorMap *tmK, const CUtensorMap *tmV, const v3_args &a)
{
    using C = v3_cfg<D, STEP>;
    int n = 0, nq = 0;
    v3_where w;
    const int &bh = w.bh;
    for (int k = 0; v3_next_tile<D, STEP, true, VL>(sm, a, k, w); k++) {
        int jb0, jb1;
        int i0 = w.qb * C::BR;
        if constexpr (VL) {
            if (!mask_key_blocks(w.mask, i0, min(i0 + C::BR, w.mask.seqlen_q), C::BC, &jb0, &jb1)) continue;
        } else if constexpr (C::PRODUCER_REGS <= 32) {
            attn_mask mk = a.mask;
            v3_opaque(mk.seqlen_q, mk.seqlen_k, mk.window_size_left, mk.window_size_right);
            if (!mask_key_blocks(mk, i0, min(i0 + C::BR, mk.seqlen_q), C::BC, &jb0, &jb1)) continue;
        } else {
            if (!mask_key_blocks(a.mask, i0, min(i0 + C::BR, a.seqlen_q), C::BC, &jb0, &jb1)) continue;
        }
        if (nq > 0) mbar_wait(sm.empty_q(), (nq - 1) & 1);
        tma_tile<C::CB, C::BR>(tmQ, sm.q(), sm.full_q(), w.q0 + i0, v3_q_head<VL>(a, bh));
        nq++;
        const int2 kvh = v3_kv_head<VL>(a, bh);
        for (int jb = jb0; jb < jb1; jb++, n++) {
            produce<D, STEP>(sm, tmK, false, n, jb, kvh, true, w.k0);
            produce<D, STEP>(sm, tmV, true, n, jb, kvh, true, w.k0);
        }
    }
}
//< v3-producer

//> v3-softmax
/* Online softmax of one S tile in place (stage 2's update, base 2): on
 * return s holds P = 2^(x - m) (fp32), m the new row maxima (of x), l the
 * row sums of this thread's columns rescaled, alpha = 2^(m_old - m_new) the
 * factor for O. Rows lane/4 (h = 0) and lane/4 + 8 (h = 1) of the warp's 16;
 * a row's 128 columns live in the 4 lanes of a quad (two shuffles).
 * MASKED: column 8n + e of this thread (tile column 8n + 2t + e) is kept
 * only in [lo[h], hi[h]], given relative to this thread's first column, so
 * each test compares with a constant (no per-element index registers: the
 * registers this would take are what lets the softmax run while P V is in
 * flight). A row with no visible key so far has m = -inf; it is
 * exponentiated against 0 instead (P = 0, alpha = 0), so -inf - -inf never
 * happens.
 * Deliberate copy: the shape of version 2's softmax update
 * (stage4_fwd_v2.cu), kept apart because chapters/23-hopper.md builds
 * version 3 in steps from its own pieces. */
template <bool MASKED, int NG = 16>
__device__ __forceinline__ void v3_softmax(float (&s)[4 * NG], float (&m)[2], float (&l)[2],
                                           float (&alpha)[2], float scale_log2, const int (&lo)[2],
                                           const int (&hi)[2])
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < NG; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float x = __fmul_rn(s[4 * n + 2 * h + e], scale_log2);   /* rounded once */
                if (MASKED && (8 * n + e < lo[h] || 8 * n + e > hi[h])) x = -INFINITY;
                s[4 * n + 2 * h + e] = x;
                mx = fmaxf(mx, x);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[h], mx);
        const float mu = m_new == -INFINITY ? 0.f : m_new;
        alpha[h] = ex2(m[h] - mu);
        m[h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < NG; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float p = ex2(s[4 * n + 2 * h + e] - mu);   /* x <= m: argument <= 0 */
                s[4 * n + 2 * h + e] = p;
                sum += p;
            }
        l[h] = l[h] * alpha[h] + sum;
    }
}
/* The tile at key j0: the masked variant where some pair of the warpgroup's
 * rows is invisible or past seqlen_k, the plain one elsewhere. */
template <int NG = 16>
__device__ __forceinline__ void v3_softmax_tile(float (&s)[4 * NG], float (&m)[2], float (&l)[2],
                                                float (&alpha)[2], float scale_log2, bool masked,
                                                int j0, const int (&lo)[2], const int (&hi)[2], int t)
{
    if (masked) {
        const int c0 = j0 + 2 * t;
        const int rl[2] = {lo[0] - c0, lo[1] - c0}, rh[2] = {hi[0] - c0, hi[1] - c0};
        v3_softmax<true, NG>(s, m, l, alpha, scale_log2, rl, rh);
    } else {
        v3_softmax<false, NG>(s, m, l, alpha, scale_log2, lo, hi);
    }
}
//< v3-softmax

//> v3-softmax-lean
/* Step 7's softmax: the same function of S, in fewer instructions.
 *  - The row maximum is taken over the raw scores s. Rounding to fp32 is
 *    monotone and scale_log2 > 0, so round(max s * c) is exactly the maximum
 *    of the rounded x = round(s c) that step 4 takes: the same m.
 *  - The exponent is one FFMA, s c - m (the product not rounded), where
 *    |m| < 2^16. It then differs from round(s c) - m by less than half an
 *    ulp of the row's maximum, at most 2^-8, the size of the rounding step
 *    4 makes in x, and exceeds the row's true maximum minus m by that much
 *    at most. Where |m| >= 2^16 (scores beyond fp16's range, where that half
 *    ulp could be hundreds) the warp takes step 4's two operations instead,
 *    so huge logits give no inf.
 *  - The maximum the exponents are taken against (m, which L and the final
 *    division use too) moves only when the row's maximum passes it by more
 *    than V3_MAX_SLACK = 8: the exponents stay below 8 (plus the 2^-8
 *    above), P below 2^8, harmless in fp32 and in bf16/fp16, and O, l need
 *    no rescaling for that block. The caller rescales O only when this
 *    returns true for some thread of the warp.
 *  - The maxima and sums run in four independent chains per row, not one.
 * m = -inf (no visible key yet) is used as 0 in the exponent, as in step 4. */
#define V3_MAX_SLACK 8.0f
/* P = 2^(x - m) in place over both rows of the tile, and the rows' sums in
 * four chains each. FUSED: the exponent as one FFMA of the raw score;
 * otherwise step 4's x rounded once, then x - m <= 0. */
template <bool FUSED, int NG>
__device__ __forceinline__ void v3_exp_rows(float (&s)[4 * NG], float c, const float (&mu)[2],
                                            float (&sum)[2][4])
{
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int n = 0; n < NG; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float &x = s[4 * n + 2 * h + e];
                x = FUSED ? ex2(fmaf(x, c, -mu[h])) : ex2(__fmul_rn(x, c) - mu[h]);
                if (n < 2) sum[h][2 * n + e] = x;
                else sum[h][(2 * n + e) & 3] += x;
            }
}
template <bool MASKED, int NG>
__device__ __forceinline__ bool v3_softmax_lean(float (&s)[4 * NG], float (&m)[2], float (&l)[2],
                                                float (&alpha)[2], float c, const int (&lo)[2],
                                                const int (&hi)[2])
{
    bool moved = false;
    float mu[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (MASKED) {
#pragma unroll
            for (int n = 0; n < NG; n++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    if (8 * n + e < lo[h] || 8 * n + e > hi[h]) s[4 * n + 2 * h + e] = -INFINITY;
        }
        float r[4];
#pragma unroll
        for (int i = 0; i < 4; i++) r[i] = fmaxf(s[4 * i + 2 * h], s[4 * i + 2 * h + 1]);
#pragma unroll
        for (int n = 4; n < NG; n++) r[n & 3] = fmaxf(r[n & 3], fmaxf(s[4 * n + 2 * h], s[4 * n + 2 * h + 1]));
        float mr = fmaxf(fmaxf(r[0], r[1]), fmaxf(r[2], r[3]));
        mr = fmaxf(mr, __shfl_xor_sync(0xffffffffu, mr, 1));
        mr = fmaxf(mr, __shfl_xor_sync(0xffffffffu, mr, 2));
        const float mx = __fmul_rn(mr, c);             /* = max of round(s c) */
        const bool up = mx > m[h] + V3_MAX_SLACK;      /* m = -inf: any visible key moves it */
        alpha[h] = up ? ex2(m[h] - mx) : 1.f;          /* m = -inf: 0, nothing accumulated yet */
        m[h] = up ? mx : m[h];
        moved |= up;
        mu[h] = m[h] == -INFINITY ? 0.f : m[h];
    }
    float sum[2][4];
    if (__all_sync(0xffffffffu, fabsf(mu[0]) < 65536.f && fabsf(mu[1]) < 65536.f))
        v3_exp_rows<true, NG>(s, c, mu, sum);
    else
        v3_exp_rows<false, NG>(s, c, mu, sum);
#pragma unroll
    for (int h = 0; h < 2; h++) l[h] = l[h] * alpha[h] + ((sum[h][0] + sum[h][1]) + (sum[h][2] + sum[h][3]));
    return moved;
}
/* The tile at key j0, as v3_softmax_tile chooses for step 4. */
template <int NG>
__device__ __forceinline__ bool v3_softmax_lean_tile(float (&s)[4 * NG], float (&m)[2], float (&l)[2],
                                                     float (&alpha)[2], float c, bool masked, int j0,
                                                     const int (&lo)[2], const int (&hi)[2], int t)
{
    if (masked) {
        const int c0 = j0 + 2 * t;
        const int rl[2] = {lo[0] - c0, lo[1] - c0}, rh[2] = {hi[0] - c0, hi[1] - c0};
        return v3_softmax_lean<true, NG>(s, m, l, alpha, c, rl, rh);
    }
    return v3_softmax_lean<false, NG>(s, m, l, alpha, c, lo, hi);
}
//< v3-softmax-lean

//> v3-consumer
/* One consumer warpgroup (cw = 0 .. NWG-1): rows 64 cw .. 64 cw + 63 of each
 * tile. n counts K/V loads across tiles (the ring position), nq Q loads. */
template <typename T, int D, int STEP, bool VL>
__device__ void v3_consumer(int cw, const v3_smem<D, STEP> &sm, const CUtensorMap *tmQ,
                            const CUtensorMap *tmK, const CUtensorMap *tmV, const v3_args &a)
{
    using C = v3_cfg<D, STEP>;
    constexpr int S = C::STAGES;
    const int tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    /* In step 1 this warpgroup is also the producer: all its threads run the
     * producer's waits, thread 0 alone issues (tma_tile's predicate). */
    constexpr bool self_load = !C::WS;
    const bool issuer = tid == 0;
    int n = 0, nq = 0;
    v3_where w;
    const int &bh = w.bh, &qb = w.qb;

    /* Ping-pong: warpgroup cw waits on barrier 1 + cw for its turn on the
     * tensor cores and hands the turn over on the next one's (cw + 1, round
     * the NWG consumers); the last warpgroup starts by handing it to
     * warpgroup 0. */
    auto turn_wait = [&]() { if constexpr (C::PINGPONG) named_bar_sync(1 + cw, 256); };
    auto turn_pass = [&]() {
        if constexpr (C::PINGPONG && C::NWG == 2) named_bar_arrive(1 + (cw ^ 1), 256);
        else if constexpr (C::PINGPONG) named_bar_arrive(1 + (cw + 1 == C::NWG ? 0 : cw + 1), 256);
    };
    if constexpr (C::PINGPONG)
        if (cw == C::NWG - 1) named_bar_arrive(1, 256);   /* the last hands the first turn to warpgroup 0 */

    constexpr int NG = C::BC / 8;   /* groups of 8 key columns per row */
    float o[D / 2], s[4 * NG];
    uint32_t p[2 * NG];
    for (int k = 0; v3_next_tile<D, STEP, false, VL>(sm, a, k, w); k++) {
        /* the tile's sequence: the call itself without variable lengths */
        const attn_mask mk = VL ? w.mask : a.mask;
        const int seqlen_q = VL ? w.mask.seqlen_q : a.seqlen_q, seqlen_k = VL ? w.mask.seqlen_k : a.seqlen_k;
        const int i0 = qb * C::BR;
        const int r0 = i0 + 64 * cw + 16 * warp + g;   /* this thread's rows r0 and r0 + 8 */
        T *Oh = (T *)a.O + (size_t)(bh / a.H) * a.o_batch + (size_t)(bh % a.H) * a.o_head +
                (size_t)w.q0 * a.o_row;
        float *Lh = a.L + (VL ? (size_t)(bh % a.H) * a.total_q + w.q0 : (size_t)bh * a.seqlen_q);
        int jb0, jb1;
        const int nblk = mask_key_blocks(mk, i0, min(i0 + C::BR, seqlen_q), C::BC, &jb0, &jb1);
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];
        int lo[2], hi[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            lo[h] = mask_key_first(mk, r0 + 8 * h);
            hi[h] = min(mask_key_last(mk, r0 + 8 * h), seqlen_k - 1);
        }
        /* the warpgroup's rows, for the "is this tile fully visible" test */
        const int w0 = i0 + 64 * cw, w1 = min(w0 + 64, seqlen_q);
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] = 0.f;

        if (nblk > 0) {
            const int2 kvh = v3_kv_head(a, bh);
            static_assert(!(self_load && VL), "step 1 has no varlen form");
            if constexpr (self_load) {   /* step 1: Q and the first STAGES blocks */
                tma_tile<C::CB, C::BR>(tmQ, sm.q(), sm.full_q(), i0, v3_q_head(a, bh), issuer);
                for (int b = 0; b < S && b < nblk; b++) {
                    produce<D, STEP>(sm, tmK, false, n + b, jb0 + b, kvh, issuer);
                    produce<D, STEP>(sm, tmV, true, n + b, jb0 + b, kvh, issuer);
                }
            }
            mbar_wait(sm.full_q(), nq & 1);
            nq++;
            const uint32_t q = sm.q() + 64 * cw * 128;
            /* step 7: the key blocks every row of this warpgroup sees whole
             * are one range [ju0, ju1) (a row's keys are an interval whose
             * ends grow with the row): two comparisons per block instead of
             * mask_tile_unmasked's arithmetic; the same answer */
            const int kf = mask_key_first(mk, w1 - 1);
            const int kl = min(mask_key_last(mk, w0), seqlen_k - 1);
            const int ju0 = (kf + C::BC - 1) / C::BC, ju1 = kl + 1 > 0 ? (kl + 1) / C::BC : 0;
            auto need_mask = [&](int j0) {
                if constexpr (C::LEAN)
                    return w0 < seqlen_q && (j0 < ju0 * C::BC || j0 >= ju1 * C::BC);
                return w0 < seqlen_q &&
                       (j0 + C::BC > seqlen_k || !mask_tile_unmasked(mk, w0, w1, j0, j0 + C::BC));
            };
            /* step 7: descriptors' low words of this warpgroup's Q and of K, V
             * in ring stage 0; stage st is KV_BYTES >> 4 further on */
            const uint32_t qlo = desc_lo(q, 16), klo0 = desc_lo(sm.k(0), 16);
            const uint32_t vlo0 = desc_lo(sm.v(0), C::BC * 128);
            constexpr uint32_t KV16 = C::KV_BYTES >> 4;
            auto issue_qk = [&](int st_) {
                if constexpr (C::LEAN) gemm_qk_lean<T, D, C::BR, C::BC>(s, qlo, klo0 + st_ * KV16);
                else gemm_qk<T, D, C::BR, C::BC>(s, q, sm.k(st_));
            };
            auto issue_pv = [&](int st_) {
                if constexpr (C::LEAN) gemm_pv_lean<T, D, C::BC>(o, p, vlo0 + st_ * KV16);
                else gemm_pv<T, D, C::BC>(o, p, sm.v(st_));
            };
            bool moved = false;
            auto softmax = [&](int jb) {
                if constexpr (C::LEAN)
                    moved = v3_softmax_lean_tile<NG>(s, m, l, alpha, a.scale_log2, need_mask(jb * C::BC),
                                                     jb * C::BC, lo, hi, t);
                else
                    v3_softmax_tile<NG>(s, m, l, alpha, a.scale_log2, need_mask(jb * C::BC), jb * C::BC, lo, hi, t);
            };

            /* prologue: S of the first block, its softmax, P packed */
            int st = n % S, ph = (n / S) & 1;
            mbar_wait(sm.full_k(st), ph);
            turn_wait();
            reg_fence(s);
            wgmma_fence();
            issue_qk(st);
            wgmma_commit();
            turn_pass();
            wgmma_wait<0>();
            reg_fence(s);
            v3_release(sm.empty_k(st));
            /* step 6: Q is free once its last product is done, so the
             * producer may bring the next tile's Q during this tile's tail */
            if constexpr (C::DYNAMIC) v3_release_if(sm.empty_q(), nblk == 1);
            softmax(jb0);
#pragma unroll
            for (int i = 0; i < 2 * NG; i++) p[i] = pack2<T>(s[2 * i], s[2 * i + 1]);
            int pst = st, pph = ph;   /* the stage whose V the packed P multiplies */
            n++;

            for (int jb = jb0 + 1; jb < jb1; jb++, n++) {
                st = n % S;
                ph = (n / S) & 1;
                mbar_wait(sm.full_k(st), ph);
                turn_wait();
                reg_fence(s);
                reg_fence(o);
                reg_fence(p);
                wgmma_fence();
                issue_qk(st);                            /* S_j = Q K_j^T */
                wgmma_commit();
                mbar_wait(sm.full_v(pst), pph);
                issue_pv(pst);                           /* O += P_{j-1} V_{j-1} */
                wgmma_commit();
                turn_pass();
                if constexpr (C::OVERLAP) wgmma_wait<1>();   /* S_j done, P V may still run */
                else wgmma_wait<0>();
                reg_fence(s);
                v3_release(sm.empty_k(st));
                if constexpr (C::DYNAMIC) v3_release_if(sm.empty_q(), jb == jb1 - 1);
                softmax(jb);
                /* pin the softmax before the wait: without these the compiler
                 * may sink the exponentials below it, and the overlap is gone */
                reg_fence(s);
                reg_fence(l);
                reg_fence(alpha);
                wgmma_wait<0>();                          /* P_{j-1} V_{j-1} done */
                reg_fence(o);
                reg_fence(p);
                v3_release(sm.empty_v(pst));
                if constexpr (self_load)   /* step 1: refill that stage */
                    if (jb - jb0 - 1 + S < nblk) {
                        produce<D, STEP>(sm, tmK, false, n - 1 + S, jb - 1 + S, kvh, issuer);
                        produce<D, STEP>(sm, tmV, true, n - 1 + S, jb - 1 + S, kvh, issuer);
                    }
                /* step 7: only where some row of the warp moved its maximum */
                if (!C::LEAN || __any_sync(0xffffffffu, moved)) {
#pragma unroll
                    for (int i = 0; i < D / 2; i++) o[i] *= alpha[(i >> 1) & 1];
                }
#pragma unroll
                for (int i = 0; i < 2 * NG; i++) p[i] = pack2<T>(s[2 * i], s[2 * i + 1]);
                pst = st;
                pph = ph;
            }

            /* tail: P V of the last block */
            mbar_wait(sm.full_v(pst), pph);
            turn_wait();
            reg_fence(o);
            reg_fence(p);
            wgmma_fence();
            issue_pv(pst);
            wgmma_commit();
            turn_pass();
            wgmma_wait<0>();
            reg_fence(o);
            v3_release(sm.empty_v(pst));
            if constexpr (C::PERSIST && !C::DYNAMIC)
                v3_release(sm.empty_q());   /* the producer may load the next Q */
        }

        /* epilogue: O / l and L, rows below seqlen_q; a row with l = 0 saw
         * no key: O = 0, L = -inf */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float lt = l[h];
            lt += __shfl_xor_sync(0xffffffffu, lt, 1);
            lt += __shfl_xor_sync(0xffffffffu, lt, 2);
            const int row = r0 + 8 * h;
            if (row >= seqlen_q) continue;   /* (varlen: the next sequence's row) */
            const float inv = lt > 0.f ? 1.f / lt : 0.f;
            T *orow = Oh + (size_t)row * a.o_row + 2 * t;
#pragma unroll
            for (int c = 0; c < D / 8; c++)
                *reinterpret_cast<uint32_t *>(orow + 8 * c) =
                    pack2<T>(o[4 * c + 2 * h] * inv, o[4 * c + 2 * h + 1] * inv);
            if (t == 0) Lh[row] = lt > 0.f ? (m[h] + log2f(lt)) * 0.6931471805599453f : -INFINITY;
        }
    }
    /* the last hand-over of the last warpgroup is still pending on barrier 1 */
    if constexpr (C::PINGPONG)
        if (cw == 0) named_bar_sync(1, 256);
}
//< v3-consumer

//> v3-kernel
template <typename T, int D, int STEP, bool VL>
__global__ void __launch_bounds__(v3_cfg<D, STEP>::THREADS, 1)
    fwd_v3_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                  const __grid_constant__ CUtensorMap tmV, const v3_args a)
{
    using C = v3_cfg<D, STEP>;
    extern __shared__ uint8_t v3_smem_raw[];
    /* the 128-byte swizzle repeats every 1024 bytes: tiles start on that */
    const v3_smem<D, STEP> sm{(smem_u32(v3_smem_raw) + 1023u) & ~1023u};
    if (threadIdx.x == 0) {
        mbar_init(sm.full_q(), 1);
        mbar_init(sm.empty_q(), 4 * C::NWG);
        for (int st = 0; st < C::STAGES; st++) {
            mbar_init(sm.full_k(st), 1);   /* the producer's expect_tx arrival */
            mbar_init(sm.full_v(st), 1);
            mbar_init(sm.empty_k(st), 4 * C::NWG);   /* one arrival per consumer warp */
            mbar_init(sm.empty_v(st), 4 * C::NWG);
        }
        if constexpr (C::DYNAMIC)
            for (int i = 0; i < 2; i++) {
                mbar_init(sm.tile_full(i), 1);            /* the producer's arrival */
                mbar_init(sm.tile_empty(i), 4 * C::NWG);  /* one per consumer warp */
            }
        fence_barrier_init();   /* make the initialized barriers visible to the copy engine */
    }
    __syncthreads();
    if constexpr (C::WS) {
        if (threadIdx.x < 128) {   /* warpgroup 0: the producer */
            setmaxnreg_dec<C::PRODUCER_REGS>();
            if (threadIdx.x == 0) v3_producer<D, STEP, VL>(sm, &tmQ, &tmK, &tmV, a);
        } else {                   /* warpgroups 1, 2: the consumers */
            setmaxnreg_inc<C::CONSUMER_REGS>();
            /* step 7: the warpgroup index as a warp-uniform value (see v3_next_tile) */
            const int wg = C::LEAN ? __shfl_sync(0xffffffffu, threadIdx.x / 128, 0) : threadIdx.x / 128;
            v3_consumer<T, D, STEP, VL>(wg - 1, sm, &tmQ, &tmK, &tmV, a);
        }
    } else {
        v3_consumer<T, D, STEP, VL>(0, sm, &tmQ, &tmK, &tmV, a);
    }
}
//< v3-kernel

/* ------------------------------------------------------------------------- */
/* Host side: tensor maps, checks, launch                                     */
/* ------------------------------------------------------------------------- */
PFN_cuTensorMapEncodeTiled_v12000 v3_encode_fn(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    if (!fn) {
        void *ptr = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                             &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)ptr;
        else
            (void)cudaGetLastError();
    }
    return fn;
}

//> v3-tensormap
/* The tensor map of one operand: a 4-D array (d, seqlen, heads, batch) of
 * 16-bit elements with the operand's row, head and batch strides (fa_stride,
 * in elements; the copy engine takes them in bytes, multiples of 16, which
 * fa_api.cu's stride check asks of every strided call); a box is 64 columns
 * (128 bytes, the widest the 128-byte swizzle takes) x `rows` x 1 head x 1
 * batch. Rows past seqlen are filled with zeros by the copy engine, so a
 * tile that runs past the end of a head never reads the next head. */
int v3_tensor_map_strided(CUtensorMap *map, const void *ptr, int dtype, int d, int seqlen,
                                 int heads, int batch, const fa_stride *st, int rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 encode = v3_encode_fn();
    if (!encode)
        return fa_set_error(FA_ERR_CUDA, "%s:%d: the driver has no cuTensorMapEncodeTiled", __FILE__, __LINE__);
    cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)seqlen, (cuuint64_t)heads, (cuuint64_t)batch};
    cuuint64_t strides[3] = {(cuuint64_t)st->row * 2, (cuuint64_t)st->head * 2, (cuuint64_t)st->batch * 2};
    cuuint32_t box[4] = {64, (cuuint32_t)rows, 1, 1}, elem[4] = {1, 1, 1, 1};
    CUresult r = encode(map, dtype == FA_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                        4, const_cast<void *>(ptr), dims, strides, box, elem,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return fa_set_error(FA_ERR_CUDA, "%s:%d: cuTensorMapEncodeTiled (d %d, seqlen %d, heads %d, box rows %d): CUresult %d",
                       __FILE__, __LINE__, d, seqlen, heads, rows, (int)r);
    return FA_OK;
}
/* The contiguous case: (heads, seqlen, d) row-major, one batch (the pieces'
 * self-tests, tests/gpu/v3_check_cuda.cu, build their maps with it). */
int v3_tensor_map(CUtensorMap *map, const void *ptr, int dtype, int d, int seqlen,
                         int heads, int rows)
{
    const fa_stride st = {(int64_t)heads * seqlen * d, (int64_t)seqlen * d, d};
    return v3_tensor_map_strided(map, ptr, dtype, d, seqlen, heads, 1, &st, rows);
}
//< v3-tensormap

//> v3-step
/* The step a launch runs: FA_V3_STEP in the environment (1 .. FA_V3_STEPS),
 * else FA_V3_DEFAULT_STEP (stage4_fwd_v3_hopper.h). The version table has one
 * row for version 3; the steps are read here, at each launch, so that every
 * program and tool that runs "version 3" (stage4, bench_gpu.py, v3_check)
 * can be pointed at any step. 0 when the variable holds anything else. */
static int v3_step(void)
{
    const char *e = getenv("FA_V3_STEP");
    if (!e || !*e) return FA_V3_DEFAULT_STEP;
    char *end;
    long k = strtol(e, &end, 10);
    return (*end == '\0' && k >= 1 && k <= FA_V3_STEPS) ? (int)k : 0;
}
//< v3-step

extern "C" int fa_v3_current_step(void) { return v3_step(); }

extern "C" const char *fa_v3_step_name(int step)
{
    switch (step) {
    case 1: return "step 1: TMA + wgmma, one warpgroup (64 rows) issues its own copies";
    case 2: return "step 2: producer warpgroup + 2 consumer warpgroups, setmaxnreg";
    case 3: return "step 3: + ping-pong of the consumers on the tensor cores";
    case 4: return "step 4: + softmax of S_j under P_{j-1} V_{j-1} (intra-warpgroup overlap)";
    case 5: return "step 5: + persistent grid, longest tiles first";
    case 6: return "step 6: + tiles handed out by a counter as blocks free (dynamic, longest first)";
    case 7: return "step 7: + fewer instructions per key block (descriptors, one-FFMA exponent, lazy rescale)";
    case 8: return "step 8: + tile shapes per d: 3 consumer warpgroups (Br 192) at d = 64, Bc = 176 at d = 128";
    default: return "?";
    }
}

/* compute capability and SM count of the current device, -1 when none */
static int v3_device(int *cc, int *sms)
{
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    *cc = 10 * major + minor;
    return 0;
}

/* The limits beyond the table row's (fp16/bf16, d = 64 or 128, masks and
 * GQA taken): the step, fp16 from step FA_V3_FP16_FIRST on, sizes. No GPU
 * check here (fa_check_problem is what a machine without a GPU can say). */
static int v3_check(int dtype, const attn_params *p)
{
    const int step = v3_step();
    if (!step)
        return fa_set_error(FA_ERR_UNSUPPORTED, "FA_V3_STEP=%s: version 3 has steps 1 to %d",
                            getenv("FA_V3_STEP"), FA_V3_STEPS);
    if (dtype == FA_FP16 && step < FA_V3_FP16_FIRST)
        return fa_set_error(FA_ERR_UNSUPPORTED,
                            "FA_V3_STEP=%d: steps 1 to %d of version 3 are kept in bf16 only (the "
                            "record of how it was built); fp16 runs in steps %d to %d", step,
                            FA_V3_FP16_FIRST - 1, FA_V3_FP16_FIRST, FA_V3_STEPS);
    if ((long long)p->B * p->H * ((p->seqlen_q + 63) / 64) > INT32_MAX / 2 ||
        (long long)p->B * p->H_kv * p->seqlen_k * p->d > (1ll << 40))
        return fa_set_error(FA_ERR_UNSUPPORTED, "version 3: problem too large (tile count or tensor extent)");
    return FA_OK;
}

//> v3-counter
/* Step 6's tile counters: one 4-byte word per launch, zeroed on the launch's
 * stream just before the kernel, so it starts at 0 whatever ran before.
 * Launches take the slots in turn, so that launches in flight on different
 * streams at the same time count on different words (up to
 * V3_COUNTER_SLOTS of them). */
#define V3_COUNTER_SLOTS 64
__device__ unsigned v3_tile_counters[V3_COUNTER_SLOTS];

static int v3_counter_for_launch(unsigned **ctr, cudaStream_t stream)
{
    static std::atomic<unsigned> next{0};
    void *base = nullptr;
    CUDA_TRY(cudaGetSymbolAddress(&base, v3_tile_counters));
    *ctr = (unsigned *)base + next.fetch_add(1) % V3_COUNTER_SLOTS;
    CUDA_TRY(cudaMemsetAsync(*ctr, 0, sizeof(unsigned), stream));
    return FA_OK;
}
//< v3-counter

/* vl: packed sequences (VL), else NULL. */
template <typename T, int D, int STEP, bool VL = false>
static int v3_launch(const attn_params *p, const void *q, const void *k, const void *v, void *o,
                     float *lse, const fa_stride *s, cudaStream_t stream, const fa_varlen *vl = nullptr)
{
    using C = v3_cfg<D, STEP>;
    int dtype = std::is_same<T, __nv_bfloat16>::value ? FA_BF16 : FA_FP16;
    CUtensorMap tq, tk, tv;
    /* varlen: the tiles run over H heads x slots (core/varlen.h), the maps
     * over one batch of total rows (a dimension of 1, whose stride the copy
     * engine never steps over but checks: one row's) */
    const int BH = VL ? p->H : p->B * p->H;
    const int rows_q = VL ? vl->total_q : p->seqlen_q, rows_k = VL ? vl->total_k : p->seqlen_k;
    const int batches = VL ? 1 : p->B;
    fa_stride sq = s[0], sk = s[1], sv = s[2];
    if (VL) {
        sq.batch = sq.row;
        sk.batch = sk.row;
        sv.batch = sv.row;
        if ((long long)p->H * varlen_slots(vl->total_q, p->B, C::BR) > INT32_MAX / 2)
            return fa_set_error(FA_ERR_UNSUPPORTED, "version 3: problem too large (tile count)");
    }
    int rc;
    /* s: fa_strides_of's q, k, v, o */
    if ((rc = v3_tensor_map_strided(&tq, q, dtype, D, rows_q, p->H, batches, &sq, C::BR)) ||
        (rc = v3_tensor_map_strided(&tk, k, dtype, D, rows_k, p->H_kv, batches, &sk, C::BC)) ||
        (rc = v3_tensor_map_strided(&tv, v, dtype, D, rows_k, p->H_kv, batches, &sv, C::BC)))
        return rc;
    v3_args a;
    a.O = o;
    a.L = lse;
    a.o_batch = s[3].batch;
    a.o_head = s[3].head;
    a.o_row = s[3].row;
    a.mask = attn_mask_of(p);
    a.H = p->H;
    a.H_kv = p->H_kv;
    a.BH = BH;
    a.seqlen_q = p->seqlen_q;
    a.seqlen_k = p->seqlen_k;
    a.n_qblocks = VL ? varlen_slots(vl->total_q, p->B, C::BR) : (p->seqlen_q + C::BR - 1) / C::BR;
    a.n_tiles = a.n_qblocks * BH;
    a.cu_q = VL ? vl->cu_seqlens_q : nullptr;
    a.cu_k = VL ? vl->cu_seqlens_k : nullptr;
    a.B = p->B;
    a.total_q = VL ? vl->total_q : 0;
    a.total_k = VL ? vl->total_k : 0;
    a.scale_log2 = (float)(p->softmax_scale * 1.4426950408889634);
    int cc = 0, sms = 132, dev = 0, l2 = 50 << 20;
    if (v3_device(&cc, &sms) != 0) sms = 132;
    (void)cc;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        l2 = 50 << 20;
    }
    const double kv_head_bytes = 2.0 * rows_k * D * 2;   /* varlen: a head's keys of every sequence */
    a.heads_per_group = (int)std::max(1.0, std::min((double)BH, 0.5 * l2 / kv_head_bytes));
    const int n_groups = (BH + a.heads_per_group - 1) / a.heads_per_group;
    a.group_q = BH / n_groups;
    a.group_r = BH % n_groups;
    a.tile_counter = nullptr;
    if (C::DYNAMIC) {
        int rc2 = v3_counter_for_launch(&a.tile_counter, stream);
        if (rc2) return rc2;
    }
    int grid = C::PERSIST ? std::min(a.n_tiles, sms) : a.n_tiles;
    static bool attr_set = false;   /* per instantiation */
    if (!attr_set) {
        CUDA_TRY(cudaFuncSetAttribute(fwd_v3_kernel<T, D, STEP, VL>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
        attr_set = true;
    }
    fwd_v3_kernel<T, D, STEP, VL><<<grid, C::THREADS, C::SMEM, stream>>>(tq, tk, tv, a);
    CUDA_TRY(cudaGetLastError());
    return FA_OK;
}

template <typename T, int D>
static int v3_launch_step(int step, const attn_params *p, const void *q, const void *k,
                          const void *v, void *o, float *lse, const fa_stride *s, cudaStream_t st)
{
    switch (step) {
    case 1: return v3_launch<T, D, 1>(p, q, k, v, o, lse, s, st);
    case 2: return v3_launch<T, D, 2>(p, q, k, v, o, lse, s, st);
    case 3: return v3_launch<T, D, 3>(p, q, k, v, o, lse, s, st);
    case 4: return v3_launch<T, D, 4>(p, q, k, v, o, lse, s, st);
    case 5: return v3_launch<T, D, 5>(p, q, k, v, o, lse, s, st);
    case 6: return v3_launch<T, D, 6>(p, q, k, v, o, lse, s, st);
    case 7: return v3_launch<T, D, 7>(p, q, k, v, o, lse, s, st);
    default: return v3_launch<T, D, 8>(p, q, k, v, o, lse, s, st);
    }
}

/* fp16 runs in the steps from FA_V3_FP16_FIRST on (v3_check refuses the
 * others): only those are instantiated for it. */
template <int D>
static int v3_launch_step_fp16(int step, const attn_params *p, const void *q, const void *k,
                               const void *v, void *o, float *lse, const fa_stride *s, cudaStream_t st)
{
    static_assert(FA_V3_FP16_FIRST == 5, "instantiate fp16 for the steps from FA_V3_FP16_FIRST on");
    switch (step) {
    case 5: return v3_launch<__half, D, 5>(p, q, k, v, o, lse, s, st);
    case 6: return v3_launch<__half, D, 6>(p, q, k, v, o, lse, s, st);
    case 7: return v3_launch<__half, D, 7>(p, q, k, v, o, lse, s, st);
    default: return v3_launch<__half, D, 8>(p, q, k, v, o, lse, s, st);
    }
}

/* The row's launcher: fa_api.cu has checked the dtype, d, masks and
 * v3_check; what is left is the GPU (sm_90a code runs on 9.0 only: refuse
 * elsewhere with one line instead of failing at launch) and alignment. */
static int v3_run(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic,
                  cudaStream_t st)
{
    (void)deterministic;
    int cc = 0, sms = 0;
    if (v3_device(&cc, &sms) != 0)
        return fa_set_error(FA_ERR_UNSUPPORTED, "forward version 3 needs a CUDA GPU of compute capability 9.0, "
                            "none found");
    if (cc != 90)
        return fa_set_error(FA_ERR_UNSUPPORTED, "forward version 3 is built for sm_90a (H100/H200) only, "
                            "this GPU has %d.%d", cc / 10, cc % 10);
    if (!aligned16(x->q) || !aligned16(x->k) || !aligned16(x->v) || ((uintptr_t)x->o & 3u))
        return fa_set_error(FA_ERR_UNSUPPORTED, "version 3 needs 16-byte aligned Q, K, V (the tensor copy "
                            "engine's rule) and a 4-byte aligned O");
    fa_stride s[8];
    fa_strides_of(p, x, s);
    const int step = v3_step();
    if (dtype == FA_BF16)
        return p->d == 64 ? v3_launch_step<__nv_bfloat16, 64>(step, p, x->q, x->k, x->v, x->o, x->softmax_lse, s, st)
                          : v3_launch_step<__nv_bfloat16, 128>(step, p, x->q, x->k, x->v, x->o, x->softmax_lse, s, st);
    return p->d == 64 ? v3_launch_step_fp16<64>(step, p, x->q, x->k, x->v, x->o, x->softmax_lse, s, st)
                      : v3_launch_step_fp16<128>(step, p, x->q, x->k, x->v, x->o, x->softmax_lse, s, st);
}

/* Packed sequences (fa_forward_varlen): step FA_V3_VARLEN_STEP only, whose
 * dynamic tile counter passes over the unused slots of core/varlen.h's block
 * map. Each sequence computes what the dense kernel computes on it alone:
 * its rows past the end (the next sequence's, read by the copy engine with
 * the tile) are masked to -inf as keys and never written as queries, so a
 * key past the end adds P V = 0 x V = 0 (V finite). The only difference from
 * a dense call: a warp whose other rows hold another sequence's queries with
 * scores beyond 2^16 takes step 4's two-operation exponent (v3_softmax_lean),
 * as accurate, not bit for bit the same. */
#define FA_V3_VARLEN_STEP 8
static int v3_check_varlen(int dtype, const attn_params *p, int flags)
{
    (void)dtype;
    (void)p;
    (void)flags;
    if (v3_step() != FA_V3_VARLEN_STEP)
        return fa_set_error(FA_ERR_UNSUPPORTED, "FA_V3_STEP=%d: version 3 runs variable lengths in step %d only",
                            v3_step(), FA_V3_VARLEN_STEP);
    return FA_OK;
}
static int v3_run_varlen(int dtype, const attn_params *p, const fa_varlen *vl, const fa_ptrs *x, int flags,
                         cudaStream_t st)
{
    (void)flags;
    int cc = 0, sms = 0;
    if (v3_device(&cc, &sms) != 0 || cc != 90)
        return fa_set_error(FA_ERR_UNSUPPORTED, "forward version 3 is built for sm_90a (H100/H200) only");
    if (!aligned16(x->q) || !aligned16(x->k) || !aligned16(x->v) || ((uintptr_t)x->o & 3u))
        return fa_set_error(FA_ERR_UNSUPPORTED, "version 3 needs 16-byte aligned Q, K, V (the tensor copy "
                            "engine's rule) and a 4-byte aligned O");
    const fa_stride s[4] = {x->sq, x->sk, x->sv, x->so};   /* resolved by fa_api.cu */
    constexpr int S8 = FA_V3_VARLEN_STEP;
    if (dtype == FA_BF16)
        return p->d == 64 ? v3_launch<__nv_bfloat16, 64, S8, true>(p, x->q, x->k, x->v, x->o, x->softmax_lse, s, st, vl)
                          : v3_launch<__nv_bfloat16, 128, S8, true>(p, x->q, x->k, x->v, x->o, x->softmax_lse, s, st, vl);
    return p->d == 64 ? v3_launch<__half, 64, S8, true>(p, x->q, x->k, x->v, x->o, x->softmax_lse, s, st, vl)
                      : v3_launch<__half, 128, S8, true>(p, x->q, x->k, x->v, x->o, x->softmax_lse, s, st, vl);
}

/* The tile shape of the step that runs (v3_cfg): the IO model counts K and
 * V once per query block of Br rows. */
static int v3_block_rows(int d)
{
    const int step = v3_step();
    return step == 1 ? 64 : step >= 8 && d == 64 ? 192 : 128;
}
static int v3_block_cols(int d)
{
    return v3_step() >= 8 && d == 128 ? 176 : FA_V3_BC;
}

//> v3-row
/* Version 3's row of the table (core/versions.def): fp16 and bf16, d = 64
 * and 128 (d_min 64, d_max 128, multiples of 64), masks and grouped heads,
 * compute capability 9.0; the IO model is the tiled forward's with Br = 128
 * (64 in step 1, 192 at d = 64 from step 8) and Bc = 128 (176 at d = 128
 * from step 8). */
const fa_row fa_row_fwd_v3 = {.info = {.pass = FA_FORWARD, .version = 3, .name = "v3",
    .what = "Hopper: TMA copies, wgmma, producer/consumer warpgroups, overlapped softmax", .dtypes = FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 64, .d_max = 128, .d_multiple = 64, .masks = 1, .deterministic = 0, .min_cc = 90, .slug = "hopper", .strided = 1, .varlen = 1},
    .run = v3_run, .check = v3_check, .workspace = nullptr, .block_rows = v3_block_rows, .block_cols = v3_block_cols, .model_bytes = fa_model_tiled_forward,
    .run_varlen = v3_run_varlen, .check_varlen = v3_check_varlen, .workspace_varlen = nullptr};
//< v3-row
