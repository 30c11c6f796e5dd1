/*
 * combo.c - the transport x channel axis (see combo.h).
 */
#include "combo.h"
#include "launch.h"

#include <stdio.h>
#include <string.h>

bool twc_combo_parse(const char *spec, twc_combo *out)
{
	const char *plus = spec ? strchr(spec, '+') : NULL;
	if (!plus || plus == spec || !plus[1] || strchr(plus + 1, '+') ||
	    (size_t)(plus - spec) >= sizeof(out->transport) ||
	    strlen(plus + 1) >= sizeof(out->channel))
		return false;
	snprintf(out->transport, sizeof(out->transport), "%.*s", (int)(plus - spec), spec);
	snprintf(out->channel, sizeof(out->channel), "%s", plus + 1);
	return true;
}

static twc_combo current = { "uv", "basic" };

const twc_combo *twc_combo_current(void)
{
	return &current;
}

bool twc_combo_set_current(const char *spec)
{
	return twc_combo_parse(spec, &current);
}

bool twc_combo_listen_url(const char *transport, char *out, size_t out_len)
{
	if (!strcmp(transport, "uv") || !strcmp(transport, "ibv")) {
		snprintf(out, out_len, "%s://%s:0", transport, twc_launch_address("server"));
		return true;
	}
	if (!strcmp(transport, "shm")) {
		snprintf(out, out_len, "shm://"); /* the kernel picks an abstract name */
		return true;
	}
	if (out_len)
		out[0] = '\0';
	return false;
}

const char *twc_combo_sections(const char *name)
{
	static const struct {
		const char *name, *sections;
	} table[] = {
		{ "shm", "wire.md 2.3, wire.md 2.3.1, wire.md 2.3.2, wire.md 2.3.3" },
		{ "ibv", "wire.md 2.3.3, wire.md 2.4, wire.md 2.4.1, wire.md 2.4.2, wire.md 2.4.3, "
		         "wire.md 2.4.4" },
		{ "mpt", "wire.md 4.3" },
		{ "cma", "wire.md 4.4" },
	};
	for (size_t i = 0; i < sizeof(table) / sizeof(*table); i++)
		if (!strcmp(name, table[i].name))
			return table[i].sections;
	return "";
}
