/*
 * stage8_decode.h -- Stage 8 on the CPU, fp64: decoding a few query rows per
 * sequence against a paged KV cache, with the keys split into ranges whose
 * partial results the merge rule of merge.h joins (split-KV). The problem,
 * the layouts and the split plan are those of decode_plan.h.
 *
 * Two passes, as on the GPU:
 *   split pass    one work unit per (sequence b, key/value head g, split s):
 *                 the G seqlen_q rows of the group's query heads meet the
 *                 unit's keys a page-contained tile at a time, with stage 2's
 *                 online softmax update; the unit writes (O, L) directly when
 *                 num_splits = 1, else its partial (O_s, L_s)
 *   combine       per query row: the num_splits partials merged in split
 *                 order into an empty accumulator (O = 0, L = -inf) with
 *                 merge_rows (merge.h), then O and L written
 *
 * IO model (elements of slow memory; the counters see exactly these moves):
 *   cache     2 d H_kv sum_b (hi_b - lo_b)      each visible K and V row once
 *                                                per key/value head
 *   Q         H seqlen_q d sum_b nonempty_b      every split with a key reads
 *                                                its group's Q rows
 *   partials  B H seqlen_q (d + 1) num_splits    written by the split pass and
 *                                                read by the combine (each;
 *                                                0 when num_splits = 1)
 *   output    B H seqlen_q (d + 1)               O and L written once
 * where [lo_b, hi_b) is decode_key_range and nonempty_b the splits of it that
 * hold a key (decode_split_range).
 */
#ifndef FA_STAGE8_DECODE_H
#define FA_STAGE8_DECODE_H

#include <stdint.h>

#include "common.h"
#include "decode_plan.h"

/* The terms of the IO model above, in elements. */
typedef struct {
    uint64_t cache, q, partials_written, partials_read, out;
} decode_io;
uint64_t decode_io_total(decode_io t);

/* The closed form for one problem (cache_seqlens (B,)). */
decode_io decode_io_formula(const decode_params *p, const int *cache_seqlens, int num_splits);

/* Scratch ("SRAM") elements the split pass and the combine need: the
 * group's rows (G seqlen_q) times d for Q and the accumulator, a tile of
 * DECODE_BLOCK_N keys of K and V, the score tile, the row state. */
size_t decode_sram_elements(const decode_params *p);

/* The split pass (see the top of this file). Q (B, H, seqlen_q, d);
 * K_cache, V_cache (num_pages, page_size, H_kv, d); block_table (B,
 * pages_per_seq); cache_seqlens (B,), checked already (decode_tables_check).
 * num_splits = 1: writes O (B, H, seqlen_q, d) and L (B, H, seqlen_q), and
 * O_part, L_part may be NULL. num_splits > 1: writes O_part (num_splits, B,
 * H, seqlen_q, d) and L_part (num_splits, B, H, seqlen_q); O and L are not
 * touched. Traffic goes to io (may be NULL). Source: FlashAttention-2's
 * split-KV forward (Dao 2023, "FlashDecoding"), stage 3's tile loop. */
void decode_split_pass(const decode_params *p, const double *Q, const double *K_cache,
                       const double *V_cache, const int *block_table, const int *cache_seqlens,
                       int num_splits, double *O, double *L, double *O_part, double *L_part,
                       sram_arena *sram, io_counter *io);

/* The combine: O, L from the num_splits partials, merged in split order
 * (merge.h). Shapes as above. */
void decode_combine(const decode_params *p, int num_splits, const double *O_part, const double *L_part,
                    double *O, double *L, sram_arena *sram, io_counter *io);

/* Both passes; the partials are allocated here when num_splits > 1.
 * io_split and io_combine (may be NULL) get the two passes' traffic. */
void decode_forward(const decode_params *p, const double *Q, const double *K_cache,
                    const double *V_cache, const int *block_table, const int *cache_seqlens,
                    int num_splits, double *O, double *L, sram_arena *sram, io_counter *io_split,
                    io_counter *io_combine);

/* Dense K or V of sequence b, (H_kv, cache_seqlens[b], d), gathered from the
 * pages (what stage 1 reads): out holds H_kv cache_seqlens[b] d elements. */
void decode_gather_dense(const decode_params *p, const double *cache, const int *block_table, int b,
                         int len, double *out);

/* The counted terms of the IO model from the two passes' counters (split:
 * sp, combine: cb, as decode_forward fills them). */
decode_io decode_io_counted(const io_counter *sp, const io_counter *cb, int num_splits);

/* One paged problem in host memory, fp64: Q (B, H, seqlen_q, d) of nq
 * elements, the K and V pools (num_pages, page_size, H_kv, d) of pool
 * elements, block_table (B, pages_per_seq), cache_seqlens `lens` (B,). */
typedef struct {
    decode_params p;
    double *Q, *K, *V;
    int *table, *lens;
    size_t nq, pool;
} decode_problem;

/* Random tensors for x->p: Q and K ~ N(0, 1), V ~ N(v_mean, v_sd^2), drawn
 * in that order; the block table table_given (copied) or, when NULL, the
 * pool's pages handed to the slots in shuffled order (slot t gets a
 * permutation's entry t mod num_pages, so a pool smaller than the tables
 * shares pages). lens is left as it is (the caller's: lengths are what each
 * program chooses). */
void decode_problem_draw(decode_problem *x, rng_t *rng, double v_mean, double v_sd, const int *table_given);
/* Frees Q, K, V, table and lens (each may be NULL). */
void decode_problem_free(decode_problem *x);

/* The split run and the one-split run of one problem side by side (the
 * checks compare them): O, L from num_splits, O1, L1 from 1 split, the
 * counters io[0], io[1] (split, combine) of the first and io[2], io[3] of
 * the second, the SRAM high-water mark over both, the first run's wall
 * time in seconds. */
typedef struct {
    io_counter io[4];
    size_t sram_high;
    double seconds;
} decode_pair;
void decode_forward_pair(const decode_problem *x, int num_splits, double *O, double *L, double *O1, double *L1,
                         decode_pair *r);

#endif /* FA_STAGE8_DECODE_H */
