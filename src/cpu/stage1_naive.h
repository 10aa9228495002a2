/*
 * stage1_naive.h -- naive attention with S and P materialized: the fp64
 * reference that every later stage checks against.
 *
 * The problem is an attn_params (attn_params.h). The per-head functions take
 * one query head and the key/value head it reads, row-major:
 *   Q, O, dO, dQ     (seqlen_q, d)        K, V, dK, dV   (seqlen_k, d)
 *   S, P, dP, dS     (seqlen_q, seqlen_k) L              (seqlen_q,)
 * and use seqlen_q, seqlen_k, d, softmax_scale and the window of p (B, H,
 * H_kv only matter to the all-heads function). Masked scores are -inf
 * (mask_visible, mask.h); a query row that sees no key gets P = 0, O = 0,
 * L = -inf and contributes nothing to the gradients.
 *
 * IO model (elements of slow memory), written Sq = seqlen_q, Sk = seqlen_k.
 * The naive algorithm is a schedule of separate passes, each a kernel that
 * reads each of its operands once and writes its result once (the chapter's
 * accounting, the best case for a kernel-by-kernel implementation). The
 * passes count what they move as they move it, through hbm_load/hbm_store:
 *   forward   S = scale*Q K^T : read Q (Sq d), K (Sk d),  write S (Sq Sk)
 *             P, L = softmax(S): read S,               write P, L (Sq)
 *             O = P V          : read P, V (Sk d),     write O (Sq d)
 *             total            4 Sq Sk + 2 Sq d + 2 Sk d + Sq
 *   backward  dV = P^T dO      : read P, dO          write dV
 *             dP = dO V^T      : read dO, V          write dP
 *             dS = P*(dP - D), D_i = dO_i . O_i
 *                              : read P, dP, dO, O   write dS
 *             dQ = scale dS K  : read dS, K          write dQ
 *             dK = scale dS^T Q: read dS, Q          write dK
 *             total            7 Sq Sk + 6 Sq d + 4 Sk d
 * per query head; with Sq = Sk = N the chapter's 4N^2 + 4Nd (+ N for L,
 * which stage 3 needs) and 7N^2 + 10Nd. The mask does not change these
 * counts: S, P, dP, dS are written whole. With grouped heads (H_kv < H) the
 * backward writes each query head's dK, dV and one more pass sums them into
 * the key/value head's: read 2 (H/H_kv) Sk d, write 2 Sk d per key/value head.
 */
#ifndef FA_STAGE1_NAIVE_H
#define FA_STAGE1_NAIVE_H

#include <stdbool.h>
#include <stdint.h>
#include "common.h"

/* Forward, fp64, one head. Writes S, P, O, L. Source: chapter, "The memory
 * bottleneck" (S = QK^T/sqrt(d), P = softmax_rows(S), O = PV). */
void naive_forward(const attn_params *p, const double *Q, const double *K, const double *V,
                   double *S, double *P, double *O, double *L, io_counter *io);

/* Backward, fp64, one head, from the P saved by the forward. Writes dP, dS,
 * dQ, dK, dV. Source: chapter, "The backward pass" (dV = P^T dO,
 * dP = dO V^T, dS = P * (dP - D), dQ = dS K scale, dK = dS^T Q scale). */
void naive_backward(const attn_params *p, const double *Q, const double *K, const double *V,
                    const double *O, const double *P, const double *dO, double *dP, double *dS,
                    double *dQ, double *dK, double *dV, io_counter *io);

/* The same two algorithms with every operation in float (fp32): what a
 * single-precision implementation gets, to set beside the fp64 result. */
void naive_forward_f32(const attn_params *p, const float *Q, const float *K, const float *V,
                       float *S, float *P, float *O, float *L, io_counter *io);
void naive_backward_f32(const attn_params *p, const float *Q, const float *K, const float *V,
                        const float *O, const float *P, const float *dO, float *dP, float *dS,
                        float *dQ, float *dK, float *dV, io_counter *io);

/* Gradient check by central differences over the whole problem p: the
 * relative error max |numeric - analytic| / max |analytic| over every entry
 * of dQ, dK, dV, where numeric is the central difference (step eps) of
 * f = sum(dO * O) with O from naive_attention_all_heads. Cost: 2 numel(Q, K,
 * V) forward passes; meant for small problems (problem_slice). */
double gradcheck_central(const attn_params *p, const double *Q, const double *K, const double *V,
                         const double *dO, const double *dQ, const double *dK, const double *dV,
                         double eps);

/* Exit with status 2 and one line when the seqlen_q x seqlen_k matrices
 * would not fit (four of them, 8 GB; N <= 16384 when square). `origin` says
 * where the sizes came from. */
void naive_require_size(const attn_params *p, const char *origin);

/* The same before any input is read, for the sizes --n and --seqlen-k ask
 * for (nothing when --n is not given). */
void naive_require_size_flags(const options *opt);
/* load_problem, then naive_require_size on what it loaded (files or the
 * real input can be larger than the flags said): the problem of a stage
 * whose reference is this one. */
void naive_load_problem(const options *opt, attn_problem *prob);

/* Exit with status 2 and one line when a logsumexp in L (B H seqlen_q
 * entries) is +inf or NaN: the scores softmax_scale * Q K^T overflowed fp64,
 * so no finite softmax can be computed from them here. (-inf is an empty
 * row, a valid answer.) */
void naive_require_finite_scores(const double *L, const attn_params *p);

/* The closed forms above over the whole problem (B H query heads, and the
 * grouped-heads sum), in elements. */
uint64_t naive_forward_io_formula(const attn_params *p);
uint64_t naive_backward_io_formula(const attn_params *p);

/* The fp64 reference over every head of p: Q, dO (B, H, seqlen_q, d), K, V
 * (B, H_kv, seqlen_k, d) in; O, dQ (B, H, seqlen_q, d), L (B, H, seqlen_q),
 * dK, dV (B, H_kv, seqlen_k, d) out. Forward only when dQ is NULL (dO, dK,
 * dV are then unused). The seqlen_q x seqlen_k buffers are allocated once.
 * Forward and backward traffic go to io_f and io_b, their wall times
 * (seconds) to *t_f and *t_b; any of these may be NULL. */
void naive_attention_all_heads(const attn_params *p, const double *Q, const double *K,
                               const double *V, const double *dO, double *O, double *L,
                               double *dQ, double *dK, double *dV, io_counter *io_f,
                               io_counter *io_b, double *t_f, double *t_b);

#endif /* FA_STAGE1_NAIVE_H */
