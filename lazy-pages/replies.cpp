// Replies, in the order the channel answers requests: the front of the
// request ring is always the request the next reply belongs to. A page is
// installed only after its checksum matched, and only if it is still lazy
// in its process's current map (uffd_events.cpp changes the map as events
// arrive): pages unmapped, removed or installed meanwhile are dropped. A
// corrupt page is fetched again once, and a second corruption stops the
// migration rather than install it.
#include "replies.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/page.hpp"
#include "uffd_ops.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ferry::lazy {

namespace {

// The faulting page of `req` is in place (or was already): its service time.
void note_fault_served(fault_state& s, const outstanding_request& req, uint64_t now) noexcept {
    s.fault_latency.record(now - req.fault_ns);
    s.first.record(req.fault_addr, req.fault_ns, now);
}

// Installs verified pages [first, first + count) of `req` whose data starts
// at `data`. Each page is checked against the process's current lazy map:
// pages unmapped, removed or already installed meanwhile are skipped.
void install_run(fault_state& s, outstanding_request& req, const std::byte* data, uint32_t first,
                 uint32_t count) {
    lazy_process& p = *req.proc;
    uint64_t addr = req.addr + uint64_t(first) * page_size;
    uint64_t img = req.img_addr + uint64_t(first) * page_size;
    uint32_t left = count;
    while (left > 0 && !p.exited) {
        const auto r = p.lazy.find(addr);
        if (!r || r->img_of(addr) != img) {
            s.stats.pages_duplicate++;
            if (addr == req.fault_addr)
                note_fault_served(s, req, monotonic_ns());
            addr += page_size, img += page_size, data += page_size, left--;
            continue;
        }
        const uint32_t run = uint32_t(std::min<uint64_t>(left, pages_in(r->end - addr)));
        const uint64_t copy_start = monotonic_ns();
        const auto res = uffd::copy(p.uffd.get(), addr, data, uint64_t(run) * page_size);
        uint32_t done = uint32_t(pages_in(res.bytes));
        if (res.result == uffd::outcome::exists)
            done++; // the page at addr + done was present already: nothing to install there
        p.take_installed(addr, addr + uint64_t(done) * page_size);

        // Account for what landed.
        const bool has_fault_page =
            req.fault_addr >= addr && req.fault_addr < addr + uint64_t(done) * page_size;
        if (has_fault_page) {
            const uint64_t now = monotonic_ns();
            note_fault_served(s, req, now);
            s.install_latency.record(now - copy_start);
        }
        if (p.forked) {
            s.stats.pages_forked += done;
        } else {
            s.stats.pages_faulted += has_fault_page ? 1 : 0;
            s.stats.pages_prefetched += done - (has_fault_page ? 1 : 0);
        }
        if (!copy_may_go_on(s, p, res.result, res.err, addr + uint64_t(done) * page_size,
                            uint64_t(left - done) * page_size))
            return;
        addr += uint64_t(done) * page_size;
        img += uint64_t(done) * page_size;
        data += size_t(done) * page_size;
        left -= done;
    }
}

// Installs verified pages [req.consumed, upto) of a reply.
void install_verified(fault_state& s, outstanding_request& req, const incoming_reply& reply,
                      uint32_t upto) {
    const uint32_t first = req.consumed;
    if (upto > first && !req.proc->exited) {
        auto install = [&](uint32_t from, uint32_t to) {
            if (to > from)
                install_run(s, req, reply.pages + size_t(from) * page_size, from, to - from);
        };
        // The faulting page alone first: its copy wakes the thread, and the
        // window's other pages (a few microseconds each into fresh memory)
        // need not delay it.
        const uint64_t fault_index = (req.fault_addr - req.addr) / page_size;
        if (req.fault_addr >= req.addr && fault_index >= first && fault_index < upto) {
            const auto k = uint32_t(fault_index);
            install(k, k + 1);
            install(first, k);
            install(k + 1, upto);
        } else {
            install(first, upto);
        }
    }
    req.consumed = upto;
}

void finish_request(fault_state& s, const outstanding_request& req) {
    lazy_process& p = *req.proc;
    p.bg_swept = false; // what it asked for may be lazy still
    if (req.kind == request_kind::fault)
        p.in_flight.erase(req.addr, req.addr + uint64_t(req.nr_pages) * page_size);
    else {
        p.bg_in_flight.erase(req.addr, req.addr + uint64_t(req.nr_pages) * page_size);
        p.bg_outstanding--;
    }
    if (req.bad_from == ~0u || p.exited)
        return;
    const uint32_t bad = req.nr_pages - req.bad_from;
    if (req.attempt >= 1)
        throw error(fmt::format(
            "checksum mismatch again for pid {} page {:#x}: refusing to install a corrupt page",
            p.image_pid, req.img_addr + uint64_t(req.bad_from) * page_size));
    s.stats.pages_refetched += bad;
    const uint64_t addr = req.addr + uint64_t(req.bad_from) * page_size;
    const uint64_t img = req.img_addr + uint64_t(req.bad_from) * page_size;
    s.issue(req.kind, p, addr, img, bad, req.fault_addr >= addr ? req.fault_addr : ~0ull,
            req.fault_ns, 1, req.stream);
}

} // namespace

