/*
 * cli/cmd_run.c - `vramtrace run`: run a program with libvramtrace preloaded.
 *
 *   vramtrace run [-o SNAPSHOT] [--no-cache] [--conf K:V,...] -- CMD [ARGS...]
 *
 * Sets LD_PRELOAD (ours first, an existing list kept after it),
 * VRAMTRACE_CONF (the environment's, then --conf, then --no-cache: later
 * keys win) and VRAMTRACE_OUT (the recorder writes the snapshot there at
 * exit), runs CMD and exits with its status (128+N when it died of signal N,
 * as shells report it). The library is found through VRAMTRACE_LIB, next to
 * this executable's build directory, or in the install's library directory.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commands.h"

#define LIBNAME "libvramtrace.so"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: vramtrace run [-o SNAPSHOT] [--no-cache] [--conf K:V,...] -- CMD [ARGS...]\n"
            "\n"
            "Run CMD with the vramtrace allocator preloaded (LD_PRELOAD=" LIBNAME "):\n"
            "every device allocation it makes (cudaMalloc, cuMemAlloc, cudaMallocAsync, ...,\n"
            "through a shared or static CUDA runtime or the driver) is served from the\n"
            "cache and recorded.\n"
            "\n"
            "options:\n"
            "  -o, --output FILE   write the snapshot to FILE when CMD exits (VRAMTRACE_OUT;\n"
            "                      patterns: %%p pid, %%h host, %%r rank (RANK or\n"
            "                      OMPI_COMM_WORLD_RANK), %%t time, %%n snapshot counter)\n"
            "  --no-cache          record only: every allocation goes to the device (cache:0)\n"
            "  --conf K:V,...      allocator/tracing settings (VRAMTRACE_CONF syntax), merged\n"
            "                      over VRAMTRACE_CONF from the environment\n"
            "  -h, --help          this text\n"
            "\n"
            "The exit status is CMD's (128+N if it died of signal N). The library is taken\n"
            "from VRAMTRACE_LIB if set, else found next to this program or in its lib dir.\n");
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The library to preload, as an absolute path; NULL with a message if none. */
static char *find_library(void)
{
    const char *env = getenv("VRAMTRACE_LIB");
    if (env && *env) {
        char *p = realpath(env, NULL);
        if (!p || !is_file(p)) {
            fprintf(stderr, "vramtrace run: VRAMTRACE_LIB=%s: no such library\n", env);
            free(p);
            return NULL;
        }
        return p;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "vramtrace run: cannot locate this executable; set VRAMTRACE_LIB\n");
        return NULL;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    /* Build tree (cli/vramtrace, ./libvramtrace.so), then installs (bin/ and lib*). */
    static const char *const rel[] = {
        "/../" LIBNAME, "/" LIBNAME,
        "/../lib/" LIBNAME, "/../lib64/" LIBNAME,
        "/../lib/x86_64-linux-gnu/" LIBNAME, "/../lib/aarch64-linux-gnu/" LIBNAME,
        "/../lib/" LIBNAME ".0", "/../lib64/" LIBNAME ".0",
        "/../lib/x86_64-linux-gnu/" LIBNAME ".0",
    };
    char cand[PATH_MAX + 64];
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(cand, sizeof cand, "%s%s", exe, rel[i]);
        if (is_file(cand))
            return realpath(cand, NULL);
    }
    fprintf(stderr, "vramtrace run: cannot find " LIBNAME " near %s; set VRAMTRACE_LIB\n", exe);
    return NULL;
}

static int unchanged(const char *p, const struct stat *before)
{
    struct stat now;
    return stat(p, &now) == 0 && now.st_mtim.tv_sec == before->st_mtim.tv_sec
           && now.st_mtim.tv_nsec == before->st_mtim.tv_nsec && now.st_ino == before->st_ino;
}

/* Append "k:v" items of `src` to the list, replacing an earlier same key. */
struct kv_list { char *items[64]; int n; };

static int kv_add(struct kv_list *l, const char *src)
{
    char *copy = strdup(src);
    if (!copy)
        return -1;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (!*tok)
            continue;
        const char *colon = strchr(tok, ':');
        size_t klen = colon ? (size_t)(colon - tok) : strlen(tok);
        int slot = l->n;
        for (int i = 0; i < l->n; i++)
            if (strncmp(l->items[i], tok, klen) == 0
                && (l->items[i][klen] == ':' || l->items[i][klen] == '\0'))
                slot = i;
        if (slot == l->n) {
            if (l->n == (int)(sizeof l->items / sizeof l->items[0]))
                break;
            l->n++;
        } else {
            free(l->items[slot]);
        }
        l->items[slot] = strdup(tok);
    }
    free(copy);
    return 0;
}

