#include "transport/staging/stager.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/page.hpp"
#include "core/unique_fd.hpp"
#include "sys/proc.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace ferry::transport::staging {

namespace {

constexpr uint64_t eager_chunk_pages = 16;       // between two looks at the ring
constexpr uint64_t spin_after_work_ns = 200'000; // then sleep on the doorbell
constexpr uint64_t sleep_ns = 20'000'000;

} // namespace

region_file region_file::create(const std::filesystem::path& dir, const std::string& id,
                                uint64_t bytes) {
    region_file f;
    f._path = dir / fmt::format("ferry-{}.region", id);
    f._fd.reset(::open(f._path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!f._fd)
        throw sys_error("create shm region " + f._path.string());
    f.ensure_size(bytes);
    return f;
}

region_file::region_file(region_file&& o) noexcept
    : _fd(std::move(o._fd)), _path(std::move(o._path)), _size(o._size), _map(std::move(o._map)) {}

region_file& region_file::operator=(region_file&& o) noexcept {
    if (this != &o) {
        unlink();
        _fd = std::move(o._fd);
        _path = std::move(o._path);
        _size = o._size;
        _map = std::move(o._map);
    }
    return *this;
}

region_file::~region_file() {
    unlink();
}

// Readers that mapped the region keep their mapping; the name goes.
void region_file::unlink() noexcept {
    if (_fd)
        ::unlink(_path.c_str());
    _map.reset();
    _fd.reset();
}

// Allocates (and zeroes) every page now, so staging later only copies, and
// maps them all: shared file pages are otherwise mapped one write fault at a
// time (no fault-around for writes), ~65k faults per 256 MiB on the staging
// path. A region that grows (one prepared before the freeze is a little
// short when the lazy areas outgrow the anonymous memory) allocates and maps
// only what it gains: mapping it all again took ~48 ms per 256 MiB at the
// registration, inside the downtime.
void region_file::ensure_size(uint64_t bytes) {
    if (bytes <= _size)
        return;
    if (::fallocate(_fd.get(), 0, 0, off_t(bytes)))
        throw sys_error("allocate shm region " + _path.string());
    if (_map)
        _map.grow(bytes, true, "shm region " + _path.string());
    else
        _map = mapping::of_file(_fd.get(), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                                "shm region " + _path.string());
    _size = bytes;
}

uint64_t private_writable_bytes_of_tree(pid_t root) {
    uint64_t total = 0;
    for (const auto& [inner, host] : proc::map_tree_by_inner_pid(root)) {
        std::ifstream in(fmt::format("/proc/{}/maps", host));
        std::string line;
        while (std::getline(in, line)) {
            // start-end perms offset dev inode [path]
            unsigned long start = 0, end = 0, offset = 0, inode = 0;
            char perms[5] = {};
            char dev[16] = {};
            if (std::sscanf(line.c_str(), "%lx-%lx %4s %lx %15s %lu", &start, &end, perms, &offset,
                            dev, &inode) != 6)
                continue;
            if (perms[0] == 'r' && perms[1] == 'w' && perms[3] == 'p' && inode == 0)
                total += end - start;
        }
    }
    return total;
}

namespace {
// tmpfs on every Linux.
const std::filesystem::path region_dir = "/dev/shm";
} // namespace

region_file prepare_region(pid_t root, const std::string& id) {
    // CRIU dumps a lazy area whole (criu-patches/0006), untouched pages too,
    // so the region is laid out for the areas, not for the memory in them.
    const uint64_t bytes = private_writable_bytes_of_tree(root);
    return region_file::create(region_dir, id, layout(bytes / page_size).total_size + bytes / 64);
}

region_file take_region(region_file prepared, const std::string& id) {
    return prepared ? std::move(prepared) : region_file::create(region_dir, id, 0);
}

stager::stager(page_source& src, region_file file, std::function<void()> staged)
    : _src(src), _log(make_logger("pagesrv", src.id())), _file(std::move(file)),
      _staged(std::move(staged)) {
    const region_geometry geo = layout(_src.lazy_pages().total_pages());
    // A region prepared before the freeze may be larger than needed; the
    // reader maps what the handshake says.
    _file.ensure_size(geo.total_size);
    _region.base = _file.map();
    // Zero-filled, so every page state starts absent.
    auto& h = _region.header();
    h.geo = geo;
    h.geo.total_size = _file.size();
    h.stager_bell.init();
    h.staged_pages.store(0, std::memory_order_relaxed);
    h.stager_alive.store(1, std::memory_order_relaxed);
    _region.ring().init();
    h.version = region_version;
    std::atomic_thread_fence(std::memory_order_release);
    h.magic = region_magic; // last: a reader that sees the magic sees the rest
    _thread = std::thread([this] {
        (void)::pthread_setname_np(::pthread_self(), "stager"); // for top -H and traces
        run();
    });
}

stager::~stager() {
    _stop = true;
    _region.header().stager_bell.ring();
    _thread.join();
    _region.header().stager_alive.store(0, std::memory_order_release);
}

void stager::stage_everything() {
    _started_ns = monotonic_ns();
    _eager.store(true, std::memory_order_release);
    _region.header().stager_bell.ring();
}

void stager::stage(uint64_t first, uint64_t count, bool restage) {
    const uint64_t end = std::min(first + count, _region.header().geo.page_count);
    while (first < end) {
        const auto& r = _src.lazy_pages().range_of(first);
        const uint64_t range_pages = (r.end - r.start) / page_size;
        uint64_t run_end = std::min(end, r.first_page + range_pages);
        // Skip what is staged already, unless asked to write it again.
        auto* states = _region.states();
        if (!restage) {
            while (first < run_end && states[first].load(std::memory_order_relaxed) == page_staged)
                first++;
            uint64_t stop = first;
            while (stop < run_end && states[stop].load(std::memory_order_relaxed) != page_staged)
                stop++;
            run_end = stop;
        }
        if (first == run_end)
            continue;
        const uint32_t n =
            uint32_t(std::min<uint64_t>(run_end - first, wire::max_pages_per_request));
        const wire::page_request req{wire::op::get, r.pid, n,
                                     r.start + (first - r.first_page) * page_size, 0};
        const wire::status st =
            _src.read_pages(req, _region.page(first), _region.checksums() + first);
        if (st != wire::status::ok) {
            if (!_read_error_logged)
                _log->error("cannot stage pid {} {:#x}: {}", r.pid, req.vaddr, wire::to_string(st));
            _read_error_logged = true;
            first += n; // left absent: the reader's fetch deadline reports it
            continue;
        }
        for (uint32_t i = 0; i < n; i++)
            states[first + i].store(page_staged,
                                    std::memory_order_release); // pairs with readers' acquire
        _region.header().staged_pages.fetch_add(n, std::memory_order_relaxed);
        _src.count_sent(n, uint64_t(n) * (page_size + sizeof(uint64_t)));
        first += n;
    }
    if (_staged)
        _staged();
}

void stager::run() {
    auto& ring = _region.ring();
    auto& bell = _region.header().stager_bell;
    const uint64_t total = _region.header().geo.page_count;
    uint64_t cursor = 0;
    uint64_t last_work = monotonic_ns();
    cpu_teller cpu(_src);
    while (!_stop.load(std::memory_order_relaxed)) {
        bool worked = false;
        stage_request req;
        while (ring.try_pop(req)) {
            stage(req.first_page, req.count, req.flags & restage_flag);
            worked = true;
        }
        if (cursor < total && _eager.load(std::memory_order_acquire)) {
            stage(cursor, eager_chunk_pages, false);
            cursor += eager_chunk_pages;
            worked = true;
            if (cursor >= total)
                _log->info("{} pages staged in {:.1f} ms", total,
                           ns_to_ms(monotonic_ns() - _started_ns));
        }
        const uint64_t now = monotonic_ns();
        if (worked) {
            last_work = now;
            continue;
        }
        if (now - last_work < spin_after_work_ns) {
            __builtin_ia32_pause();
            continue;
        }
        cpu.tell(); // before each sleep: the account is current whenever it idles
        bell.wait(
            [&] {
                return !ring.empty() || _stop.load(std::memory_order_relaxed) ||
                       (cursor < total && _eager.load(std::memory_order_relaxed));
            },
            sleep_ns);
    }
    cpu.tell();
}

} // namespace ferry::transport::staging
