#ifndef REALTIME_SUPPORT_H
#define REALTIME_SUPPORT_H

// Real-time scheduling helpers for the priority-inversion test and benchmark (not part of the
// library): pin the calling thread to one processor, give it a real-time priority, burn its own
// processor time. Linux only; elsewhere every call fails with ENOTSUP.

/// Pins the calling thread to processor `cpu`, or lets it run on every processor again for a
/// negative `cpu`. Returns 0, or an errno value.
int qsvrt_pin_to_cpu(int cpu);

/// Gives the calling thread SCHED_FIFO at `priority` (1...99), or SCHED_OTHER for 0. Returns 0, or
/// an errno value (EPERM without CAP_SYS_NICE or an RLIMIT_RTPRIO).
int qsvrt_set_realtime(int priority);

/// The calling thread's real-time priority: 1...99 under SCHED_FIFO or SCHED_RR, 0 otherwise.
int qsvrt_realtime_priority(void);

/// Seconds on a monotonic clock.
double qsvrt_now(void);

/// Spins until the calling thread has used `seconds` of processor time (not wall time: a thread
/// that does not get the processor does not progress).
void qsvrt_burn_cpu(double seconds);

#endif
