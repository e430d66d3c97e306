// One per-link setting of the kernel's network stack, through its
// /proc/sys/net file opened in the calling thread's network namespace: the
// file acts there from any thread, and writing it takes no RTNL lock. (A
// link change through rtnetlink does, and may queue behind another link's
// change: a macvlan's MAC change holds RTNL through an RCU grace period.)
#pragma once

#include "core/unique_fd.hpp"

#include <optional>
#include <string>

namespace ferry::netlink {

class conf_file {
  public:
    conf_file() = default;
    // /proc/sys/net/FAMILY/conf/LINK/NAME (family "ipv4" or "ipv6").
    // Throws if it cannot be opened, unless `absent_ok` and the file does
    // not exist (a kernel without IPv6): the result is then empty.
    conf_file(const std::string& family, const std::string& link, const std::string& name,
              bool absent_ok = false);
    [[nodiscard]] explicit operator bool() const noexcept { return bool(_fd); }
    [[nodiscard]] int read() const;
    void write(int value) const;

  private:
    std::string _what; // net.FAMILY.conf.LINK.NAME, for errors
    unique_fd _fd;
};

// A setting held at one value for a while, then put back as it was: a
// link kept quiet (arp_ignore, disable_ipv6) until its workload's copy
// takes over, or the migration is called off.
class conf_override {
  public:
    conf_override(conf_file file, int value) : _file(std::move(file)), _value(value) {}
    // Remembers the setting and sets the value (once; a no-op for an empty
    // file, a setting this kernel does not have).
    void apply();
    // Puts the remembered setting back; a no-op unless applied.
    void restore();
    [[nodiscard]] bool applied() const noexcept { return _before.has_value(); }

  private:
    conf_file _file;
    int _value;
    std::optional<int> _before;
};

} // namespace ferry::netlink
