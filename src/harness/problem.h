/*
 * problem.h -- the one problem type of host code (attn_problem: Q, K, V, dO
 * in fp64 and their attn_params) and where it comes from: the real input,
 * files, or random draws.
 */
#ifndef FA_PROBLEM_H
#define FA_PROBLEM_H

#include "options.h"
#include "util.h"

/* ---------------------------------------------------------------------------
 * Inputs and outputs of an attention problem, all fp64 in memory.
 * ------------------------------------------------------------------------- */
/* The one problem type of host code: the CPU stages, the GPU host programs
 * (gpu_host.h's gh_inputs is this type) and stage 7. */
typedef struct {
    attn_params params;  /* sizes, heads, mask, softmax_scale: complete */
    double *Q, *dO;      /* (B, H, seqlen_q, d); dO is the upstream gradient */
    double *K, *V;       /* (B, H_kv, seqlen_k, d) */
    int kind;            /* how random inputs were drawn: 0 N(0,1), files or the real
                          * input; the GPU stages' fault inputs (gpu_host.h) otherwise */
    char source[512];    /* where it came from, for the printed table */
} attn_problem;

/* Q, K, V, dO of problem p allocated and drawn N(0, 1) from rng, in that
 * order (a caller may go on drawing from rng); p->params, kind and source
 * are the caller's. */
void problem_fill_normal(attn_problem *p, rng_t *rng);

/* The default input: Q, K, V, dO of a pretrained transformer on a real
 * sentence (data/input/, see its README.md). */
#define DEFAULT_INPUT_DIR DATA_DIR "/input"

/* Load the problem the options describe and fill p->params completely:
 *   tensors  the files --q --k --v [--do] if given (all three of q, k, v or
 *            none; K and V of one shape (B, H_kv, seqlen_k, d), Q and dO of
 *            (B, H, seqlen_q, d), H a multiple of H_kv); else random N(0,1)
 *            input of (--batch, --heads, --n, --d) with --kv-heads key/value
 *            heads (default --heads) and --seqlen-k keys (default --n) if
 *            --random or any of those flags is given; else the real default
 *            input, whose keys --seqlen-k truncates to the first seqlen_k and
 *            whose key/value heads --kv-heads thins to every (H/H_kv)-th one.
 *   mask     --causal (window (-1, 0)) or --window L,R; none: (-1, -1).
 *   scale    --scale, else 1/sqrt(d).
 * A missing dO is drawn at random (seeded). Every error (missing file, bad
 * .npy, shapes that do not fit together, a flag the input already decides,
 * attn_params_check) exits with status 2 and one line, before any work. */
void load_problem(const options *opt, attn_problem *p);
void free_problem(attn_problem *p);

/* A small problem of its own, B = H = H_kv = 1, cut from query head 0 and
 * its key/value head: the first n query rows, the first n + (seqlen_k -
 * seqlen_q) key rows (clamped to [1, seqlen_k]; keeping the difference keeps
 * every row's visible keys, since the mask depends on j - i - (seqlen_k -
 * seqlen_q) only) and the first dn columns; same mask and softmax_scale.
 * Used for gradient checks, whose cost grows as (n dn)^2. Free with
 * free_problem. */
attn_problem problem_slice(const attn_problem *p, int n, int dn);

#endif /* FA_PROBLEM_H */
