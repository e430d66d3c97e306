// Source side of the shm fabric: registers an outgoing migration's lazy pages
// as a shared-memory region (lib/shm_region.hpp) and keeps it filled. One
// thread stages pages from the frozen tasks into the region: requested pages
// first (from the region's request ring), everything else in layout order
// when no request waits. Readers then copy pages one-sided, without this
// daemon's CPU.
#pragma once

#include "shm_region.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace ferry::pagesrv {

class outgoing_migration;

class shm_stager {
  public:
    struct range {
        uint32_t pid;
        uint64_t start, end, first_page;
    };

    // Creates the region file in `dir` (tmpfs) and starts staging.
    shm_stager(outgoing_migration& m, const std::filesystem::path& dir);
    shm_stager(const shm_stager&) = delete;
    shm_stager& operator=(const shm_stager&) = delete;
    // Stops staging, then unmaps and unlinks the region; readers that mapped
    // it keep their mapping.
    ~shm_stager();

    [[nodiscard]] const std::filesystem::path& file() const noexcept { return _file; }
    [[nodiscard]] uint64_t size() const noexcept { return _size; }
    [[nodiscard]] const std::vector<range>& ranges() const noexcept { return _ranges; }

  private:
    void run();
    // Stages pages [first, first + count), which may span several ranges.
    void stage(uint64_t first, uint64_t count, bool restage);

    outgoing_migration& _m;
    std::filesystem::path _file;
    std::vector<range> _ranges; // in layout order, first_page ascending
    uint64_t _size = 0;
    std::byte* _map = nullptr;
    shm::region_view _region;
    std::atomic<bool> _stop{false};
    bool _read_error_logged = false;
    uint64_t _started_ns = 0;
    std::thread _thread;
};

} // namespace ferry::pagesrv
