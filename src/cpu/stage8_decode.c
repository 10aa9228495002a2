/*
 * stage8_decode.c -- Stage 8: decoding against a paged KV cache, on the CPU
 * in fp64, with the keys split into ranges whose partial results the merge
 * rule joins (split-KV).
 *
 * What it adds over stages 3 and 6: the queries are few (seqlen_q 1 to 16
 * per sequence) and the keys many, so one query block per (sequence, head)
 * would leave a GPU's SMs idle; the keys are cut into num_splits ranges,
 * each range's (O_s, L_s) is a partial result over disjoint keys, and
 * merge.h's rule -- stage 2's rescaling, stage 7's ring merge -- joins them.
 * The cache is paged (a block table per sequence, pages in any order),
 * sequences have their own lengths (cache_seqlens), and the query heads of
 * a group share each K/V row read (grouped heads).
 *
 * Build and run:   make stage8 && ./stage8
 *   ./stage8                          4 sequences (lengths 0, 1, random, 1000),
 *                                     8 heads on 2 KV heads, pages of 16 keys
 *   ./stage8 --n 4 --causal --page-size 64 --splits 3
 *   ./stage8 --batch 2 --lens 700,33 --seqlen-k 1024 --window 100,0 --n 8
 *   ./stage8 --sweep io --csv data/cpu/decode_io.csv      (make sweep)
 *
 * What it prints: the split count and why; stage 8 against stage 1 (the
 * materialized fp64 reference on the dense K, V gathered from the pages),
 * per sequence; the splits against one split; the slow-memory traffic
 * counted while it runs beside the closed form of stage8_decode.h, term by
 * term. Exit 0 only when every check passes; bad input is one line and
 * exit 2.
 */
#include "stage8_decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "merge.h"
#include "stage1_naive.h"
#include "stage8_cli.h"
#include "stage2_online_softmax.h"
#include "tolerances.h"

uint64_t decode_io_total(decode_io t)
{
    return t.cache + t.q + t.partials_written + t.partials_read + t.out;
}

//> decode-io-formula
decode_io decode_io_formula(const decode_params *p, const int *cache_seqlens, int num_splits)
{
    decode_io t = {0, 0, 0, 0, 0};
    uint64_t d = (uint64_t)p->d, rows = (uint64_t)p->B * p->H * p->seqlen_q;
    for (int b = 0; b < p->B; b++) {
        int lo, hi, k0, k1, nonempty = 0;
        decode_key_range(p, cache_seqlens[b], &lo, &hi);
        for (int s = 0; s < num_splits; s++) nonempty += decode_split_range(hi - lo, num_splits, s, &k0, &k1) > 0;
        t.cache += 2 * d * (uint64_t)p->H_kv * (uint64_t)(hi - lo);
        t.q += (uint64_t)p->H * p->seqlen_q * d * (uint64_t)nonempty;
    }
    if (num_splits > 1) t.partials_written = t.partials_read = rows * (d + 1) * (uint64_t)num_splits;
    t.out = rows * (d + 1);
    return t;
}
//< decode-io-formula

size_t decode_sram_elements(const decode_params *p)
{
    size_t M = (size_t)(p->H / p->H_kv) * p->seqlen_q, d = (size_t)p->d;
    return 2 * M * d + 2 * M + 2 * (size_t)DECODE_BLOCK_N * d + M * DECODE_BLOCK_N;
}

