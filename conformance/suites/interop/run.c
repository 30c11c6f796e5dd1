/*
 * run.c - one interop case between two adapters: the client connects, the
 * server accepts, the case's messages travel client -> server and then
 * server -> client over that one pipe, both ends report the run's transport
 * and channel (combo.h: uv and basic unless --combo says otherwise), and
 * both adapters end cleanly (harness/session.h checks bytes, descriptors and
 * callbacks).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cases.h"
#include "combo.h"
#include "session.h"

/* Whether the case's messages cannot travel on this combination by the
 * spec's own limits: on a ring transport (shm, ibv) a frame is under 4 GiB
 * (wire.md 2.3.3.d) and basic moves a tensor in one frame, so a larger
 * tensor must be refused there (2.5), not carried: not a case to run. */
static bool twc_interop_beyond_limits(const twc_interop_case *c, char *why, size_t len)
{
	const twc_combo *cb = twc_combo_current();
	bool ring = !strcmp(cb->transport, "shm") || !strcmp(cb->transport, "ibv");
	if (!ring || strcmp(cb->channel, "basic") != 0)
		return false;
	twc_agent_msg m;
	memset(&m, 0, sizeof(m));
	bool beyond = false;
	uint64_t biggest = 0;
	if (c->shape(0, &m) == 0)
		for (size_t i = 0; i < m.num_tensors; i++)
			if (m.tensors[i].data.len > UINT32_MAX) {
				beyond = true;
				biggest = m.tensors[i].data.len;
			}
	twc_msg_clear(&m);
	if (beyond)
		snprintf(why, len,
		         "a %llu-byte tensor cannot travel on %s+basic: a ring frame is under 4 GiB "
		         "(spec/wire.md 2.3.3.d, 2.5); ref.limits checks that it is refused",
		         (unsigned long long)biggest, cb->transport);
	return beyond;
}

int twc_interop_run_case(const twc_interop_case *c, const char *ccmd, const char *scmd,
                        const char *cname, const char *sname, int wait_s, char *reason,
                        size_t reasonlen, char *transport, char *channel)
{
	const char *why;
	if (twc_cmd_unavailable(scmd, &why) || twc_cmd_unavailable(ccmd, &why)) {
		snprintf(reason, reasonlen, "%s (%s): %s", twc_cmd_unavailable(scmd, NULL) ? "server" : "client",
		         twc_cmd_unavailable(scmd, NULL) ? sname : cname, why);
		return 77;
	}
	if (twc_interop_beyond_limits(c, reason, reasonlen))
		return 77;
	int case_no = (int)(c - twc_interop_cases);
	uint64_t base = (uint64_t)(case_no + 1) << 36;
	twc_session s;
	printf("# case %s: %s; client %s, server %s\n", c->id, c->title, cname, sname);
	fflush(stdout);
	json_t *ctx = c->eager_off ? twc_session_reply_context() : NULL;
	int rc = twc_session_start(&s, ccmd, scmd, cname, sname,
	                          (wait_s > 0 ? wait_s : c->wait_s) * 1000, ctx, NULL);
	json_decref(ctx);
	if (rc == 0)
		rc = twc_session_connect(&s, NULL);
	if (rc == 0)
		rc = twc_session_transfer(&s, true, c->shape, c->num_messages, c->burst, base);
	if (rc == 0)
		rc = twc_session_transfer(&s, false, c->shape, c->num_messages, c->burst,
		                         base + (UINT64_C(1) << 35));
	if (rc == 0)
		rc = twc_session_check_info(&s, twc_combo_current()->transport,
		                            twc_combo_current()->channel);
	if (rc == 0)
		rc = twc_session_finish(&s);
	twc_session_destroy(&s);
	snprintf(reason, reasonlen, "%s", rc == 0 ? "" : s.reason);
	if (transport)
		snprintf(transport, 32, "%s", s.transport);
	if (channel)
		snprintf(channel, 32, "%s", s.channel);
	return rc == 0 ? 0 : 1;
}
