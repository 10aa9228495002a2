/*
 * options.h -- the command-line options shared by the programs: one table of
 * flags, one parser, one error convention (a one-line message and exit 2).
 */
#ifndef FA_OPTIONS_H
#define FA_OPTIONS_H

#include "util.h"

/* ---------------------------------------------------------------------------
 * Command-line options. One convention for every stage: `--flag value` or
 * `--flag=value`; a stage lists the flags it accepts, and any other flag, a
 * missing value or a bad value is a one-line error with exit status 2.
 * ------------------------------------------------------------------------- */
enum opt_flag {
    OPT_N = 1u << 0, OPT_D = 1u << 1, OPT_BATCH = 1u << 2, OPT_HEADS = 1u << 3,
    OPT_SEED = 1u << 4, OPT_CAUSAL = 1u << 5, OPT_SCALE = 1u << 6,
    OPT_INPUTS = 1u << 7,   /* --q --k --v (OPT_DO: --do) */
    OPT_FWD_OUTPUTS = 1u << 8,  /* --out --lse (OPT_OUTPUTS: all five output files) */
    OPT_CSV = 1u << 9, OPT_DTYPE = 1u << 10,
    OPT_BR = 1u << 11, OPT_BC = 1u << 12, OPT_SRAM = 1u << 13,
    OPT_BLOCK = 1u << 14, OPT_TRACE = 1u << 15, OPT_LOGITS = 1u << 16,
    OPT_SWEEP = 1u << 17, OPT_RANDOM = 1u << 19,
    OPT_KERNEL = 1u << 21, OPT_REPEATS = 1u << 22,
    OPT_RULE = 1u << 23,
    OPT_WINDOW = 1u << 18,   /* --window L,R */
    OPT_KV_HEADS = 1u << 20, /* --kv-heads */
    OPT_SEQLEN_K = 1u << 24, /* --seqlen-k */
    OPT_CHECK = 1u << 25,    /* --check naive|rows */
    /* The flags that describe the problem's mask and shape beyond (B, H, N, d). */
    OPT_MASKS = OPT_CAUSAL | OPT_WINDOW | OPT_KV_HEADS | OPT_SEQLEN_K,
    OPT_DETERMINISTIC = 1u << 26,   /* --deterministic (GPU backward) */
    /* The values of --dtype a program runs, OR-ed into `accepted` beside
     * OPT_DTYPE: --help lists just these and the parser refuses the others.
     * OPT_DTYPE alone means all four. */
    OPT_FP64 = 1u << 27, OPT_FP32 = 1u << 28, OPT_FP16 = 1u << 29, OPT_BF16 = 1u << 30,
};
/* --dq --dk --dv, apart from --out --lse so that a forward-only program
 * (stage 4) does not list them; a macro, since an enum constant must fit an
 * int. */
#define OPT_GRAD_OUTPUTS (1u << 31)
#define OPT_OUTPUTS (OPT_FWD_OUTPUTS | OPT_GRAD_OUTPUTS)   /* --out --lse --dq --dk --dv */
/* The ring of stage 7: --gpus G, --virtual (G shards on one GPU), --budget S
 * (seconds of --sweep scale). Past bit 31, so the sets are 64 bits wide. */
#define OPT_GPUS    (1ull << 32)
#define OPT_VIRTUAL (1ull << 33)
#define OPT_BUDGET  (1ull << 34)
/* --do, apart from --q --k --v so that a program without a backward (stage 2,
 * stage 4) refuses it instead of reading a dO it never uses. */
#define OPT_DO      (1ull << 35)
/* The problem and tile flags of a tiled CPU stage (stage 3, stage 6). */
#define OPT_TILED_CPU (OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_MASKS | OPT_SCALE | \
                       OPT_INPUTS | OPT_DO | OPT_OUTPUTS | OPT_BR | OPT_BC | OPT_SRAM | OPT_RULE)
/* A set of OPT_* bits. */
typedef uint64_t opt_set;

#define MAX_LOGITS 4096

typedef struct {
    opt_set given;           /* OPT_* bits of the flags present on the command line */
    int N, d, batch, heads;  /* --n --d --batch --heads (random input) */
    uint64_t seed;           /* --seed */
    bool causal;             /* --causal: window (-1, 0) */
    int window_left, window_right;  /* --window L,R (each -1 or >= 0) */
    int kv_heads;            /* --kv-heads: key/value heads H_kv */
    int seqlen_k;            /* --seqlen-k: key rows (random or the real input) */
    const char *check;       /* --check naive|rows: the reference a tiled run is held to */
    double softmax_scale;    /* --scale; 0 means 1/sqrt(d) */
    const char *q, *k, *v, *dO;                 /* --q --k --v --do input files */
    const char *out, *lse, *dq, *dk, *dv;       /* output files */
    const char *csv;                            /* --csv */
    const char *dtype;                          /* --dtype fp64|fp32|fp16|bf16 */
    int Br, Bc;              /* --br --bc */
    long M;                  /* --sram: scratch size in elements */
    const char *rule;        /* --rule paper|io: how Br, Bc follow from M */
    int block;               /* --block (stage2) */
    bool trace;              /* --trace (stage2) */
    double logits[MAX_LOGITS];  /* --logits a,b,c (stage2) */
    int n_logits;
    const char *sweep;       /* --sweep NAME */
    bool random;             /* --random: random input instead of the real one */
    int kernel;              /* --kernel K (GPU stages) */
    int repeats;             /* --repeats R */
    bool deterministic;      /* --deterministic: bitwise reproducible dQ, dK, dV */
    int gpus;                /* --gpus G (stage 7; 0: every GPU here) */
    bool virt;               /* --virtual: G shards on one GPU (stage 7) */
    double budget;           /* --budget S: seconds of stage 7's --sweep scale (default 120) */
} options;

/* A program's own --help text for a shared flag whose meaning it narrows
 * (stage 8's --n is the query rows per sequence, not a sequence length). */
typedef struct { opt_set flag; const char *text; } flag_help;

/* Set before parse_options: --help prints table[i].text for the flag
 * table[i].flag instead of the shared text (n entries; the table must
 * outlive the parse). */
void options_help(const flag_help *table, size_t n);

/* Parse argv into opt (defaults: N=256, d=64, batch=1, heads=1, seed=1234,
 * no mask).
 * `accepted` is the OR of OPT_* flags this stage takes (and, with OPT_DTYPE,
 * the OPT_FP* values it runs); `usage` is the stage's own summary printed
 * above the flag list by --help (exit 0), which lists only accepted flags.
 * A flag this stage does not take, a flag given twice, a missing or bad
 * value: one line on stderr and exit 2. */
void parse_options(int argc, char **argv, opt_set accepted, const char *usage,
                   options *opt);


/* softmax_scale in effect: --scale if given, else 1/sqrt(d). */
double effective_scale(const options *opt, int d);

#endif /* FA_OPTIONS_H */
