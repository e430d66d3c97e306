#include "fault_state.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/page.hpp"
#include "uffd_ops.hpp"
#include "unlocked_copies.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ferry::lazy {

lazy_process& fault_state::add(std::unique_ptr<lazy_process> p) {
    watch_uffd(p->uffd.get(), uint32_t(procs.size()));
    procs.push_back(std::move(p));
    return *procs.back();
}

void fault_state::issue(request_kind kind, lazy_process& p, uint64_t addr, uint64_t img_addr,
                        uint32_t nr_pages, uint64_t fault_addr, uint64_t fault_ns, uint8_t attempt,
                        uint8_t stream) {
    outstanding_request r;
    r.id = next_request_id++;
    r.proc = &p;
    r.addr = addr;
    r.img_addr = img_addr;
    r.nr_pages = nr_pages;
    r.fault_addr = fault_addr;
    r.issued_ns = monotonic_ns();
    r.fault_ns = fault_ns;
    r.attempt = attempt;
    r.kind = kind;
    r.stream = stream;
    wire::page_request wr{attempt ? wire::op::refetch : wire::op::get, p.image_pid, nr_pages,
                          img_addr, r.id};
    if (kind == request_kind::fault) {
        fault_reqs.push(r);
        p.in_flight.insert_identity(addr, addr + uint64_t(nr_pages) * page_size);
        fault_ch.send(wr);
    } else {
        background_stream& st = bg[stream];
        st.reqs.push(r);
        p.bg_in_flight.insert_identity(addr, addr + uint64_t(nr_pages) * page_size);
        p.bg_outstanding++;
        st.ch.send(wr);
    }
}

void fault_state::process_gone(lazy_process& p) {
    if (p.exited)
        return;
    const quiet_copies quiet(p, cfg.copy_quiet_wait); // no copy may use the uffd once it is closed
    p.exited = true;
    if (!p.forked)
        stats.pages_dropped += pages_in(p.lazy.bytes());
    p.lazy.clear();
    p.in_flight.clear();
    p.bg_in_flight.clear();
    unwatch_uffd(p.uffd.get());
    p.uffd.reset();
}

void fault_state::range_gone(lazy_process& p, uint64_t start, uint64_t end) {
    const uint64_t dropped = p.take_dropped(start, end);
    if (!p.forked)
        stats.pages_dropped += pages_in(dropped);
    p.in_flight.erase(start, end);
    p.bg_in_flight.erase(start, end);
    (void)uffd::wake(p.uffd.get(), start, end - start);
}

void fault_state::check_deadlines() const {
    const uint64_t now = monotonic_ns();
    const uint64_t limit = uint64_t(cfg.fetch_deadline.count()) * 1'000'000;
    const auto& fault = fault_reqs;
    if (!fault.empty() && now - fault.front().issued_ns > limit)
        throw error(fmt::format(
            "the source did not answer a fault request for pid {} page {:#x} within {} ms",
            fault.front().proc->image_pid, fault.front().img_addr, cfg.fetch_deadline.count()));
    for (const auto& st : bg)
        if (!st.reqs.empty() && now - st.reqs.front().issued_ns > limit)
            throw error(fmt::format(
                "the source did not answer a background request for pid {} within {} ms",
                st.reqs.front().proc->image_pid, cfg.fetch_deadline.count()));
}

bool fault_state::main_pass_open(uint64_t now) const noexcept {
    if (cfg.main_pass_before_resume)
        return lazy_areas_ready();
    if (!restore_finished)
        return false;
    const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(cfg.tasks_run_wait);
    return tasks_run || !expect_tasks_run || now - restore_finished_ns >= uint64_t(wait.count());
}

bool fault_state::finished() const noexcept {
    if (!restore_finished || !fault_reqs.empty() ||
        std::any_of(bg.begin(), bg.end(), [](const auto& st) { return !st.reqs.empty(); }))
        return false;
    return std::all_of(procs.begin(), procs.end(),
                       [](const auto& p) { return p->exited || p->lazy.empty(); });
}

} // namespace ferry::lazy
