/*
 * trace/record/installed_code.c - Python source an installer put outside
 * site-packages and dist-packages: `pip install --target DIR`, a PYTHONPATH
 * entry that holds installed distributions. The path rule
 * (common/user_code.h) takes such files for the program's own, and a report
 * would lead with a line of transformers instead of the user's. What tells
 * them apart is on the recording machine's disk: the directory an installer
 * filled holds each distribution's NAME-VERSION.dist-info, whose RECORD
 * lists every file it installed, so the first part of each listed path is a
 * package (or a module) that installer put there. The recorder asks while
 * the files are there, and the snapshot carries the answer per frame
 * (VT_FRAME_INSTALLED, format.h).
 *
 * Only .dist-info counts: a project installed in development mode
 * (`setup.py develop`) keeps an .egg-info in its own tree, and its code is
 * the user's; and only the names a RECORD lists, so a program whose own
 * folder received `pip install -t .` stays the program's.
 *
 * Each directory is read once (most hold no distribution at all); what
 * was learnt is kept for the life of the process, up to MAX_DIRS.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fork_lock.h"
#include "grow.h"
#include "rec_internal.h"
#include "u64map.h"

#define MAX_DIRS 4096                  /* directories remembered */
#define MAX_RECORD_BYTES (64u << 20)   /* a RECORD larger than this is not read */

/* What one directory's distributions installed at its top: names, each
 * NUL-ended, then an empty one; NULL: none. */
struct dir_names {
    char *dir;
    char *names;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static vt__u64map by_hash;         /* hash of a directory -> its index in dirs */
static struct dir_names *dirs;
static size_t ndirs, cap_dirs;

/* a snapshot's frames look their files up here, on any thread */
VT__LOCK_ACROSS_FORK(installed_code, lock)

static uint64_t hash_of(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

/* Whether `name` (len bytes) is in `names` (NUL-ended, then an empty one). */
static bool listed(const char *names, const char *name, size_t len)
{
    for (const char *p = names; *p; p += strlen(p) + 1)
        if (strlen(p) == len && !memcmp(p, name, len))
            return true;
    return false;
}

/* ---- the names a directory's distributions installed ----------------- */

struct names_buf {
    char *p;      /* names, each NUL-ended, then an empty one (once n > 0) */
    size_t n, cap;
    bool oom;
};

static void add_name(struct names_buf *b, const char *name, size_t len)
{
    if (b->oom || (b->n && listed(b->p, name, len)))
        return;
    size_t at = b->n ? b->n - 1 : 0;   /* over the empty name that ends them */
    if (vt__grow_from((void **)&b->p, &b->cap, at + len + 2, 1, 256)) {
        b->oom = true;
        return;
    }
    memcpy(b->p + at, name, len);
    b->p[at + len] = '\0';
    b->p[at + len + 1] = '\0';
    b->n = at + len + 2;
}

/* The first part of each path a RECORD lists (CSV: path,hash,size; a path
 * with a comma is quoted). Paths that leave the directory (../bin/tool), the
 * distribution's own .dist-info and bytecode caches name no package. */
static void names_of_record(int dirfd, const char *distinfo, struct names_buf *b)
{
    char rel[NAME_MAX + 16];
    snprintf(rel, sizeof rel, "%s/RECORD", distinfo);
    int fd = openat(dirfd, rel, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return;
    struct stat st;
    char *text = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
        (uint64_t)st.st_size <= MAX_RECORD_BYTES && (text = malloc((size_t)st.st_size + 1))) {
        size_t n = 0;
        ssize_t r;
        while (n < (size_t)st.st_size && (r = read(fd, text + n, (size_t)st.st_size - n)) > 0)
            n += (size_t)r;
        text[n] = '\0';
        for (char *line = text; line && *line;) {
            char *next = strchr(line, '\n');
            if (*line == '"')
                line++;
            size_t len = strcspn(line, "/,\"\n\r");
            bool top_dir_file = line[len] == '/';
            if (len && !(len == 2 && !memcmp(line, "..", 2)) &&
                !(len >= 10 && !memcmp(line + len - 10, ".dist-info", 10)) &&
                !(len == 11 && !memcmp(line, "__pycache__", 11)) &&
                (top_dir_file || line[len] == ','))
                add_name(b, line, len);
            line = next ? next + 1 : NULL;
        }
    }
    free(text);
    close(fd);
}

/* NUL-separated names (ending with an empty one), or NULL when the
 * directory holds no distribution or cannot be read. */
static char *read_dir_names(const char *dir)
{
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return NULL;
    DIR *d = fdopendir(dirfd);
    if (!d) {
        close(dirfd);
        return NULL;
    }
    struct names_buf b = { 0 };
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 10 && !strcmp(e->d_name + len - 10, ".dist-info"))
            names_of_record(dirfd, e->d_name, &b);
    }
    closedir(d);
    if (b.oom || !b.n) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* ---- the directories remembered --------------------------------------- */

/* The names of directory dir[0..len) (NULL: none), read on first asking;
 * *known false when it cannot be remembered (full, out of memory, or two
 * directories of one hash: asked no further). Called with the lock held. */
static const char *names_of(const char *dir, size_t len, bool *known)
{
    *known = false;
    uint64_t h = hash_of(dir, len);
    if (!by_hash.mask && vt__u64map_init(&by_hash, 64))
        return NULL;
    uint32_t at = vt__u64map_get(&by_hash, h);
    if (at != VT__U64MAP_NONE) {
        *known = !strncmp(dirs[at].dir, dir, len) && !dirs[at].dir[len];
        return *known ? dirs[at].names : NULL;
    }
    char *copy;
    if (ndirs >= MAX_DIRS || vt__grow((void **)&dirs, &cap_dirs, ndirs + 1, sizeof *dirs) ||
        !(copy = strndup(dir, len)))
        return NULL;
    if (vt__u64map_put(&by_hash, h, (uint32_t)ndirs)) {
        free(copy);
        return NULL;
    }
    dirs[ndirs] = (struct dir_names){ .dir = copy, .names = read_dir_names(copy) };
    *known = true;
    return dirs[ndirs++].names;
}

bool vt__source_is_installed(const char *file)
{
    if (!file || !*file || *file == '<')
        return false;
    char path[PATH_MAX];
    if (file[0] == '/') {
        if (strlen(file) >= sizeof path)
            return false;
        strcpy(path, file);
    } else {   /* as the interpreter was given it: against the working directory */
        if (!getcwd(path, sizeof path))
            return false;
        size_t n = strlen(path);
        if (n + 1 + strlen(file) >= sizeof path)
            return false;
        path[n] = '/';
        strcpy(path + n + 1, file);
    }
    /* Each directory above the file, nearest first: does a distribution
     * installed there list the part of the path right below it? */
    bool installed = false;
    pthread_mutex_lock(&lock);
    for (char *slash = strrchr(path, '/'); slash && slash > path && !installed;) {
        const char *below = slash + 1;
        size_t below_len = strcspn(below, "/");
        bool known;
        const char *names = names_of(path, (size_t)(slash - path), &known);
        if (!known)
            break;
        installed = names && listed(names, below, below_len);
        char *up = slash - 1;
        while (up > path && *up != '/')
            up--;
        slash = up;
    }
    pthread_mutex_unlock(&lock);
    return installed;
}
