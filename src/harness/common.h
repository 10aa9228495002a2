/*
 * common.h -- the shared harness of every program, one header for the
 * five rooms of src/harness/:
 *   util.h       fatal errors, checked allocation, random numbers, shapes,
 *                validation, timing
 *   io_model.h   IO counters, the bounded SRAM arena, counted tile copies
 *   options.h    the command-line options shared by the programs
 *   problem.h    the problem (attn_problem): real input, files or random
 *   outputs.h    output files (staged, renamed on success), .npy, CSV
 * A stage file should hold only what is new in it; everything else lives
 * in these.
 */
#ifndef FA_COMMON_H
#define FA_COMMON_H

#include "util.h"
#include "io_model.h"
#include "options.h"
#include "problem.h"
#include "outputs.h"

#endif /* FA_COMMON_H */
