#include "transport/request_loop.hpp"

#include "core/clock.hpp"
#include "core/log.hpp"
#include "core/mapping.hpp"
#include "core/page.hpp"
#include "sys/net.hpp"

#include <sys/resource.h>
#include <sys/uio.h>

#include <vector>

namespace ferry::transport {

namespace {
uint64_t voluntary_switches() noexcept {
    rusage u{};
    ::getrusage(RUSAGE_THREAD, &u);
    return uint64_t(u.ru_nvcsw);
}
} // namespace

uint64_t send_page_reply(net::stream& conn, const wire::page_reply& rep, const uint64_t* checksums,
                         const std::byte* pages, net::deadline until) {
    auto rh = wire::encode(rep);
    iovec iov[3] = {{rh.data(), rh.size()},
                    {const_cast<uint64_t*>(checksums), size_t(rep.nr_pages) * sizeof(uint64_t)},
                    {const_cast<std::byte*>(pages), size_t(rep.nr_pages) * page_size}};
    // Counted first: writev_full advances the iovecs as it writes.
    const uint64_t bytes = iov[0].iov_len + iov[1].iov_len + iov[2].iov_len;
    net::writev_full(conn, iov, rep.nr_pages ? 3 : 1, until, "send page reply");
    return bytes;
}

void serve_requests(net::stream& conn, page_source& src) {
    const auto log = make_logger("pagesrv", src.id());
    const auto buffer =
        mapping::anonymous(size_t(wire::max_pages_per_request) * page_size, "page reply buffer");
    std::byte* pages = buffer.data();
    std::vector<uint64_t> checksums(wire::max_pages_per_request);
    // What serving costs this host's CPU: requests, how often this thread
    // slept for one (its voluntary context switches: each is a wake-up),
    // read once at each end, and its CPU time, told to the migration after
    // each reply so that its account is current when the migrator asks for
    // it at the end.
    uint64_t requests = 0;
    const uint64_t slept_before = voluntary_switches();
    cpu_teller cpu(src);
    for (;;) {
        wire::header_bytes h;
        if (!net::read_full(conn, h, net::no_deadline, "read page request")) {
            log->info("page channel closed: {} requests served, {} wake-ups of its thread, "
                      "{:.1f} ms of its CPU",
                      requests, voluntary_switches() - slept_before, ns_to_ms(cpu.total_ns()));
            return; // the destination closed the channel
        }
        requests++;
        wire::page_request req;
        if (auto err = wire::decode(h, req); err != wire::decode_error::none) {
            log->warn("malformed page request ({}); closing the channel", wire::to_string(err));
            return;
        }
        if (req.operation == wire::op::done) {
            log->info("the destination has every page");
            cpu.tell();
            src.destination_done();
            continue;
        }
        if (req.operation == wire::op::discarded) {
            log->warn("the destination killed its copy before it ran");
            src.destination_discarded();
            continue;
        }
        const wire::status st = src.read_pages(req, pages, checksums.data());
        wire::page_reply rep{st, req.pid, st == wire::status::ok ? req.nr_pages : 0, req.vaddr,
                             req.request_id};
        const uint64_t bytes = send_page_reply(conn, rep, checksums.data(), pages,
                                               net::after(std::chrono::seconds(30)));
        src.count_sent(rep.nr_pages, bytes);
        cpu.tell();
        if (st != wire::status::ok)
            log->warn("refused pid {} [{:#x}, +{} pages): {}", req.pid, req.vaddr, req.nr_pages,
                      wire::to_string(st));
    }
}

} // namespace ferry::transport
