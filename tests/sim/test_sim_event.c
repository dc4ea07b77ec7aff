/* tests/sim/test_sim_event.c - events: record, query, synchronize, timing, waits. */
#include <cuda_runtime_api.h>

#include "harness.h"
#include "simcuda.h"
#include "test_sim_held.h"
#include "test_sim_util.h"

TEST(never_recorded_event_is_complete)
{
    cudaEvent_t e;
    ASSERT_OK(cudaEventCreate(&e));
    ASSERT_OK(cudaEventQuery(e));
    ASSERT_OK(cudaEventSynchronize(e));
    float ms;
    ASSERT_EQ(cudaEventElapsedTime(&ms, e, e), cudaErrorInvalidResourceHandle);
    ASSERT_OK(cudaEventDestroy(e));
}

TEST(record_query_synchronize_and_elapsed_time)
{
    cudaStream_t s;
    cudaEvent_t a, b;
    ASSERT_OK(cudaStreamCreate(&s));
    ASSERT_OK(cudaEventCreate(&a));
    ASSERT_OK(cudaEventCreate(&b));
    static int flag;
    ASSERT_OK(cudaEventRecord(a, s));
    ASSERT_OK(launch_slow_store(s, &flag, 1, 50));
    ASSERT_OK(cudaEventRecord(b, s));
    ASSERT_EQ(cudaEventQuery(b), cudaErrorNotReady);
    float ms = -1;
    ASSERT_EQ(cudaEventElapsedTime(&ms, a, b), cudaErrorNotReady);
    ASSERT_OK(cudaEventSynchronize(b));
    ASSERT_EQ(load_flag(&flag), 1);
    ASSERT_OK(cudaEventQuery(b));
    ASSERT_OK(cudaEventElapsedTime(&ms, a, b));
    ASSERT_MSG(ms >= 45.0f && ms < 1000.0f, "elapsed %f ms", (double)ms);
    simcuda_counters c;
    ASSERT_EQ(simcuda_stats(0, &c), 0);
    ASSERT_GE(c.event_records, 2);
    ASSERT_OK(cudaEventDestroy(a));
    ASSERT_OK(cudaEventDestroy(b));
    ASSERT_OK(cudaStreamDestroy(s));
}

TEST(disable_timing_makes_elapsed_time_invalid)
{
    cudaEvent_t a, b;
    ASSERT_OK(cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
    ASSERT_OK(cudaEventCreate(&b));
    ASSERT_OK(cudaEventRecord(a, 0));
    ASSERT_OK(cudaEventRecord(b, 0));
    ASSERT_OK(cudaEventSynchronize(b));
    ASSERT_OK(cudaEventSynchronize(a));
    float ms;
    ASSERT_EQ(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle);
    ASSERT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    ASSERT_OK(cudaEventDestroy(a));
    ASSERT_OK(cudaEventDestroy(b));
}

TEST(stream_wait_event_orders_across_streams)
{
    cudaStream_t s1 = held_stream(cudaStreamDefault), s2 = held_stream(cudaStreamDefault);
    cudaEvent_t e = held_event(cudaEventDisableTiming);
    static int flag;
    ASSERT_OK(launch_slow_store(s1, &flag, 1, 50));
    ASSERT_OK(cudaEventRecord(e, s1));
    ASSERT_OK(cudaStreamWaitEvent(s2, e, 0));
    ASSERT_EQ(flag_seen_by(s2, &flag), 1);
    release_held();
}

/* The wait binds to the record current at the time of the call: recording
 * the event again afterwards, on an idle stream, changes nothing. */
TEST(stream_wait_uses_record_current_at_call_time)
{
    cudaStream_t s1 = held_stream(cudaStreamDefault), s2 = held_stream(cudaStreamDefault),
                 s3 = held_stream(cudaStreamDefault);
    cudaEvent_t e = held_event(cudaEventDefault);
    static int flag;
    ASSERT_OK(launch_slow_store(s1, &flag, 1, 60));
    ASSERT_OK(cudaEventRecord(e, s1));
    ASSERT_OK(cudaStreamWaitEvent(s2, e, 0));
    ASSERT_OK(cudaEventRecord(e, s3));               /* completes at once */
    ASSERT_OK(cudaEventSynchronize(e));
    ASSERT_EQ(load_flag(&flag), 0);                  /* the new record is done, s1 is not */
    ASSERT_EQ(flag_seen_by(s2, &flag), 1);
    release_held();
}

TEST(destroying_an_event_with_a_pending_record_is_safe)
{
    cudaStream_t s;
    cudaEvent_t e;
    ASSERT_OK(cudaStreamCreate(&s));
    ASSERT_OK(cudaEventCreate(&e));
    static int flag;
    ASSERT_OK(launch_slow_store(s, &flag, 1, 30));
    ASSERT_OK(cudaEventRecord(e, s));
    ASSERT_OK(cudaEventDestroy(e));
    ASSERT_OK(cudaStreamSynchronize(s));
    ASSERT_OK(cudaStreamDestroy(s));
}

TEST_MAIN()
