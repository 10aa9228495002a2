/*
 * outputs.h -- output files: checked before any work, written to a
 * temporary file, renamed into place only when the run succeeded
 * (outputs_finish); .npy tensors and CSV with provenance.
 */
#ifndef FA_OUTPUTS_H
#define FA_OUTPUTS_H

#include <stdio.h>

#include "options.h"
#include "util.h"

/* ---------------------------------------------------------------------------
 * Output files. A failed run leaves every output file as it was:
 *   - parse_options checks each of --out --lse --dq --dk --dv --csv before any
 *     work (the folder exists and a file can be created in it, the path is not
 *     a directory, not another output, not an input; one line naming the flag
 *     and exit 2) and creates a temporary file beside it (".NAME.XXXXXX");
 *   - save_tensor and csv_open write to that temporary file;
 *   - outputs_finish(status), the last thing main does, renames every written
 *     temporary file onto its path when status is 0 and removes them all
 *     otherwise; exit without it (fatal, --help, a signal) removes them too.
 * An existing output that is not a regular file (/dev/stdout, a pipe) is
 * written in place: it has no content to keep.
 * ------------------------------------------------------------------------- */
/* Check path (named by flag in messages) and create its temporary file, as
 * parse_options does for the output flags; a write to a path never staged
 * stages it first. Exits with status 2 if the path cannot be written. */
void stage_output(const char *flag, const char *path);
/* Stage every output the options name (--out --lse --dq --dk --dv --csv),
 * refusing one that is another output or an input; parse_options calls it
 * last. Exits with status 2 on the first path that cannot be written. */
void stage_option_outputs(const options *opt);
/* Rename the outputs written by this run onto their paths when status is 0
 * (returns 0, or 2 if a rename fails), else remove them (returns status).
 * Use as `return outputs_finish(status);` at the end of main. */
int outputs_finish(int status);

/* Write x to path as .npy <f8 of shape (B, H, rows, d), or (B, H, rows)
 * when d == 0 (staged: see outputs_finish). Exits with status 2 if it cannot. */
void save_tensor(const char *path, const double *x, int B, int H, int rows, int d);
/* The four shapes of an attention problem's tensors. */
void save_q_like(const char *path, const double *x, const attn_params *p);    /* Q, O, dQ */
void save_kv_like(const char *path, const double *x, const attn_params *p);   /* dK, dV */
void save_rows(const char *path, const double *x, const attn_params *p);      /* L */

/* ---------------------------------------------------------------------------
 * CSV with provenance: opens path for writing (its temporary file: see
 * outputs_finish), writes '# key: value' lines (commit, date, host, command)
 * and the header line. gnuplot and the scripts skip '#' lines. csv_close
 * closes it and exits with status 2 if any write failed (a full disk).
 * ------------------------------------------------------------------------- */
FILE *csv_open(const char *path, int argc, char **argv, const char *header);
/* The pieces of that provenance, for programs that write them per row
 * (stage 7): the first line a shell command prints ("" when none); the
 * commit of the code (FA_COMMIT when set: a copy of the tree without .git,
 * as on the GPU machine; else git's short hash; "unknown"); the UTC time
 * now as 2026-12-01T21:00:00Z. */
void command_line_of(const char *cmd, char *buf, size_t n);
void source_commit(char *buf, size_t n);
void utc_date(char *buf, size_t n);
void csv_close(FILE *f);

#endif /* FA_OUTPUTS_H */
