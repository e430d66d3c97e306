#include "netlink/ipv6_silence.hpp"

#include <filesystem>

namespace ferry::netlink {

conf_override ipv6_silence(const std::string& link) {
    const bool no_ipv6 = !std::filesystem::exists("/proc/sys/net/ipv6");
    return conf_override(conf_file("ipv6", link, "disable_ipv6", no_ipv6), 1);
}

} // namespace ferry::netlink
