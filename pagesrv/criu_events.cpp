#include "criu_events.hpp"

#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstring>
#include <sstream>

namespace ferry::pagesrv {

namespace {

constexpr const char* socket_name = "ferry-criu-events"; // as in criu-plugin/

} // namespace

std::optional<std::pair<std::string, criu_event>> parse_criu_event(const std::string& datagram) {
    std::istringstream in(datagram);
    std::string magic, version, id;
    criu_event e;
    if (!(in >> magic >> version >> id >> e.name >> e.pid >> e.monotonic_ns >> e.ret))
        return std::nullopt;
    if (magic != "ferry-criu" || version != "1" || id.empty() || id.size() > 64)
        return std::nullopt;
    return std::make_pair(id, e);
}

criu_event_log::criu_event_log() {
    unique_fd s(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s)
        return;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, socket_name, std::strlen(socket_name));
    const auto len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(socket_name));
    if (::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0)
        _sock = std::move(s);
}

std::vector<std::pair<std::string, criu_event>> criu_event_log::receive() {
    std::vector<std::pair<std::string, criu_event>> got;
    char buf[256];
    for (;;) {
        const ssize_t n = ::recv(_sock.get(), buf, sizeof buf - 1, MSG_DONTWAIT);
        if (n <= 0)
            break;
        if (auto e = parse_criu_event(std::string(buf, size_t(n))))
            got.push_back(std::move(*e));
    }
    return got;
}

} // namespace ferry::pagesrv
