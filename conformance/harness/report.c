/*
 * report.c - TAP, JUnit XML, JSON lines and the summary matrix (see report.h).
 */
#define _GNU_SOURCE
#include "report.h"

#include "agent.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

void twc_result_target(const twc_result *r, char *buf, size_t len)
{
	bool other = r->combo[0] && strcmp(r->combo, "uv+basic") != 0;
	if (r->peer)
		snprintf(buf, len, "%s->%s%s%s", r->iut->name, r->peer->name, other ? " " : "",
		         other ? r->combo : "");
	else
		snprintf(buf, len, "%s%s%s", r->iut->name, other ? " " : "", other ? r->combo : "");
}

#ifndef TWC_RUNNER_VERSION
#define TWC_RUNNER_VERSION "unknown"
#endif
#ifndef TWC_SPEC_REVISION
#define TWC_SPEC_REVISION "unknown"
#endif

const char *twc_runner_version(void)
{
	return TWC_RUNNER_VERSION;
}

const char *twc_spec_revision(void)
{
	return TWC_SPEC_REVISION;
}

const char *twc_rdma_provider(void)
{
	const char *p = getenv("TW_RDMA_PROVIDER");
	return p && *p ? p : "system";
}

/* ---- TAP ---------------------------------------------------------------------------- */

void twc_tap_plan(FILE *f, int n)
{
	fprintf(f, "TAP version 13\n1..%d\n", n);
	fflush(f);
}

static void one_line(const char *s, char *out, size_t len)
{
	size_t k = 0;
	for (; *s && k + 1 < len; s++)
		out[k++] = (*s == '\n' || *s == '\r' || *s == '#') ? ' ' : *s;
	out[k] = '\0';
}

void twc_tap_result(FILE *f, int index, const twc_result *r, bool verbose)
{
	char target[96], reason[1024];
	twc_result_target(r, target, sizeof(target));
	one_line(r->reason, reason, sizeof(reason));
	const char *level = r->c->level == TWC_MUST ? "MUST" : "SHOULD";
	switch (r->outcome) {
	case TWC_PASS:
		fprintf(f, "ok %d - %s [%s]\n", index, r->c->id, target);
		break;
	case TWC_SKIP:
		fprintf(f, "ok %d - %s [%s] # SKIP %s\n", index, r->c->id, target, reason);
		break;
	case TWC_XFAIL:
		fprintf(f, "not ok %d - %s [%s] # TODO XFAIL %s\n", index, r->c->id, target, reason);
		break;
	default:
		if (!r->required_failure)
			fprintf(f, "not ok %d - %s [%s] # TODO %s-level requirement not met\n", index,
			        r->c->id, target, level);
		else
			fprintf(f, "not ok %d - %s [%s]\n", index, r->c->id, target);
		break;
	}
	if (r->outcome != TWC_PASS && r->outcome != TWC_SKIP) {
		fprintf(f, "  ---\n  outcome: %s\n  level: %s\n  section: %s\n  reason: \"",
		        twc_outcome_name(r->outcome), level, r->c->section);
		for (const char *p = reason; *p; p++)
			fprintf(f, *p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
		fprintf(f, "\"\n  ...\n");
	}
	if (r->log && (verbose || r->required_failure)) {
		const char *p = r->log;
		while (*p) {
			size_t n = strcspn(p, "\n");
			fprintf(f, "#   %.*s\n", (int)n, p);
			p += n + (p[n] ? 1 : 0);
		}
	}
	fflush(f);
}

/* ---- JUnit ----------------------------------------------------------------------------- */

/* XML 1.0 text: escapes markup, drops control characters and bytes that are
 * not ASCII (the logs may hold anything a crashing process printed). */
static void xml_text(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		unsigned char ch = (unsigned char)*s;
		switch (ch) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&apos;", f); break;
		default:
			if (ch == '\n' || ch == '\t' || (ch >= 0x20 && ch < 0x7f))
				fputc(ch, f);
			else if (ch != '\r')
				fputc('?', f);
		}
	}
}

static void suite_key(const twc_result *r, char *buf, size_t len)
{
	char target[96];
	twc_result_target(r, target, sizeof(target));
	snprintf(buf, len, "%s.%s", r->c->suite, target);
}

