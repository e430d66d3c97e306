#include "criu/criu_page_server.hpp"

#include "core/error.hpp"
#include "sys/net.hpp"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <thread>

namespace ferry::criu {

namespace {

struct ps_iov_v41 {
    uint32_t cmd;
    uint32_t nr_pages;
    uint64_t vaddr;
    uint64_t dst_id;
};
static_assert(sizeof(ps_iov_v41) == 24, "CRIU 4.1's page_server_iov is 24 bytes");

unique_fd connect_with_retry(uint16_t port, std::chrono::milliseconds timeout,
                             const std::function<bool()>& criu_alive) {
    auto ep = net::parse_endpoint(fmt::format("127.0.0.1:{}", port));
    const auto until = net::after(timeout);
    for (;;) {
        try {
            return net::tcp_connect(ep, std::chrono::milliseconds(1000));
        } catch (const std::system_error& e) {
            if (e.code().value() != ECONNREFUSED || std::chrono::steady_clock::now() >= until ||
                !criu_alive())
                throw;
        }
        std::this_thread::sleep_for(
            std::chrono::milliseconds(5)); // CRIU has not started listening yet
    }
}

void send_command(int fd, uint32_t cmd, std::chrono::milliseconds timeout) {
    ps_iov_v41 h{cmd, 0, 0, 0};
    net::write_full(fd, std::as_bytes(std::span(&h, 1)), net::after(timeout),
                    "send to CRIU page server");
}

} // namespace

void finish_lazy_dump(uint16_t port, std::chrono::milliseconds timeout) {
    unique_fd fd = connect_with_retry(port, timeout, [] { return true; });
    send_command(fd.get(), ps_iov_close, timeout);
    std::array<std::byte, 4> reply;
    if (!net::read_full(fd.get(), reply, net::after(timeout), "read CRIU CLOSE reply"))
        throw error("CRIU's page server closed without acknowledging CLOSE");
    int32_t status;
    std::memcpy(&status, reply.data(), sizeof status);
    if (status != 0)
        throw error(fmt::format("CRIU's page server answered CLOSE with {}", status));
    // CRIU waits for our side to close before it finishes the dump.
}

void abort_lazy_dump(uint16_t port, std::chrono::milliseconds timeout,
                     const std::function<bool()>& criu_alive) {
    unique_fd fd = connect_with_retry(port, timeout, criu_alive);
    send_command(fd.get(), ps_iov_unknown, timeout);
    // CRIU drops the connection once it rejects the command. Whether that
    // is seen in time does not matter: the caller waits for CRIU's end.
    std::array<std::byte, 1> b;
    try {
        (void)net::read_full(fd.get(), b, net::after(timeout), "wait for CRIU page server");
    } catch (const std::exception&) {
        return;
    }
}

} // namespace ferry::criu
