// What CRIU's mount-v2 does before it restores a mount namespace, timed
// alone: make an empty mount namespace (unshare CRIU's, a copy of the
// host's whole mount table; mark it private; mount the roots yard; pivot
// into it; detach the copy). criu-patches/0028 does this while a warm
// restore waits for its images; this measures what that takes out of the
// downtime. Each run is a fresh child. --extra-mounts N first adds N tmpfs
// mounts in a private mount namespace of this process, for a destination
// host with more mounts than this one. Prints p50/p90/min in microseconds.
#include "core/clock.hpp"
#include "core/latency_recorder.hpp"
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "empty-mntns-bench: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
}

std::string extra_mount_dir(const char* yard, int i) {
    return std::string(yard) + "/m" + std::to_string(i);
}

size_t mount_count() {
    std::ifstream in("/proc/self/mountinfo");
    size_t n = 0;
    for (std::string line; std::getline(in, line);)
        n++;
    return n;
}

// CRIU's get_empty_mntns(), step by step (mount-v2.c, cr_pivot_root()).
// Returns 0, or the step that failed.
int make_own_mntns_empty(const char* yard) {
    if (::unshare(CLONE_NEWNS))
        return 1;
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr))
        return 2;
    if (::mount("none", yard, "tmpfs", 0, nullptr) ||
        ::mount("none", yard, nullptr, MS_PRIVATE, nullptr))
        return 3;
    if (::chdir(yard) || (::mkdir("tmp", 0777) && errno != EEXIST))
        return 4;
    if (::mount("tmp", "tmp", nullptr, MS_BIND, nullptr) ||
        ::mount(nullptr, "tmp", nullptr, MS_PRIVATE, nullptr))
        return 5;
    if (::syscall(SYS_pivot_root, ".", "tmp"))
        return 6;
    if (::mount("none", "tmp", "none", MS_REC | MS_SLAVE, nullptr) || ::umount2("tmp", MNT_DETACH))
        return 7;
    return 0;
}

// One run in a fresh child; its time in ns. The child's exit status is the
// step that failed, if one did.
uint64_t one_run(const char* yard) {
    int p[2];
    if (::pipe(p))
        die("pipe");
    const pid_t pid = ::fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        ::close(p[0]);
        const uint64_t t0 = ferry::monotonic_ns();
        const int failed = make_own_mntns_empty(yard);
        const uint64_t took = ferry::monotonic_ns() - t0;
        (void)!::write(p[1], &took, sizeof(took));
        ::_exit(failed);
    }
    ::close(p[1]);
    uint64_t took = 0;
    const bool got = ::read(p[0], &took, sizeof(took)) == sizeof(took);
    ::close(p[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status)) {
        std::fprintf(stderr, "empty-mntns-bench: step %d failed in the child\n",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        std::exit(1);
    }
    return took;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"time the empty mount namespace CRIU's mount-v2 makes before it restores one"};
    int runs = 200;
    int extra_mounts = 0;
    app.add_option("--runs", runs, "children, one run each")->check(CLI::Range(1, 100000));
    app.add_option("--extra-mounts", extra_mounts,
                   "tmpfs mounts to add first, in a private mount namespace")
        ->check(CLI::Range(0, 10000));
    CLI11_PARSE(app, argc, argv);

    char yard[] = "/tmp/.ferry-empty-mntns.XXXXXX";
    if (!::mkdtemp(yard))
        die("mkdtemp");
    if (extra_mounts > 0) {
        if (::unshare(CLONE_NEWNS) || ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr))
            die("a private mount namespace for the extra mounts");
        // Under the yard's directory: they go with this process's namespace.
        for (int i = 0; i < extra_mounts; i++) {
            const std::string dir = extra_mount_dir(yard, i);
            if (::mkdir(dir.c_str(), 0700) || ::mount("none", dir.c_str(), "tmpfs", 0, "size=4k"))
                die("an extra tmpfs mount");
        }
    }
    const size_t mounts = mount_count();
    std::vector<uint64_t> ns;
    ns.reserve(size_t(runs));
    for (int i = 0; i < runs; i++)
        ns.push_back(one_run(yard));
    for (int i = 0; i < extra_mounts; i++) {
        const std::string dir = extra_mount_dir(yard, i);
        (void)::umount2(dir.c_str(), MNT_DETACH);
        (void)::rmdir(dir.c_str());
    }
    ::rmdir(yard);
    std::printf("empty mount namespace, %zu mounts: p50 %.1f us, p90 %.1f, min %.1f (%d runs)\n",
                mounts, ferry::ns_to_us(ferry::percentile_of(ns, 50)),
                ferry::ns_to_us(ferry::percentile_of(ns, 90)),
                ferry::ns_to_us(*std::min_element(ns.begin(), ns.end())), runs);
    return 0;
}
