#include "netlink/new_netns.hpp"

#include "core/error.hpp"
#include "netlink/links.hpp"
#include "netlink/netns.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <thread>

namespace ferry::netlink {

unique_fd make_netns() {
    unique_fd fd;
    std::exception_ptr failed;
    // A thread of its own: unsharing moves only the calling thread.
    std::thread worker([&] {
        try {
            if (::unshare(CLONE_NEWNET) != 0)
                throw error(
                    fmt::format("cannot make a network namespace: {}", std::strerror(errno)));
            fd.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
            if (!fd)
                throw sys_error("open the new network namespace");
            link_control().set_up("lo");
        } catch (...) {
            failed = std::current_exception();
        }
    });
    worker.join();
    if (failed)
        std::rethrow_exception(failed);
    return fd;
}

std::filesystem::path netns_path(int netns) {
    return fmt::format("/proc/self/fd/{}", netns);
}

void add_macvlan(int netns, const link_identity& source, const std::string& parent) {
    link_control().make_macvlan(netns, source, parent);
    in_netns(netns_path(netns), [&] { link_control().set_up(source.name); });
}

} // namespace ferry::netlink
