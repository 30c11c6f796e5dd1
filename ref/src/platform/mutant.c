/*
 * mutant.c - the switch behind TW_MUTANT() (see mutant.h). TW_MUTANT is read
 * once; an unknown name aborts the process with a message naming it, so the
 * mutation suite never mistakes a typo for a surviving defect. Compiled in
 * only into the test-only twin tw_ref_mutant (ref/CMakeLists.txt).
 */
#include "platform/mutant.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every TW_MUTANT("...") of the library; conformance/mutants/mutants.list
 * describes each one. */
static const char *const tw__mutants[] = {
	"accept_cb_twice",
	"channel_priority_ignored",
	"close_cb_never",
	"closed_as_eof",
	"cma_pid_trusted",
	"cma_yama_ignored",
	"data_dropped_at_end",
	"descriptor_cb_late",
	"descriptor_cb_twice",
	"descriptor_reply_unchecked",
	"empty_variant_kept",
	"eager_tensors_reordered",
	"eof_as_reset",
	"ext_acked_unasked",
	"frame_length_unchecked",
	"frame_limit_unchecked",
	"gdr_chunks_unsplit",
	"gdr_small_into_device",
	"goodbye_omitted",
	"handshake_timeout_ignored",
	"ibv_fork_unsafe",
	"ibv_gid_index_zero",
	"ibv_port_state_ignored",
	"ibv_queues_unbounded",
	"ibv_record_unchecked",
	"ibv_reap_unwaited",
	"ibv_srq_assumed",
	"ibv_srq_leaked",
	"ibv_srq_post_dropped",
	"ibv_writes_unsplit",
	"listen_backlog_small",
	"listener_dies_on_bad_hello",
	"metadata_truncated_at_nul",
	"operation_timeout_ignored",
	"payloads_reordered",
	"peer_death_ignored",
	"proof_ignored",
	"proof_trusting",
	"proto_as_sys",
	"read_cb_early",
	"registration_any_transport",
	"registration_reusable",
	"registration_unchecked",
	"segments_unsealed",
	"tensors_reordered",
	"transport_priority_ignored",
	"write_cb_early",
	"write_cb_never",
	"write_cb_twice",
	"write_error_swallowed",
	"write_ok_before_handshake",
	"xth_peer_trusted",
	"zero_length_tensor_framed",
	NULL,
};

static const char *active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void tw__mutant_read(void)
{
	const char *env = getenv("TW_MUTANT");
	if (!env || !*env)
		return;
	for (size_t i = 0; tw__mutants[i]; i++) {
		if (!strcmp(tw__mutants[i], env)) {
			active = tw__mutants[i];
			fprintf(stderr, "tensorwire: mutant '%s' is switched on (test-only build)\n",
			        active);
			return;
		}
	}
	fprintf(stderr, "tensorwire: TW_MUTANT='%s' names no mutant of this build\n", env);
	abort();
}

bool tw__mutant(const char *name)
{
	pthread_once(&active_once, tw__mutant_read);
	return active && !strcmp(active, name);
}
