#include "transport/tcp/tcp_channel.hpp"

#include "core/error.hpp"
#include "core/page.hpp"
#include "wire/control.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cstring>

namespace ferry::transport::tcp {

tcp_channel::tcp_channel(std::unique_ptr<net::stream> conn, uint32_t max_pages, bool populate)
    : _conn(std::move(conn)), _max_pages(max_pages) {
    // The fault loop must never block on a half-arrived reply.
    net::set_nonblocking(_conn->fd(), true);
    _staging_map = mapping::anonymous(size_t(_max_pages) * page_size, "staging buffer",
                                      populate ? MAP_POPULATE : 0);
    _staging = _staging_map.data();
    _checksums = std::make_unique<uint64_t[]>(_max_pages);
}

tcp_channel::~tcp_channel() = default;

void tcp_channel::send(const wire::page_request& r) {
    auto bytes = wire::encode(r);
    net::write_full(*_conn, bytes, net::after(std::chrono::seconds(10)), "send page request");
}

bool tcp_channel::read_some(std::byte* dst, size_t want, size_t& have, size_t& budget) {
    const size_t n_want = std::min(want - have, std::max<size_t>(budget, 1));
    const ssize_t n = _conn->read_some(dst + have, n_want);
    if (n > 0) {
        have += size_t(n);
        _bytes_received += uint64_t(n);
        budget = budget > size_t(n) ? budget - size_t(n) : 0;
        return true;
    }
    if (n == 0)
        throw error("the source closed the page channel");
    return false; // would block
}

incoming_reply* tcp_channel::pump(size_t budget) {
    while (budget > 0) {
        switch (_stage) {
        case stage::header: {
            if (!read_some(_header_buf.data(), _header_buf.size(), _have, budget))
                return nullptr;
            if (_have < _header_buf.size())
                continue;
            _reply = incoming_reply{};
            if (auto err = wire::decode(_header_buf, _reply.header);
                err != wire::decode_error::none)
                throw error(fmt::format("malformed page reply: {}", wire::to_string(err)));
            if (_reply.header.nr_pages > _max_pages)
                throw error(fmt::format("page reply of {} pages exceeds the {} requested at most",
                                        _reply.header.nr_pages, _max_pages));
            _reply.checksums = _checksums.get();
            _reply.pages = _staging;
            _have = 0;
            _stage = _reply.header.nr_pages ? stage::checksums : stage::complete;
            if (_stage == stage::complete)
                return &_reply;
            continue;
        }
        case stage::checksums: {
            const size_t want = size_t(_reply.header.nr_pages) * sizeof(uint64_t);
            if (!read_some(reinterpret_cast<std::byte*>(_checksums.get()), want, _have, budget))
                return nullptr;
            if (_have < want)
                continue;
            _have = 0;
            _stage = stage::data;
            continue;
        }
        case stage::data: {
            const size_t want = size_t(_reply.header.nr_pages) * page_size;
            const bool progressed = read_some(_staging, want, _have, budget);
            _reply.pages_ready = uint32_t(_have / page_size);
            if (_have == want)
                _stage = stage::complete;
            if (!progressed || _stage == stage::complete)
                return &_reply;
            continue;
        }
        case stage::complete:
            return &_reply;
        }
    }
    return _stage == stage::data || _stage == stage::complete ? &_reply : nullptr;
}

void tcp_channel::finish_reply() noexcept {
    _stage = stage::header;
    _have = 0;
}

} // namespace ferry::transport::tcp
