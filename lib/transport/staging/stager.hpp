// Source side of the one-sided fabrics (shm, rdma): lays an outgoing
// migration's lazy pages out in a staging region (region.hpp) and keeps it
// filled. One thread stages pages from the frozen tasks into the region:
// requested pages first (from the region's request ring), everything else
// in layout order when no request waits. Readers then copy pages one-sided,
// without this daemon's CPU: shm maps the region, rdma registers it.
#pragma once

#include "core/mapping.hpp"
#include "core/unique_fd.hpp"
#include "criu/lazy_page_index.hpp"
#include "transport/page_source.hpp"
#include "transport/staging/region.hpp"

#include <spdlog/logger.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace ferry::transport::staging {

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

// Estimates a tree's lazy areas before the freeze: the private, writable,
// anonymous mappings of each of its processes (/proc/PID/maps), in bytes.
uint64_t private_writable_bytes_of_tree(pid_t root);

// Before the freeze: a region file in /dev/shm sized for the tree's lazy
// areas and a little slack for what it maps meanwhile.
region_file prepare_region(pid_t root, const std::string& id);
// At registration: `prepared` if there is one, else a new file (it grows
// as the stager lays the pages out).
region_file take_region(region_file prepared, const std::string& id);

class stager {
  public:
    // Lays the migration's lazy pages out in `file` (growing it if needed)
    // and starts serving the destination's requests to stage pages.
    // `staged`, if set, is called on the staging thread after each batch of
    // pages is staged (rdma answers waiting requests).
    stager(page_source& src, region_file file, std::function<void()> staged = {});
    stager(const stager&) = delete;
    stager& operator=(const stager&) = delete;
    // Stops staging, then unmaps and unlinks the region; readers that mapped
    // it keep their mapping.
    ~stager();

    [[nodiscard]] const std::filesystem::path& file() const noexcept { return _file.path(); }
    [[nodiscard]] uint64_t size() const noexcept { return _file.size(); }
    // Where each lazy page lies in the region: the index both ends share.
    [[nodiscard]] const criu::lazy_page_index& index() const noexcept { return _src.lazy_pages(); }
    [[nodiscard]] region_view region() const noexcept { return _region; }
    // From now on every page is staged, in address order, between requests.
    // Called at the commit: before it, the destination is still restoring,
    // and on one machine (a testbed) eager staging took a CPU from it: an
    // shm migration's lazy-pages took 50-60 ms instead of ~3 to start.
    void stage_everything();

  private:
    void run();
    // Stages pages [first, first + count), which may span several ranges.
    void stage(uint64_t first, uint64_t count, bool restage);

    page_source& _src;
    std::shared_ptr<spdlog::logger> _log; // the migration's
    region_file _file;
    region_view _region;
    std::function<void()> _staged;
    std::atomic<bool> _stop{false};
    std::atomic<bool> _eager{false};
    bool _read_error_logged = false;
    uint64_t _started_ns = 0;
    std::thread _thread;
};

} // namespace ferry::transport::staging
