#include "netlink/ipv6_silence.hpp"

#include "core/error.hpp"

#include <filesystem>

namespace ferry::netlink {

ipv6_silence::ipv6_silence(const std::string& link) {
    // A link of a kernel or namespace without IPv6 has no such file:
    // nothing to silence.
    const bool no_ipv6 = !std::filesystem::exists("/proc/sys/net/ipv6");
    _conf = conf_file("ipv6", link, "disable_ipv6", no_ipv6);
}

void ipv6_silence::silence() {
    if (!_conf || _silenced)
        return;
    _before = _conf.read();
    if (_before != 0)
        return; // off already
    _conf.write(1);
    _silenced = true;
}

void ipv6_silence::restore() {
    if (!_silenced)
        return;
    _conf.write(_before);
    _silenced = false;
}

} // namespace ferry::netlink
