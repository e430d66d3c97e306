// Source side of the shm fabric: registers an outgoing migration's lazy pages
// as a shared-memory region (shm_region.hpp) and keeps it filled. One
// thread stages pages from the frozen tasks into the region: requested pages
// first (from the region's request ring), everything else in layout order
// when no request waits. Readers then copy pages one-sided, without this
// daemon's CPU.
#pragma once

#include "core/mapping.hpp"
#include "core/unique_fd.hpp"
#include "criu/lazy_page_index.hpp"
#include "transport/page_source.hpp"
#include "transport/shm/shm_region.hpp"

#include <spdlog/logger.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace ferry::transport::shm {

// The shared-memory file behind a region: created (and its pages allocated)
// ahead of time if the migrator prepared the migration before the freeze,
// otherwise on first use. Unlinked when dropped.
class region_file {
  public:
    region_file() = default;
    // Creates `dir`/ferry-<id>.region of `bytes`, with its pages allocated
    // and mapped here, so that staging later neither allocates nor faults.
    static region_file create(const std::filesystem::path& dir, const std::string& id,
                              uint64_t bytes);
    region_file(region_file&& o) noexcept;
    region_file& operator=(region_file&& o) noexcept;
    ~region_file();

    // Grows the file and its mapping.
    void ensure_size(uint64_t bytes);
    [[nodiscard]] int fd() const noexcept { return _fd.get(); }
    [[nodiscard]] std::byte* map() const noexcept { return _map.data(); }
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return _path; }
    [[nodiscard]] uint64_t size() const noexcept { return _size; }
    [[nodiscard]] explicit operator bool() const noexcept { return _fd.valid(); }

  private:
    void unlink() noexcept;

    unique_fd _fd; // while valid, the file at _path is ours to unlink
    std::filesystem::path _path;
    uint64_t _size = 0;
    mapping _map;
};

// Estimates a tree's lazy memory: the anonymous memory of each of its
// processes (smaps_rollup), in bytes.
uint64_t anonymous_bytes_of_tree(pid_t root);

class shm_stager {
  public:
    // Lays the migration's lazy pages out in `file` (growing it if needed)
    // and starts staging.
    shm_stager(page_source& src, region_file file);
    shm_stager(const shm_stager&) = delete;
    shm_stager& operator=(const shm_stager&) = delete;
    // Stops staging, then unmaps and unlinks the region; readers that mapped
    // it keep their mapping.
    ~shm_stager();

    [[nodiscard]] const std::filesystem::path& file() const noexcept { return _file.path(); }
    [[nodiscard]] uint64_t size() const noexcept { return _file.size(); }
    // Where each lazy page lies in the region: the index both ends share.
    [[nodiscard]] const criu::lazy_page_index& index() const noexcept { return _src.lazy_pages(); }

  private:
    void run();
    // Stages pages [first, first + count), which may span several ranges.
    void stage(uint64_t first, uint64_t count, bool restage);

    page_source& _src;
    std::shared_ptr<spdlog::logger> _log; // the migration's
    region_file _file;
    region_view _region;
    std::atomic<bool> _stop{false};
    bool _read_error_logged = false;
    uint64_t _started_ns = 0;
    std::thread _thread;
};

} // namespace ferry::transport::shm
