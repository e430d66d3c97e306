#include "pool/pool_channel.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <fmt/format.h>

namespace ferry {

namespace {

// Best effort: the source may have ended after the hand-off (the pool
// holds every page), and no longer waits for "done".
void try_send_notice(page_channel& source, const wire::page_request& r) noexcept {
    try {
        source.send(r);
    } catch (const std::exception&) {
        return;
    }
}

} // namespace

pool_channel::pool_channel(const pool::pool_spec& spec, uint64_t object,
                           const criu::lazy_page_index& index,
                           std::shared_ptr<pool::pool_health> health,
                           std::unique_ptr<page_channel> source, uint32_t max_pages,
                           std::string name, double deadline_scale)
    : _index(index), _client(spec, object, std::move(health),
                             pool::pool_client::options{.name = std::move(name),
                                                        .read_slots = 32,
                                                        .max_read_pages = std::min(max_pages, 256u)}
                                 .with_deadline_scale(deadline_scale)),
      _source(std::move(source)), _max_pages(std::min(max_pages, 256u)) {
    if (_source)
        _max_pages = std::min(_max_pages, _source->max_pages());
}

uint64_t pool_channel::bytes_received() const noexcept {
    return _client.stats().bytes_read + (_source ? _source->bytes_received() : 0);
}

void pool_channel::send(const wire::page_request& r) {
    if (wire::is_notice(r.operation)) {
        // The source may have ended after the hand-off; it no longer waits.
        if (_source)
            try_send_notice(*_source, r);
        return;
    }
    if (_count == _queue.size())
        throw error("too many pool requests in flight");
    const auto first = _index.find(r.pid, r.vaddr, r.nr_pages);
    if (!first)
        throw error(fmt::format("pid {} pages [{:#x}, +{}) are not lazy pages of this restore",
                                r.pid, r.vaddr, r.nr_pages));
    _queue[(_head + _count) % _queue.size()] = pending{r, *first, -1, false};
    _count++;
    start_reads();
}

// Reads go out as soon as a read slot is free, so several requests are in
// flight at once; replies are still handed out in request order.
void pool_channel::start_reads() noexcept {
    for (size_t i = 0; i < _count; i++) {
        auto& p = _queue[(_head + i) % _queue.size()];
        if (p.read >= 0 || p.at_source)
            continue;
        const int slot = _client.begin_read(p.first_page, p.request.nr_pages,
                                            p.request.operation == wire::op::refetch
                                                ? pool::read_mode::distrust_data
                                                : pool::read_mode::normal);
        if (slot < 0)
            return;
        p.read = slot;
    }
}

incoming_reply* pool_channel::forward_to_source(pending& p, size_t budget) {
    if (!p.at_source) {
        if (!_source || _source_gone)
            throw error(fmt::format("pid {} pages [{:#x}, +{}) are not in the pool and there is "
                                    "no source to ask{}",
                                    p.request.pid, p.request.vaddr, p.request.nr_pages,
                                    _source_gone ? " (its channel failed: " + _source_error + ")"
                                                 : std::string()));
        if (p.read >= 0) {
            _client.end_read(p.read);
            p.read = -1;
        }
        try {
            _source->send(p.request);
        } catch (const std::exception& e) {
            throw error(fmt::format("pid {} pages [{:#x}, +{}) are not in the pool, and the "
                                    "source is gone: {}",
                                    p.request.pid, p.request.vaddr, p.request.nr_pages, e.what()));
        }
        p.at_source = true;
        _stats.source_pages += p.request.nr_pages;
    }
    return pump_source(budget);
}

// The source ends once the pool holds every page (the hand-off), and its
// channel may fail with requests still at it (a READ in flight as its
// region goes, a closed socket): those are read from the pool again. If
// the pool lacks them, the source really was needed and the error says so.
incoming_reply* pool_channel::pump_source(size_t budget) {
    try {
        return _source->pump(budget);
    } catch (const std::exception& e) {
        if (_source_gone)
            throw;
        _source_gone = true;
        _source_error = e.what();
        make_logger("pool")->warn("the source's channel failed ({}); reading what it still owed "
                                  "from the pool",
                                  e.what());
        for (size_t i = 0; i < _count; i++) {
            auto& q = _queue[(_head + i) % _queue.size()];
            if (q.at_source) {
                q.at_source = false;
                _stats.source_pages -= q.request.nr_pages;
            }
        }
        start_reads();
        return nullptr;
    }
}

incoming_reply* pool_channel::pump(size_t budget) {
    if (_count == 0)
        return nullptr;
    _client.progress();
    start_reads();
    auto& p = _queue[_head];
    if (p.at_source)
        return pump_source(budget);
    if (p.read < 0)
        return nullptr;
    switch (_client.poll_read(p.read)) {
    case pool::read_status::pending:
        return nullptr;
    case pool::read_status::missing:
        return forward_to_source(p, budget);
    case pool::read_status::lost:
        throw error(_client.read_error(p.read));
    case pool::read_status::ok:
        break;
    }
    _reply.header = wire::page_reply{wire::status::ok, p.request.pid, p.request.nr_pages,
                                     p.request.vaddr, p.request.request_id};
    _reply.pages = _client.read_pages(p.read);
    _reply.checksums = _client.read_checksums(p.read);
    _reply.pages_ready = p.request.nr_pages;
    return &_reply;
}

void pool_channel::finish_reply() noexcept {
    if (_count == 0)
        return;
    auto& p = _queue[_head];
    if (p.at_source && !_source_gone)
        _source->finish_reply();
    else if (p.read >= 0) {
        _client.end_read(p.read);
        _stats.pool_pages += p.request.nr_pages;
    }
    p = pending{};
    _head = (_head + 1) % _queue.size();
    _count--;
    start_reads();
}

} // namespace ferry
