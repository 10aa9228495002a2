/* outputs.c -- the output files of a run: checked before any work, written
 * to a temporary file beside each, renamed onto their paths only when the run
 * succeeds (see outputs.h). */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700   /* realpath */
#include "common.h"
#include "npy.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* One output file of this run. `tmp` is a file created next to `final` (same
 * folder, so that rename(2) replaces final in one step); it holds what the
 * program writes until outputs_finish renames it. An existing output that is
 * not a regular file (a terminal, a pipe, /dev/null) cannot be replaced that
 * way and is written in place (`direct`): there is no earlier content to keep. */
typedef struct {
    const char *flag;     /* "--out", ..., "--csv": names the path in messages */
    const char *path;     /* as the user gave it */
    char final[4096];     /* what tmp is renamed onto: path, or the file a link names */
    char tmp[4096];       /* "" once renamed or removed */
    bool direct, written;
    FILE *csv;            /* the stream csv_open returned, until csv_close */
} staged_output;

#define MAX_STAGED 8
static staged_output g_staged[MAX_STAGED];
static int g_n_staged;
static pid_t g_staged_pid;   /* a forked child must not remove its parent's files */

/* Remove every temporary file not yet renamed. Called at exit and from the
 * signal handler, so it uses unlink only (async-signal-safe). */
static void discard_staged(void)
{
    if (getpid() != g_staged_pid) return;
    for (int i = 0; i < g_n_staged; i++)
        if (g_staged[i].tmp[0] && !g_staged[i].direct) {
            unlink(g_staged[i].tmp);
            g_staged[i].tmp[0] = '\0';
        }
}

