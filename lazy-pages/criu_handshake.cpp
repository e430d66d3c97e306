#include "criu_handshake.hpp"

#include "core/error.hpp"
#include "sys/net.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>

namespace ferry::lazy {

unique_fd listen_lazy_socket(const std::filesystem::path& work_dir) {
    unique_fd dir(::open(work_dir.c_str(), O_DIRECTORY | O_CLOEXEC));
    if (!dir)
        throw sys_error("open " + work_dir.string());
    if (::fchdir(dir.get()))
        throw sys_error("chdir " + work_dir.string());
    unique_fd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!sock)
        throw sys_error("socket AF_UNIX");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, lazy_socket_name, sizeof addr.sun_path - 1);
    ::unlink(lazy_socket_name);
    if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr))
        throw sys_error(fmt::format("bind {}/{}", work_dir.string(), lazy_socket_name));
    if (::listen(sock.get(), 10))
        throw sys_error("listen lazy-pages socket");
    return sock;
}

unique_fd accept_restore(int listen_fd, std::chrono::milliseconds timeout, int abort_fd) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {abort_fd, POLLIN, 0}};
    const int nfds = abort_fd >= 0 ? 2 : 1;
    for (;;) {
        int r = ::poll(fds, nfds_t(nfds), int(timeout.count()));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            throw sys_error("poll lazy-pages socket");
        if (r == 0)
            throw error(fmt::format("restore did not connect to the lazy-pages socket within {} ms",
                                    timeout.count()));
        if (nfds == 2 && fds[1].revents)
            throw error("the daemon went away before restore connected");
        break;
    }
    unique_fd client(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (!client)
        throw sys_error("accept lazy-pages socket");
    return client;
}

void receive_uffds(int sock, size_t nr_tasks,
                   const std::function<void(pid_t, unique_fd)>& on_task) {
    for (size_t i = 0; i < nr_tasks; i++) {
        int32_t pid = 0;
        ssize_t n = ::recv(sock, &pid, sizeof pid, MSG_WAITALL);
        if (n != sizeof pid)
            throw error(
                n == 0 ? "restore closed the lazy-pages socket while sending uffds (restore failed)"
                       : "short read of a task pid on the lazy-pages socket");
        if (pid < 0)
            continue; // a zombie: no memory, no uffd
        if (pid == 0)
            throw error("restore sent pid 0 on the lazy-pages socket");
        unique_fd uffd = net::recv_fd(sock);
        net::set_nonblocking(uffd.get(), true);
        on_task(pid, std::move(uffd));
    }
}

} // namespace ferry::lazy
