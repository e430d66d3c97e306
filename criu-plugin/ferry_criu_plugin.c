// ferry_criu.so: Ferry's CRIU plugin. It observes the moments a migration's
// downtime is made of and reports each to the host's Ferry daemon:
//   freeze-start  PAUSE_DEVICES, before CRIU freezes the tree
//   frozen        CHECKPOINT_DEVICES, every task frozen (once per task)
//   dump-end      exit(DUMP), CRIU's dump is over (after CLOSE, for a lazy dump)
//   resumed       RESUME_DEVICES_LATE, the restored tasks run (once per task)
// A report is one datagram, "ferry-criu 1 <migration> <event> <pid> <ns> <ret>"
// (CLOCK_MONOTONIC), sent without blocking to the abstract unix socket
// "@ferry-criu-events" of CRIU's network namespace; the migration id comes
// from $FERRY_MIGRATION_ID. Every hook returns -ENOTSUP ("not mine") and no
// failure here, a missing daemon included, ever reaches CRIU.
//
// It also sets CRIU's log level to $FERRY_CRIU_LOG_LEVEL for a Ferry
// migration: runc hands its CRIU level 4 by RPC, which outranks every config
// file Ferry can name, and each debug line is a write(2) inside the downtime.
#include <criu-plugin.h>

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define FERRY_EVENTS_SOCKET "ferry-criu-events"

static int ferry_migration(void)
{
	const char *id = getenv("FERRY_MIGRATION_ID");

	return id && *id && strlen(id) <= 64;
}

static void report(const char *event, int pid, int ret)
{
	const char *id = getenv("FERRY_MIGRATION_ID");
	struct timespec ts;
	char msg[192];
	struct sockaddr_un addr;
	socklen_t len;
	int n, sk;

	if (!ferry_migration())
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	n = snprintf(msg, sizeof(msg), "ferry-criu 1 %s %s %d %llu %d", id, event, pid,
		     (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec, ret);
	if (n <= 0 || n >= (int)sizeof(msg))
		return;
	sk = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (sk < 0)
		return;
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	memcpy(addr.sun_path + 1, FERRY_EVENTS_SOCKET, strlen(FERRY_EVENTS_SOCKET));
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(FERRY_EVENTS_SOCKET));
	(void)sendto(sk, msg, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&addr, len);
	close(sk);
}

/* criu-log.h, the plugins' log API, includes a log.h CRIU does not install. */
extern void log_set_loglevel(unsigned int loglevel);
extern unsigned int log_get_loglevel(void);
extern void print_on_level(unsigned int loglevel, const char *format, ...)
	__attribute__((format(printf, 2, 3)));
#define FERRY_LOG_INFO 3

/* Called at the start of a dump or restore, before the freeze and before the
 * restore's first task: everything in the downtime gets the new level. */
static void set_log_level(void)
{
	const char *level = getenv("FERRY_CRIU_LOG_LEVEL");
	unsigned int want, had;

	if (!ferry_migration() || !level || level[0] < '0' || level[0] > '4' || level[1])
		return;
	want = (unsigned int)(level[0] - '0');
	had = log_get_loglevel();
	if (want == had)
		return;
	print_on_level(FERRY_LOG_INFO, "ferry: log level %u, not %u, for migration %s (FERRY_CRIU_LOG_LEVEL)\n",
		       want, had, getenv("FERRY_MIGRATION_ID"));
	log_set_loglevel(want);
}

static int ferry_init(int stage)
{
	if (stage == CR_PLUGIN_STAGE__DUMP || stage == CR_PLUGIN_STAGE__RESTORE)
		set_log_level();
	return 0;
}

static void ferry_exit(int stage, int ret)
{
	if (stage == CR_PLUGIN_STAGE__DUMP)
		report("dump-end", 0, ret);
}

static int ferry_pause_devices(int pid)
{
	report("freeze-start", pid, 0);
	return -ENOTSUP;
}

static int ferry_checkpoint_devices(int pid)
{
	report("frozen", pid, 0);
	return -ENOTSUP;
}

static int ferry_resume_devices_late(int pid)
{
	report("resumed", pid, 0);
	return -ENOTSUP;
}

CR_PLUGIN_REGISTER("ferry", ferry_init, ferry_exit)
/* CRIU's registration macro stores hooks as void *, which ISO C frowns on. */
#pragma GCC diagnostic ignored "-Wpedantic"
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__PAUSE_DEVICES, ferry_pause_devices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, ferry_checkpoint_devices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__RESUME_DEVICES_LATE, ferry_resume_devices_late)