static void on_fatal_signal(int sig)
{
    discard_staged();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Install the clean-up once: at exit (fatal, a failed check, --help) and on
 * the signals that end a process, unless someone (a sanitizer) handles the
 * signal already. */
static void install_cleanup(void)
{
    static bool done;
    if (done) return;
    done = true;
    g_staged_pid = getpid();
    atexit(discard_staged);
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV, SIGBUS, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (!strcmp(a, b)) return true;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static staged_output *find_staged(const char *path)
{
    for (int i = 0; i < g_n_staged; i++)
        if (g_staged[i].path == path || !strcmp(g_staged[i].path, path)) return &g_staged[i];
    return NULL;
}

void stage_output(const char *flag, const char *path)
{
    if (find_staged(path)) return;
    if (!*path) fatal(EXIT_BAD_INPUT, "%s: empty file name", flag);
    if (g_n_staged == MAX_STAGED) fatal(EXIT_BAD_INPUT, "%s %s: more than %d output files", flag, path, MAX_STAGED);
    install_cleanup();
    staged_output *e = &g_staged[g_n_staged];
    memset(e, 0, sizeof *e);
    e->flag = flag;
    e->path = path;
    if (strlen(path) + 16 > sizeof e->final) fatal(EXIT_BAD_INPUT, "%s: file name too long", flag);
    /* A link is followed: the file it names is replaced, the link kept. */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        char *real = realpath(path, NULL);
        if (!real) fatal(EXIT_BAD_INPUT, "%s %s: a link to nothing (%s)", flag, path, strerror(errno));
        if (strlen(real) + 16 > sizeof e->final) fatal(EXIT_BAD_INPUT, "%s: file name too long", flag);
        snprintf(e->final, sizeof e->final, "%s", real);
        free(real);
    } else {
        snprintf(e->final, sizeof e->final, "%s", path);
    }
    bool exists = stat(e->final, &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) fatal(EXIT_BAD_INPUT, "%s %s: is a directory", flag, path);
    if (exists && !S_ISREG(st.st_mode)) {
        if (access(e->final, W_OK) != 0)
            fatal(EXIT_BAD_INPUT, "%s %s: cannot write: %s", flag, path, strerror(errno));
        e->direct = true;
        memcpy(e->tmp, e->final, sizeof e->tmp);
        g_n_staged++;
        return;
    }
    if (exists && access(e->final, W_OK) != 0)
        fatal(EXIT_BAD_INPUT, "%s %s: cannot create: the file is read-only (%s)", flag, path, strerror(errno));
    /* The folder: it must exist, and a file must be creatable in it. Creating
     * the temporary file now is the test (a permission check alone passes for
     * root in /proc, where nothing can be created). */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", e->final);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : e->final;
    if (!*base) fatal(EXIT_BAD_INPUT, "%s %s: is a directory", flag, path);
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    else strcpy(dir, ".");
    struct stat ds;
    if (stat(dir, &ds) != 0)
        fatal(EXIT_BAD_INPUT, "%s %s: cannot create: folder %s: %s", flag, path, dir, strerror(errno));
    if (!S_ISDIR(ds.st_mode)) fatal(EXIT_BAD_INPUT, "%s %s: cannot create: %s is not a folder", flag, path, dir);
    int len = snprintf(e->tmp, sizeof e->tmp, "%s%s.%s.XXXXXX", dir, strcmp(dir, "/") ? "/" : "", base);
    if (len < 0 || (size_t)len >= sizeof e->tmp) fatal(EXIT_BAD_INPUT, "%s: file name too long", flag);
    int fd = mkstemp(e->tmp);
    if (fd < 0) {
        int err = errno;
        e->tmp[0] = '\0';
        fatal(EXIT_BAD_INPUT, "%s %s: cannot create a file in folder %s: %s", flag, path, dir, strerror(err));
    }
    g_n_staged++;   /* from here on, exit removes it */
    mode_t mask = umask(022);
    umask(mask);
    mode_t mode = exists ? (st.st_mode & 07777) : (0666 & ~mask);
    if (fchmod(fd, mode) != 0 || close(fd) != 0)
        fatal(EXIT_BAD_INPUT, "%s %s: cannot set up %s: %s", flag, path, e->tmp, strerror(errno));
}

/* Every output the options name, checked before any work: writable, distinct
 * from the other outputs, not one of the inputs. */
void stage_option_outputs(const options *opt)
{
    const char *outs[6] = {opt->out, opt->lse, opt->dq, opt->dk, opt->dv, opt->csv};
    const char *names[6] = {"--out", "--lse", "--dq", "--dk", "--dv", "--csv"};
    const char *ins[4] = {opt->q, opt->k, opt->v, opt->dO};
    const char *in_names[4] = {"--q", "--k", "--v", "--do"};
    for (int i = 0; i < 6; i++) {
        if (!outs[i]) continue;
        for (int j = 0; j < i; j++)
            if (outs[j] && same_file(outs[i], outs[j]))
                fatal(EXIT_BAD_INPUT, "%s and %s name the same file %s", names[j], names[i], outs[i]);
        for (int j = 0; j < 4; j++)
            if (ins[j] && same_file(outs[i], ins[j]))
                fatal(EXIT_BAD_INPUT, "%s %s would overwrite the input %s", names[i], outs[i], in_names[j]);
        /* the real input is the default of every stage: never written over */
        static const char *const real[] = {"q", "k", "v", "do", "o_model"};
        for (size_t j = 0; j < sizeof real / sizeof real[0]; j++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.npy", DEFAULT_INPUT_DIR, real[j]);
            if (same_file(outs[i], path))
                fatal(EXIT_BAD_INPUT, "%s %s would overwrite the real input %s", names[i], outs[i], path);
        }
    }
    for (int i = 0; i < 6; i++)
        if (outs[i]) stage_output(names[i], outs[i]);
}

/* The file a write to path goes to, staging path first (named `flag` in
 * messages) if no option named it. */
static staged_output *staged_for(const char *path, const char *flag)
{
    staged_output *e = find_staged(path);
    if (!e) {
        stage_output(flag, path);
        e = find_staged(path);
    }
    if (!e->tmp[0]) fatal(EXIT_BAD_INPUT, "%s %s: written after outputs_finish", e->flag, path);
    e->written = true;
    return e;
}

void csv_close(FILE *f)
{
    staged_output *e = NULL;
    for (int i = 0; i < g_n_staged; i++)
        if (g_staged[i].csv == f) e = &g_staged[i];
    if (e) e->csv = NULL;
    int bad = fflush(f) != 0 || ferror(f);
    int err = errno;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (bad) fatal(EXIT_BAD_INPUT, "%s %s: write failed: %s", e ? e->flag : "--csv", e ? e->path : "", strerror(err));
}

int outputs_finish(int status)
{
    if (status != 0) {
        discard_staged();
        return status;
    }
    for (int i = 0; i < g_n_staged; i++) {
        staged_output *e = &g_staged[i];
        if (e->csv) csv_close(e->csv);
        if (e->direct || !e->tmp[0]) continue;
        if (!e->written) {   /* named but not produced by this run: left as it was */
            unlink(e->tmp);
        } else if (rename(e->tmp, e->final) != 0) {
            fprintf(stderr, "%s: error: %s %s: cannot replace it with %s: %s\n", g_prog, e->flag, e->path, e->tmp,
                    strerror(errno));
            discard_staged();
            return EXIT_BAD_INPUT;
        }
        e->tmp[0] = '\0';
    }
    /* one line saying which files the run wrote (a file written in place,
     * such as /dev/stdout, is not named: the line would land in its stream) */
    int named = 0;
    for (int i = 0; i < g_n_staged; i++) {
        const staged_output *e = &g_staged[i];
        if (e->direct || !e->written) continue;
        printf("%s%s %s", named++ ? ", " : "wrote ", e->flag, e->path);
    }
    if (named) printf("\n");
    return 0;
}

void save_tensor(const char *path, const double *x, int B, int H, int rows, int d)
{
    int64_t shape[4] = {B, H, rows, d};
    char err[256];
    staged_output *e = staged_for(path, "output");
    if (npy_write(e->tmp, x, d ? 4 : 3, shape, false, err, sizeof err) != 0)
        fatal(EXIT_BAD_INPUT, "%s %s: %s", e->flag, path, err);
}

void save_q_like(const char *path, const double *x, const attn_params *p)
{
    save_tensor(path, x, p->B, p->H, p->seqlen_q, p->d);
}

void save_kv_like(const char *path, const double *x, const attn_params *p)
{
    save_tensor(path, x, p->B, p->H_kv, p->seqlen_k, p->d);
}

void save_rows(const char *path, const double *x, const attn_params *p)
{
    save_tensor(path, x, p->B, p->H, p->seqlen_q, 0);
}

FILE *csv_open(const char *path, int argc, char **argv, const char *header)
{
    staged_output *e = staged_for(path, "--csv");
    FILE *f = fopen(e->tmp, "w");
    if (!f) fatal(EXIT_BAD_INPUT, "%s %s: cannot create: %s", e->flag, path, strerror(errno));
    e->csv = f;
    char commit[64], changes[8], host[256], cpu[256];
    /* A copy of the tree without .git (as on a remote GPU machine) names its
     * commit in FA_COMMIT. */
    const char *env_commit = getenv("FA_COMMIT");
    source_commit(commit, sizeof commit);
    /* Changes under data/ are measurements (this file among them), not code.
     * A copy named by FA_COMMIT is taken at its word: its .git, if it came
     * along, need not match the copied files' modes (seen on the GPU
     * machine, which marked a clean commit as changed). */
    changes[0] = '\0';
    if (!(env_commit && *env_commit))
        command_line_of("git -c core.fileMode=false status --porcelain --untracked-files=no -- . ':!data' "
                     "2>/dev/null | head -c1", changes, sizeof changes);
    bool dirty = changes[0] != '\0';
    command_line_of("uname -srm", host, sizeof host);
    command_line_of("grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'",
                 cpu, sizeof cpu);
    char date[64];
    utc_date(date, sizeof date);
    fprintf(f, "# commit: %s%s\n# date: %s\n# machine: %s; %s\n# command:",
            commit,
            dirty ? " (with uncommitted changes)" : (env_commit && *env_commit) ? " (FA_COMMIT, a copy of the tree)" : "",
            date, host, cpu[0] ? cpu : "unknown cpu");
    for (int i = 0; i < argc; i++) fprintf(f, " %s", argv[i]);
    fprintf(f, "\n%s\n", header);
    return f;
}

/* ------------------------------------------------------------------------- */
/* CSV with provenance                                                        */
/* ------------------------------------------------------------------------- */

void command_line_of(const char *cmd, char *buf, size_t n)
{
    buf[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (!p) return;
    if (fgets(buf, (int)n, p)) buf[strcspn(buf, "\r\n")] = '\0';
    pclose(p);
}

void source_commit(char *buf, size_t n)
{
    const char *env_commit = getenv("FA_COMMIT");
    if (env_commit && *env_commit) snprintf(buf, n, "%s", env_commit);
    else command_line_of("git rev-parse --short HEAD 2>/dev/null", buf, n);
    if (!buf[0]) snprintf(buf, n, "unknown");
}

void utc_date(char *buf, size_t n)
{
    time_t t = time(NULL);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
}
