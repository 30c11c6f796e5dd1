/*
 * wire.c - the wire-level suite: the harness itself is the raw TCP peer
 * (harness/rawcases.c) of an IUT listener driven through its adapter. Every
 * case checks that the IUT fails only the offending connection or pipe, keeps
 * running and keeps accepting well-formed clients, plus the case's own rule
 * (what the BrochureAnswer chose, the DescriptorReply bytes, data intact).
 *
 * Sections follow the numbering of the wire reference, which spec/wire.md
 * keeps ("wire.md 5.3").
 */
#include <stdio.h>
#include <string.h>

#include "case.h"
#include "rawcases.h"

/* The requirement each raw case checks, quoted. */
static const struct {
	const char *id;
	const char *requirement;
} quotes[] = {
	/* The rule every case shares is the first one. */
	{"*", "Bad input from the wire never aborts the process: it fails that pipe with "
	      "TW_ERR_PROTO and a detail, and the listener keeps serving. (STYLE.md, Errors; "
	      "tensorwire issue 2 item 9)"},
	{"close_before_hello", "a connection that closes before its hello: our side fails only "
	                       "that pipe [...] and the listener keeps accepting (issue 2 item 9)"},
	{"unknown_registration_id", "A RequestedConnection arriving with an id that is unknown "
	                            "(never registered, or already used [...]) is silently closed. "
	                            "(wire.md 3.8)"},
	{"reused_registration_id", "A RequestedConnection arriving with an id that is unknown "
	                           "(never registered, or already used [...]) is silently closed. "
	                           "(wire.md 3.8)"},
	{"huge_length_prefix", "every allocation is bounded by the bytes actually available "
	                       "(issue 2 item 4)"},
	{"silent_mid_header", "a peer that goes silent mid-frame [...] Each checks that the IUT "
	                      "fails only that pipe and keeps serving new ones. (issue 3 item 4)"},
	{"silent_mid_body", "a peer that goes silent mid-frame [...] Each checks that the IUT "
	                    "fails only that pipe and keeps serving new ones. (issue 3 item 4)"},
	{"trailing_junk", "Bytes left over in a frame after the top-level object has been decoded "
	                  "are silently ignored. (wire.md 1.12)"},
	{"no_common_transport", "no common transport: our side fails only that pipe with "
	                        "TW_ERR_PROTO (issue 2 item 9; wire.md 3.5)"},
	{"no_channels", "A brochure with no common channel yields empty channel maps; the pipe "
	                "still works for messages without tensors. (wire.md 3.5)"},
	{"unknown_names", "The server [...] picks the first [transport] that [...] appears in the "
	                  "client's brochure [...]; unknown names are ignored by the server. "
	                  "(wire.md 3.5, 5.1)"},
	{"payload_length_mismatch", "read(ptr, len): reads one frame into a caller buffer; the "
	                            "frame length MUST equal len (wire.md 2.1); a payload length "
	                            "that disagrees with the descriptor fails only that pipe "
	                            "(issue 2 item 9)"},
	{"tensor_length_mismatch", "read(ptr, len): reads one frame into a caller buffer; the frame "
	                           "length MUST equal len (wire.md 2.1, 4.2); a peer that sends "
	                           "more bytes than announced fails only that pipe (issue 3 item 4)"},
	{"descriptor_reply", "If any tensor lacks targetDevice: wait for one DescriptorReply on R, "
	                     "whose targetDevices lists, in tensor order, a device for each tensor "
	                     "that lacked one (tensors that had one are skipped). (wire.md 3.10)"},
	{"close_after_answer", "client closes the bootstrap connection right after the "
	                       "BrochureAnswer: the listener survives (wire.md 5.3, 5.4)"},
};

static const char *quote_for(const char *id)
{
	for (size_t i = 1; i < sizeof(quotes) / sizeof(quotes[0]); i++)
		if (!strcmp(quotes[i].id, id))
			return quotes[i].requirement;
	return quotes[0].requirement;
}

static tw_outcome_t run_raw(const tw_case *c, tw_case_env *env)
{
	const tw_raw_case *rc = c->arg;
	tw_raw_obs o;
	if (tw_raw_case_run(env->iut_cmd, rc, 1500, &o) != 0)
		return tw_case_result(env, TW_ERROR, "%s", o.note);
	printf("# process: %s\n# stderr: %s\n# accept: %s\n# pipe: %s\n# listener: %s\n"
	       "# class: %s\n",
	       o.process, o.stderr_line[0] ? o.stderr_line : "-", o.accept[0] ? o.accept : "-",
	       o.pipe[0] ? o.pipe : "-", o.listener, o.klass);
	snprintf(env->transport, sizeof(env->transport), "uv");
	snprintf(env->channel, sizeof(env->channel), "basic");
	char why[1024];
	if (tw_raw_case_robust(rc, &o, why, sizeof(why)))
		return tw_case_result(env, TW_PASS, "%s", o.klass);
	return tw_case_result(env, TW_FAIL, "%s", why);
}

const tw_case *tw_suite_wire(int *count_out)
{
	static tw_case cases[64];
	static char ids[64][64], sections[64][32], descs[64][320];
	static int n = -1;
	if (n < 0) {
		n = 0;
		for (int i = 0; i < tw_raw_num_cases && n < 64; i++) {
			const tw_raw_case *rc = &tw_raw_cases[i];
			snprintf(ids[n], sizeof(ids[n]), "wire.%s", rc->id);
			snprintf(sections[n], sizeof(sections[n]), "wire.md %s", rc->section);
			snprintf(descs[n], sizeof(descs[n]), "raw client: %s", rc->what);
			cases[n] = (tw_case){
				.id = ids[n],
				.suite = "wire",
				.section = sections[n],
				.level = rc->must ? TW_MUST : TW_SHOULD,
				.needs = "",
				.description = descs[n],
				.requirement = quote_for(rc->id),
				.accepts = 0,
				.timeout_s = 60,
				.run = run_raw,
				.arg = rc,
			};
			n++;
		}
	}
	*count_out = n;
	return cases;
}