// After a UFFDIO_COPY that ended with `result`, [at, at + bytes_left) not
// yet installed: true if installing may go on (done, or one page found
// present). Otherwise handles the outcome, and the caller installs no more
// of its range.
bool copy_may_go_on(fault_state& s, lazy_process& p, uffd::outcome result, int err, uint64_t at,
                    uint64_t bytes_left) {
    switch (result) {
    case uffd::outcome::done:
    case uffd::outcome::exists:
        return true;
    case uffd::outcome::retry:
        // The address space is changing (fork, mremap): leave the rest lazy
        // and let blocked threads fault again once events are read.
        (void)uffd::wake(p.uffd.get(), at, bytes_left);
        return false;
    case uffd::outcome::target_gone:
        s.process_gone(p);
        return false;
    case uffd::outcome::unmapped:
        // No registered area holds the page at `at` any more: the
        // application unmapped or replaced it, and its event, if one came,
        // was read before this copy was claimed. Nobody can fault on it
        // through this uffd again, so it is dropped, not fatal; a thread
        // blocked on it retries its access and meets whatever is there now.
        s.range_gone(p, at, at + page_size);
        return false;
    case uffd::outcome::fatal:
        throw sys_error(fmt::format("UFFDIO_COPY pid {} {:#x} +{} pages", p.image_pid, at,
                                    pages_in(bytes_left)),
                        err);
    }
    return false;
}

uint32_t take_landed(fault_state& s, lazy_process& p, const unlocked_run& run, uint64_t& counter) {
    // On EEXIST the page after the copied ones was present already.
    const uint32_t landed = run.copied + (run.result == uffd::outcome::exists ? 1 : 0);
    // Only what is still lazy counts: a fault's install or an event may
    // have taken pages off the map since the claim.
    const uint64_t erased =
        pages_in(p.take_installed(run.addr, run.addr + uint64_t(landed) * page_size));
    (p.forked ? s.stats.pages_forked : counter) += erased;
    return landed;
}

void check_reply(const outstanding_request& req, const incoming_reply& reply) {
    const auto& h = reply.header;
    if (h.request_id != req.id || h.pid != req.proc->image_pid || h.vaddr != req.img_addr)
        throw error(fmt::format("page reply {} does not match request {}", h.request_id, req.id));
    if (h.result != wire::status::ok)
        throw error(fmt::format("the source could not serve pid {} pages [{:#x}, +{}): {}", h.pid,
                                h.vaddr, req.nr_pages, wire::to_string(h.result)));
    if (h.nr_pages != req.nr_pages)
        throw error(
            fmt::format("the source sent {} pages for a request of {}", h.nr_pages, req.nr_pages));
}

