/*
 * alloc/alloc_fork.c - the heaps across fork().
 *
 * fork() while another thread holds a heap lock would leave it held forever
 * in the child: the child's snapshot at exit (VRAMTRACE_OUT with %p, a
 * DataLoader worker) and every hook that looks up a pointer would spin on it.
 * So the fork waits for every heap lock and the child starts with them free.
 * Heap locks are taken inside the snapshot writer's lock (the state
 * provider), never the other way round; prepare handlers run in reverse
 * order of registration, so this one is registered first (constructor
 * priority) to run after the recorder's and take the locks in that order.
 */
#include <pthread.h>

#include "alloc_internal.h"

static void fork_prepare(void)
{
    for (int d = 0; d < VT_MAX_DEVICES; d++)
        vt__heap_lock(vt__heap_slot(d));
}

static void fork_release(void)
{
    for (int d = VT_MAX_DEVICES - 1; d >= 0; d--)
        vt__heap_unlock(vt__heap_slot(d));
}

__attribute__((constructor(101))) static void heap_atfork(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_release);
}
