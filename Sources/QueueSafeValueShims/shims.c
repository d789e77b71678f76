#include "QueueSafeValueShims.h"
#include <pthread.h>

uintptr_t qsv_current_thread_id(void) {
    return (uintptr_t)pthread_self();
}
