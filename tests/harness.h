/* tests/harness.h - the whole C test harness, one header.
 *
 * A test file defines tests with TEST(name) { ... } and ends with TEST_MAIN().
 * The binary runs one test per process:
 *   ./test_x NAME      run test NAME in this process (meson does this: one
 *                      test() entry per name, each with its own timeout)
 *   ./test_x           fork every test into its own child, with a timeout
 *                      (HARNESS_TIMEOUT seconds, default 60), and report
 *   ./test_x --list    print the names
 * An ASSERT that fails prints file:line and the values and exits 1.
 */
#ifndef VT_TESTS_HARNESS_H
#define VT_TESTS_HARNESS_H

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*harness_fn)(void);
struct harness_test { const char *name; harness_fn fn; };

#define HARNESS_MAX_TESTS 256
static struct harness_test harness_tests[HARNESS_MAX_TESTS];
static int harness_ntests;

/* Past the limit a test would silently never run: refuse to start at all. */
static inline void harness_register(const char *name, harness_fn fn)
{
    if (harness_ntests >= HARNESS_MAX_TESTS) {
        fprintf(stderr, "harness: more than %d tests in one file (%s is one too many): "
                "raise HARNESS_MAX_TESTS or split the file\n", HARNESS_MAX_TESTS, name);
        exit(2);
    }
    harness_tests[harness_ntests++] = (struct harness_test){ name, fn };
}

/* A test that cannot run here says why and exits 77, which meson counts as
 * skipped (never as passed). */
#define SKIP(...)                                                           \
    do {                                                                    \
        printf("SKIP: ");                                                   \
        printf(__VA_ARGS__);                                                \
        putchar('\n');                                                      \
        fflush(stdout);                                                     \
        exit(77);                                                           \
    } while (0)

/* ThreadSanitizer makes a stress loop 5-20 times slower, and what it looks
 * for (two threads' accesses with no order between them) shows within a
 * shorter run: a loop of HARNESS_STRESS(n, tsan_n) steps runs n steps in the
 * main and ASan builds, tsan_n under ThreadSanitizer (build-tsan). */
#if defined(__SANITIZE_THREAD__)
#define HARNESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HARNESS_TSAN 1
#endif
#endif
#ifdef HARNESS_TSAN
#define HARNESS_STRESS(n, tsan_n) (tsan_n)
#else
#define HARNESS_STRESS(n, tsan_n) (n)
#endif

#define TEST(name)                                                          \
    static void test_##name(void);                                          \
    __attribute__((constructor)) static void register_##name(void)          \
    { harness_register(#name, test_##name); }                               \
    static void test_##name(void)

#define HARNESS_FAIL(...)                                                   \
    do {                                                                    \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                     \
        fprintf(stderr, __VA_ARGS__);                                       \
        fputc('\n', stderr);                                                \
        exit(1);                                                            \
    } while (0)

#define ASSERT(cond)                                                        \
    do { if (!(cond)) HARNESS_FAIL("assertion failed: %s", #cond); } while (0)
#define ASSERT_MSG(cond, ...)                                               \
    do { if (!(cond)) HARNESS_FAIL(__VA_ARGS__); } while (0)
#define ASSERT_INT_OP(a, op, b)                                             \
    do {                                                                    \
        long long a_ = (long long)(a), b_ = (long long)(b);                 \
        if (!(a_ op b_))                                                    \
            HARNESS_FAIL("%s %s %s: %lld vs %lld", #a, #op, #b, a_, b_);    \
    } while (0)
#define ASSERT_EQ(a, b)  ASSERT_INT_OP(a, ==, b)
#define ASSERT_NE(a, b)  ASSERT_INT_OP(a, !=, b)
#define ASSERT_LT(a, b)  ASSERT_INT_OP(a, <, b)
#define ASSERT_LE(a, b)  ASSERT_INT_OP(a, <=, b)
#define ASSERT_GT(a, b)  ASSERT_INT_OP(a, >, b)
#define ASSERT_GE(a, b)  ASSERT_INT_OP(a, >=, b)
#define ASSERT_PTR_EQ(a, b)                                                 \
    do {                                                                    \
        const void *a_ = (const void *)(a), *b_ = (const void *)(b);        \
        if (a_ != b_) HARNESS_FAIL("%s == %s: %p vs %p", #a, #b, a_, b_);   \
    } while (0)
#define ASSERT_PTR_NE(a, b)                                                 \
    do {                                                                    \
        const void *a_ = (const void *)(a), *b_ = (const void *)(b);        \
        if (a_ == b_) HARNESS_FAIL("%s != %s: both %p", #a, #b, a_);        \
    } while (0)
#define ASSERT_STR_EQ(a, b)                                                 \
    do {                                                                    \
        const char *a_ = (a), *b_ = (b);                                    \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                              \
            HARNESS_FAIL("%s == %s: \"%s\" vs \"%s\"", #a, #b,              \
                         a_ ? a_ : "(null)", b_ ? b_ : "(null)");           \
    } while (0)
#define ASSERT_STR_CONTAINS(hay, needle)                                    \
    do {                                                                    \
        const char *h_ = (hay), *n_ = (needle);                             \
        if (!h_ || !strstr(h_, n_))                                         \
            HARNESS_FAIL("%s does not contain \"%s\": \"%s\"", #hay, n_,    \
                         h_ ? h_ : "(null)");                               \
    } while (0)
/* For CUDA calls: both runtime and driver success codes are 0. */
#define ASSERT_OK(call)                                                     \
    do {                                                                    \
        long long rc_ = (long long)(call);                                  \
        if (rc_ != 0) HARNESS_FAIL("%s returned %lld", #call, rc_);         \
    } while (0)

static inline int harness_run_forked(const struct harness_test *t, int timeout_s)
{
    fflush(stdout);   /* or the child would print our buffered lines again */
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm((unsigned)timeout_s);
        t->fn();
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFSIGNALED(status))
        fprintf(stderr, "  %s: killed by signal %d%s\n", t->name, WTERMSIG(status),
                WTERMSIG(status) == SIGALRM ? " (timeout)" : "");
    return 1;
}

static inline int harness_main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < harness_ntests; i++) puts(harness_tests[i].name);
        return 0;
    }
    if (argc > 1) {
        for (int i = 0; i < harness_ntests; i++)
            if (strcmp(harness_tests[i].name, argv[1]) == 0) {
                harness_tests[i].fn();
                return 0;
            }
        fprintf(stderr, "no test named %s (try --list)\n", argv[1]);
        return 2;
    }
    const char *env = getenv("HARNESS_TIMEOUT");
    int timeout_s = env ? atoi(env) : 60;
    int failed = 0;
    for (int i = 0; i < harness_ntests; i++) {
        int rc = harness_run_forked(&harness_tests[i], timeout_s);
        printf("%s %s\n", rc ? "FAIL" : "ok  ", harness_tests[i].name);
        failed += rc;
    }
    printf("%d passed, %d failed\n", harness_ntests - failed, failed);
    return failed ? 1 : 0;
}

#define TEST_MAIN() int main(int argc, char **argv) { return harness_main(argc, argv); }

#endif /* VT_TESTS_HARNESS_H */
