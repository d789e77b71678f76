// For pthread_getname_np on glibc.
#define _GNU_SOURCE
// Most shims are header-only (static inline). The sanitizer hooks live here, out of line, because
// only this file is compiled by clang with the package's sanitizer flags: the header is also read
// by the Swift compiler's importer, which does not see them.
#include "QueueSafeValueShims.h"
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#if defined(__APPLE__)
#include <pthread/qos.h>
#endif

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QSV_THREAD_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define QSV_THREAD_SANITIZER 1
#endif

#if QSV_THREAD_SANITIZER
// ThreadSanitizer's runtime interface (compiler-rt's tsan_interface.h).
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#endif

void qsv_sanitizer_ignore_accesses_begin(void) {
#if QSV_THREAD_SANITIZER
    __tsan_ignore_thread_begin();
#endif
}

void qsv_sanitizer_ignore_accesses_end(void) {
#if QSV_THREAD_SANITIZER
    __tsan_ignore_thread_end();
#endif
}

// The running monitor's address and its long-wait threshold (see the header).
intptr_t qsv_monitor_word = 0;
intptr_t qsv_monitor_long_wait_ms = 0;

// The name every thread starts with (on Linux, the program's name; empty on Apple platforms).
static char qsv_default_name[64];

#if defined(__APPLE__)
int qsv_is_main_thread(void) {
    return pthread_main_np();
}
#else
static pthread_t qsv_main_thread;

// Runs when the library is loaded, which happens on the main thread.
__attribute__((constructor)) static void qsv_record_main_thread(void) {
    qsv_main_thread = pthread_self();
    if (pthread_getname_np(qsv_main_thread, qsv_default_name, sizeof qsv_default_name) != 0) {
        qsv_default_name[0] = 0;
    }
}

int qsv_is_main_thread(void) {
    return pthread_equal(pthread_self(), qsv_main_thread);
}
#endif

