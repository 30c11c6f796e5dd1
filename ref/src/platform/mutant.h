/*
 * mutant.h - seeded defects for the harness's mutation suite (tensorwire
 * issue 17): TW_MUTANT("write_cb_early") asks "is this defect switched on?".
 *
 * The shipped library never has one: without TW_MUTANTS the macro is the
 * constant false and the defect's code folds away. Only the test-only twin
 * tw_ref_mutant (ref/CMakeLists.txt), and the adapter tw-iut-mutant built on
 * it, compile them in; there the environment variable TW_MUTANT names the one
 * defect of this process. A name that no TW_MUTANT() of the library knows is
 * refused at the first check (the process aborts with the name), so a typo
 * can never pass for a mutant that survives.
 *
 * The list of defects, their classes and the cases expected to kill them
 * live in conformance/mutants/mutants.list, next to the suite that uses them;
 * the names table of mutant.c must name the same set (the unit test
 * conformance.mutants_list_complete compares the list, the table and the
 * TW_MUTANT() points).
 */
#ifndef TW_PLATFORM_MUTANT_H
#define TW_PLATFORM_MUTANT_H

#include <stdbool.h>

#ifdef TW_MUTANTS
#define TW_MUTANT(name) tw__mutant(name)
#else
#define TW_MUTANT(name) false
#endif

/* True if TW_MUTANT names `name`. Thread-safe. */
bool tw__mutant(const char *name);

#endif /* TW_PLATFORM_MUTANT_H */
