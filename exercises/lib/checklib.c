/*
 * checklib.c -- the shared part of the exercise checkers: answers files,
 * marking, written answers. See checklib.h for the conventions.
 */
#include "checklib.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define MAX_ENTRIES 64
#define KEY_LEN 64
#define VAL_LEN 128

struct answers {
    int n;
    char key[MAX_ENTRIES][KEY_LEN];
    char val[MAX_ENTRIES][VAL_LEN];
    int line[MAX_ENTRIES];
    int dup_line[MAX_ENTRIES];   /* a second line giving the same key, 0 if none */
    /* looked up by a part; written through the const lookups, which are
     * reads as far as the caller is concerned */
    bool used[MAX_ENTRIES];
    char path[4096];
};

/* The case running now, for the crash handler (written before each case,
 * read only by the handler, which may not call printf). */
static char crash_case[512] = "before the first case";

void check_case(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(crash_case, sizeof crash_case, fmt, ap);
    va_end(ap);
}

static void on_crash(int sig)
{
    const char *what = sig == SIGSEGV ? "a segmentation fault (a bad pointer or an index out of range)"
                     : sig == SIGBUS ? "a bus error (a bad pointer)"
                     : sig == SIGFPE ? "an arithmetic exception (an integer division by zero?)"
                     : sig == SIGILL ? "an illegal instruction"
                     : "an abort (an assertion or a bad free?)";
    const char *parts[] = {"  crash  your code stopped with ", what, " in ", crash_case,
                           "\n  (replay that case alone under a debugger: gdb --args ",
                           "<this checker> with the same arguments)\n"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        ssize_t r = write(STDOUT_FILENO, parts[i], strlen(parts[i]));
        (void)r;
    }
    _exit(1);
}

uint64_t check_seed(const char *text)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (!isdigit((unsigned char)*text) || *end != '\0' || errno == ERANGE) {
        fprintf(stderr, "check: --seed takes a decimal integer such as 12345, not '%s'\n", text);
        exit(2);
    }
    return (uint64_t)v;
}

/* The options' usage line on stderr, exit 2. */
static void options_usage(int ex, const char *arg)
{
    fprintf(stderr, "ex%d check: unexpected argument '%s' (usage: check [DIR] [--seed S] [--cases K])\n", ex, arg);
    exit(2);
}

static const char *begin(int argc, char **argv, int ex, const char *title, int takes_options)
{
    static char dir[4096];
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s [DIR]%s\n  marks exercise %d in DIR (default %s/ex%d): each part right, wrong "
                   "(with a hint) or not answered yet;\n  exit 0 when every part is right, 1 otherwise, 2 on a "
                   "bad argument%s\n", argv[0], takes_options ? " [--seed S] [--cases K]" : "", ex, EX_ROOT, ex,
                   takes_options ? "\n  --seed S replays the random cases of seed S; --cases K runs K of them" : "");
            exit(0);
        }
    for (int i = 1; i < argc && !takes_options; i++) {
        if (i == 1 && argv[i][0] != '-') continue;       /* the folder to mark */
        fprintf(stderr, "ex%d check: unexpected argument '%s' (usage: check [DIR], DIR the folder of your answers)\n",
                ex, argv[i]);
        exit(2);
    }
    /* bad options are refused before anything is printed (check_seed_flags
     * reads them after the header) */
    for (int i = 1; i < argc && takes_options; i++) {
        if (i == 1 && argv[i][0] != '-') continue;
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) (void)check_seed(argv[++i]);
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) i++;
        else options_usage(ex, argv[i]);
    }
    if (argc > 1 && argv[1][0] != '-') {
        snprintf(dir, sizeof dir, "%s", argv[1]);
    } else {
        snprintf(dir, sizeof dir, "%s/ex%d", EX_ROOT, ex);
    }
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0';
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "check: %s is not a folder (give the folder that holds your answers.txt)\n",
                dir);
        exit(2);
    }
    printf("exercise %d: %s\n  marking %s\n", ex, title, dir);
    fflush(stdout);
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_crash);
    return dir;
}

const char *check_begin(int argc, char **argv, int ex, const char *title)
{
    return begin(argc, argv, ex, title, 0);
}

const char *check_begin_with_options(int argc, char **argv, int ex, const char *title)
{
    return begin(argc, argv, ex, title, 1);
}

