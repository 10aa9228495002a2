/*
 * checklib.h -- what every exercise checker shares: reading a learner's
 * answers file, marking one part at a time with a hint (never the answer),
 * and showing a written answer beside the model answer.
 *
 * Answers files (exercises/exN/answers.txt) hold one `key = value` per line;
 * `#` starts a comment; a value of `?` means "not answered yet". Values are
 * plain numbers (123, 1.5e-3, -inf, inf); `_` may group digits (16_384). A
 * key given on two lines is an error (reported when the file is read) and
 * its part stays unmarked.
 *
 * A checker prints one line per part:
 *     right  key
 *     wrong  key: <hint>       (also: a value that is not a number, with its line)
 *     todo   key: <what is missing>
 * then a closing line, and exits 0 only when every marked part is right.
 * Written parts are shown, never marked.
 */
#ifndef EX_CHECKLIB_H
#define EX_CHECKLIB_H

#include <stdbool.h>
#include <stdint.h>

/* The exercises folder of this checkout, set by the build
 * (-DEX_ROOT='"<repo>/exercises"'). */
#ifndef EX_ROOT
#define EX_ROOT "exercises"
#endif

typedef struct {
    int right, wrong, todo;   /* the exercise's parts */
    int stray;                /* lines of the answers file with a key no part has */
} tally;

/* Start a checker: prints the title line and returns the folder to mark:
 * argv[1] when it is given and is not an option, else EX_ROOT "/exN". A
 * folder that does not exist is one line and exit 2 (nothing is marked:
 * the C compiled into a checker is only that of the folder it names).
 * Installs handlers so that a crash of the learner's code (SIGSEGV, SIGBUS,
 * SIGFPE, SIGILL, SIGABRT) prints the case set by check_case and exits 1. */
const char *check_begin(int argc, char **argv, int ex, const char *title);
/* check_begin refuses, in one line and exit 2 before any output, every
 * argument but the folder; a checker with options of its own (--seed,
 * --cases: check_seed_flags) starts with check_begin_with_options. */
const char *check_begin_with_options(int argc, char **argv, int ex, const char *title);
/* The random cases' seed of a checker: --seed S (default a fresh one) and,
 * where cases is not NULL, --cases K; any other flag gets one line on
 * stderr and exit status 2 (check_begin_with_options has refused a bad seed
 * or an unknown flag before the header). Prints "  <what> from seed S
 * (replay: ...)". */
uint64_t check_seed_flags(int argc, char **argv, const char *dir, const char *what, int *cases);

/* Name the case about to run (printf format), for the crash report. */
void check_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parse the value of --seed: a decimal integer, all of it, or one line on
 * stderr and exit 2. */
uint64_t check_seed(const char *text);

/* Print the closing line and return the exit status: 0 when every part is
 * right, 1 otherwise. */
int check_end(const tally *t, int ex);

typedef struct answers answers;

/* Read dir/name. A missing or unreadable file is reported (one line) and
 * gives NULL. */
answers *answers_load(const char *dir, const char *name);

/* Mark every key of the file that no part looked up as wrong (a typo such
 * as "blockl_m = 4" must not be dropped silently), then free the file. */
void answers_done(tally *t, answers *a);
void answers_free(answers *a);

enum ans_state { ANS_MISSING, ANS_TODO, ANS_EMPTY, ANS_TWICE, ANS_BAD, ANS_GIVEN };

/* The value written for key, as text (trimmed), or NULL when absent. */
const char *answer_text(const answers *a, const char *key);

/* The number given for key; the state says whether there is one. */
enum ans_state answer_number(const answers *a, const char *key, double *x);

/* |x - ref| <= atol + rtol * |ref|; equal infinities are close. */
bool close_to(double x, double ref, double atol, double rtol);

/* x and ref rounded to sig significant figures are the same number: how an
 * answer asked "to 2 significant figures" is judged (0.85 and 0.851 are
 * 0.851 at two, 0.86 is not). */
bool same_sig(double x, double ref, int sig);

/* Look key up and mark it. When the value is missing, still '?', empty or
 * given twice, the part is "todo"; when it is not a number (e.g. "6,07"), it
 * is "wrong", the hint naming the file, line and value. Either way the
 * function returns false with *x untouched; otherwise it returns true and
 * sets *x, and the caller decides right or wrong with mark(). */
bool take_answer(tally *t, const answers *a, const char *key, double *x);

/* Mark a part right (ok) or wrong, printing the hint when wrong. */
void mark(tally *t, const char *key, bool ok, const char *hint_fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Mark a numeric part: right when ok. Every numeric part of every checker
 * goes through here, so that rounding is judged the same way everywhere:
 * when the answer is wrong but equals ref rounded to the last digit the
 * learner wrote (fewer digits than the statement asks for), the hint is
 * "too few decimals: the right value rounds to this, but give <want>"
 * (want: "6 decimals", "3 significant figures", ...), never the value;
 * otherwise hint_fmt, which is about a mistake of substance. */
void mark_number(tally *t, const answers *a, const char *key, double x, bool ok, double ref,
                 const char *want, const char *hint_fmt, ...)
    __attribute__((format(printf, 8, 9)));

/* Print a part as todo with a reason (e.g. the C function did nothing). */
void mark_todo(tally *t, const char *key, const char *why_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Show the learner's written answer (dir/name) and, once the learner has
 * written something (the file no longer holds the stub's placeholder line)
 * and every part t marked is right, the model answer
 * EX_ROOT/solutions/exN/name beside it (it works the numbers out). Never
 * marked. */
void show_written(const char *dir, const char *name, int ex, const tally *t);

/* The placeholder a stub's written answer carries until it is replaced. */
#define WRITTEN_PLACEHOLDER "(write your answer here)"

#endif /* EX_CHECKLIB_H */
