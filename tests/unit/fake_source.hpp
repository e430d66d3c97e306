// A page source for tests: serves page channels over TLS on loopback from a
// buffer, the way pagesrv serves them from a frozen task, with switches to
// corrupt or withhold replies.
#pragma once

#include "core/checksum.hpp"
#include "sys/net.hpp"
#include "test_credentials.hpp"
#include "tls/tls_stream.hpp"
#include "wire/control.hpp"
#include "wire/page_wire.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::test {

class fake_source {
  public:
    // Serves image addresses [base, base + len) from `memory`.
    fake_source(const std::byte* memory, uint64_t base, uint64_t len)
        : _mem(memory), _base(base), _len(len), _listener(net::tcp_listen(any_loopback())) {
        _thread = std::thread([this] { accept_loop(); });
    }
    ~fake_source() {
        _stop = true;
        ::shutdown(_listener.get(), SHUT_RDWR);
        _thread.join();
        std::lock_guard lock(_mutex);
        for (auto& c : _conns)
            c.tls->shutdown();
        for (auto& c : _conns)
            c.thread.join();
    }

    [[nodiscard]] net::endpoint endpoint() const { return net::local_endpoint(_listener.get()); }

    std::atomic<int> corrupt_replies{0}; // corrupt the first page of this many replies
    std::atomic<bool> corrupt_always{false};
    std::atomic<bool> silent{false}; // read requests, never answer
    std::atomic<uint64_t> requests{0};
    std::atomic<uint64_t> first_read_vaddr{0}; // the first page request's address
    std::atomic<bool> done_received{false};
    std::atomic<bool> plaintext_pages{false}; // leave TLS after the acceptance
    // Pages served on each connection, in the order they were accepted
    // (lazy-pages opens its fault channel first, then its background ones).
    static constexpr size_t counted_connections = 8;
    std::array<std::atomic<uint64_t>, counted_connections> pages_by_connection{};

  private:
    static net::endpoint any_loopback() {
        auto ep = net::parse_endpoint("127.0.0.1:1");
        ep.addr.sin_port = 0;
        return ep;
    }
    struct conn {
        std::shared_ptr<tls::tls_stream> tls;
        std::thread thread;
    };

    void accept_loop() {
        while (!_stop) {
            unique_fd fd(::accept4(_listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (!fd)
                return;
            std::lock_guard lock(_mutex);
            auto& c = _conns.emplace_back();
            c.tls = std::make_shared<tls::tls_stream>(std::move(fd), loopback_credentials(),
                                                      tls::tls_stream::role::server);
            const size_t index = _conns.size() - 1;
            c.thread = std::thread([this, s = c.tls, index] { serve(*s, index); });
        }
    }

    void serve(tls::tls_stream& s, size_t index) {
        try {
            tls::authenticate_client(s, {}, net::after(std::chrono::seconds(5)));
            auto open = control::receive(s, net::after(std::chrono::seconds(5)));
            FerryControl__PageChannelAccepted ok = FERRY_CONTROL__PAGE_CHANNEL_ACCEPTED__INIT;
            ok.page_size = uint32_t(page_size);
            ok.max_pages_per_request = wire::max_pages_per_request;
            ok.has_plaintext_pages = true;
            ok.plaintext_pages = plaintext_pages;
            control::send_message(s, ok, net::after(std::chrono::seconds(5)));
            std::unique_ptr<net::socket_stream> plain;
            if (plaintext_pages)
                plain = std::make_unique<net::socket_stream>(
                    s.to_plaintext(net::after(std::chrono::seconds(5))));
            net::stream& conn = plain ? static_cast<net::stream&>(*plain) : s;
            std::vector<std::byte> pages(wire::max_pages_per_request * page_size);
            std::vector<uint64_t> sums(wire::max_pages_per_request);
            for (;;) {
                wire::header_bytes h;
                if (!net::read_full(conn, h, net::no_deadline, "fake source"))
                    return;
                wire::page_request r;
                if (wire::decode(h, r) != wire::decode_error::none)
                    return;
                requests++;
                if (r.operation == wire::op::done) {
                    done_received = true;
                    continue;
                }
                uint64_t none = 0;
                first_read_vaddr.compare_exchange_strong(none, r.vaddr);
                if (silent)
                    continue;
                const uint64_t len = uint64_t(r.nr_pages) * page_size;
                const bool in_range = r.vaddr >= _base && r.vaddr + len <= _base + _len;
                wire::page_reply rep{in_range ? wire::status::ok : wire::status::out_of_range,
                                     r.pid, in_range ? r.nr_pages : 0, r.vaddr, r.request_id};
                if (in_range) {
                    std::memcpy(pages.data(), _mem + (r.vaddr - _base), len);
                    for (uint32_t i = 0; i < r.nr_pages; i++)
                        sums[i] = page_checksum(pages.data() + i * page_size);
                    if (corrupt_always || corrupt_replies.fetch_sub(1) > 0)
                        pages[100] ^= std::byte{0xff};
                    if (index < counted_connections)
                        pages_by_connection[index] += r.nr_pages;
                }
                auto hb = wire::encode(rep);
                iovec iov[3] = {{hb.data(), hb.size()},
                                {sums.data(), rep.nr_pages * sizeof(uint64_t)},
                                {pages.data(), rep.nr_pages * page_size}};
                net::writev_full(conn, iov, 3, net::after(std::chrono::seconds(5)),
                                 "fake source reply");
            }
        } catch (const std::exception&) {
            // The test sees what the channel's end saw.
        }
    }

    const std::byte* _mem;
    uint64_t _base, _len;
    unique_fd _listener;
    std::thread _thread;
    std::atomic<bool> _stop{false};
    std::mutex _mutex;
    std::list<conn> _conns;
};

} // namespace ferry::test