void verify_pages(outstanding_request& req, const incoming_reply& reply, uint32_t upto) noexcept {
    if (req.bad_from != ~0u)
        return;
    uint32_t good = req.verified;
    while (good < upto &&
           page_checksum(reply.pages + size_t(good) * page_size) == reply.checksums[good])
        good++;
    if (good < upto)
        req.bad_from = good;
    req.verified = good;
}

void drain_fault_replies(fault_state& s, page_channel& ch) {
    for (;;) {
        incoming_reply* reply = ch.pump(SIZE_MAX);
        if (!reply)
            return;
        if (s.fault_reqs.empty())
            throw error("the source sent a page reply nobody asked for");
        outstanding_request& req = s.fault_reqs.front();
        check_reply(req, *reply);
        if (!reply->complete())
            return; // fault replies are installed whole
        const bool first_look = req.verified == 0;
        verify_pages(req, *reply, reply->pages_ready);
        if (first_look && req.fault_addr != ~0ull && req.attempt == 0) // not a prefetch
            s.fetch_latency.record(monotonic_ns() - req.fault_ns);
        install_verified(s, req, *reply, req.verified);
        // Pop before finishing: a refetch pushes onto the same ring.
        const outstanding_request done = req;
        s.fault_reqs.pop();
        ch.finish_reply();
        finish_request(s, done);
    }
}

void claim_background_slice(fault_state& s, background_stream& st, const incoming_reply& reply,
                            background_slice& slice) {
    const outstanding_request& req = st.reqs.front();
    lazy_process& p = *req.proc;
    slice.count = 0;
    uint32_t at = req.consumed;
    const uint32_t end = std::min(req.verified, req.consumed + background_slice::max_pages);
    if (p.exited) {
        slice.upto = end; // nothing to install: the pages went with the process
        return;
    }
    while (at < end && slice.count < slice.runs.size()) {
        const uint64_t addr = req.addr + uint64_t(at) * page_size;
        const auto r = p.lazy.find(addr);
        if (!r || r->img_of(addr) != req.img_addr + uint64_t(at) * page_size) {
            s.stats.pages_duplicate++; // installed, unmapped or removed meanwhile
            at++;
            continue;
        }
        const auto run = uint32_t(std::min<uint64_t>(end - at, pages_in(r->end - addr)));
        slice.runs[slice.count++] =
            unlocked_run{addr, reply.pages + size_t(at) * page_size, at, run};
        at += run;
    }
    slice.upto = at;
    if (slice.count > 0)
        begin_unlocked_copies(p);
}

bool commit_background_slice(fault_state& s, background_stream& st, const incoming_reply& reply,
                             const background_slice& slice) {
    outstanding_request& req = st.reqs.front();
    lazy_process& p = *req.proc;
    uint32_t consumed = slice.upto;
    p.end_recent_generation(monotonic_ns(), false);
    for (const unlocked_run& run : slice.claimed()) {
        const uint32_t landed = take_landed(s, p, run, s.stats.pages_background);
        if (run.whole())
            continue;
        // Stopped short. After a lock holder's quiet (done) or a present
        // page the rest goes next turn; otherwise the slice's rest is left.
        if (copy_may_go_on(s, p, run.result, run.err, run.addr + uint64_t(run.copied) * page_size,
                           uint64_t(run.pages - run.copied) * page_size))
            consumed = run.first + landed;
        break;
    }
    req.consumed = consumed;
    if (req.consumed < req.verified || !reply.complete())
        return false;
    // Pop before finishing: a refetch pushes onto the same ring.
    const outstanding_request done = req;
    st.reqs.pop();
    st.ch.finish_reply();
    finish_request(s, done);
    return true;
}

} // namespace ferry::lazy
