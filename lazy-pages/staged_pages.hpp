// The pre-copy's staged pages (migrator --precopy): copies of the source's
// memory received before the freeze (precopy_receiver.hpp), and, once the
// source's last scan is in, which of them are still what the frozen tasks
// hold. The fault path and the local pass (fault_loop.cpp) install those
// with UFFDIO_COPY instead of fetching them.
//
// Filled by the receiver's thread, then published once or twice (the pages
// valid at the freeze, then with the last round's too); lookups after
// ready() read the latest immutable sorted index: no lock, no allocation.
// An index, once published, lives as long as this object.
#pragma once

#include "core/mapping.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
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
    // The runs (pid, [start, end)) whose staged copy is valid, in any order,
    // all of them: from now on lookups see them. Receiver's thread only.
    // A later publish may only add runs (the last round's): a page said
    // valid must not be stored again (any_valid).
    void publish(std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> valid);
    // After ready(): whether any page of pid's [start, end) is valid.
    [[nodiscard]] bool any_valid(uint32_t pid, uint64_t start, uint64_t end) const noexcept;
    // Nothing staged will be published (the pre-copy failed or had none).
    void abandon() noexcept { _abandoned.store(true, std::memory_order_release); }

    [[nodiscard]] bool ready() const noexcept {
        return _index.load(std::memory_order_acquire) != nullptr;
    }
    // How many lists have been published: a new one may make pages staged
    // that a pass over the lazy pages has gone by.
    [[nodiscard]] uint32_t publications() const noexcept {
        const index* ix = current();
        return ix ? ix->number : 0;
    }
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

    // A run of image pages of one pid.
    struct page_run {
        uint32_t pid;
        uint64_t start, end;
        friend bool operator<(const page_run& a, const page_run& b) noexcept {
            return a.pid != b.pid ? a.pid < b.pid : a.start < b.start;
        }
    };
    // After ready(): the pages of `pid` that arrived more than once, sorted
    // and disjoint. The source sends a page again when the workload wrote
    // it after it was sent, so these are what the workload was writing in
    // its last seconds before the freeze (at most max_rewritten_runs runs
    // are kept: past that, nearly everything is being written and no order
    // is better than another).
    [[nodiscard]] std::span<const page_run> rewritten(uint32_t pid) const noexcept;
    static constexpr size_t max_rewritten_runs = 65536;

    // These two are read by the report's thread while the receiver stores.
    [[nodiscard]] uint64_t pages_staged() const noexcept {
        return _used.load(std::memory_order_relaxed) / 4096;
    }
    [[nodiscard]] uint64_t pages_rewritten() const noexcept;
    [[nodiscard]] uint64_t pages_valid() const noexcept;
    [[nodiscard]] uint64_t pages_not_staged() const noexcept {
        return _overflow_pages.load(std::memory_order_relaxed);
    }

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
    struct index {
        std::vector<run> runs;           // sorted by (pid, start), disjoint
        std::vector<page_run> rewritten; // sorted and merged
        uint64_t valid_pages = 0;
        uint64_t rewritten_pages = 0;
        uint32_t number = 0; // 1 for the first list published
        // The run containing or following (pid, img), or runs.end().
        [[nodiscard]] std::vector<run>::const_iterator at_or_after(uint32_t pid,
                                                                   uint64_t img) const noexcept;
    };
    [[nodiscard]] const index* current() const noexcept {
        return _index.load(std::memory_order_acquire);
    }

    mapping _memory;
    std::atomic<uint64_t> _used{0};
    std::atomic<uint64_t> _overflow_pages{0};
    std::map<std::pair<uint32_t, uint64_t>, extent> _extents;
    std::vector<page_run> _rewritten;                     // as stored (receiver's thread)
    std::vector<std::unique_ptr<const index>> _published; // receiver's thread
    std::atomic<const index*> _index{nullptr};
    std::atomic<bool> _abandoned{false};
};

} // namespace ferry::lazy