//> decode-split-pass
void decode_split_pass(const decode_params *p, const double *Q, const double *K_cache,
                       const double *V_cache, const int *block_table, const int *cache_seqlens,
                       int num_splits, double *O, double *L, double *O_part, double *L_part,
                       sram_arena *sram, io_counter *io)
{
    int G = p->H / p->H_kv, Sq = p->seqlen_q, d = p->d, M = G * Sq, P = p->page_size;
    int ld = p->H_kv * d;   /* elements between one head's consecutive keys in a page */
    size_t part_stride = (size_t)p->B * p->H * Sq * d, part_rows = (size_t)p->B * p->H * Sq;
    sram_reset(sram);
    /* The group's rows: r = (h - g G) Sq + i, all G heads at once, so that a
     * K/V tile loaded once serves every query head that reads it. The arena
     * is a tiled forward's (stage 3's passes, exercise 4's solution): the
     * same run of allocations by design, each pass's tiles in its listing. */
    double *Qi = sram_alloc(sram, (size_t)M * d, "Q of the group");
    double *Oi = sram_alloc(sram, (size_t)M * d, "O of the group (unnormalized)");
    double *m = sram_alloc(sram, (size_t)M, "m");
    double *l = sram_alloc(sram, (size_t)M, "l");
    double *Kj = sram_alloc(sram, (size_t)DECODE_BLOCK_N * d, "K_j");
    double *Vj = sram_alloc(sram, (size_t)DECODE_BLOCK_N * d, "V_j");
    double *Sij = sram_alloc(sram, (size_t)M * DECODE_BLOCK_N, "S_ij");

    for (int b = 0; b < p->B; b++) {
        int len = cache_seqlens[b], lo, hi;
        attn_mask mask = decode_mask(p, len);
        decode_key_range(p, len, &lo, &hi);
        const int *pages = block_table + (size_t)b * p->pages_per_seq;
        for (int g = 0; g < p->H_kv; g++)
            for (int s = 0; s < num_splits; s++) {               /* one work unit */
                int k0, k1, h0 = g * G;
                bool any = decode_split_range(hi - lo, num_splits, s, &k0, &k1) > 0;
                k0 += lo;
                k1 += lo;
                for (int r = 0; r < M; r++) {
                    m[r] = -INFINITY;
                    l[r] = 0.0;
                    for (int c = 0; c < d; c++) Oi[(size_t)r * d + c] = 0.0;
                }
                if (any)
                    for (int h = 0; h < G; h++)
                        hbm_load(Qi + (size_t)h * Sq * d, Q + ((size_t)b * p->H + h0 + h) * Sq * d, Sq, d,
                                 d, io, T_Q);
                /* Tiles of at most DECODE_BLOCK_N keys that never cross a
                 * page: within a page one head's keys are ld apart. */
                for (int j0 = k0, j1; j0 < k1; j0 = j1) {
                    j1 = mask_imin(mask_imin(k1, j0 + DECODE_BLOCK_N), (j0 / P + 1) * P);
                    int bc = j1 - j0;
                    size_t at = (((size_t)pages[j0 / P] * P + (size_t)(j0 % P)) * p->H_kv + g) * d;
                    hbm_load(Kj, K_cache + at, bc, d, ld, io, T_K);
                    hbm_load(Vj, V_cache + at, bc, d, ld, io, T_V);
                    for (int r = 0; r < M; r++) {
                        int i = r % Sq;
                        for (int c = 0; c < bc; c++) {
                            double x = 0.0;
                            for (int k = 0; k < d; k++) x += Qi[(size_t)r * d + k] * Kj[(size_t)c * d + k];
                            Sij[(size_t)r * bc + c] = mask_visible(mask, i, j0 + c) ? x * p->softmax_scale
                                                                                    : -INFINITY;
                        }
                        online_softmax_update(&m[r], &l[r], Oi + (size_t)r * d, Sij + (size_t)r * bc, Vj,
                                              bc, d, d, NULL);
                    }
                }
                /* O = o / l and L = m + log l; a row that saw no key of this
                 * unit: O = 0, L = -inf (the merge's empty partial). */
                for (int r = 0; r < M; r++) online_softmax_finalize(m[r], l[r], Oi + (size_t)r * d, d, &m[r]);
                double *Od = num_splits == 1 ? O : O_part + (size_t)s * part_stride;
                double *Ld = num_splits == 1 ? L : L_part + (size_t)s * part_rows;
                for (int h = 0; h < G; h++) {
                    size_t row0 = ((size_t)b * p->H + h0 + h) * Sq;
                    hbm_store(Od + row0 * d, Oi + (size_t)h * Sq * d, Sq, d, d, io, T_O);
                    hbm_store(Ld + row0, m + (size_t)h * Sq, Sq, 1, 1, io, T_L);
                }
            }
    }
}
//< decode-split-pass

//> decode-combine
void decode_combine(const decode_params *p, int num_splits, const double *O_part, const double *L_part,
                    double *O, double *L, sram_arena *sram, io_counter *io)
{
    int Sq = p->seqlen_q, d = p->d;
    size_t part_stride = (size_t)p->B * p->H * Sq * d, part_rows = (size_t)p->B * p->H * Sq;
    sram_reset(sram);
    double *Oa = sram_alloc(sram, (size_t)Sq * d, "O accumulator");
    double *La = sram_alloc(sram, (size_t)Sq, "L accumulator");
    double *Os = sram_alloc(sram, (size_t)Sq * d, "O_s");
    double *Ls = sram_alloc(sram, (size_t)Sq, "L_s");
    for (size_t row0 = 0; row0 < part_rows; row0 += Sq) {     /* one (sequence, query head) */
        //> decode-merge-splits
        for (int i = 0; i < Sq; i++) {
            La[i] = -INFINITY;   /* the empty result: no key yet */
            for (int c = 0; c < d; c++) Oa[(size_t)i * d + c] = 0.0;
        }
        for (int s = 0; s < num_splits; s++) {
            hbm_load(Os, O_part + s * part_stride + row0 * d, Sq, d, d, io, T_O);
            hbm_load(Ls, L_part + s * part_rows + row0, Sq, 1, 1, io, T_L);
            merge_into(Oa, La, Os, Ls, (size_t)Sq, d);   /* merge.h, as stage 7's ring */
        }
        //< decode-merge-splits
        hbm_store(O + row0 * d, Oa, Sq, d, d, io, T_O);
        hbm_store(L + row0, La, Sq, 1, 1, io, T_L);
    }
}
//< decode-combine

