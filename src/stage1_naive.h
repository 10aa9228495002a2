/*
 * stage1_naive.h -- naive attention with S and P materialized: the fp64
 * reference that every later stage checks against.
 *
 * Shapes (one head, row-major): Q, K, V, O, dO, dQ, dK, dV are (N, d);
 * S, P, dP, dS are (N, N); L is (N,). softmax_scale is usually 1/sqrt(d).
 * With causal, query i sees keys j <= i (S_ij = -inf above the diagonal).
 *
 * IO model (elements of slow memory; each of the five kernels below reads
 * each operand once and writes its result once -- the chapter's accounting,
 * which is the best case for a kernel-by-kernel implementation):
 *   forward   S = scale*Q K^T : read Q, K (2Nd),  write S (N^2)
 *             P, L = softmax(S): read S (N^2),    write P (N^2), L (N)
 *             O = P V          : read P (N^2), V (Nd), write O (Nd)
 *             total            4 N^2 + 4 N d + N
 *   backward  dV = P^T dO      : read P, dO      write dV      N^2 + 2Nd
 *             dP = dO V^T      : read dO, V      write dP      N^2 + 2Nd
 *             dS = P*(dP - D), D_i = dO_i . O_i
 *                              : read P, dP, dO, O  write dS  3N^2 + 2Nd
 *             dQ = scale dS K  : read dS, K      write dQ      N^2 + 2Nd
 *             dK = scale dS^T Q: read dS, Q      write dK      N^2 + 2Nd
 *             total            7 N^2 + 10 N d
 * The chapter counts 4N^2 + 4Nd for the forward; the extra N is the
 * logsumexp L, which stage 3 needs and so we write here too.
 */
#ifndef FA_STAGE1_NAIVE_H
#define FA_STAGE1_NAIVE_H

#include <stdbool.h>
#include <stdint.h>
#include "common.h"

/* Forward, fp64. Writes S, P (N,N), O (N,d), L (N,). Source: chapter,
 * "The memory bottleneck" (S = QK^T/sqrt(d), P = softmax_rows(S), O = PV). */
void naive_forward(const double *Q, const double *K, const double *V, int N, int d,
                   double softmax_scale, bool causal,
                   double *S, double *P, double *O, double *L, io_counter *io);

/* Backward, fp64, from the P saved by the forward. Writes dP, dS (N,N) and
 * dQ, dK, dV (N,d). Source: chapter, "The backward pass" (dV = P^T dO,
 * dP = dO V^T, dS = P * (dP - D), dQ = dS K scale, dK = dS^T Q scale). */
void naive_backward(const double *Q, const double *K, const double *V, const double *O,
                    const double *P, const double *dO, int N, int d, double softmax_scale,
                    double *dP, double *dS, double *dQ, double *dK, double *dV,
                    io_counter *io);

/* The same two algorithms with every operation in float (fp32): what a
 * single-precision implementation gets, to set beside the fp64 result. */
void naive_forward_f32(const float *Q, const float *K, const float *V, int N, int d,
                       float softmax_scale, bool causal,
                       float *S, float *P, float *O, float *L, io_counter *io);
void naive_backward_f32(const float *Q, const float *K, const float *V, const float *O,
                        const float *P, const float *dO, int N, int d, float softmax_scale,
                        float *dP, float *dS, float *dQ, float *dK, float *dV,
                        io_counter *io);

/* Gradient check by central differences: the relative error
 * max |numeric - analytic| / max |analytic| over every entry of dQ, dK, dV,
 * where numeric is the central difference (step eps) of f = sum(dO * O) with
 * O from naive_forward. Cost: 6 N d forward passes. */
double gradcheck_central(const double *Q, const double *K, const double *V,
                         const double *dO, int N, int d, double softmax_scale, bool causal,
                         const double *dQ, const double *dK, const double *dV, double eps);

/* Exit with status 2 and one line when N x N matrices of this N would not
 * fit (four of them, 8 GB; N <= 16384). `origin` says where N came from. */
void naive_require_size(int N, const char *origin);

/* Exit with status 2 and one line when a logsumexp in L (rows entries) is
 * +inf or NaN: the scores softmax_scale * Q K^T overflowed fp64, so no
 * finite softmax can be computed from them here. */
void naive_require_finite_scores(const double *L, size_t rows, int N);

/* The closed forms above, in elements. */
uint64_t naive_forward_io_formula(int64_t N, int64_t d);
uint64_t naive_backward_io_formula(int64_t N, int64_t d);

/* Convenience for later stages: run naive forward (and backward when dQ is
 * not NULL) over every head of a (B,H,N,d) problem, allocating the N x N
 * buffers once. L is (B,H,N). Forward and backward traffic go to io_f and
 * io_b, their wall times (seconds) to *t_f and *t_b; any of these may be NULL. */
void naive_attention_all_heads(const double *Q, const double *K, const double *V,
                               const double *dO, attn_shape s, double softmax_scale,
                               bool causal, double *O, double *L,
                               double *dQ, double *dK, double *dV,
                               io_counter *io_f, io_counter *io_b, double *t_f, double *t_b);

#endif /* FA_STAGE1_NAIVE_H */
