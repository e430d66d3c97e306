/*
 * ferry-criu-action: CRIU's action script for a restore Ferry runs through
 * a container engine (engine_restore.cpp names it in CRIU's config).
 *
 * CRIU waits for its action script at each step it runs it for, inside the
 * downtime. With criu-patches/0013 it runs it only at the two steps Ferry
 * acts in; without, at every step of a restore, seven times. So this is
 * small, C and static: it returns at once for the other steps, and asks the
 * destination daemon's gate itself at the two that matter (a C++ program
 * costs ~1.5 ms more a start here):
 *   post-restore      "post-restore PID" -> "ok": the commit gate; any
 *                     other answer makes CRIU kill the restored tasks;
 *   setup-namespaces  "setup-namespaces PID" -> "ok", when the network
 *                     moves and runc makes the copy's namespace inside the
 *                     restore (ferry-runc says so, FERRY_NETWORK_MOVES):
 *                     the daemon gives the copy the source's addresses
 *                     before CRIU restores a socket.
 * The gate's protocol is engine_request.hpp's: one line each way, CRIU's
 * action-socket protocol. A CRIU with criu-patches/0017 speaks it itself
 * and does not run this at all.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The migrator commits the source meanwhile; either peer closes the socket
 * when it gives up, so this bound is only the last resort. */
#define GATE_TIMEOUT_MS 120000

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sends "STEP PID" on the gate and reads one line back: 0 if it is `want`. */
static int ask_gate(const char *gate, const char *step, const char *want)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	const char *pid = getenv("CRTOOLS_INIT_PID");
	const long long until = now_ms() + GATE_TIMEOUT_MS;
	char line[4096];
	size_t len = 0;
	int s, n;

	if (strlen(gate) >= sizeof(addr.sun_path)) {
		fprintf(stderr, "ferry-criu-action: gate path %s is too long\n", gate);
		return 1;
	}
	strcpy(addr.sun_path, gate);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof(addr))) {
		fprintf(stderr, "ferry-criu-action: connect to %s: %s\n", gate, strerror(errno));
		return 1;
	}
	n = snprintf(line, sizeof(line), "%s %s\n", step, pid ? pid : "0");
	if (n <= 0 || n >= (int)sizeof(line) || write(s, line, (size_t)n) != n) {
		fprintf(stderr, "ferry-criu-action: write to %s: %s\n", gate, strerror(errno));
		close(s);
		return 1;
	}
	while (len < sizeof(line) - 1) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		const long long left = until - now_ms();
		ssize_t r;

		if (left <= 0)
			break;
		r = poll(&p, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		r = read(s, line + len, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r != 1 || line[len] == '\n')
			break;
		len++;
	}
	line[len] = '\0';
	close(s);
	if (strcmp(line, want) == 0)
		return 0;
	fprintf(stderr, "ferry-criu-action: %s refused: %s\n", step, len ? line : "no answer");
	return 1;
}

int main(void)
{
	const char *action = getenv("CRTOOLS_SCRIPT_ACTION");
	const char *gate = getenv("FERRY_GATE");

	if (!action || !gate)
		return 0; /* not a restore Ferry gates */
	if (strcmp(action, "post-restore") == 0)
		return ask_gate(gate, "post-restore", "ok"); /* else CRIU kills the tasks */
	if (strcmp(action, "setup-namespaces") == 0 && getenv("FERRY_NETWORK_MOVES"))
		return ask_gate(gate, "setup-namespaces", "ok"); /* else the restore fails */
	return 0;
}
