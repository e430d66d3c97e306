#include "netlink/ipv6_silence.hpp"

#include "core/error.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

namespace ferry::netlink {

ipv6_silence::ipv6_silence(const std::string& link) : _link(link) {
    // Opened here, in this thread's namespace: /proc/sys/net is resolved
    // at open.
    const auto path = fmt::format("/proc/sys/net/ipv6/conf/{}/disable_ipv6", link);
    _conf = unique_fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (_conf)
        return;
    if (errno == ENOENT && !std::filesystem::exists("/proc/sys/net/ipv6"))
        return; // no IPv6 in this kernel or namespace: nothing to silence
    throw sys_error(fmt::format("open {}", path));
}

int ipv6_silence::read_value() {
    char buf[16] = {};
    const ssize_t n = ::pread(_conf.get(), buf, sizeof buf - 1, 0);
    if (n <= 0)
        throw sys_error(fmt::format("read disable_ipv6 of {}", _link));
    return std::atoi(buf);
}

void ipv6_silence::write_value(int value) {
    const std::string text = fmt::format("{}\n", value);
    if (::pwrite(_conf.get(), text.data(), text.size(), 0) != ssize_t(text.size()))
        throw sys_error(fmt::format("set disable_ipv6 {} on {}", value, _link));
}

void ipv6_silence::silence() {
    if (!_conf || _silenced)
        return;
    _before = read_value();
    if (_before != 0)
        return; // off already
    write_value(1);
    _silenced = true;
}

void ipv6_silence::restore() {
    if (!_silenced)
        return;
    write_value(_before);
    _silenced = false;
}

} // namespace ferry::netlink
