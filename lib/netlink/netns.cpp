#include "netlink/netns.hpp"

#include "core/error.hpp"
#include "core/unique_fd.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <thread>

namespace ferry::netlink {

void in_netns(const std::filesystem::path& netns, const std::function<void()>& work) {
    unique_fd fd(::open(netns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd)
        throw error(fmt::format("cannot open network namespace {}: {}", netns.string(),
                                std::strerror(errno)));
    std::exception_ptr failed;
    std::thread worker([&] {
        try {
            if (::setns(fd.get(), CLONE_NEWNET) != 0)
                throw error(fmt::format("cannot enter network namespace {}: {}", netns.string(),
                                        std::strerror(errno)));
            work();
        } catch (...) {
            failed = std::current_exception();
        }
    });
    worker.join();
    if (failed)
        std::rethrow_exception(failed);
}

std::filesystem::path netns_of(pid_t pid) {
    return fmt::format("/proc/{}/ns/net", pid);
}

bool has_own_netns(pid_t pid) {
    struct stat theirs {
    }, ours{};
    if (::stat(netns_of(pid).c_str(), &theirs) != 0)
        throw error(fmt::format("cannot see the network namespace of pid {}: {}", pid,
                                std::strerror(errno)));
    if (::stat("/proc/self/ns/net", &ours) != 0)
        throw error(
            fmt::format("cannot see this process's network namespace: {}", std::strerror(errno)));
    return theirs.st_ino != ours.st_ino || theirs.st_dev != ours.st_dev;
}

} // namespace ferry::netlink
