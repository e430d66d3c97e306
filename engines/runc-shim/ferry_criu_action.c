/*
 * ferry-criu-action: CRIU's action script for a restore Ferry runs through
 * a container engine (engine_restore.cpp names it in CRIU's config).
 *
 * CRIU runs its action script at every step of a restore, seven times, and
 * waits for it each time: all of it is downtime. ferry-runc, a C++ program,
 * costs about 1.5 ms a start here; this one, small, C and static, returns at
 * once for the steps Ferry has nothing to do in, and hands the two that
 * matter to ferry-runc beside it: post-restore (the commit gate) and, when
 * the network moves, setup-namespaces.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The steps ferry-runc's action_script() acts on: keep the two in step. */
static int wanted(const char *action)
{
	if (!getenv("FERRY_GATE"))
		return 0; /* not a restore Ferry gates */
	if (strcmp(action, "post-restore") == 0)
		return 1;
	return strcmp(action, "setup-namespaces") == 0 && getenv("FERRY_NETWORK_MOVES");
}

int main(int argc, char **argv)
{
	const char *action = getenv("CRTOOLS_SCRIPT_ACTION");
	char path[PATH_MAX];
	ssize_t n;
	char *slash;

	(void)argc;
	if (!action)
		return 0;
	if (!wanted(action))
		return 0;
	n = readlink("/proc/self/exe", path, sizeof(path) - sizeof("/ferry-runc"));
	if (n <= 0) {
		fprintf(stderr, "ferry-criu-action: /proc/self/exe: %s\n", strerror(errno));
		return 1; /* CRIU stops the restore: nothing ran */
	}
	path[n] = '\0';
	slash = strrchr(path, '/');
	if (!slash)
		return 1;
	strcpy(slash, "/ferry-runc");
	execv(path, argv);
	fprintf(stderr, "ferry-criu-action: exec %s: %s\n", path, strerror(errno));
	return 1;
}
