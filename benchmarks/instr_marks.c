/* Callgrind client requests for the in-process instruction-count benchmark (benchmarks/instructions.py).
 * Loaded with ctypes; outside valgrind every call is a no-op of a few instructions. */
#include <valgrind/callgrind.h>

int marks_running_on_valgrind(void) { return RUNNING_ON_VALGRIND; }
void marks_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void marks_zero(void) { CALLGRIND_ZERO_STATS; }
void marks_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
