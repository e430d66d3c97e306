#include "criu/criu_image.hpp"

#include "core/unique_fd.hpp"
#include "criu/criu_images.pb-c.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace ferry::criu {

namespace {

// An entry longer than this is corruption, not a real image.
constexpr uint32_t max_entry_size = 64u << 20;

uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v); // CRIU writes host-endian; Ferry runs on little-endian x86-64.
    return v;
}

template <typename Msg>
struct unpacked_deleter {
    void (*free_fn)(Msg*, ProtobufCAllocator*);
    void operator()(Msg* m) const {
        if (m)
            free_fn(m, nullptr);
    }
};

template <typename Msg>
using unpacked_ptr = std::unique_ptr<Msg, unpacked_deleter<Msg>>;

template <typename Msg>
unpacked_ptr<Msg> unpack(std::span<const uint8_t> entry,
                         Msg* (*unpack_fn)(ProtobufCAllocator*, size_t, const uint8_t*),
                         void (*free_fn)(Msg*, ProtobufCAllocator*), const std::string& name,
                         size_t index) {
    Msg* m = unpack_fn(nullptr, entry.size(), entry.data());
    if (!m)
        throw image_error(fmt::format("{}: entry {} does not decode", name, index));
    return unpacked_ptr<Msg>(m, unpacked_deleter<Msg>{free_fn});
}

} // namespace

bool vma::lazy_capable() const noexcept {
    const bool anon_private = (flags & MAP_ANONYMOUS) && (flags & MAP_PRIVATE);
    const bool pinned = flags & (MAP_LOCKED | MAP_HUGETLB);
    const bool special = status & (vma_area_vdso | vma_area_vvar | vma_area_vsyscall);
    return anon_private && !pinned && !special;
}

std::vector<std::span<const uint8_t>> split_entries(std::span<const uint8_t> file,
                                                    uint32_t type_magic, const std::string& name) {
    size_t off = 0;
    if (type_magic != inventory_magic) {
        if (file.size() < 4 || load_u32(file.data()) != common_magic)
            throw image_error(fmt::format("{}: bad common magic", name));
        off = 4;
    }
    if (file.size() < off + 4 || load_u32(file.data() + off) != type_magic)
        throw image_error(fmt::format("{}: bad image magic (want {:#x})", name, type_magic));
    off += 4;

    std::vector<std::span<const uint8_t>> entries;
    while (off < file.size()) {
        if (file.size() - off < 4)
            throw image_error(fmt::format("{}: truncated entry header at offset {}", name, off));
        const uint32_t len = load_u32(file.data() + off);
        off += 4;
        if (len > max_entry_size || len > file.size() - off)
            throw image_error(fmt::format("{}: entry of {} bytes at offset {} overruns the file",
                                          name, len, off - 4));
        entries.push_back(file.subspan(off, len));
        off += len;
    }
    return entries;
}

inventory parse_inventory(std::span<const uint8_t> file) {
    const std::string name = "inventory.img";
    auto entries = split_entries(file, inventory_magic, name);
    if (entries.size() != 1)
        throw image_error(fmt::format("{}: expected one entry, found {}", name, entries.size()));
    auto m = unpack(entries[0], criu_image__inventory_entry__unpack,
                    criu_image__inventory_entry__free_unpacked, name, 0);
    inventory inv;
    inv.img_version = m->img_version;
    if (inv.img_version != supported_img_version)
        throw image_error(fmt::format("{}: image version {} is not the supported {}", name,
                                      inv.img_version, supported_img_version));
    if (m->plugins_entry)
        for (size_t i = 0; i < m->plugins_entry->n_plugins; i++)
            inv.plugins.emplace_back(m->plugins_entry->plugins[i]);
    return inv;
}

std::vector<task> parse_pstree(std::span<const uint8_t> file) {
    const std::string name = "pstree.img";
    auto entries = split_entries(file, pstree_magic, name);
    if (entries.empty())
        throw image_error(name + ": no tasks");
    std::vector<task> tasks;
    for (size_t i = 0; i < entries.size(); i++) {
        auto m = unpack(entries[i], criu_image__pstree_entry__unpack,
                        criu_image__pstree_entry__free_unpacked, name, i);
        task t;
        t.pid = m->pid;
        t.ppid = m->ppid;
        t.threads.assign(m->threads, m->threads + m->n_threads);
        if (t.pid == 0)
            throw image_error(fmt::format("{}: entry {} has pid 0", name, i));
        tasks.push_back(std::move(t));
    }
    if (tasks[0].ppid != 0)
        throw image_error(name + ": the first task is not the root (ppid != 0)");
    return tasks;
}

std::vector<vma> parse_mm(std::span<const uint8_t> file, const std::string& name) {
    auto entries = split_entries(file, mm_magic, name);
    if (entries.size() != 1)
        throw image_error(fmt::format("{}: expected one entry, found {}", name, entries.size()));
    auto m = unpack(entries[0], criu_image__mm_entry__unpack, criu_image__mm_entry__free_unpacked,
                    name, 0);
    std::vector<vma> vmas;
    vmas.reserve(m->n_vmas);
    uint64_t prev_end = 0;
    for (size_t i = 0; i < m->n_vmas; i++) {
        const auto* v = m->vmas[i];
        if (v->start >= v->end || v->start % 4096 || v->end % 4096 || v->start < prev_end)
            throw image_error(fmt::format("{}: VMA {} [{:#x}, {:#x}) is malformed or out of order",
                                          name, i, v->start, v->end));
        prev_end = v->end;
        vmas.push_back({v->start, v->end, v->prot, v->flags, v->status, v->has_madv ? v->madv : 0});
    }
    return vmas;
}

