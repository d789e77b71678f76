#ifndef QUEUE_SAFE_VALUE_SHIMS_H
#define QUEUE_SAFE_VALUE_SHIMS_H

#include <stdint.h>
#include <pthread.h>
#include <time.h>
#include <stddef.h>

/// Atomic operations on a word that Swift allocated (`UnsafeMutablePointer<Int>`).
/// Swift's own `Atomic` type needs macOS 15 / iOS 18; these builtins work on every platform we support.

static inline intptr_t qsv_atomic_load_acquire(intptr_t *word) {
    return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}

static inline intptr_t qsv_atomic_load_relaxed(intptr_t *word) {
    return __atomic_load_n(word, __ATOMIC_RELAXED);
}

static inline void qsv_atomic_store_release(intptr_t *word, intptr_t value) {
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
}

/// The running `QueueMonitor`'s address, or 0: a plain C global, so that a contended command's
/// check of it is one load (a Swift global would be a lazy initialization check and a retain).
extern intptr_t qsv_monitor_word;

static inline intptr_t qsv_monitor_load(void) {
    return __atomic_load_n(&qsv_monitor_word, __ATOMIC_ACQUIRE);
}

static inline void qsv_monitor_store(intptr_t value) {
    __atomic_store_n(&qsv_monitor_word, value, __ATOMIC_RELEASE);
}

/// The running monitor's long-wait threshold in milliseconds (a hand-off compares with it while
/// the monitor runs).
extern intptr_t qsv_monitor_long_wait_ms;

static inline intptr_t qsv_monitor_long_wait_load(void) {
    return __atomic_load_n(&qsv_monitor_long_wait_ms, __ATOMIC_RELAXED);
}

static inline void qsv_monitor_long_wait_store(intptr_t value) {
    __atomic_store_n(&qsv_monitor_long_wait_ms, value, __ATOMIC_RELAXED);
}

