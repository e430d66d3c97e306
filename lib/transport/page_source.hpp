// The source's side of every transport: what a backend's server half serves
// pages from. The daemon's outgoing migration (the frozen tasks) is one.
#pragma once

#include "core/clock.hpp"
#include "criu/lazy_page_index.hpp"
#include "wire/page_wire.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry::transport {

class page_source {
  public:
    virtual ~page_source() = default;
    [[nodiscard]] virtual const std::string& id() const noexcept = 0;
    // The lazy pages, numbered as both ends number them.
    [[nodiscard]] virtual const criu::lazy_page_index& lazy_pages() const noexcept = 0;
    // Reads one request's pages into `pages` and their checksums into
    // `checksums`. Safe to call from several threads at once.
    [[nodiscard]] virtual wire::status read_pages(const wire::page_request& r, std::byte* pages,
                                                  uint64_t* checksums) = 0;
    virtual void count_sent(uint64_t pages, uint64_t bytes) noexcept = 0;
    // CPU time a thread spent serving this migration's pages, since its
    // last report.
    virtual void count_cpu(uint64_t /*ns*/) noexcept {}
    // The destination reported every page installed.
    virtual void destination_done() = 0;
    // The destination killed its restored copy before it ran: this source
    // is the only copy. Sources that hold no tasks have nothing to do.
    virtual void destination_discarded() {}
    // The migration's --deadline-scale: how much longer than on real hosts
    // a silent destination is waited for.
    [[nodiscard]] virtual double deadline_scale() const noexcept { return 1.0; }
};

// A serving thread's CPU, told to its page source as it goes: each tell()
// adds what the thread used since the last (one clock read, ~0.3 us).
class cpu_teller {
  public:
    explicit cpu_teller(page_source& src) noexcept : _src(src) {}
    void tell() noexcept {
        const uint64_t now = thread_cpu_ns();
        _src.count_cpu(now - _told);
        _told = now;
    }
    // The thread's CPU since this teller was made, told or not.
    [[nodiscard]] uint64_t total_ns() const noexcept { return thread_cpu_ns() - _start; }

  private:
    page_source& _src;
    const uint64_t _start = thread_cpu_ns();
    uint64_t _told = _start;
};

// What a backend keeps on the source for one migration (shm: its region and
// the thread that stages it). Owned by the migration.
class source_state {
  public:
    virtual ~source_state() = default;
    // The destination may resume: from now on the migration cannot go back
    // to the source, and the destination's restore is over.
    virtual void committed() {}
};

} // namespace ferry::transport
