#include "wire/criu_event_wire.hpp"

#include "core/clock.hpp"
#include "core/unique_fd.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <sstream>
#include <string_view>

namespace ferry::criu_events {

namespace {

constexpr std::string_view socket_name = "ferry-criu-events"; // as in criu-plugin/

} // namespace

sockaddr_un socket_address(socklen_t& len) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    // Abstract: the name follows a leading NUL.
    std::memcpy(addr.sun_path + 1, socket_name.data(), socket_name.size());
    len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + socket_name.size());
    return addr;
}

std::optional<std::pair<std::string, event>> parse(const std::string& datagram) {
    std::istringstream in(datagram);
    std::string magic, version, id;
    event e;
    if (!(in >> magic >> version >> id >> e.name >> e.pid >> e.monotonic_ns >> e.ret))
        return std::nullopt;
    if (magic != "ferry-criu" || version != "1" || id.empty() || id.size() > 64)
        return std::nullopt;
    return std::make_pair(id, e);
}

void report(const std::string& migration_id, const char* name, pid_t pid) noexcept {
    try {
        const auto msg =
            fmt::format("ferry-criu 1 {} {} {} {} 0", migration_id, name, pid, monotonic_ns());
        unique_fd s(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        if (!s)
            return;
        socklen_t len = 0;
        const auto addr = socket_address(len);
        (void)::sendto(s.get(), msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                       reinterpret_cast<const sockaddr*>(&addr), len);
    } catch (const std::exception&) {
        // A report only: nothing here may fail the sender.
    }
}

} // namespace ferry::criu_events
