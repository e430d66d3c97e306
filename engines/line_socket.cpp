#include "line_socket.hpp"

#include "core/error.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

namespace ferry::engines {

namespace {

sockaddr_un unix_address(const std::filesystem::path& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const auto p = path.string();
    if (p.size() >= sizeof addr.sun_path)
        throw error(fmt::format("socket path {} is too long for a unix socket", p));
    std::strcpy(addr.sun_path, p.c_str());
    return addr;
}

unique_fd unix_socket() {
    unique_fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s)
        throw sys_error("socket AF_UNIX");
    return s;
}

} // namespace

unique_fd listen_unix(const std::filesystem::path& path) {
    const auto addr = unix_address(path);
    auto s = unix_socket();
    ::unlink(addr.sun_path);
    if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) ||
        ::listen(s.get(), 4))
        throw sys_error("unix socket " + path.string());
    return s;
}

std::string ask_line(const std::filesystem::path& path, const std::string& line,
                     std::chrono::milliseconds bound) {
    return ask_line_after_notes(path, line, bound, {}, {});
}

std::string ask_line_after_notes(const std::filesystem::path& path, const std::string& line,
                                 std::chrono::milliseconds bound, const std::string& note,
                                 const std::function<void()>& on_note) {
    const auto addr = unix_address(path);
    auto s = unix_socket();
    if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr))
        throw sys_error("connect to " + path.string());
    const std::string ask = line + "\n";
    if (::write(s.get(), ask.data(), ask.size()) != ssize_t(ask.size()))
        throw sys_error("write to " + path.string());
    const auto until = std::chrono::steady_clock::now() + bound;
    try {
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                until - std::chrono::steady_clock::now());
            auto answer = read_line(s.get(), std::max(left, std::chrono::milliseconds(0)));
            if (note.empty() || answer != note)
                return answer;
            on_note();
        }
    } catch (const ferry::error&) {
        throw error(fmt::format("no answer on {} within {} ms", path.string(), bound.count()));
    }
}

std::string read_line(int conn, std::chrono::milliseconds bound) {
    const auto until = std::chrono::steady_clock::now() + bound;
    std::string line;
    char c;
    while (line.size() < 4096) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        pollfd p{conn, POLLIN, 0};
        const int r = ::poll(&p, 1, int(std::max<int64_t>(left.count(), 0)));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            throw error(fmt::format("no line within {} ms", bound.count()));
        const ssize_t n = ::read(conn, &c, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != 1 || c == '\n')
            break;
        line += c;
    }
    return line;
}

void write_line(int conn, const std::string& line) noexcept {
    const std::string l = line + "\n";
    (void)!::write(conn, l.data(), l.size());
}

} // namespace ferry::engines