int twc_junit_write(const char *path, const twc_result *rs, int n, char *err, size_t errlen)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		snprintf(err, errlen, "--junit %s: cannot open for writing", path);
		return -1;
	}
	int tot[TWC_OUTCOME_COUNT] = {0};
	double all = 0;
	for (int i = 0; i < n; i++) {
		tot[rs[i].outcome]++;
		all += rs[i].seconds;
	}
	char stamp[32];
	time_t now = time(NULL);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", gmtime(&now));
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
	fprintf(f, "<testsuites name=\"tensorwire-conform\" tests=\"%d\" failures=\"%d\" "
	           "errors=\"%d\" skipped=\"%d\" time=\"%.3f\">\n",
	        n, tot[TWC_FAIL], tot[TWC_ERROR] + tot[TWC_TIMEOUT], tot[TWC_SKIP] + tot[TWC_XFAIL], all);
	/* one <testsuite> per suite and target, in order of first appearance */
	bool *done = calloc((size_t)n + 1, sizeof(bool));
	if (!done) {
		fclose(f);
		snprintf(err, errlen, "--junit: out of memory");
		return -1;
	}
	for (int i = 0; i < n; i++) {
		if (done[i])
			continue;
		char key[160], k2[160];
		suite_key(&rs[i], key, sizeof(key));
		int cnt[TWC_OUTCOME_COUNT] = {0}, tests = 0;
		double t = 0;
		for (int j = i; j < n; j++) {
			suite_key(&rs[j], k2, sizeof(k2));
			if (!strcmp(key, k2)) {
				cnt[rs[j].outcome]++;
				tests++;
				t += rs[j].seconds;
			}
		}
		fprintf(f, "  <testsuite name=\"");
		xml_text(f, key);
		fprintf(f, "\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\" "
		           "timestamp=\"%s\">\n",
		        tests, cnt[TWC_FAIL], cnt[TWC_ERROR] + cnt[TWC_TIMEOUT], cnt[TWC_SKIP] + cnt[TWC_XFAIL],
		        t, stamp);
		fprintf(f, "    <properties>\n");
		const twc_iut_info *who[2] = {rs[i].iut, rs[i].peer};
		for (int w = 0; w < 2; w++) {
			if (!who[w])
				continue;
			const char *role = rs[i].peer ? (w ? "server" : "client") : "iut";
			fprintf(f, "      <property name=\"%s\" value=\"", role);
			xml_text(f, who[w]->name);
			fprintf(f, "\"/>\n      <property name=\"%s.impl\" value=\"", role);
			xml_text(f, who[w]->impl);
			fprintf(f, "\"/>\n      <property name=\"%s.version\" value=\"", role);
			xml_text(f, who[w]->version);
			fprintf(f, "\"/>\n      <property name=\"%s.adapter\" value=\"", role);
			xml_text(f, who[w]->adapter);
			fprintf(f, "\"/>\n      <property name=\"%s.protocol\" value=\"%d", role,
			        who[w]->protocol);
			fprintf(f, "\"/>\n      <property name=\"%s.profile\" value=\"", role);
			xml_text(f, who[w]->profile);
			fprintf(f, "\"/>\n");
		}
		fprintf(f, "      <property name=\"runner.version\" value=\"");
		xml_text(f, twc_runner_version());
		fprintf(f, "\"/>\n      <property name=\"runner.agent_protocol\" value=\"%d\"/>\n",
		        TWC_AGENT_PROTOCOL_VERSION);
		fprintf(f, "      <property name=\"spec.revision\" value=\"");
		xml_text(f, twc_spec_revision());
		fprintf(f, "\"/>\n      <property name=\"rdma.provider\" value=\"");
		xml_text(f, twc_rdma_provider());
		fprintf(f, "\"/>\n");
		fprintf(f, "    </properties>\n");
		for (int j = i; j < n; j++) {
			suite_key(&rs[j], k2, sizeof(k2));
			if (strcmp(key, k2) != 0)
				continue;
			done[j] = true;
			const twc_result *r = &rs[j];
			fprintf(f, "    <testcase classname=\"");
			xml_text(f, key);
			fprintf(f, "\" name=\"");
			xml_text(f, r->c->id);
			fprintf(f, "\" time=\"%.3f\">\n", r->seconds);
			switch (r->outcome) {
			case TWC_PASS:
				break;
			case TWC_SKIP:
			case TWC_XFAIL:
				fprintf(f, "      <skipped message=\"%s", r->outcome == TWC_XFAIL ? "XFAIL: " : "");
				xml_text(f, r->reason);
				fprintf(f, "\"/>\n");
				break;
			case TWC_FAIL:
				fprintf(f, "      <failure type=\"%s\" message=\"",
				        r->c->level == TWC_MUST ? "MUST" : "SHOULD");
				xml_text(f, r->reason);
				fprintf(f, "\"/>\n");
				break;
			default:
				fprintf(f, "      <error type=\"%s\" message=\"", twc_outcome_name(r->outcome));
				xml_text(f, r->reason);
				fprintf(f, "\"/>\n");
				break;
			}
			fprintf(f, "      <system-out>section: ");
			xml_text(f, r->c->section);
			fprintf(f, "\nlevel: %s\noutcome: %s\ntransport: ",
			        r->c->level == TWC_MUST ? "MUST" : "SHOULD", twc_outcome_name(r->outcome));
			xml_text(f, r->transport);
			fprintf(f, "\nchannel: ");
			xml_text(f, r->channel);
			fprintf(f, "\ndescription: ");
			xml_text(f, r->c->description);
			fprintf(f, "\n");
			if (r->log && r->outcome != TWC_PASS)
				xml_text(f, r->log);
			fprintf(f, "</system-out>\n    </testcase>\n");
		}
		fprintf(f, "  </testsuite>\n");
	}
	free(done);
	fprintf(f, "</testsuites>\n");
	if (fclose(f) != 0) {
		snprintf(err, errlen, "--junit %s: write failed", path);
		return -1;
	}
	return 0;
}

