/*
 * trace/record/fork_lock.h - a recorder lock held across fork().
 *
 * fork() while another thread holds one of the recorder's locks leaves it
 * held for ever in the child (only the forking thread goes on there), and
 * the child's next use of it hangs: a DataLoader worker naming a tensor, a
 * child's own snapshot. VT__LOCK_ACROSS_FORK(name, lock) registers, at
 * load, handlers that take `lock` before the fork (the fork waits for the
 * other thread to let it go) and release it on both sides, so each starts
 * with it free and what it guards whole. For a leaf lock: one taken under
 * no other lock of the recorder's (the handlers run in an order of their
 * own).
 */
#ifndef VT_TRACE_RECORD_FORK_LOCK_H
#define VT_TRACE_RECORD_FORK_LOCK_H

#include <pthread.h>

#define VT__LOCK_ACROSS_FORK(name, lock)                                              \
    static void name##_fork_prepare(void) { pthread_mutex_lock(&(lock)); }           \
    static void name##_fork_release(void) { pthread_mutex_unlock(&(lock)); }         \
    __attribute__((constructor)) static void name##_atfork(void)                     \
    {                                                                                \
        pthread_atfork(name##_fork_prepare, name##_fork_release, name##_fork_release); \
    }

#endif