int check_end(const tally *t, int ex)
{
    int total = t->right + t->wrong + t->todo;
    char stray[96] = "";
    if (t->stray)
        snprintf(stray, sizeof stray, "; %d line%s with a key no part has", t->stray, t->stray > 1 ? "s" : "");
    if (t->wrong == 0 && t->todo == 0 && t->stray == 0) {
        printf("exercise %d: all %d parts right\n", ex, total);
        return 0;
    }
    printf("exercise %d: %d of %d parts right (%d wrong, %d not answered yet%s)\n", ex,
           t->right, total, t->wrong, t->todo, stray);
    return 1;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

answers *answers_load(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("  cannot read %s: %s\n", path, strerror(errno));
        return NULL;
    }
    answers *a = calloc(1, sizeof *a);
    if (!a) {
        fclose(f);
        printf("  out of memory reading %s\n", path);
        return NULL;
    }
    snprintf(a->path, sizeof a->path, "%s", path);
    char buf[512];
    int lineno = 0;
    while (fgets(buf, sizeof buf, f)) {
        lineno++;
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        char *eq = strchr(buf, '=');
        char *line = trim(buf);
        if (!*line) continue;
        if (!eq) {
            printf("  %s:%d: no '=' on this line (expected key = value)\n", path, lineno);
            continue;
        }
        *eq = '\0';
        char *k = trim(buf), *v = trim(eq + 1);
        int seen = -1;
        for (int i = 0; i < a->n; i++)
            if (strcmp(a->key[i], k) == 0) seen = i;
        if (seen >= 0) {
            /* neither line wins: the part is left unmarked until one goes */
            printf("  %s:%d: error: '%s' is given twice (first on line %d); keep one line\n",
                   path, lineno, k, a->line[seen]);
            if (!a->dup_line[seen]) a->dup_line[seen] = lineno;
            continue;
        }
        if (a->n == MAX_ENTRIES) break;
        snprintf(a->key[a->n], KEY_LEN, "%s", k);
        snprintf(a->val[a->n], VAL_LEN, "%s", v);
        a->line[a->n] = lineno;
        a->n++;
    }
    fclose(f);
    return a;
}

void answers_free(answers *a) { free(a); }

void answers_done(tally *t, answers *a)
{
    if (!a) return;
    for (int i = 0; i < a->n; i++)
        if (!a->used[i]) {
            t->stray++;
            printf("  wrong  %s: %s:%d gives a key no part of this exercise has (a typo? "
                   "the keys are those of the shipped answers.txt)\n", a->key[i], a->path,
                   a->line[i]);
        }
    free(a);
}

const char *answer_text(const answers *a, const char *key)
{
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->key[i], key) == 0) {
            ((answers *)a)->used[i] = true;
            return a->val[i];
        }
    return NULL;
}

enum ans_state answer_number(const answers *a, const char *key, double *x)
{
    const char *v = answer_text(a, key);
    if (!v) return ANS_MISSING;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->key[i], key) == 0 && a->dup_line[i]) return ANS_TWICE;
    if (*v == '\0') return ANS_EMPTY;
    if (strcmp(v, "?") == 0) return ANS_TODO;
    char num[VAL_LEN];
    size_t n = 0;
    for (const char *p = v; *p && n + 1 < sizeof num; p++)
        if (*p != '_') num[n++] = *p;
    num[n] = '\0';
    char *end;
    errno = 0;
    double d = strtod(num, &end);
    if (end == num || *trim(end) != '\0' || isnan(d)) return ANS_BAD;
    *x = d;
    return ANS_GIVEN;
}

bool close_to(double x, double ref, double atol, double rtol)
{
    if (isinf(ref) || isinf(x)) return x == ref;
    return fabs(x - ref) <= atol + rtol * fabs(ref);
}

bool same_sig(double x, double ref, int sig)
{
    if (!isfinite(x) || !isfinite(ref)) return x == ref;
    if (ref == 0) return x == 0;
    /* the place value of the last significant figure of ref */
    double unit = pow(10.0, floor(log10(fabs(ref))) - (sig - 1));
    return nearbyint(x / unit) == nearbyint(ref / unit);
}

bool take_answer(tally *t, const answers *a, const char *key, double *x)
{
    switch (answer_number(a, key, x)) {
    case ANS_GIVEN:
        return true;
    case ANS_MISSING:
        mark_todo(t, key, "no line '%s = ...' in the answers file", key);
        return false;
    case ANS_TODO:
        mark_todo(t, key, "still '?'");
        return false;
    case ANS_EMPTY:
        mark_todo(t, key, "empty (nothing after '=')");
        return false;
    case ANS_TWICE:
        for (int i = 0; i < a->n; i++)
            if (strcmp(a->key[i], key) == 0)
                mark_todo(t, key, "given twice (lines %d and %d): keep one", a->line[i],
                          a->dup_line[i]);
        return false;
    case ANS_BAD:
    default:
        /* Answered, but with something that cannot be read as a number (a
         * decimal comma, a unit, an expression): wrong, not "not answered
         * yet", and the line is named so that it can be found. */
        for (int i = 0; i < a->n; i++)
            if (strcmp(a->key[i], key) == 0)
                mark(t, key, false, "%s:%d: '%s' is not a number (write a plain number such as "
                     "1.5e-3 or 16_384)", a->path, a->line[i], a->val[i]);
        return false;
    }
}

/* One "wrong" line with its hint: shared by mark and mark_number. */
static void vmark_wrong(tally *t, const char *key, const char *hint_fmt, va_list ap)
{
    t->wrong++;
    printf("  wrong  %s: ", key);
    vprintf(hint_fmt, ap);
    printf("\n");
}

void mark(tally *t, const char *key, bool ok, const char *hint_fmt, ...)
{
    if (ok) {
        t->right++;
        printf("  right  %s\n", key);
        return;
    }
    va_list ap;
    va_start(ap, hint_fmt);
    vmark_wrong(t, key, hint_fmt, ap);
    va_end(ap);
}