/* ---- JSON lines ------------------------------------------------------------------------- */

/* Strings go in made valid UTF-8 (twc_agent_jstr), so that no report line
 * is lost to what an adapter wrote or to a field cut mid-character. */
static json_t *iut_json(const twc_iut_info *i)
{
	if (!i)
		return json_null();
	return json_pack("{s:o,s:o,s:o,s:o,s:o,s:i,s:o}", "name", twc_agent_jstr(i->name),
	                 "command", twc_agent_jstr(i->cmd), "impl", twc_agent_jstr(i->impl), "version",
	                 twc_agent_jstr(i->version), "adapter", twc_agent_jstr(i->adapter), "protocol",
	                 i->protocol, "profile", twc_agent_jstr(i->profile));
}

int twc_json_write(const char *path, const twc_result *rs, int n, char *err, size_t errlen)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		snprintf(err, errlen, "--json %s: cannot open for writing", path);
		return -1;
	}
	int lost = 0;
	for (int i = 0; i < n; i++) {
		const twc_result *r = &rs[i];
		json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:f,s:o,s:o,s:o,s:o,s:b}", "id", r->c->id,
		                      "suite", r->c->suite, "section", r->c->section, "level",
		                      r->c->level == TWC_MUST ? "MUST" : "SHOULD", "outcome",
		                      twc_outcome_name(r->outcome), "reason", twc_agent_jstr(r->reason),
		                      "duration_s", r->seconds, "iut", iut_json(r->iut), "peer",
		                      iut_json(r->peer), "transport", twc_agent_jstr(r->transport), "channel",
		                      twc_agent_jstr(r->channel), "required_failure", r->required_failure);
		if (o)
			json_object_set_new(o, "rdma_provider", json_string(twc_rdma_provider()));
		if (o)
			json_object_set_new(o, "runner",
			                    json_pack("{s:s,s:i,s:s}", "version", twc_runner_version(),
			                              "agent_protocol", TWC_AGENT_PROTOCOL_VERSION,
			                              "spec_revision", twc_spec_revision()));
		char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
		if (line)
			fprintf(f, "%s\n", line);
		else
			lost++;
		free(line);
		json_decref(o);
	}
	if (fclose(f) != 0) {
		snprintf(err, errlen, "--json %s: write failed", path);
		return -1;
	}
	if (lost) { /* out of memory: say so rather than leave runs out */
		snprintf(err, errlen, "--json %s: %d of %d run(s) could not be written", path, lost, n);
		return -1;
	}
	return 0;
}