static char *kv_join(const struct kv_list *l)
{
    size_t len = 1;
    for (int i = 0; i < l->n; i++)
        len += strlen(l->items[i]) + 1;
    char *s = malloc(len);
    if (!s)
        return NULL;
    s[0] = '\0';
    for (int i = 0; i < l->n; i++) {
        if (i)
            strcat(s, ",");
        strcat(s, l->items[i]);
    }
    return s;
}

static char *absolute(const char *path)
{
    if (path[0] == '/')
        return strdup(path);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return strdup(path);
    size_t n = strlen(cwd) + strlen(path) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", cwd, path);
    return s;
}

int vt_cmd_run(int argc, char **argv)
{
    const char *out = NULL;
    int no_cache = 0;
    struct kv_list conf = { .n = 0 };
    int i = 1;
    const char *env_conf = getenv("VRAMTRACE_CONF");
    if (env_conf)
        kv_add(&conf, env_conf);
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-cache")) {
            no_cache = 1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--conf")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "vramtrace run: %s needs a value (see vramtrace run --help)\n", a);
                return 2;
            }
            if (!strcmp(a, "--conf"))
                kv_add(&conf, argv[++i]);
            else
                out = argv[++i];
        } else if (!strncmp(a, "--output=", 9)) {
            out = a + 9;
        } else if (!strncmp(a, "--conf=", 7)) {
            kv_add(&conf, a + 7);
        } else if (!strncmp(a, "-o", 2) && a[2]) {
            out = a + 2;
        } else if (a[0] == '-') {
            fprintf(stderr, "vramtrace run: unknown option '%s' (see vramtrace run --help)\n", a);
            return 2;
        } else {
            break;   /* the command, without a "--" */
        }
    }
    if (i >= argc) {
        fprintf(stderr, "vramtrace run: no command given\n"
                        "usage: vramtrace run [-o SNAPSHOT] [--no-cache] [--conf K:V,...] -- CMD [ARGS...]\n");
        return 2;
    }
    if (no_cache)
        kv_add(&conf, "cache:0");

    char *lib = find_library();
    if (!lib)
        return 2;
    const char *old = getenv("LD_PRELOAD");
    size_t plen = strlen(lib) + (old ? strlen(old) : 0) + 2;
    char *preload = malloc(plen);
    char *confs = kv_join(&conf);
    char *outabs = out ? absolute(out) : NULL;
    if (!preload || !confs || (out && !outabs)) {
        fprintf(stderr, "vramtrace run: out of memory\n");
        return 2;
    }
    snprintf(preload, plen, "%s%s%s", lib, old && *old ? ":" : "", old && *old ? old : "");
    setenv("LD_PRELOAD", preload, 1);
    if (conf.n)
        setenv("VRAMTRACE_CONF", confs, 1);
    if (outabs)
        setenv("VRAMTRACE_OUT", outabs, 1);

    struct stat before;
    int existed = outabs && stat(outabs, &before) == 0;

    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "vramtrace run: fork: %s\n", strerror(errno));
        return 2;
    }
    if (pid == 0) {
        execvp(argv[i], argv + i);
        int e = errno;
        fprintf(stderr, "vramtrace run: cannot run '%s': %s\n", argv[i], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }
    /* Like a shell: the terminal's ^C / ^\ are for the program; we report. */
    struct sigaction ign = { .sa_handler = SIG_IGN }, old_int, old_quit;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "vramtrace run: waitpid: %s\n", strerror(errno));
            return 2;
        }
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);

    int rc = WIFEXITED(status) ? WEXITSTATUS(status)
           : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
    if (outabs) {
        /* %n / %t patterns name the file at exit: only a plain name is checked. */
        if (strchr(outabs, '%'))
            fprintf(stderr, "vramtrace run: snapshot pattern %s\n", outabs);
        else if (is_file(outabs) && !(existed && unchanged(outabs, &before)))
            fprintf(stderr, "vramtrace run: snapshot written to %s\n", outabs);
        else
            fprintf(stderr, "vramtrace run: no snapshot at %s (the program %s)\n", outabs,
                    WIFSIGNALED(status) ? "was killed before it exited"
                                        : "ended without exit handlers (_exit, exec), "
                                          "or the write failed: see above");
    } else {
        fprintf(stderr, "vramtrace run: no snapshot requested (-o FILE to write one)\n");
    }
    if (WIFSIGNALED(status))
        fprintf(stderr, "vramtrace run: %s died of signal %d\n", argv[i], WTERMSIG(status));
    free(lib);
    free(preload);
    free(confs);
    free(outabs);
    for (int k = 0; k < conf.n; k++)
        free(conf.items[k]);
    return rc;
}
