/*
 * suites.c - tensorwire-conform: the runner of harness/conform.c with the
 * suites of this folder.
 */
#include "conform.h"
#include "suites.h"

const tw_suite tw_suites[] = {
	{"wire", tw_suite_wire},
	{"wire", tw_suite_wire_client},
	{"wire", tw_suite_wire_fuzz},
	{"semantic", tw_suite_semantic},
	{"interop", tw_suite_interop},
};
const size_t tw_num_suites = sizeof(tw_suites) / sizeof(tw_suites[0]);

int main(int argc, char **argv)
{
	return tw_conform_main(argc, argv, tw_suites, tw_num_suites);
}
