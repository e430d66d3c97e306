// The pre-copy's staged pages (migrator --precopy): copies of the source's
// memory received before the freeze (precopy_receiver.hpp), and, once the
// source's last scan is in, which of them are still what the frozen tasks
// hold. The fault path and the local pass (fault_loop.cpp) install those
// with UFFDIO_COPY instead of fetching them.
//
// Filled by the receiver's thread, then published once; lookups after
// ready() read an immutable sorted index: no lock, no allocation.
#pragma once

#include "core/mapping.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace ferry::lazy {

class staged_pages {
  public:
    // Reserves room for `bytes` of pages (and some slack for pages that
    // come into being during the rounds). Pages beyond it are not staged.
    void reserve(uint64_t bytes);
    // Stores `nr` verified pages of `pid` from image address `addr`. A page
    // sent again replaces its earlier copy. Receiver's thread only.
    void store(uint32_t pid, uint64_t addr, uint32_t nr, const std::byte* data);
    // The runs (pid, [start, end)) whose staged copy is valid, in any order:
    // from now on lookups see them. Receiver's thread only, once.
    void publish(std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> valid);
    // Nothing staged will be published (the pre-copy failed or had none).
    void abandon() noexcept { _abandoned.store(true, std::memory_order_release); }

    [[nodiscard]] bool ready() const noexcept { return _ready.load(std::memory_order_acquire); }
    [[nodiscard]] bool abandoned() const noexcept {
        return _abandoned.load(std::memory_order_acquire);
    }
    // After ready(): the staged copy of page `img` of `pid` and the bytes
    // of valid staged copy that follow it contiguously (from `img` on), or
    // nullptr.
    [[nodiscard]] const std::byte* find(uint32_t pid, uint64_t img, uint64_t& bytes) const noexcept;
    // After ready(): the first image address in [img, limit) of `pid`
    // whose page is staged and valid, or `limit`.
    [[nodiscard]] uint64_t next(uint32_t pid, uint64_t img, uint64_t limit) const noexcept;

    [[nodiscard]] uint64_t pages_staged() const noexcept { return _used / 4096; }
    [[nodiscard]] uint64_t pages_valid() const noexcept { return _valid_pages; }
    [[nodiscard]] uint64_t pages_not_staged() const noexcept { return _overflow_pages; }

  private:
    struct extent { // staged pages [start, end) of a pid, at `offset` in the memory
        uint64_t end;
        uint64_t offset;
    };
    struct run {
        uint32_t pid;
        uint64_t start, end;
        const std::byte* data;
    };
    // The run containing or following (pid, img), or _runs.end().
    [[nodiscard]] std::vector<run>::const_iterator at_or_after(uint32_t pid,
                                                               uint64_t img) const noexcept;

    mapping _memory;
    uint64_t _used = 0;
    uint64_t _overflow_pages = 0;
    std::map<std::pair<uint32_t, uint64_t>, extent> _extents;
    std::vector<run> _runs; // sorted by (pid, start), disjoint
    uint64_t _valid_pages = 0;
    std::atomic<bool> _ready{false};
    std::atomic<bool> _abandoned{false};
};

} // namespace ferry::lazy
