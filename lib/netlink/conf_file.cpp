#include "netlink/conf_file.hpp"

#include "core/error.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace ferry::netlink {

conf_file::conf_file(const std::string& family, const std::string& link, const std::string& name,
                     bool absent_ok)
    : _what(fmt::format("net.{}.conf.{}.{}", family, link, name)) {
    // Resolved at open, in this thread's namespace.
    const auto path = fmt::format("/proc/sys/net/{}/conf/{}/{}", family, link, name);
    _fd = unique_fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (!_fd && !(absent_ok && errno == ENOENT))
        throw sys_error(fmt::format("open {}", path));
}

int conf_file::read() const {
    char buf[16] = {};
    const ssize_t n = ::pread(_fd.get(), buf, sizeof buf - 1, 0);
    if (n <= 0)
        throw sys_error(fmt::format("read {}", _what));
    return std::atoi(buf);
}

void conf_file::write(int value) const {
    const std::string text = fmt::format("{}\n", value);
    if (::pwrite(_fd.get(), text.data(), text.size(), 0) != ssize_t(text.size()))
        throw sys_error(fmt::format("set {} to {}", _what, value));
}

void conf_override::apply() {
    if (!_file || _before)
        return;
    const int before = _file.read();
    if (before != _value)
        _file.write(_value);
    _before = before;
}

void conf_override::restore() {
    if (!_before)
        return;
    if (*_before != _value)
        _file.write(*_before);
    _before.reset();
}

} // namespace ferry::netlink
