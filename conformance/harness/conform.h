/*
 * conform.h - the conformance runner (tensorwire-conform) as a function: a
 * program's main hands it the suites to run (suites/suites.c does), so the
 * harness depends on no suite.
 */
#ifndef TWC_HARNESS_CONFORM_H
#define TWC_HARNESS_CONFORM_H

#include <stddef.h>

#include "case.h"

/* Parses argv (see --help), runs what it selects and returns the exit
 * status. `suites` must stay valid for the call. */
int twc_conform_main(int argc, char **argv, const twc_suite *suites, size_t nsuites);

#endif /* TWC_HARNESS_CONFORM_H */
