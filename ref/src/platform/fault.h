/*
 * fault.h - named fault points (TW_FAULT_POINT("sys/read/short")).
 *
 * A fault point is a place where the library asks "should this call fail
 * now?". In a normal build the macro is the constant 0 and costs nothing.
 * With -DTW_FAULT_INJECTION=ON it consults the rules in the environment
 * variable TW_FAULTS, a comma-separated list of
 *     <point>:<n>      the n-th hit (1-based, counted per point, all threads)
 *                      of <point> fires
 *     <point>:<n>+     the n-th and every later hit fires
 * e.g. TW_FAULTS=sys/read/short:1+,malloc:40. The code at the point decides
 * what "fire" means (a short transfer, an errno, a NULL).
 *
 * The points are listed in fault_points.h. A rule that names no listed
 * point, or that cannot be parsed, is an error: the first fault point hit
 * prints it on stderr and aborts, since a typo would otherwise turn a fault
 * run into a pass without a single fault.
 */
#ifndef TW_PLATFORM_FAULT_H
#define TW_PLATFORM_FAULT_H

#include <stdbool.h>

#ifdef TW_FAULT_INJECTION
#define TW_FAULT_POINT(name) tw__fault_hit(name)
#else
#define TW_FAULT_POINT(name) false
#endif

/* True if the rule for `name` says this hit fails. Thread-safe. */
bool tw__fault_hit(const char *name);

/* True if `name` is in fault_points.h. */
bool tw__fault_point_known(const char *name);

/* Number of times any fault point fired so far (for sweeps: stop when a run
 * fires nothing). */
unsigned long tw__fault_fired(void);

#endif /* TW_PLATFORM_FAULT_H */
