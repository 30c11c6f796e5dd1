/*
 * wire.c - the wire-level suite: the harness itself is the raw TCP peer
 * (harness/rawcases.c) of an IUT listener driven through its adapter. Every
 * case checks that the IUT fails only the offending connection or pipe, keeps
 * running and keeps accepting well-formed clients, plus the case's own rule
 * (what the BrochureAnswer chose, the DescriptorReply bytes, data intact).
 *
 * Sections cite spec/wire.md with the numbered requirement checked
 * ("wire.md 5.2 (5.2.c)").
 */
#include <stdio.h>
#include <string.h>

#include "case.h"
#include "rawcases.h"

/* The requirement each raw case checks, quoted from spec/wire.md. Every case
 * also checks (5.2.b) "It MUST NOT terminate the process, and MUST NOT disturb
 * other pipes of the same context" and (3.3.f) "A listener MUST keep accepting
 * after any of these, and after any error on one accepted connection". */
static const struct {
	const char *id;
	const char *requirement;
} quotes[] = {
	{"*", "(5.2.b) It MUST NOT terminate the process, and MUST NOT disturb other pipes of "
	      "the same context. (3.3.f) A listener MUST keep accepting after any of these, and "
	      "after any error on one accepted connection."},
	{"close_before_hello", "(5.4.a) A connection that closes, or sends a malformed hello, "
	                       "before its hello is complete MUST be dropped without affecting the "
	                       "listener."},
	{"bad_type_byte", "(5.2.c) A listener that receives a malformed hello MUST close that "
	                  "connection and keep accepting."},
	{"bad_variant_index", "(5.2.c) A listener that receives a malformed hello MUST close that "
	                      "connection and keep accepting."},
	{"truncated_hello", "(5.2.c) A listener that receives a malformed hello MUST close that "
	                    "connection and keep accepting."},
	{"empty_variant", "(3.3.e) On the empty variant a listener MUST close that connection and "
	                  "keep listening."},
	{"unknown_registration_id", "(3.8.b) A listener MUST close a connection whose "
	                            "RequestedConnection names an id that is not registered (never "
	                            "was, or was already used, or its pipe closed)."},
	{"reused_registration_id", "(3.8.b) A listener MUST close a connection whose "
	                           "RequestedConnection names an id that is not registered (never "
	                           "was, or was already used, or its pipe closed)."},
	{"huge_length_prefix", "(5.3.a) A frame length above the receiver's limit for what it "
	                       "expects MUST fail that connection or pipe with a protocol error, "
	                       "before any allocation of that size."},
	{"silent_mid_header", "(3.3.f) A listener MUST keep accepting after any of these, and after "
	                      "any error on one accepted connection. (issue 3 item 4: a peer that "
	                      "goes silent mid-frame)"},
	{"silent_mid_body", "(3.3.f) A listener MUST keep accepting after any of these, and after "
	                    "any error on one accepted connection. (issue 3 item 4: a peer that "
	                    "goes silent mid-frame)"},
	{"trailing_junk", "(1.12.a) A decoder MUST ignore bytes left in a frame after the packet's "
	                  "value ends."},
	{"no_common_transport", "(3.5.b) If no transport qualifies, a server MUST fail only that "
	                        "pipe (closing the bootstrap connection) with a protocol error, and "
	                        "keep its listener accepting."},
	{"no_channels", "(3.5.c) A brochure with no common channel MUST still yield a pipe; "
	                "messages without tensors then work."},
	{"unknown_names", "(3.5.d) A server MUST ignore transport and channel names it does not "
	                  "know."},
	{"truncated_descriptor", "(5.2.a) An implementation that receives a malformed packet MUST "
	                         "fail only the connection, or the pipe the connection belongs to, "
	                         "with a protocol error."},
	{"huge_descriptor_length", "(5.3.a) A frame length above the receiver's limit for what it "
	                           "expects MUST fail that connection or pipe with a protocol error, "
	                           "before any allocation of that size."},
	{"payload_length_mismatch", "(5.5.a) A payload or basic-channel frame whose length differs "
	                            "from the Descriptor MUST fail the pipe with a protocol error."},
	{"tensor_length_mismatch", "(4.2.a) A receiver MUST fail the channel (and pipe) with a "
	                           "protocol error if the frame's length differs from the tensor's "
	                           "length. (issue 3 item 4: a peer that sends more bytes than "
	                           "announced)"},
	{"descriptor_reply", "(3.11.a) A receiver MUST send exactly one DescriptorReply per message "
	                     "that has at least one tensor without a target device [...] (3.11.b) "
	                     "Its targetDevices MUST hold one Device per tensor that lacked a target "
	                     "device, in tensor order."},
	{"close_after_answer", "(5.4.a) A connection that closes [...] before its hello is complete "
	                       "MUST be dropped without affecting the listener; here the handshake "
	                       "is abandoned later, after the BrochureAnswer."},
	{"close_after_answer_noticed", "(5.6.b) An implementation SHOULD notice a peer's close even "
	                               "when no read is pending. (3.8.e) A server SHOULD fail a pipe "
	                               "whose registered connections do not all arrive within a "
	                               "bounded time."},
	{"registration_timeout", "(3.8.e) A server SHOULD fail a pipe whose registered connections "
	                         "do not all arrive within a bounded time."},
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
	/* Stock TensorPipe's failure here is recorded (docs/stock-bad-input.md)
	 * and excused by its profile; a different failure is news, and the
	 * record is stale: no profile may excuse it. */
	if (rc->stock_class && env->iut_impl && !strcmp(env->iut_impl, "tensorpipe") &&
	    !tw_raw_case_as_stock(rc, &o)) {
		env->unexcused = true;
		return tw_case_result(env, TW_FAIL,
		                      "%s; docs/stock-bad-input.md records stock's outcome as '%s'%s%s, "
		                      "observed '%s' (stderr: %s)",
		                      why, rc->stock_class, rc->stock_stderr ? " with stderr " : "",
		                      rc->stock_stderr ? rc->stock_stderr : "", o.klass,
		                      o.stderr_line[0] ? o.stderr_line : "-");
	}
	return tw_case_result(env, TW_FAIL, "%s", why);
}

const tw_case *tw_suite_wire(int *count_out)
{
	static tw_case cases[64];
	static char ids[64][64], sections[64][48], descs[64][320], reqs[64][1024];
	static int n = -1;
	if (n < 0) {
		n = 0;
		for (int i = 0; i < tw_raw_num_cases && n < 64; i++) {
			const tw_raw_case *rc = &tw_raw_cases[i];
			snprintf(ids[n], sizeof(ids[n]), "wire.%s", rc->id);
			snprintf(sections[n], sizeof(sections[n]), "wire.md %s", rc->section);
			snprintf(descs[n], sizeof(descs[n]), "raw client: %s", rc->what);
			const char *own = quote_for(rc->id);
			if (own == quotes[0].requirement)
				snprintf(reqs[n], sizeof(reqs[n]), "%s", own);
			else
				snprintf(reqs[n], sizeof(reqs[n]), "%s And always: %s", own,
				         quotes[0].requirement);
			cases[n] = (tw_case){
				.id = ids[n],
				.suite = "wire",
				.section = sections[n],
				.level = rc->must ? TW_MUST : TW_SHOULD,
				.needs = "",
				.description = descs[n],
				.requirement = reqs[n],
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