/// Replaces `expected` with `desired`; returns whether it did.
static inline int qsv_monitor_compare_exchange(intptr_t expected, intptr_t desired) {
    return __atomic_compare_exchange_n(
        &qsv_monitor_word, &expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static inline void qsv_atomic_store_relaxed(intptr_t *word, intptr_t value) {
    __atomic_store_n(word, value, __ATOMIC_RELAXED);
}

static inline intptr_t qsv_atomic_exchange(intptr_t *word, intptr_t value) {
    return __atomic_exchange_n(word, value, __ATOMIC_ACQ_REL);
}

/// Returns 1 and stores `desired` if `*word == expected`; returns 0 otherwise.
static inline int qsv_atomic_compare_exchange(intptr_t *word, intptr_t expected, intptr_t desired) {
    return __atomic_compare_exchange_n(word, &expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static inline intptr_t qsv_atomic_fetch_add(intptr_t *word, intptr_t delta) {
    return __atomic_fetch_add(word, delta, __ATOMIC_ACQ_REL);
}

static inline intptr_t qsv_atomic_fetch_or(intptr_t *word, intptr_t bits) {
    return __atomic_fetch_or(word, bits, __ATOMIC_ACQ_REL);
}

static inline intptr_t qsv_atomic_fetch_and(intptr_t *word, intptr_t bits) {
    return __atomic_fetch_and(word, bits, __ATOMIC_ACQ_REL);
}

/// Stores `desired` if `*word == expected`; returns the value the word held (`expected` on success).
static inline intptr_t qsv_atomic_compare_exchange_value(intptr_t *word, intptr_t expected, intptr_t desired) {
    __atomic_compare_exchange_n(word, &expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return expected;
}

/// A hint to the CPU that the caller is spinning.
static inline void qsv_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

/// A cheap monotonic clock in nanoseconds, on the same base as `DispatchTime.uptimeNanoseconds` but
/// with a resolution of a few milliseconds: for "since when" in diagnostics, read on slow paths.
static inline uint64_t qsv_coarse_now_ns(void) {
#if defined(__APPLE__)
    return clock_gettime_nsec_np(CLOCK_UPTIME_RAW_APPROX);
#else
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
#endif
}

/// The task the caller runs in, or NULL outside any task: only its address is used, as an identity.
/// Unsafe: it calls the concurrency runtime's entry point directly (Swift's calling convention, no
/// arguments, returns the task without retaining it), because `withUnsafeCurrentTask` costs about
/// 35 ns and an awaiting command's idle path records its task.
static inline void *qsv_current_task(void) {
    extern void *swift_task_getCurrent(void) __attribute__((swiftcall));
    return swift_task_getCurrent();
}

/// Whether the caller runs on the process's main thread (cheap: the main thread's id is recorded
/// when the library loads; `Thread.isMainThread` costs hundreds of nanoseconds on Linux).
int qsv_is_main_thread(void);

/// The processor the calling thread runs on (Linux: `sched_getcpu`, which glibc 2.35 and later
/// answer from the thread's restartable-sequence area without a system call), or -1 elsewhere
/// (Apple platforms: `pthread_cpu_number_np` needs macOS 11 / iOS 14.2, above the deployment
/// floor, and is not used). A hint: the thread may have moved by the time the caller reads it.
int qsv_current_processor(void);

/// The controlled scheduler that runs the calling thread (the debug builds' testing seam,
/// `SyncPoints.scheduler`), unretained, or null. A C thread-local because every sync point of every
/// thread reads it: a Swift global holding a `pthread_key_t` goes through `swift_once` at each read,
/// which under ThreadSanitizer takes a lock shared by all threads (so that the sanitizer sees the
/// global's initialization), and threads that poll their words queued on that lock in the kernel.
#if defined(__linux__)
extern __thread void *qsv_thread_scheduler_slot __attribute__((tls_model("initial-exec")));
#else
extern __thread void *qsv_thread_scheduler_slot;
#endif

static inline void *qsv_thread_scheduler(void) {
    return qsv_thread_scheduler_slot;
}

static inline void qsv_set_thread_scheduler(void *scheduler) {
    qsv_thread_scheduler_slot = scheduler;
}

/// Under ThreadSanitizer, makes it ignore the calling thread's memory accesses until the matching
/// `qsv_sanitizer_ignore_accesses_end()` (synchronization is still tracked); does nothing otherwise.
void qsv_sanitizer_ignore_accesses_begin(void);
void qsv_sanitizer_ignore_accesses_end(void);

/// Copies the name of `thread` (a live thread's id, see `qsv_current_thread_id`) into `buffer` and
/// returns 1, or returns 0 if it has no name of its own (none, or the name every thread starts
/// with). The thread must stay alive during the call.
int qsv_thread_name(uintptr_t thread, char *buffer, size_t size);

/// Names the calling thread (Linux keeps the first 15 bytes); takes effect at once.
void qsv_set_current_thread_name(const char *name);

// Priority inheritance's platform calls, each a few lines: the policy that decides when to make
// them is in Swift (`PriorityBackend.swift`), where the tests run both platforms' policies on a
// recording fake.

#if defined(__APPLE__)
/// The QoS class the live thread `thread` (an id from `qsv_current_thread_id`) requested for itself
/// (`pthread_get_qos_class_np`: overrides are not counted), or 0 (unspecified) if it cannot be read.
int qsv_qos_class_of_thread(uintptr_t thread);

/// Starts a QoS override of the live thread `thread` at `qos_class`: the kernel runs it at least at
/// that class until the override ends. Returns the override, or NULL if the system refused.
void *qsv_qos_override_start(uintptr_t thread, int qos_class);

/// Ends an override `qsv_qos_override_start` returned (once).
void qsv_qos_override_end(void *override_handle);
#else
/// Reads the scheduling policy and priority of the live thread `thread` (an id from
/// `qsv_current_thread_id`). Returns 0, or an errno value.
int qsv_thread_scheduling(uintptr_t thread, int *policy, int *priority);

/// Sets the scheduling policy and priority of the live thread `thread`. Returns 0, or an errno value
/// (EPERM without CAP_SYS_NICE or an RLIMIT_RTPRIO, to raise a thread into a real-time policy).
int qsv_set_thread_scheduling(uintptr_t thread, int policy, int priority);

/// The real-time policies (`SCHED_FIFO`, `SCHED_RR`) and the default one, as numbers.
int qsv_sched_fifo(void);
int qsv_sched_rr(void);
#endif

/// Escalates the task `task` (a live task's address, see `qsv_current_task`) to run at least at
/// `priority` (a `TaskPriority` raw value), as awaiting a task does. Escalation is not undone: a task
/// keeps its escalated priority until it ends, as Swift's runtime defines it.
void qsv_escalate_task(void *task, size_t priority);

/// Keeps the live task `task` alive (a task is a reference-counted object of the runtime) until the
/// matching `qsv_release_task`: the engine escalates a holder task after releasing the lock that
/// kept it alive.
void qsv_retain_task(void *task);

/// Lets go of a task `qsv_retain_task` kept alive.
void qsv_release_task(void *task);

/// An identifier of the calling thread that is never 0. On Linux it is the thread pointer, read
/// from its register: what `pthread_self()` reads too, without the call through the PLT (on the
/// uncontended blocking path that call was a sixth of the time). The x86-64 and AArch64 ABIs put
/// the thread control block there, and glibc and musl keep its address, nonzero, for the thread's
/// lifetime.
static inline uintptr_t qsv_current_thread_id(void) {
#if defined(__linux__) && defined(__x86_64__)
    uintptr_t self;
    __asm__("mov %%fs:0, %0" : "=r"(self));
    return self;
#elif defined(__linux__) && defined(__aarch64__)
    uintptr_t self;
    __asm__("mrs %0, tpidr_el0" : "=r"(self));
    return self;
#else
    return (uintptr_t)pthread_self();
#endif
}

/// How many shared reads one thread can hold on the idle path at once (nested reads of different
/// values); a thread that holds this many takes the next read through the engine lock.
#define QSV_IDLE_READ_SLOTS 4

/// The shared reads a thread holds on the idle path (without the engine lock): the engines' addresses
/// in `engines[0..<depth]`, innermost last, 0 in the slots above. One record per live thread, found
/// through a thread-local pointer; `depth` is the owner's alone, every other field is read by other
/// threads (deadlock detection and priority inheritance look for a value's idle readers with
/// `qsv_idle_readers_of`) and written atomically. Records are never freed: a thread that exits gives
/// its record back (`thread` becomes 0) and a new thread takes it over, so a reader of the list never
/// meets freed memory.
typedef struct qsv_idle_reads {
    intptr_t engines[QSV_IDLE_READ_SLOTS];
    intptr_t depth;
    /// The owner thread (`qsv_current_thread_id`), 0 while the record is free.
    uintptr_t thread;
    /// The next record of the process-wide list; set once, before the record is published.
    struct qsv_idle_reads *next;
} qsv_idle_reads;

#if defined(__linux__)
extern __thread qsv_idle_reads *qsv_idle_reads_current_record __attribute__((tls_model("initial-exec")));
#else
extern __thread qsv_idle_reads *qsv_idle_reads_current_record;
#endif

/// The calling thread's record, made (or taken over from an exited thread) on its first idle read.
qsv_idle_reads *qsv_idle_reads_attach(void);

/// The calling thread's record.
static inline qsv_idle_reads *qsv_idle_reads_current(void) {
    qsv_idle_reads *record = qsv_idle_reads_current_record;
    return __builtin_expect(record != 0, 1) ? record : qsv_idle_reads_attach();
}

/// ``qsv_idle_reads_push`` for a thread that holds idle reads already (out of line).
intptr_t qsv_idle_reads_push_nested(qsv_idle_reads *record, intptr_t engine);

/// Notes that the calling thread is about to join `engine`'s shared reads on the idle path, before
/// the compare-and-swap that joins (whose release ordering publishes this store to whoever sees the
/// reader in the engine's word). Returns the read's place in the record plus one, for
/// `qsv_idle_reads_pop`, or 0 if it must not join: the thread holds an idle read of `engine`
/// already (a nested read: the engine lock decides, and refuses it), or its slots are full.
static inline intptr_t qsv_idle_reads_push(qsv_idle_reads *record, intptr_t engine) {
    if (__builtin_expect(record->depth != 0, 0)) return qsv_idle_reads_push_nested(record, engine);
    __atomic_store_n(&record->engines[0], engine, __ATOMIC_RELEASE);
    record->depth = 1;
    return 1;
}

/// Forgets the innermost idle read, which `qsv_idle_reads_push` placed at `place` (its result): its
/// join failed, or it is about to leave.
static inline void qsv_idle_reads_pop(qsv_idle_reads *record, intptr_t place) {
    record->depth = place - 1;
    __atomic_store_n(&record->engines[place - 1], 0, __ATOMIC_RELEASE);
}

/// Whether the calling thread holds a shared read of `engine` on the idle path.
static inline int qsv_idle_reads_holds(intptr_t engine) {
    qsv_idle_reads *record = qsv_idle_reads_current_record;
    if (record == 0) return 0;
    for (intptr_t index = 0; index < record->depth; index++) {
        if (record->engines[index] == engine) return 1;
    }
    return 0;
}

/// Writes the threads that hold (or are about to join, or have just left) a shared read of `engine`
/// on the idle path into `threads`, at most `capacity` of them, and returns how many there are.
/// Lock-free: it walks the list of records. A caller that saw the engine's word with `slowRelease`
/// set, after setting it, finds every thread whose join it saw; one that may be just joining or
/// leaving can appear too.
int qsv_idle_readers_of(intptr_t engine, uintptr_t *threads, int capacity);

#endif