/* ---- matrix ---------------------------------------------------------------------------------- */

/* Every distinct non-PASS reason of the matrix, numbered; at most one per
 * run, so the matrix gets room for all of them up front. */
typedef struct notes {
	char (*text)[320];
	int n;
} notes;

static int note_index(notes *ns, const char *s)
{
	for (int i = 0; i < ns->n; i++)
		if (!strncmp(ns->text[i], s, sizeof(ns->text[0]) - 1))
			return i + 1;
	snprintf(ns->text[ns->n], sizeof(ns->text[0]), "%.319s", s);
	return ++ns->n;
}

static void table(FILE *f, const twc_result *rs, int n, bool pairwise, notes *ns)
{
	char (*cols)[96] = calloc((size_t)n + 1, sizeof(*cols)); /* at most one per run */
	int ncols = 0;
	if (!cols) {
		fprintf(f, "\n(no memory for the matrix)\n");
		return;
	}
	for (int i = 0; i < n; i++) {
		if ((rs[i].peer != NULL) != pairwise)
			continue;
		char t[96];
		twc_result_target(&rs[i], t, sizeof(t));
		int k;
		for (k = 0; k < ncols; k++)
			if (!strcmp(cols[k], t))
				break;
		if (k == ncols)
			snprintf(cols[ncols++], sizeof(cols[0]), "%s", t);
	}
	if (ncols == 0) {
		free(cols);
		return;
	}
	fprintf(f, "\n%-36s %-6s", pairwise ? "case (client->server)" : "case", "level");
	for (int k = 0; k < ncols; k++)
		fprintf(f, " %-15s", cols[k]);
	fprintf(f, "\n");
	for (int i = 0; i < n; i++) {
		if ((rs[i].peer != NULL) != pairwise)
			continue;
		bool first = true;
		for (int j = 0; j < i; j++)
			if (rs[j].c == rs[i].c)
				first = false;
		if (!first)
			continue;
		fprintf(f, "%-36s %-6s", rs[i].c->id, rs[i].c->level == TWC_MUST ? "MUST" : "SHOULD");
		for (int k = 0; k < ncols; k++) {
			const twc_result *cell = NULL;
			for (int j = i; j < n; j++) {
				char t[96];
				twc_result_target(&rs[j], t, sizeof(t));
				if (rs[j].c == rs[i].c && !strcmp(t, cols[k]))
					cell = &rs[j];
			}
			char txt[40];
			if (!cell)
				snprintf(txt, sizeof(txt), "-");
			else if (cell->outcome == TWC_PASS)
				snprintf(txt, sizeof(txt), "PASS");
			else
				snprintf(txt, sizeof(txt), "%s[%d]", twc_outcome_name(cell->outcome),
				         note_index(ns, cell->reason));
			fprintf(f, " %-15s", txt);
		}
		fprintf(f, "\n");
	}
	free(cols);
}

void twc_matrix_print(FILE *f, const twc_result *rs, int n)
{
	notes ns = {calloc((size_t)n + 1, sizeof(*ns.text)), 0};
	if (!ns.text) {
		fprintf(f, "\n(no memory for the matrix)\n");
		return;
	}
	int tot[TWC_OUTCOME_COUNT] = {0};
	for (int i = 0; i < n; i++)
		tot[rs[i].outcome]++;
	fprintf(f, "\n==== tensorwire-conform: who passes what ====");
	table(f, rs, n, false, &ns);
	table(f, rs, n, true, &ns);
	if (ns.n)
		fprintf(f, "\nnotes:\n");
	for (int i = 0; i < ns.n; i++)
		fprintf(f, "  [%d] %s\n", i + 1, ns.text[i]);
	free(ns.text);
	fprintf(f, "\n%d run(s): %d PASS, %d FAIL, %d XFAIL, %d SKIP, %d ERROR, %d TIMEOUT\n", n,
	        tot[TWC_PASS], tot[TWC_FAIL], tot[TWC_XFAIL], tot[TWC_SKIP], tot[TWC_ERROR],
	        tot[TWC_TIMEOUT]);
	fflush(f);
}
