#include "CHaulSystem.h"

// Swift's runtime declares it `SWIFT_CC(swift) void (*swift_task_enqueueGlobal_hook)(Job *, swift_task_enqueueGlobal_original)`;
// a plain pointer here, as only its address is taken.
extern void *swift_task_enqueueGlobal_hook;

void **haul_enqueue_global_hook(void) { return &swift_task_enqueueGlobal_hook; }