pagemap parse_pagemap(std::span<const uint8_t> file, const std::string& name) {
    auto entries = split_entries(file, pagemap_magic, name);
    if (entries.empty())
        throw image_error(name + ": missing pagemap head");
    pagemap pm;
    {
        auto head = unpack(entries[0], criu_image__pagemap_head__unpack,
                           criu_image__pagemap_head__free_unpacked, name, 0);
        pm.pages_id = head->pages_id;
    }
    uint64_t prev_end = 0;
    for (size_t i = 1; i < entries.size(); i++) {
        auto e = unpack(entries[i], criu_image__pagemap_entry__unpack,
                        criu_image__pagemap_entry__free_unpacked, name, i);
        pagemap_entry pe{e->vaddr, e->nr_pages, e->has_flags ? e->flags : pe_present};
        if (pe.vaddr % 4096 || pe.nr_pages == 0 || pe.vaddr < prev_end || pe.end() < pe.vaddr)
            throw image_error(
                fmt::format("{}: entry {} ({:#x}, {} pages) is malformed or out of order", name, i,
                            pe.vaddr, pe.nr_pages));
        prev_end = pe.end();
        pm.entries.push_back(pe);
    }
    return pm;
}

std::vector<lazy_range> compute_lazy_ranges(const pagemap& pm, const std::vector<vma>& vmas,
                                            const std::string& name) {
    std::vector<lazy_range> out;
    size_t v = 0;
    for (const auto& pe : pm.entries) {
        if (!pe.lazy())
            continue;
        uint64_t start = pe.vaddr;
        const uint64_t end = pe.end();
        while (start < end) {
            while (v < vmas.size() && vmas[v].end <= start)
                v++;
            if (v == vmas.size() || vmas[v].start > start)
                throw image_error(
                    fmt::format("{}: lazy page {:#x} lies outside every VMA", name, start));
            if (!vmas[v].lazy_capable())
                throw image_error(fmt::format(
                    "{}: lazy page {:#x} lies in a VMA that cannot be lazy", name, start));
            const uint64_t piece_end = std::min(end, vmas[v].end);
            if (!out.empty() && out.back().end == start && out.back().start >= vmas[v].start)
                out.back().end = piece_end; // same VMA, adjacent entries
            else
                out.push_back({start, piece_end});
            start = piece_end;
        }
    }
    return out;
}

uint64_t process_image::lazy_pages() const noexcept {
    uint64_t n = 0;
    for (const auto& r : lazy)
        n += (r.end - r.start) / 4096;
    return n;
}

// One read per file where it can: a migrator reads some 30 images inside
// the downtime, and a stream iterator's byte-wise copy cost ~1 ms of that.
std::vector<uint8_t> read_file(const std::filesystem::path& path) {
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd)
        throw image_error(fmt::format("cannot open {}: {}", path.string(), std::strerror(errno)));
    struct stat st {};
    std::vector<uint8_t> data;
    if (::fstat(fd.get(), &st) == 0 && st.st_size > 0) {
        data.reserve(size_t(st.st_size) + 4096); // the read that finds the end fits too
        data.resize(size_t(st.st_size));
    }
    size_t have = 0;
    for (;;) {
        if (have == data.size())
            data.resize(have + 4096); // past the size fstat gave: grew, or none (procfs)
        const ssize_t n = ::read(fd.get(), data.data() + have, data.size() - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            throw image_error(
                fmt::format("cannot read {}: {}", path.string(), std::strerror(errno)));
        if (n == 0)
            break;
        have += size_t(n);
    }
    data.resize(have);
    return data;
}

image_set image_set::load(const std::filesystem::path& dir) {
    image_set set;
    set.inv = parse_inventory(read_file(dir / "inventory.img"));
    set.tasks = parse_pstree(read_file(dir / "pstree.img"));
    for (const auto& t : set.tasks) {
        process_image p;
        p.t = t;
        const std::string mm_name = fmt::format("mm-{}.img", t.pid);
        const std::string pm_name = fmt::format("pagemap-{}.img", t.pid);
        const bool has_mm = std::filesystem::exists(dir / mm_name);
        const bool has_pm = std::filesystem::exists(dir / pm_name);
        if (has_mm != has_pm)
            throw image_error(fmt::format("task {}: {} without {}", t.pid,
                                          has_mm ? mm_name : pm_name, has_mm ? pm_name : mm_name));
        if (has_mm) { // a zombie has neither
            p.vmas = parse_mm(read_file(dir / mm_name), mm_name);
            p.pm = parse_pagemap(read_file(dir / pm_name), pm_name);
            p.lazy = compute_lazy_ranges(p.pm, p.vmas, pm_name);
        }
        set.processes.push_back(std::move(p));
    }
    return set;
}

uint64_t image_set::lazy_pages() const noexcept {
    uint64_t n = 0;
    for (const auto& p : processes)
        n += p.lazy_pages();
    return n;
}

const process_image* image_set::find(uint32_t pid) const noexcept {
    for (const auto& p : processes)
        if (p.t.pid == pid)
            return &p;
    return nullptr;
}

} // namespace ferry::criu
