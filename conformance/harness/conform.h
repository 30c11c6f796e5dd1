/*
 * conform.h - the conformance runner (tensorwire-conform) as a function: a
 * program's main hands it the suites to run (suites/suites.c does), so the
 * harness depends on no suite.
 */
#ifndef TW_HARNESS_CONFORM_H
#define TW_HARNESS_CONFORM_H

#include <stddef.h>

#include "case.h"

/* Parses argv (see --help), runs what it selects and returns the exit
 * status. `suites` must stay valid for the call. */
int tw_conform_main(int argc, char **argv, const tw_suite *suites, size_t nsuites);

#endif /* TW_HARNESS_CONFORM_H */