int qsv_current_processor(void) {
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

int qsv_thread_name(uintptr_t thread, char *buffer, size_t size) {
    if (size == 0) return 0;
    buffer[0] = 0;
    if (pthread_getname_np((pthread_t)thread, buffer, size) != 0) return 0;
    if (buffer[0] == 0 || strcmp(buffer, qsv_default_name) == 0) return 0;
    return 1;
}

void qsv_set_current_thread_name(const char *name) {
#if defined(__APPLE__)
    (void)pthread_setname_np(name);
#else
    char truncated[16];
    strncpy(truncated, name, sizeof truncated - 1);
    truncated[sizeof truncated - 1] = 0;
    (void)pthread_setname_np(pthread_self(), truncated);
#endif
}

// MARK: - Priority inheritance: the platform calls

#if defined(__APPLE__)
int qsv_qos_class_of_thread(uintptr_t thread) {
    qos_class_t qos = QOS_CLASS_UNSPECIFIED;
    int relative = 0;
    if (pthread_get_qos_class_np((pthread_t)thread, &qos, &relative) != 0) return 0;
    return (int)qos;
}

void *qsv_qos_override_start(uintptr_t thread, int qos_class) {
    return (void *)pthread_override_qos_class_start_np((pthread_t)thread, (qos_class_t)qos_class, 0);
}

void qsv_qos_override_end(void *override_handle) {
    (void)pthread_override_qos_class_end_np((pthread_override_t)override_handle);
}
#else
int qsv_thread_scheduling(uintptr_t thread, int *policy, int *priority) {
    struct sched_param param;
    int status = pthread_getschedparam((pthread_t)thread, policy, &param);
    if (status == 0) *priority = param.sched_priority;
    return status;
}

int qsv_set_thread_scheduling(uintptr_t thread, int policy, int priority) {
    struct sched_param param = {.sched_priority = priority};
    return pthread_setschedparam((pthread_t)thread, policy, &param);
}

int qsv_sched_fifo(void) { return SCHED_FIFO; }
int qsv_sched_rr(void) { return SCHED_RR; }
#endif

// The concurrency runtime's entry point behind `Task.escalatePriority(to:)` (Swift's calling
// convention; `JobPriority` is a `size_t`), called directly because the engine knows a holder
// task only by its address: the public API needs a handle it does not have.
extern size_t swift_task_escalate(void *task, size_t priority) __attribute__((swiftcall));

void qsv_escalate_task(void *task, size_t priority) {
    (void)swift_task_escalate(task, priority);
}

// The runtime's reference counting of heap objects, which a task is (as a `Task` handle keeps it).
extern void *swift_retain(void *object);
extern void swift_release(void *object);

void qsv_retain_task(void *task) {
    (void)swift_retain(task);
}

void qsv_release_task(void *task) {
    swift_release(task);
}

// MARK: - The testing seam's scheduler (see the header)

__thread void *qsv_thread_scheduler_slot;

// MARK: - Idle shared reads

__thread qsv_idle_reads *qsv_idle_reads_current_record;

/// The process-wide list of records, newest first. Records are only ever added.
static qsv_idle_reads *qsv_idle_reads_list;
static pthread_key_t qsv_idle_reads_key;
static pthread_once_t qsv_idle_reads_once = PTHREAD_ONCE_INIT;

/// At a thread's exit: its record is free for the next thread (its slots are empty, since every
/// read ends before the thread that runs it returns).
static void qsv_idle_reads_detach(void *record) {
    qsv_idle_reads_current_record = 0;
    __atomic_store_n(&((qsv_idle_reads *)record)->thread, 0, __ATOMIC_RELEASE);
}

static void qsv_idle_reads_make_key(void) {
    if (pthread_key_create(&qsv_idle_reads_key, qsv_idle_reads_detach) != 0) abort();
}

qsv_idle_reads *qsv_idle_reads_attach(void) {
    pthread_once(&qsv_idle_reads_once, qsv_idle_reads_make_key);
    uintptr_t self = qsv_current_thread_id();
    qsv_idle_reads *record = 0;
    for (qsv_idle_reads *free = __atomic_load_n(&qsv_idle_reads_list, __ATOMIC_ACQUIRE); free; free = free->next) {
        uintptr_t nobody = 0;
        if (__atomic_load_n(&free->thread, __ATOMIC_RELAXED) == 0
            && __atomic_compare_exchange_n(&free->thread, &nobody, self, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            record = free;
            break;
        }
    }
    if (record == 0) {
        record = calloc(1, sizeof(qsv_idle_reads));
        if (record == 0) abort();
        record->thread = self;
        qsv_idle_reads *head = __atomic_load_n(&qsv_idle_reads_list, __ATOMIC_RELAXED);
        do {
            record->next = head;
        } while (!__atomic_compare_exchange_n(&qsv_idle_reads_list, &head, record, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
    }
    record->depth = 0;
    if (pthread_setspecific(qsv_idle_reads_key, record) != 0) abort();
    qsv_idle_reads_current_record = record;
    return record;
}

intptr_t qsv_idle_reads_push_nested(qsv_idle_reads *record, intptr_t engine) {
    intptr_t depth = record->depth;
    if (depth == QSV_IDLE_READ_SLOTS) return 0;
    for (intptr_t index = 0; index < depth; index++) {
        if (record->engines[index] == engine) return 0;
    }
    __atomic_store_n(&record->engines[depth], engine, __ATOMIC_RELEASE);
    record->depth = depth + 1;
    return depth + 1;
}

int qsv_idle_readers_of(intptr_t engine, uintptr_t *threads, int capacity) {
    int found = 0;
    for (qsv_idle_reads *record = __atomic_load_n(&qsv_idle_reads_list, __ATOMIC_ACQUIRE); record; record = record->next) {
        for (int index = 0; index < QSV_IDLE_READ_SLOTS; index++) {
            if (__atomic_load_n(&record->engines[index], __ATOMIC_ACQUIRE) != engine) continue;
            uintptr_t thread = __atomic_load_n(&record->thread, __ATOMIC_ACQUIRE);
            if (thread != 0) {
                if (found < capacity) threads[found] = thread;
                found++;
            }
            break;
        }
    }
    return found;
}
