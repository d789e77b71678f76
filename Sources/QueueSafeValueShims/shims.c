// For pthread_getname_np on glibc.
#define _GNU_SOURCE
// Most shims are header-only (static inline). The sanitizer hooks live here, out of line, because
// only this file is compiled by clang with the package's sanitizer flags: the header is also read
// by the Swift compiler's importer, which does not see them.
#include "QueueSafeValueShims.h"
#include <string.h>

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

int qsv_thread_name(uintptr_t thread, char *buffer, size_t size) {
    if (size == 0) return 0;
    buffer[0] = 0;
    if (pthread_getname_np((pthread_t)thread, buffer, size) != 0) return 0;
    if (buffer[0] == 0 || strcmp(buffer, qsv_default_name) == 0) return 0;
    return 1;
}
