/*
 * launch.h - where a session's two adapters run (tensorwire issue 15 item
 * 4). By default both run here, as children of the case process, and the
 * server listens on loopback. For runs across hosts (or namespaces, pods,
 * containers) the runner takes, per role (server, client):
 *
 *   --launch ROLE=TEMPLATE   the command line that starts that role's
 *                            adapter: {cmd} is the adapter command as one
 *                            shell word ("exec CMD", quoted), {host} the
 *                            role's --host, {role} the role. E.g.
 *                              'ssh {host} {cmd}'
 *                              'ip netns exec nsA sh -c {cmd}'
 *                              'srun -w {host} -N1 -n1 sh -c {cmd}'
 *                              'kubectl exec -i {host} -- sh -c {cmd}'
 *   --host ROLE=NAME         what {host} stands for in that role's template
 *   --address ROLE=IP        the address that role's listener binds and
 *                            advertises (default 127.0.0.1)
 *
 * The template must keep the adapter's stdin and stdout connected (ssh
 * without -n, kubectl exec -i) and should end in the adapter itself (exec),
 * so that cases which stop or kill the peer (SIGSTOP, SIGKILL) reach it:
 * with ssh they reach only the local ssh client. Sessions (the semantic,
 * interop, fault and rdma suites' two-adapter runs) honour this; the wire
 * suite's raw peer runs in the runner's own process on loopback.
 *
 * The runner stores the settings in its environment (TWC_LAUNCH_SERVER,
 * TWC_HOST_CLIENT, TWC_ADDRESS_SERVER, ...), so that every case process it
 * starts reads the same.
 */
#ifndef TWC_HARNESS_LAUNCH_H
#define TWC_HARNESS_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>

/* Takes one option: opt is "--launch", "--host" or "--address", arg is
 * "ROLE=VALUE". Returns 0, or -1 with the reason in err. */
int twc_launch_option(const char *opt, const char *arg, char *err, size_t errlen);

/* The command line that starts `cmd` in `role` ("server" or "client"):
 * cmd itself without a template. Caller frees; NULL when out of memory. */
char *twc_launch_command(const char *role, const char *cmd);

/* The address `role`'s listeners bind and advertise ("127.0.0.1"). */
const char *twc_launch_address(const char *role);

/* A summary for reports ("" when everything runs here). */
const char *twc_launch_summary(void);

#endif /* TWC_HARNESS_LAUNCH_H */