void decode_forward(const decode_params *p, const double *Q, const double *K_cache,
                    const double *V_cache, const int *block_table, const int *cache_seqlens,
                    int num_splits, double *O, double *L, sram_arena *sram, io_counter *io_split,
                    io_counter *io_combine)
{
    if (num_splits == 1) {
        decode_split_pass(p, Q, K_cache, V_cache, block_table, cache_seqlens, 1, O, L, NULL, NULL, sram,
                          io_split);
        return;
    }
    size_t rows = (size_t)num_splits * p->B * p->H * p->seqlen_q;
    double *Op = xmalloc(rows * (p->d + 1), sizeof(double), "partials (O_s, L_s)"), *Lp = Op + rows * p->d;
    poison(Op, rows * (p->d + 1));
    decode_split_pass(p, Q, K_cache, V_cache, block_table, cache_seqlens, num_splits, NULL, NULL, Op, Lp,
                      sram, io_split);
    decode_combine(p, num_splits, Op, Lp, O, L, sram, io_combine);
    free(Op);
}

void decode_gather_dense(const decode_params *p, const double *cache, const int *block_table, int b,
                         int len, double *out)
{
    int P = p->page_size, d = p->d;
    for (int g = 0; g < p->H_kv; g++)
        for (int j = 0; j < len; j++) {
            int page = block_table[(size_t)b * p->pages_per_seq + j / P];
            memcpy(out + ((size_t)g * len + j) * d,
                   cache + (((size_t)page * P + (size_t)(j % P)) * p->H_kv + g) * d, (size_t)d * sizeof(double));
        }
}

decode_io decode_io_counted(const io_counter *sp, const io_counter *cb, int num_splits)
{
    decode_io t = {sp->reads[T_K] + sp->reads[T_V], sp->reads[T_Q], 0, 0, 0};
    uint64_t split_out = sp->writes[T_O] + sp->writes[T_L];
    if (num_splits == 1) {
        t.out = split_out;
    } else {
        t.partials_written = split_out;
        t.partials_read = cb->reads[T_O] + cb->reads[T_L];
        t.out = cb->writes[T_O] + cb->writes[T_L];
    }
    return t;
}

void decode_problem_draw(decode_problem *x, rng_t *rng, double v_mean, double v_sd, const int *table_given)
{
    const decode_params *p = &x->p;
    size_t slots = (size_t)p->B * p->pages_per_seq;
    x->nq = (size_t)p->B * p->H * p->seqlen_q * p->d;
    x->pool = (size_t)p->num_pages * p->page_size * p->H_kv * p->d;
    x->Q = xmalloc(x->nq, sizeof(double), "Q");
    x->K = xmalloc(x->pool, sizeof(double), "K_cache");
    x->V = xmalloc(x->pool, sizeof(double), "V_cache");
    x->table = xmalloc(slots, sizeof(int), "block_table");
    fill_normal(x->Q, x->nq, 0, 1, rng);
    fill_normal(x->K, x->pool, 0, 1, rng);
    fill_normal(x->V, x->pool, v_mean, v_sd, rng);
    if (table_given) {
        memcpy(x->table, table_given, slots * sizeof(int));
        return;
    }
    int *perm = xmalloc((size_t)p->num_pages, sizeof(int), "permutation");
    for (int i = 0; i < p->num_pages; i++) perm[i] = i;
    for (int i = p->num_pages - 1; i > 0; i--) {
        int j = rng_int(rng, 0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t t = 0; t < slots; t++) x->table[t] = perm[t % (size_t)p->num_pages];
    free(perm);
}

void decode_problem_free(decode_problem *x)
{
    void *owned[] = {x->Q, x->K, x->V, x->table, x->lens};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
}

void decode_forward_pair(const decode_problem *x, int num_splits, double *O, double *L, double *O1, double *L1,
                         decode_pair *r)
{
    const decode_params *p = &x->p;
    sram_arena sram;
    sram_init(&sram, decode_sram_elements(p));
    for (int k = 0; k < 4; k++) io_reset(&r->io[k]);
    double t0 = now_seconds();
    decode_forward(p, x->Q, x->K, x->V, x->table, x->lens, num_splits, O, L, &sram, &r->io[0], &r->io[1]);
    r->seconds = now_seconds() - t0;
    decode_forward(p, x->Q, x->K, x->V, x->table, x->lens, 1, O1, L1, &sram, &r->io[2], &r->io[3]);
    r->sram_high = sram.high_water;
    sram_free(&sram);
}

/* ------------------------------------------------------------------------- */
/* The demonstration program                                                  */
/* ------------------------------------------------------------------------- */
