#define _GNU_SOURCE
#include "RealtimeSupport.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#if defined(__linux__)
int qsvrt_pin_to_cpu(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu >= 0) {
        CPU_SET(cpu, &set);
    } else {
        for (int each = 0; each < CPU_SETSIZE; each++) CPU_SET(each, &set);
    }
    return sched_setaffinity(0, sizeof set, &set) == 0 ? 0 : errno;
}

int qsvrt_set_realtime(int priority) {
    struct sched_param param = {.sched_priority = priority};
    return pthread_setschedparam(pthread_self(), priority > 0 ? SCHED_FIFO : SCHED_OTHER, &param);
}

static double seconds(clockid_t clock) {
    struct timespec now;
    clock_gettime(clock, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

void qsvrt_burn_cpu(double duration) {
    double end = seconds(CLOCK_THREAD_CPUTIME_ID) + duration;
    while (seconds(CLOCK_THREAD_CPUTIME_ID) < end) {
    }
}

double qsvrt_now(void) {
    return seconds(CLOCK_MONOTONIC);
}
#else
int qsvrt_pin_to_cpu(int cpu) {
    (void)cpu;
    return ENOTSUP;
}

int qsvrt_set_realtime(int priority) {
    (void)priority;
    return ENOTSUP;
}

void qsvrt_burn_cpu(double duration) {
    (void)duration;
}

double qsvrt_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}
#endif

int qsvrt_realtime_priority(void) {
    int policy;
    struct sched_param param;
    if (pthread_getschedparam(pthread_self(), &policy, &param) != 0) return 0;
    return (policy == SCHED_FIFO || policy == SCHED_RR) ? param.sched_priority : 0;
}