/* The place value of the last digit written in text ("1.0748" -> 1e-4,
 * "5.4e8" -> 1e7), and whether more than a single bare digit was written
 * (a decimal point with a digit after it, or two significant digits); false
 * for anything but a plain finite number. */
static bool last_digit(const char *text, double *unit, bool *several)
{
    const char *p = text;
    int decimals = 0, digits = 0, lead = 1;
    bool point = false;
    if (*p == '+' || *p == '-') p++;
    for (; *p && *p != 'e' && *p != 'E'; p++) {
        if (*p == '_') continue;
        if (*p == '.') {
            if (point) return false;
            point = true;
            continue;
        }
        if (!isdigit((unsigned char)*p)) return false;
        if (point) decimals++;
        if (*p != '0') lead = 0;
        if (!lead) digits++;
    }
    long e = 0;
    if (*p) {
        char *end;
        e = strtol(p + 1, &end, 10);
        if (end == p + 1 || *end) return false;
    }
    *unit = pow(10.0, (double)(e - decimals));
    *several = decimals >= 1 || digits >= 2;
    return true;
}

void mark_number(tally *t, const answers *a, const char *key, double x, bool ok, double ref,
                 const char *want, const char *hint_fmt, ...)
{
    double unit;
    bool several;
    const char *text = answer_text(a, key);
    /* Wrong, but ref rounded to the last digit written: a rounding matter,
     * not the mistake the checker's own hint is about. Not for a single bare
     * digit: "1" for 1.07 is more likely a slip of substance (exp(0) alone)
     * and gets the checker's hint. */
    if (!ok && text && last_digit(text, &unit, &several) && several &&
        fabs(x - ref) <= 0.5 * unit * (1 + 1e-9)) {
        mark(t, key, false, "too few %s: the right value rounds to this, but give %s",
             strpbrk(text, "eE") ? "digits" : "decimals", want);
        return;
    }
    if (ok) {
        mark(t, key, true, "%s", "");
        return;
    }
    va_list ap;
    va_start(ap, hint_fmt);
    vmark_wrong(t, key, hint_fmt, ap);
    va_end(ap);
}

void mark_todo(tally *t, const char *key, const char *why_fmt, ...)
{
    t->todo++;
    printf("  todo   %s: ", key);
    va_list ap;
    va_start(ap, why_fmt);
    vprintf(why_fmt, ap);
    va_end(ap);
    printf("\n");
}

/* Print a file indented by "    | "; returns false when it cannot be read.
 * *answered is set unless the file still holds the placeholder. */
static bool print_file(const char *path, bool *answered)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char buf[1024];
    bool placeholder = false, any = false, in_comment = false;
    while (fgets(buf, sizeof buf, f)) {
        /* HTML comments (the file's header) are for editors, not readers. */
        if (in_comment || strncmp(buf, "<!--", 4) == 0) {
            in_comment = strstr(buf, "-->") == NULL;
            continue;
        }
        if (strstr(buf, WRITTEN_PLACEHOLDER)) placeholder = true;
        size_t len = strlen(buf);
        if (len && buf[len - 1] == '\n') buf[--len] = '\0';
        printf(len ? "    | %s\n" : "    |%s\n", buf);
        any = true;
    }
    fclose(f);
    if (answered) *answered = any && !placeholder;
    return true;
}

void show_written(const char *dir, const char *name, int ex, const tally *t)
{
    char path[4096], model[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(model, sizeof model, "%s/solutions/ex%d/%s", EX_ROOT, ex, name);
    printf("\n  written part (not marked): compare your answer with the model answer\n");
    printf("  your answer, %s:\n", path);
    bool answered = false;
    if (!print_file(path, &answered)) {
        printf("    (cannot read %s)\n", path);
        return;
    }
    if (!answered) {
        printf("  the model answer appears here once you have replaced the line\n"
               "  \"%s\" with your own answer.\n\n", WRITTEN_PLACEHOLDER);
        return;
    }
    /* The model answer works the numbers out: not before the learner has them. */
    if (t->wrong || t->todo || t->stray) {
        printf("  the model answer appears here once every marked part above is right\n"
               "  (it works the numbers out).\n\n");
        return;
    }
    printf("  model answer, %s:\n", model);
    if (!print_file(model, NULL)) printf("    (cannot read %s)\n", model);
    printf("\n");
}

uint64_t check_seed_flags(int argc, char **argv, const char *dir, const char *what, int *cases)
{
    uint64_t seed = fresh_seed();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = check_seed(argv[++i]);
        else if (cases && !strcmp(argv[i], "--cases") && i + 1 < argc) *cases = atoi(argv[++i]);
        else if (argv[i][0] == '-') {   /* --cases where this checker has none */
            fprintf(stderr, "check: unexpected argument '%s' (usage: check [DIR] [--seed S]%s)\n", argv[i],
                    cases ? " [--cases K]" : "");
            exit(2);
        }
    }
    printf("  %s from seed %" PRIu64 " (replay: %s %s --seed %" PRIu64 ")\n", what, seed, argv[0], dir, seed);
    return seed;
}
