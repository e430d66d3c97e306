#include "transport/shm/shm_channel.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/mapping.hpp"
#include "core/page.hpp"
#include "transport/staging/advertised_ranges.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>

namespace ferry::transport::shm {

using namespace staging;

shm_channel::shm_channel(std::unique_ptr<net::stream> control,
                         const FerryControl__PageChannelAccepted& accepted, link_model model,
                         uint32_t max_pages, bool urgent)
    : _control(std::move(control)), _model(model), _max_pages(max_pages), _urgent(urgent) {
    if (!accepted.shm_path || !accepted.has_shm_size)
        throw error("the source offered no shm region (does it support the shm fabric?)");
    unique_fd fd(::open(accepted.shm_path, O_RDWR | O_CLOEXEC));
    if (!fd)
        throw sys_error(fmt::format("open shm region {}", accepted.shm_path));
    struct stat st {};
    if (::fstat(fd.get(), &st) || uint64_t(st.st_size) != accepted.shm_size)
        throw error(fmt::format("shm region {} has the wrong size", accepted.shm_path));
    _map = mapping::of_file(fd.get(), accepted.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                            "shm region");
    _region.base = _map.data();
    const auto& h = _region.header();
    if (h.magic != region_magic || h.version != region_version || h.geo.total_size != _map.size())
        throw error(
            fmt::format("shm region {} is not a Ferry region of this version", accepted.shm_path));
    _index = advertised_index(accepted, h.geo.page_count);
    _max_pages = std::min(_max_pages, wire::max_pages_per_request);
}

uint64_t shm_channel::page_index(uint32_t pid, uint64_t vaddr, uint32_t nr_pages) const {
    if (const auto i = _index.find(pid, vaddr, nr_pages))
        return *i;
    throw error(fmt::format("pid {} pages [{:#x}, +{}) are not in the source's region", pid, vaddr,
                            nr_pages));
}

void shm_channel::post(const stage_request& r) {
    const uint64_t start = monotonic_ns();
    // The ring has room for far more than the requests in flight; if the
    // source has stopped draining it, the fetch deadline reports that.
    while (!_region.ring().try_push(r)) {
        if (monotonic_ns() - start > 1'000'000'000ull)
            throw error("the source's request ring stays full");
        __builtin_ia32_pause();
    }
    _region.header().stager_bell.ring();
    _model.charge(start, sizeof r); // a remote write of one ring entry
}

void shm_channel::send(const wire::page_request& r) {
    if (wire::is_notice(r.operation)) {
        auto bytes = wire::encode(r);
        net::write_full(*_control, bytes, net::after(std::chrono::seconds(10)), "send a notice");
        return;
    }
    if (_count == _queue.size())
        throw error("too many shm requests in flight");
    const uint64_t first = page_index(r.pid, r.vaddr, r.nr_pages);
    if (r.operation == wire::op::refetch) {
        // The copy we read was bad: forget it and have the source write it again.
        for (uint32_t i = 0; i < r.nr_pages; i++)
            _region.states()[first + i].store(page_absent, std::memory_order_relaxed);
        post({first, r.nr_pages, restage_flag});
    } else if (_urgent && _region.staged_prefix(first, r.nr_pages) < r.nr_pages) {
        post({first, r.nr_pages, 0});
    }
    _queue[(_head + _count) % _queue.size()] = pending{r, first, 0};
    _count++;
}

incoming_reply* shm_channel::pump(size_t budget) {
    if (_count == 0)
        return nullptr;
    (void)budget; // a one-sided read costs the reader no more than the model says
    pending& p = _queue[_head];
    const uint32_t staged = _region.staged_prefix(p.first_page, p.request.nr_pages);
    if (staged <= p.reported)
        return p.reported ? &_reply : nullptr;
    // The one-sided read of the newly staged pages and their checksums.
    const uint64_t start = monotonic_ns();
    const uint32_t fresh = staged - p.reported;
    _model.charge(start, size_t(fresh) * (page_size + sizeof(uint64_t)));
    _bytes_read += uint64_t(fresh) * (page_size + sizeof(uint64_t));
    p.reported = staged;
    _reply.header = wire::page_reply{wire::status::ok, p.request.pid, p.request.nr_pages,
                                     p.request.vaddr, p.request.request_id};
    _reply.checksums = _region.checksums() + p.first_page;
    _reply.pages = _region.page(p.first_page);
    _reply.pages_ready = staged;
    return &_reply;
}

void shm_channel::finish_reply() noexcept {
    if (_count == 0)
        return;
    _head = (_head + 1) % _queue.size();
    _count--;
}

} // namespace ferry::transport::shm
